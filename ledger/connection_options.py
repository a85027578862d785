"""PostgreSQL connection options: libpq's own parameters, read from the database URL.

A PostgreSQL URL may carry, beside opledger's ``schema`` and ``pool_size``, the connection
parameters libpq documents (``sslmode``, ``sslrootcert``, ``application_name``,
``connect_timeout``, ``target_session_attrs``, ...). They are checked here once, when the URL is
parsed (a name libpq does not document, or one this module keeps out, is refused in one line
naming it), and then given unchanged to every connection a process makes: the ``eventsourcing``
library's pool, the read models' pool, the LISTEN connection, migrations (yoyo) and the store
identity check (``ledger.config.Database`` carries them; ``migrations.drivers.recorders`` hands them to the
library's pool). libpq reads its ``PG*`` environment variables (``PGSSLMODE``,
``PGSSLROOTCERT``, ...) for any parameter the URL leaves out.

Kept out: the parts a URL already has (``host``, ``port``, ``dbname``, ``user``, ``password``),
``replication`` (a replication connection cannot run the ledger's queries), ``sslkeylogfile``
(writes the session's TLS keys to a file) and libpq's OAuth and SCRAM-key parameters (secrets
with no use here).

Source: PostgreSQL documentation, libpq "Parameter Key Words"; issue 34 item 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = [
    "LIBPQ_PARAMETERS", "SECRET_PARAMETERS", "SSL_MODES", "TARGET_SESSION_ATTRS",
    "connection_options", "one_line",
]

LIBPQ_PARAMETERS = frozenset({
    # TLS
    "sslmode", "sslnegotiation", "sslrootcert", "sslcert", "sslkey", "sslpassword", "sslcertmode", "sslcrl",
    "sslcrldir", "sslsni", "sslcompression", "ssl_min_protocol_version", "ssl_max_protocol_version",
    # authentication
    "passfile", "require_auth", "channel_binding", "requirepeer", "gssencmode", "krbsrvname", "gsslib",
    "gssdelegation",
    # the session
    "application_name", "fallback_application_name", "client_encoding", "options", "target_session_attrs",
    "service", "hostaddr", "load_balance_hosts",
    # time limits and keep-alives
    "connect_timeout", "tcp_user_timeout", "keepalives", "keepalives_idle", "keepalives_interval",
    "keepalives_count",
})
"""libpq parameters a database URL may carry (PostgreSQL documentation, "Parameter Key Words")."""
SECRET_PARAMETERS = frozenset({"sslpassword"})
"""Parameters whose values are never printed (``ledger.redaction.mask_url`` masks them too)."""
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
"""libpq's ``sslmode`` values, weakest first."""
TARGET_SESSION_ATTRS = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")
"""libpq's ``target_session_attrs`` values."""
_WHOLE_SECONDS = ("connect_timeout", "keepalives_idle", "keepalives_interval", "keepalives_count",
                  "tcp_user_timeout")


def connection_options(query: Mapping[str, Sequence[str]],
                       ours: frozenset[str] = frozenset()) -> tuple[tuple[str, str], ...]:
    """The libpq parameters of a parsed URL query, checked. Pure.

    Args:
        query: ``urllib.parse.parse_qs`` of the URL's query (blank values kept).
        ours: opledger's own parameter names in the same query (``schema``, ``pool_size``),
            skipped here.

    Returns:
        ``(name, value)`` pairs sorted by name, e.g. ``(("application_name", "shop"),
        ("sslmode", "verify-full"))``.

    Raises:
        ValueError: a name that is neither ours nor in :data:`LIBPQ_PARAMETERS` (all such names
            are listed), a parameter given twice, an ``sslmode`` or ``target_session_attrs``
            libpq does not know, or a time that is not a whole number of seconds. The message
            never quotes a value of :data:`SECRET_PARAMETERS`.

    Source: PostgreSQL documentation, libpq "Parameter Key Words"; issue 34 item 1.
    """
    unknown = sorted(set(query) - ours - LIBPQ_PARAMETERS)
    if unknown:
        raise ValueError(
            f"unknown PostgreSQL URL parameter(s) {unknown}: a URL takes 'schema', 'pool_size' and libpq's "
            "connection parameters (sslmode, sslrootcert, application_name, connect_timeout, ...: "
            "docs/operations.md, 'PostgreSQL connection options')")
    options: list[tuple[str, str]] = []
    for name in sorted(set(query) - ours):
        values = query[name]
        if len(values) != 1:
            raise ValueError(f"PostgreSQL URL parameter {name!r} is given {len(values)} times")
        options.append((name, _checked(name, values[0])))
    return tuple(options)


def _checked(name: str, value: str) -> str:
    if name == "sslmode" and value not in SSL_MODES:
        raise ValueError(f"sslmode must be one of {', '.join(SSL_MODES)}; got {value!r}")
    if name == "target_session_attrs" and value not in TARGET_SESSION_ATTRS:
        raise ValueError(f"target_session_attrs must be one of {', '.join(TARGET_SESSION_ATTRS)}; got {value!r}")
    if name in _WHOLE_SECONDS and not value.isdigit():
        raise ValueError(f"{name} must be a whole number (seconds, or a count), got {value!r}")
    if "\x00" in value:
        shown = "***" if name in SECRET_PARAMETERS else repr(value)
        raise ValueError(f"PostgreSQL URL parameter {name!r} holds a NUL character: {shown}")
    return value


def one_line(message: str, *, hide: Sequence[str] = ()) -> str:
    """A driver's (possibly multi-line) error message as one line, without the values in ``hide``. Pure.

    libpq writes its hints on indented lines of their own ("Is the server running on that host
    ...?"); a command prints one line per error, so they are joined with ``; ``.

    Args:
        message: the error's text.
        hide: values that must not appear (the password, an ``sslpassword``); each is replaced
            by ``***``.

    Returns:
        The message on one line.
    """
    for value in hide:
        if value:
            message = message.replace(value, "***")
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())
