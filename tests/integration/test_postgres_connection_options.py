"""PostgreSQL connection options from the URL, against the local server (issue 34 item 1).

The server here has no TLS: ``sslmode=disable`` connects in plain text, ``prefer`` falls back to
it, and every TLS-requiring mode is refused in one line. A refused ``verify-full`` without a root
certificate is checked against a port that accepts libpq's TLS request and so makes libpq look
for the root certificate (``~/.postgresql/root.crt``, here in an empty home).
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from adapters.runtime import open_store, run_worker
from ledger.config import Database, Settings
from migrations import migrate
from migrations.drivers.notify import Listener
from tests.apps import ModesApp
from tests.conftest import SECRET, drop_schema, new_postgres_url, require_postgres

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[2]
APP = "tests.apps:ModesApp"
PASSWORD = "s3cr3t-pw"  # the local server trusts every client: the password is only carried
SSL_REQUEST = 80877103  # libpq's SSLRequest code (PostgreSQL protocol, "SSLRequest")


@pytest.fixture
def schema_url() -> Iterator[str]:
    require_postgres()
    url, schema = new_postgres_url()
    try:
        yield url.replace("root@", f"root:{PASSWORD}@", 1)
    finally:
        drop_schema(schema)


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The libpq parameters of every connection psycopg opens in this process meanwhile
    (``psycopg.connect``, pools, yoyo)."""
    seen: list[dict[str, Any]] = []
    original = psycopg.Connection.connect.__func__  # type: ignore[attr-defined]
    options = {"autocommit", "prepare_threshold", "context", "row_factory", "cursor_factory"}

    def recording(cls: type, conninfo: str = "", **kwargs: Any) -> Any:
        seen.append(conninfo_to_dict(conninfo, **{k: v for k, v in kwargs.items() if k not in options}))
        return original(cls, conninfo, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "connect", classmethod(recording))
    monkeypatch.setattr(psycopg, "connect", psycopg.Connection.connect)
    return seen


@pytest.mark.parametrize("sslmode", ["disable", "prefer"])
def test_every_connection_gets_the_urls_options(schema_url: str, connections: list[dict[str, Any]],
                                                sslmode: str) -> None:
    name = f"opledger_t_{uuid.uuid4().hex[:8]}"
    url = f"{schema_url}&sslmode={sslmode}&application_name={name}&connect_timeout=7"
    database = Database.parse(url)
    migrate(database, ModesApp)  # the container, identity, the library's tables, yoyo
    settings = Settings(database_url=url, app=APP, webhook_secret=SECRET, poll_interval_seconds=0.05)
    stop = threading.Event()
    worker = threading.Thread(target=run_worker, kwargs={"settings": settings, "stop": stop})
    worker.start()  # the library's pool, the view's pool, the log's LISTEN, the metrics follower
    try:
        listener = Listener(database.conninfo(), {"opledger_probe": []})
        listener.start(stop)
        deadline = time.monotonic() + 30
        while not listener.connected.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # a few worker cycles
    finally:
        stop.set()
        worker.join(timeout=60)
    assert not worker.is_alive()
    assert len(connections) >= 5
    wrong = [c for c in connections
             if (c.get("sslmode"), c.get("application_name"), str(c.get("connect_timeout"))) != (sslmode, name, "7")]
    assert not wrong, wrong
    with open_store(settings, write=False) as store, store.app.recorder.datastore.get_connection() as conn:
        row = conn.execute("SELECT current_setting('application_name') AS name, "
                           "(SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()) AS ssl").fetchone()
    assert row == {"name": name, "ssl": False}  # the server has no TLS: prefer fell back to plain text


def _cli(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OPLEDGER_", "PGSSL"))}
    environ.update({"PYTHONPATH": str(REPO), "OPLEDGER_APP": APP, "OPLEDGER_WEBHOOK_SECRET": SECRET, **env})
    return subprocess.run([sys.executable, "-m", "adapters.cli", *args], capture_output=True, text=True,
                          env=environ, timeout=120)


@pytest.mark.parametrize("sslmode", ["require", "verify-full"])
def test_a_mode_that_needs_tls_is_refused_by_a_server_without_it(schema_url: str, sslmode: str) -> None:
    database = Database.parse(schema_url)
    migrate(database, ModesApp)
    for command in (["migrate"], ["worker"], ["ops", "list", "--json"]):
        result = _cli([*command, "--database-url", f"{schema_url}&sslmode={sslmode}"])
        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines() == [
            f"error: cannot reach PostgreSQL at {database.host}:{database.port} (sslmode={sslmode}): connection "
            f'failed: connection to server at "{database.host}", port {database.port} failed: server does not '
            "support SSL, but SSL was required"]
        assert PASSWORD not in result.stdout + result.stderr


@pytest.fixture
def tls_port() -> Iterator[int]:
    """A port answering libpq's SSLRequest with 'S' (go ahead), then closing: enough for libpq
    to look for the root certificate that ``verify-full`` needs before any handshake."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                while len(request := conn.recv(8)) == 8:
                    if struct.unpack("!ii", request)[1] == SSL_REQUEST:
                        conn.sendall(b"S")
                        conn.recv(1)  # libpq gives up before its handshake: wait for it to close
                        break
                    conn.sendall(b"N")  # a GSS encryption request: not here, ask again

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        done.set()
        thread.join()
        server.close()


def test_verify_full_without_a_root_certificate_is_one_clear_line(tls_port: int, tmp_path: Path) -> None:
    url = f"postgresql://root:{PASSWORD}@127.0.0.1:{tls_port}/test?sslmode=verify-full"
    result = _cli(["migrate", "--database-url", url], HOME=str(tmp_path))
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: cannot reach PostgreSQL at 127.0.0.1:{tls_port} (sslmode=verify-full): ")
    assert f'root certificate file "{tmp_path}/.postgresql/root.crt" does not exist' in line
    assert PASSWORD not in result.stdout + result.stderr


def test_the_url_wins_over_pgsslmode(schema_url: str) -> None:
    # libpq reads PGSSLMODE for what the URL leaves out; a URL's sslmode overrides it.
    migrate(Database.parse(schema_url), ModesApp)
    refused = _cli(["ops", "list", "--json", "--database-url", schema_url], PGSSLMODE="require")
    assert refused.returncode == 2 and "SSL was required" in refused.stderr
    allowed = _cli(["ops", "list", "--json", "--database-url", f"{schema_url}&sslmode=disable"], PGSSLMODE="require")
    assert allowed.returncode == 0, allowed.stderr

