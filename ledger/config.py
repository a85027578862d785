"""opledger's settings: one pydantic-settings object, from ``OPLEDGER_*`` and CLI flags.

The database URL is rendered into the ``eventsourcing`` library's own environment keys
(``PERSISTENCE_MODULE``, ``SQLITE_DBNAME``, ``POSTGRES_*``), so the library's recorders do the
storage. Settings that cannot work (an infinite lease, a poll interval of ``1e9``) are refused
when read, with the limits of ``ledger.time_limits``. Source: DESIGN §8, issue "Ledger core"
item 8; issue 10 item 3.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ledger.clock import DEFAULT_MAX_SKEW_SECONDS
from ledger.connection_options import SECRET_PARAMETERS, connection_options, one_line
from ledger.errors import ConfigurationError
from ledger.redaction import mask_url
from ledger.retention import parse_duration
from ledger.time_limits import MAX_GRACE_SECONDS, MAX_LEASE_SECONDS, MAX_POLL_INTERVAL_SECONDS

DEFAULT_DATABASE_URL = "sqlite:///.opledger/opledger.db"
DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_POLL_LEASE_SECONDS = 300.0
"""How long a poll lease holds accepted work, seconds (``executors.polling``; ADR 0004)."""
DEFAULT_POLL_INTERVAL_SECONDS = 0.2
SQLITE_LOCK_TIMEOUT_SECONDS = 30
DEFAULT_POOL_SIZE = 10
"""PostgreSQL connections a pool keeps (the library's recorder pool may add as many again)."""
MAX_POOL_SIZE = 100
MAX_WORKER_THREADS = 1024
"""Egress threads per worker process: past this, one process is better split into several."""
DEFAULT_WORKER_THREADS = 256
"""Egress threads per worker process, for adapters that block (``executors.egress.DEFAULT_EGRESS_THREADS``)."""
MAX_EGRESS_SLOTS = 65_536
"""Concurrent egress calls per worker process: each holds a connection (a file descriptor)."""
DEFAULT_EGRESS_SLOTS = 2048
"""Concurrent egress calls per worker process (``executors.egress.DEFAULT_EGRESS_SLOTS``)."""
DEFAULT_EGRESS_PER_HOST = 1024
"""Of those, at most this many to one target host (``executors.egress.DEFAULT_PER_HOST_SLOTS``)."""
MAX_BATCH_SIZE = 10_000
"""Due rows read per cycle: past this, one cycle holds its reservations for too long."""
POLL_FRACTION_OF_LEASE = 1 / 3
"""An idle worker's wait may be at most this fraction of the lease: leases are renewed between
waits, once less than a third is left (DESIGN §7, ``executors.worker.RENEW_WHEN_REMAINING``), so
a longer wait lets a slow call's lease expire while the worker sleeps."""
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_OUR_URL_PARAMETERS = frozenset({"schema", "pool_size"})
CONNECTION_OPTIONS_ENV = "POSTGRES_CONNECTION_OPTIONS"
"""The library environment key carrying a URL's libpq parameters (JSON) to the library's pool
(``migrations.drivers.recorders.LedgerPostgresFactory``)."""


@dataclass(frozen=True, slots=True)
class Database:
    """A parsed database URL.

    Attributes:
        backend: ``"sqlite"`` or ``"postgres"``.
        path: the SQLite file (absolute), for sqlite.
        host, port, user, password, dbname: connection parameters, for postgres.
        schema: the PostgreSQL schema (``?schema=NAME``); None means the server default.
        pool_size: PostgreSQL connections each pool of a process may open (``?pool_size=N``, 1 to
            ``MAX_POOL_SIZE``; the library's recorder pool twice as many, opening one at start and
            the others on demand). A worker's store users are its loop and its projection thread,
            one or two connections each at a time (egress threads hold none), so 3 never waits;
            fewer waits for a connection (ridden out with backoff, never a crash).
        options: libpq connection parameters from the URL's query (``?sslmode=verify-full&
            sslrootcert=/etc/ssl/db-ca.pem``), sorted by name, checked by
            ``ledger.connection_options``; every connection of the process gets them
            (:meth:`conninfo`, :meth:`library_env`, :meth:`url`). Source: issue 34 item 1.
    """

    backend: str
    path: Path | None = None
    host: str = "127.0.0.1"
    port: int = 5432
    user: str = ""
    password: str = field(default="", repr=False)  # never in a repr that a log or traceback could show
    dbname: str = ""
    schema: str | None = None
    pool_size: int = DEFAULT_POOL_SIZE
    options: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, url: str) -> Database:
        """Parse ``sqlite:///relative/or//absolute/path`` or
        ``postgresql://user[:pw]@host[:port]/db[?schema=S&pool_size=N&<libpq parameter>=V...]``.

        Args:
            url: the database URL (``OPLEDGER_DATABASE_URL`` or ``--database-url``).

        Returns:
            The parsed database.

        Raises:
            ConfigurationError: an unsupported scheme, a URL missing its parts, or a query
                parameter that is neither opledger's nor one of libpq's
                (``ledger.connection_options.LIBPQ_PARAMETERS``); one line, the password masked.

        Source: DESIGN §8; issue 34 item 1 (libpq parameters).
        """
        parts = urlsplit(url)
        if parts.scheme == "sqlite":
            raw = unquote(url[len("sqlite://"):])
            if parts.query:
                # Before issue 34 a query became part of the file's name; connection options
                # are PostgreSQL's, so a query here is a mistake worth naming.
                raise ConfigurationError(f"an SQLite URL takes no query parameters (got {parts.query.split('=')[0]!r}"
                                         f" in {mask_url(url)!r}); they are PostgreSQL connection options")
            if not raw.startswith("/") or raw == "/":
                raise ConfigurationError(f"SQLite URL must look like sqlite:///path/to/file.db, got {mask_url(url)!r}")
            # sqlite:///rel/file.db is relative to the working directory; sqlite:////abs/file.db absolute.
            # Made absolute without resolving symlinks, so the store's checks can refuse one
            # (ledger.store_files).
            return cls(backend="sqlite", path=Path(os.path.abspath(raw[1:])))
        if parts.scheme in ("postgresql", "postgres", "postgresql+psycopg"):
            dbname = parts.path.lstrip("/")
            if not dbname:
                raise ConfigurationError(f"PostgreSQL URL must name a database, got {mask_url(url)!r}")
            query = parse_qs(parts.query, keep_blank_values=True)
            try:
                options = connection_options(query, ours=_OUR_URL_PARAMETERS)
                port = parts.port or 5432
            except ValueError as exc:
                raise ConfigurationError(f"invalid PostgreSQL URL {mask_url(url)!r}: {exc}") from None
            pool_size = query.get("pool_size", [str(DEFAULT_POOL_SIZE)])[0]
            if not pool_size.isdigit() or not 1 <= int(pool_size) <= MAX_POOL_SIZE:
                raise ConfigurationError(
                    f"pool_size must be a whole number from 1 to {MAX_POOL_SIZE}, got {pool_size!r}")
            schema = query.get("schema", [None])[0]
            if schema is not None and not _SCHEMA_NAME.fullmatch(schema):
                # Unquoted PostgreSQL identifiers fold to lower case and may not start with a
                # digit; allowing only names that read the same quoted or not keeps every query
                # (and yoyo's search_path) pointing at the same schema.
                raise ConfigurationError(
                    f"schema must be lower-case letters, digits and underscores, not starting with a digit "
                    f"(at most 63), got {schema!r}")
            return cls(
                backend="postgres",
                host=parts.hostname or "127.0.0.1",
                port=port,
                user=unquote(parts.username or ""),
                password=unquote(parts.password or ""),
                dbname=dbname,
                schema=schema,
                pool_size=int(pool_size),
                options=options,
            )
        raise ConfigurationError(
            f"unsupported database URL {mask_url(url)!r}: use sqlite:///path or postgresql://user@host/db"
        )

    @classmethod
    def in_file(cls, path: Path) -> Database:
        """The store in one file at ``path`` (made absolute): ``parse`` of its file URL.

        Raises:
            ConfigurationError: as :meth:`parse`.
        """
        return cls.parse(f"sqlite:///{os.path.abspath(path)}")

    def url(self, *, driver: str = "") -> str:
        """Render this database as a URL again, which :meth:`parse` reads back as equal.

        Args:
            driver: e.g. ``psycopg`` gives ``postgresql+psycopg://``, the form yoyo-migrations
                expects; its query then holds the libpq parameters and ``schema`` (which yoyo
                reads), not ``pool_size``.

        Returns:
            The URL, its password included: mask it (``ledger.redaction.mask_url``) to print it.
        """
        if self.backend == "sqlite":
            return f"sqlite:///{self.path}"
        auth = quote(self.user, safe="") + (f":{quote(self.password, safe='')}" if self.password else "")
        scheme = f"postgresql+{driver}" if driver else "postgresql"
        url = f"{scheme}://{auth}@{self.host}:{self.port}/{self.dbname}"
        query = [("schema", self.schema)] if self.schema else []
        if self.pool_size != DEFAULT_POOL_SIZE and not driver:  # ours, not a driver parameter (yoyo)
            query.append(("pool_size", str(self.pool_size)))
        query.extend(self.options)
        return url + (f"?{urlencode(query, quote_via=quote)}" if query else "")

    def conninfo(self, *, connect_timeout: int | None = None) -> str:
        """Return a libpq connection string (postgres only), the URL's libpq parameters included.

        Args:
            connect_timeout: seconds libpq waits for each connection, unless the URL sets
                ``connect_timeout`` itself (the URL wins).

        Returns:
            ``host=... port=... dbname=... [user=...] [password=...] [sslmode=...] ...``,
            quoted as libpq reads it.

        Raises:
            ConfigurationError: the installed libpq does not know one of the URL's parameters
                (one line naming it; libpq added some in later versions).
        """
        assert self.backend == "postgres"
        import psycopg
        from psycopg.conninfo import make_conninfo

        params: dict[str, str | int] = {"host": self.host, "port": self.port, "dbname": self.dbname}
        if self.user:
            params["user"] = self.user
        if self.password:
            params["password"] = self.password
        params.update(self.options)
        if connect_timeout is not None:
            params.setdefault("connect_timeout", connect_timeout)
        try:
            return make_conninfo("", **params)
        except psycopg.ProgrammingError as exc:
            raise ConfigurationError(
                f"PostgreSQL connection options refused by this libpq "
                f"({psycopg.pq.version()}): {one_line(str(exc), hide=self._secrets())}") from None

    def unreachable(self, exc: BaseException) -> ConfigurationError:
        """The one-line error for a connection that failed (refused, TLS, authentication).

        Args:
            exc: the driver's error (``psycopg.OperationalError``), whose libpq message may span
                lines.

        Returns:
            ``cannot reach PostgreSQL at host:port (sslmode=verify-full): <libpq's reason>``, with
            the password and any ``sslpassword`` masked.

        Source: issue 34 item 1.
        """
        mode = dict(self.options).get("sslmode")
        shown = f"{self.host}:{self.port}" + (f" (sslmode={mode})" if mode else "")
        return ConfigurationError(f"cannot reach PostgreSQL at {shown}: {one_line(str(exc), hide=self._secrets())}")

    def _secrets(self) -> tuple[str, ...]:
        return (self.password, *(value for name, value in self.options if name in SECRET_PARAMETERS))

    def library_env(self, *, create_table: bool, read_only: bool = False) -> dict[str, str]:
        """Render the ``eventsourcing`` environment for this database.

        Args:
            create_table: whether the library may create its tables (only ``opledger migrate``).
            read_only: open an SQLite store for inspection only (no lock, no writes).

        Returns:
            Keys for ``Application(env=...)``. The database-function insert path stays off: it
            drops the table lock that keeps notification ids in commit order (DESIGN §8); our own
            recorder (``APPLICATION_RECORDER_TOPIC``) calls a function that keeps it. The URL's
            libpq parameters travel as JSON under ``CONNECTION_OPTIONS_ENV`` to our factory
            (``migrations.drivers.recorders.LedgerPostgresFactory``), which gives them to the library's pool.
        """
        env = {"CREATE_TABLE": "y" if create_table else "n"}
        if self.backend == "sqlite":
            assert self.path is not None
            name = f"file:{self.path}?mode=ro" if read_only else f"file:{self.path}"
            env.update({
                "PERSISTENCE_MODULE": "migrations.drivers.recorders:LedgerSQLiteFactory",
                "SQLITE_DBNAME": name,
                "SQLITE_LOCK_TIMEOUT": str(SQLITE_LOCK_TIMEOUT_SECONDS),
            })
        else:
            env.update({
                # The library's factory, handing the URL's libpq parameters to its pool.
                "PERSISTENCE_MODULE": "migrations.drivers.recorders:LedgerPostgresFactory",
                "APPLICATION_RECORDER_TOPIC": "migrations.drivers.recorders:LedgerPostgresApplicationRecorder",
                "POSTGRES_DBNAME": self.dbname,
                "POSTGRES_HOST": self.host,
                "POSTGRES_PORT": str(self.port),
                "POSTGRES_USER": self.user,
                "POSTGRES_PASSWORD": self.password,
                "POSTGRES_ENABLE_DB_FUNCTIONS": "n",
                # One connection at start, up to twice pool_size on demand (min_size 1): a pool
                # of pool_size open from the start cost every process that opens the store
                # (a CLI command, each test's app) pool_size server backends it never used.
                "POSTGRES_POOL_SIZE": "1",
                "POSTGRES_MAX_OVERFLOW": str(2 * self.pool_size - 1),
                "POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT": "0",
            })
            if self.schema:
                env["POSTGRES_SCHEMA"] = self.schema
            if self.options:
                env[CONNECTION_OPTIONS_ENV] = json.dumps(dict(self.options))
        return env


