"""The secret canary (issue 14): a provider echoes a secret in every encoding and an ``internal``
value back; none of them may reach the store, the CLI (evidence included), the logs or the HTTP
API's responses, nor any span's name, attributes, events or links (issue 31: the canary extended to
spans, exported in memory). On both backends.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from typer.testing import CliRunner

from adapters.cli.app import app as cli
from ledger.config import Database
from ledger.declarations import DeliveryMode
from tests.apps import ModesApp
from tests.conftest import PG_URL
from tests.loopback import QuietHandler, serving
from tests.tracing import Spans, spans, texts_of  # noqa: F401 (spans: the fixture)
from tests.workers import run_until_settled, webhook_worker

CANARY = 'tok/ü"canary+secret 42'
"""A secret whose JSON, URL and base64 forms all differ from its raw text."""
INTERNAL = "internal-canary-7731"


def echo_forms(value: str) -> list[str]:
    raw = value.encode()
    return [value, json.dumps(value)[1:-1], json.dumps(value)[1:-1].replace("/", "\\/"),
            json.dumps(value, ensure_ascii=False)[1:-1], quote(value, safe=""), quote_plus(value),
            base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode().rstrip("="), raw.hex()]


class _Echo(QuietHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.read_body()
        body = json.dumps({"forms": echo_forms(CANARY), "internal": INTERNAL}, ensure_ascii=False).encode()
        body += b" raw:" + CANARY.encode() + b" " + json.dumps(CANARY).encode()
        self.answer(body, {"X-Echo": base64.b64encode(CANARY.encode()).decode()})


@pytest.fixture
def echo_url() -> Iterator[str]:
    with serving(_Echo, "/echo") as url:
        yield url


def _needles() -> list[bytes]:
    needles = {form.encode() for form in echo_forms(CANARY)}
    return sorted(needles)


def _postgres_bytes(database: Database) -> bytes:
    import psycopg

    assert database.schema is not None
    chunks = []
    with psycopg.connect(Database.parse(PG_URL).conninfo()) as conn:
        tables = conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                              [database.schema]).fetchall()
        for (table,) in tables:
            for row in conn.execute(f'SELECT * FROM "{database.schema}"."{table}"').fetchall():
                chunks.append(repr(row).encode())
                chunks.extend(v if isinstance(v, bytes) else str(v).encode() for v in row)
    return b"\n".join(chunks)


def _sqlite_bytes(database: Database) -> bytes:
    assert database.path is not None
    return b"".join(p.read_bytes() for p in Path(database.path).parent.iterdir() if p.is_file())


def _http_bodies(database: Database, op_id: str) -> str:
    """Every observe response that could show the operation, as ``opledger serve`` answers them."""
    from fastapi.testclient import TestClient

    from adapters.http.app import ServeConfig, attach, build_app
    from adapters.http.auth import TokenGrant
    from adapters.runtime import open_store
    from ledger.config import Settings

    settings = Settings(database_url=database.url(), app="tests.apps:ModesApp")
    tokens = {"viewer-token": TokenGrant(principal="vera", roles=["viewer"])}
    headers = {"Authorization": "Bearer viewer-token"}
    bodies = []
    with open_store(settings, write=False) as store, \
            TestClient(attach(build_app(), store=store, config=ServeConfig(tokens=tokens))) as client:
        for path in (f"/v1/operations/{op_id}", f"/v1/operations/{op_id}/timeline",
                     f"/v1/operations/{op_id}/evidence", "/v1/operations?limit=50",
                     "/v1/attention", "/metrics"):
            response = client.get(path, headers=headers)
            assert response.status_code == 200, (path, response.text)
            bodies.append(response.text)
    assert op_id in bodies[0] and "[REDACTED]" in bodies[0]
    return "\n".join(bodies)


def test_a_secret_echoed_in_every_encoding_reaches_no_sink(modes_db: Database, echo_url: str,
                                                          capsys: pytest.CaptureFixture[str], json_logs: Callable[[], None],
                                                          spans: Spans) -> None:  # noqa: F811
    json_logs()
    app = ModesApp(env=modes_db.library_env(create_table=False))
    try:
        with webhook_worker(app, modes_db, worker_id="canary", token=CANARY) as worker:
            from tests.apps import Thing
            thing = Thing(label="canary")
            op = app.intend(thing, f"test.{DeliveryMode.IDEMPOTENT.value}", target=echo_url,
                            payload={"n": 1, "note": INTERNAL, "token": "secretref:test-token"})
            app.save(thing, op)
            run_until_settled(worker, app, op.id)
            done = app.get_operation(op.id)
            assert done.status.value == "settled", (done.failure, done.ambiguity_reason)
            assert "[REDACTED]" in done.excerpt and INTERNAL not in done.excerpt
    finally:
        app.close()
    stored = _sqlite_bytes(modes_db) if modes_db.backend == "sqlite" else _postgres_bytes(modes_db)
    leaks = [needle for needle in _needles() if needle in stored]
    assert not leaks, f"secret forms found in the store: {leaks}"
    cli_out = ""
    for args in (["ops", "show", str(op.id)], ["ops", "show", str(op.id), "--json"],
                 ["ops", "timeline", str(op.id)], ["ops", "timeline", str(op.id), "--json"],
                 ["evidence", str(op.id)]):
        result = CliRunner().invoke(cli, [*args, "--database-url", modes_db.url()],
                                    env={"OPLEDGER_APP": "tests.apps:ModesApp"})
        assert result.exit_code == 0, result.output
        cli_out += result.output
    http_out = _http_bodies(modes_db, str(op.id))
    logs = capsys.readouterr()
    span_out = "\n".join(text for span in spans.finished() for text in texts_of(span))
    assert {"intend", "attempt", "settle"} <= {span.name.split()[0] for span in spans.finished()}
    for sink, text in (("CLI", cli_out), ("HTTP", http_out), ("logs", logs.out + logs.err), ("spans", span_out)):
        for needle in [*_needles(), INTERNAL.encode()]:
            assert needle not in text.encode(), f"{needle!r} found in the {sink} output"