class Settings(BaseSettings):
    """Every opledger setting. Environment variables are ``OPLEDGER_<FIELD>``; CLI flags override.

    Attributes:
        database_url: ``sqlite:///path`` (default under ``./.opledger/``) or ``postgresql://...``.
        app: topic (``module:Class``) of the host ``LedgerApplication`` that owns the log.
        lease_seconds: executor lease length, seconds; finite, > 0 and <= ``MAX_LEASE_SECONDS``.
        poll_interval_seconds: how long an idle worker waits before looking for work, seconds;
            > 0, <= ``MAX_POLL_INTERVAL_SECONDS`` and at most a third of ``lease_seconds``.
        worker_threads: egress threads per worker process, 1 to ``MAX_WORKER_THREADS``: the
            calls in flight of adapters that block (the fake, host-written ones); started as
            calls need them (ADR 0002). The webhook and lro adapters need none (ADR 0009).
        egress_slots: concurrent egress calls per worker process, 1 to ``MAX_EGRESS_SLOTS``
            (each holds a connection: the worker raises its open-file limit to fit, ADR 0009).
        egress_per_host: concurrent egress calls per worker process to one target host
            (scheme, host, port), 1 to ``MAX_EGRESS_SLOTS``: one slow partner cannot take every
            slot (at or above ``egress_slots`` it bounds nothing).
        batch_size: due rows a worker reads per cycle, 1 to ``MAX_BATCH_SIZE`` (the worker reads
            at least four times ``worker_threads``).
        grace_seconds: on SIGTERM, how long in-flight attempts may take to record, seconds;
            0 to ``MAX_GRACE_SECONDS``.
        max_clock_skew_seconds: PostgreSQL: a worker whose own clock is further than this from the
            database's logs a warning at start and every minute, seconds. Leases are judged by the
            database's clock either way (DESIGN §7).
        webhook_secret: the Standard Webhooks signing secret (``whsec_...``) of the webhook adapter
            (and of the ``lro`` adapter, which signs the same way).
        poll_lease_seconds: how long a worker holds accepted work it polls, seconds: a worker
            killed mid-poll leaves it this long before another resumes it (ADR 0004).
        callback_base_url: where providers reach ``opledger serve`` (``http(s)://host:port``):
            a ``callback``-mode request carries ``X-Callback-Url: <base>/callbacks/<integration>``.
            None sends no callback URL (the provider must know it otherwise).
        log_format: ``json`` (production), ``console``, or ``auto`` (JSON unless standard error
            is a terminal).
        log_summary_seconds: how often a worker logs its ``worker summary`` line, seconds
            (``executors.activity``); 0 never; at most a day.
        allow_unreadable_events: start ``migrate`` and workers even when the store holds ledger
            event topics this code cannot resolve (their operations wait on the attention queue
            as ``unreadable_event``); off by default, so a version mismatch stops the start.
        store_id: pin the store: every open refuses a store whose recorded id (printed by
            ``opledger migrate`` and ``opledger doctor``) differs. None accepts any store id.
        open_check: SQLite: what every open checks of the file: ``quick`` (a lost WAL, the
            header and length, and ``PRAGMA quick_check``, which reads the whole file) or
            ``header`` (the first two only: for stores large enough that reading them at every
            command is too slow; damage is then found when a read meets it, or by ``doctor``).
            ``migrate``, ``backup`` and ``import-json`` always run ``quick_check``.
        retention: how long a closed operation stays in the hot store before ``opledger archive``
            may move it into an archive, a duration (``90d``, ``12h``, a number of seconds;
            ``ledger.retention.parse_duration``); None (the default) keeps everything. A
            declaration's ``retention_seconds`` overrides it for its integration.
        archive_dir: the archive directory ``opledger archive`` writes segments into: where
            ``ops show``, ``ops timeline`` and the observe API read an archived operation from
            (``adapters.archive_reads``); None (the default) names the segment instead. The
            CLI's ``--archive-dir`` overrides it.
    """

    # allow_inf_nan=False: OPLEDGER_LEASE_SECONDS=inf or nan is refused at start, not discovered
    # as an OverflowError by the first claim. Each bound is a named constant (ledger.time_limits).
    model_config = SettingsConfigDict(env_prefix="OPLEDGER_", extra="ignore", allow_inf_nan=False)

    database_url: str = DEFAULT_DATABASE_URL
    app: str = "adapters.demo.orders:OrdersApp"
    lease_seconds: float = Field(default=DEFAULT_LEASE_SECONDS, gt=0, le=MAX_LEASE_SECONDS)
    poll_interval_seconds: float = Field(default=DEFAULT_POLL_INTERVAL_SECONDS, gt=0, le=MAX_POLL_INTERVAL_SECONDS)
    worker_threads: int = Field(default=DEFAULT_WORKER_THREADS, ge=1, le=MAX_WORKER_THREADS)
    egress_slots: int = Field(default=DEFAULT_EGRESS_SLOTS, ge=1, le=MAX_EGRESS_SLOTS)
    egress_per_host: int = Field(default=DEFAULT_EGRESS_PER_HOST, ge=1, le=MAX_EGRESS_SLOTS)
    batch_size: int = Field(default=200, ge=1, le=MAX_BATCH_SIZE)
    grace_seconds: float = Field(default=10.0, ge=0, le=MAX_GRACE_SECONDS)
    max_clock_skew_seconds: float = Field(default=DEFAULT_MAX_SKEW_SECONDS, gt=0, allow_inf_nan=False)
    webhook_secret: SecretStr | None = None
    callback_base_url: str | None = Field(default=None, pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$")
    log_format: str = Field(default="auto", pattern=r"^(json|console|auto)$")
    log_summary_seconds: float = Field(default=60.0, ge=0, le=86400)
    allow_unreadable_events: bool = False
    store_id: str | None = None
    open_check: str = Field(default="quick", pattern=r"^(quick|header)$")
    approval_policy: str | None = Field(default=None, pattern=r"^[\w.]+:[\w.]+$")
    settlement_policy: str | None = Field(default=None, pattern=r"^[\w.]+:[\w.]+$")
    poll_lease_seconds: float = Field(default=DEFAULT_POLL_LEASE_SECONDS, gt=0, le=MAX_LEASE_SECONDS)
    retention: str | None = None
    archive_dir: Path | None = None

    @field_validator("database_url")
    @classmethod
    def _parsable(cls, value: str) -> str:
        Database.parse(value)
        return value

    @field_validator("retention")
    @classmethod
    def _retention_duration(cls, value: str | None) -> str | None:
        if value is not None and value.strip():
            parse_duration(value)  # its ValueError is reported with the field's name
            return value
        return None

    @field_validator("archive_dir", mode="before")
    @classmethod
    def _archive_dir_or_none(cls, value: object) -> object:
        # OPLEDGER_ARCHIVE_DIR= (set but empty) means none, not the working directory.
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("poll_interval_seconds")
    @classmethod
    def _poll_within_lease(cls, value: float, info: ValidationInfo) -> float:
        # A field validator, so the problem is reported with the field's name.
        lease = info.data.get("lease_seconds")
        if lease is not None and value > lease * POLL_FRACTION_OF_LEASE:
            raise ValueError(
                f"must be at most a third of lease_seconds ({lease:g} s): an idle worker renews "
                "leases only between waits; lower the poll interval or raise the lease")
        return value

    @property
    def retention_seconds(self) -> float | None:
        """The store-wide retention policy in seconds, None when off (``retention``)."""
        return parse_duration(self.retention) if self.retention else None

    @property
    def database(self) -> Database:
        """The parsed database URL."""
        return Database.parse(self.database_url)
