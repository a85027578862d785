"""Spans of an operation's life (issue 31 item 1; DESIGN §9), exported in memory: intent ->
attempts -> retry -> settlement in one trace, parented and linked by the messaging conventions;
the request carries the attempt span's ``traceparent``; without an SDK the stored traceparent is
the authorizing request's, as before. On both backends."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from unittest.mock import patch
from uuid import UUID

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from ledger import tracing
from ledger.config import Database
from ledger.declarations import DeliveryMode
from ledger.inbound import CommandContext
from tests.apps import ModesApp, Thing
from tests.desk import auth
from tests.loopback import serving
from tests.receipt_desk import ReceiptDesk, receipt_desk
from tests.tracing import Spans, spans, texts_of  # noqa: F401 (spans: the fixture)
from tests.workers import run_until_settled, webhook_worker

HOST_TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TOKEN = "tok-tracing-secret-5521"


class _FlakyProvider(BaseHTTPRequestHandler):
    """Answers 503 (Retry-After: 0) to the first delivery, 200 after; keeps each traceparent."""

    seen: list[str | None] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).seen.append(self.headers.get("traceparent"))
        first = len(type(self).seen) == 1
        self.send_response(503 if first else 200)
        if first:
            self.send_header("Retry-After", "0")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def provider_url() -> Iterator[str]:
    _FlakyProvider.seen = []
    with serving(_FlakyProvider, "/hook") as url:
        yield url


def _run_until_settled(modes_db: Database, app: ModesApp, op_id: object) -> None:
    with webhook_worker(app, modes_db, worker_id="tracer", token=TOKEN) as worker:
        run_until_settled(worker, app, op_id)


def test_one_trace_from_the_host_span_through_a_retry_to_settlement(
        modes_db: Database, provider_url: str, spans: Spans,  # noqa: F811
        capsys: pytest.CaptureFixture[str], json_logs: Callable[[], None]) -> None:
    json_logs()
    app = ModesApp(env=modes_db.library_env(create_table=False))
    try:
        with spans.provider.get_tracer("host").start_as_current_span("host command") as host:
            thing = Thing(label="traced")
            op = app.intend(thing, f"test.{DeliveryMode.IDEMPOTENT.value}", target=provider_url,
                            payload={"n": 7, "note": "internal note", "token": "secretref:test-token"})
            assert not spans.named("intend"), "the producer span ends when the intent commits"
            app.save(thing, op)
        _run_until_settled(modes_db, app, op.id)
        done = app.get_operation(op.id)
        assert done.status.value == "settled" and done.attempts == 2
    finally:
        app.close()
    host_context = host.get_span_context()
    (intent,) = spans.named("intend ")
    attempts = sorted(spans.named("attempt "), key=lambda s: s.start_time or 0)
    (settle,) = spans.named("settle ")
    assert intent.name == "intend test.idempotent" and intent.kind is SpanKind.PRODUCER
    assert intent.parent is not None and intent.parent.span_id == host_context.span_id
    # The intent stores the producer span's context: every later span hangs off it.
    assert op.traceparent == tracing.traceparent_of(intent.context)
    assert intent.attributes is not None and intent.attributes[tracing.MESSAGE_ID] == str(op.id)
    assert intent.attributes[tracing.OPERATION_TYPE] == "send"
    assert len(attempts) == 2
    for number, span in enumerate(attempts, start=1):
        assert span.kind is SpanKind.CONSUMER and span.context.trace_id == host_context.trace_id
        assert span.parent is not None and span.parent.span_id == intent.context.span_id
        assert [link.context.span_id for link in span.links] == [intent.context.span_id]
        attributes = span.attributes or {}
        assert attributes[tracing.OPERATION_TYPE] == "process"
        assert attributes[tracing.MESSAGE_ID] == str(op.id) and attributes[tracing.ATTEMPT_NUMBER] == number
        assert attributes[tracing.DELIVERY_MODE] == "idempotent" and isinstance(attributes[tracing.EPOCH], int)
    assert attempts[0].attributes[tracing.OUTCOME] == "failed"  # type: ignore[index]
    assert attempts[0].attributes[tracing.ERROR_TYPE] == "throttled"  # type: ignore[index]
    assert attempts[1].attributes[tracing.OUTCOME] == "succeeded"  # type: ignore[index]
    assert attempts[0].attributes[tracing.ATTEMPT_ID] != attempts[1].attributes[tracing.ATTEMPT_ID]  # type: ignore[index]
    # Each request carried its own attempt span's context, so the provider joins the trace.
    assert _FlakyProvider.seen == [tracing.traceparent_of(span.context) for span in attempts]
    assert settle.parent is not None and settle.parent.span_id == intent.context.span_id
    assert settle.attributes is not None and settle.attributes[tracing.SETTLEMENT_RESULT] == "settled"
    assert settle.attributes[tracing.ENTITY_VERSION] == done.settled_entity_version
    # Log lines about the operation carry the trace: the current span's ids inside a span,
    # the intent's producer span's outside one.
    span_ids = {f"{span.context.span_id:016x}" for span in spans.finished()}
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    about = [line for line in lines if line.get("operation_id") == str(op.id)]
    assert about and all(line.get("trace_id") == f"{host_context.trace_id:032x}" for line in about), about
    assert all(line["span_id"] in span_ids for line in about), about
    for span in spans.finished():
        for text in texts_of(span):
            assert TOKEN not in text and "internal note" not in text and provider_url not in text, (span.name, text)


def test_an_explicit_traceparent_is_the_producer_spans_parent(modes_db: Database, spans: Spans) -> None:  # noqa: F811
    app = ModesApp(env=modes_db.library_env(create_table=False))
    try:
        thing = Thing(label="explicit")
        op = app.intend(thing, "test.idempotent", target="https://partner.test/x", traceparent=HOST_TRACEPARENT,
                        payload={"n": 1, "note": "", "token": "secretref:test-token"})
        app.save(thing, op)
    finally:
        app.close()
    (intent,) = spans.named("intend ")
    assert intent.parent is not None and tracing.traceparent_of(intent.parent) == HOST_TRACEPARENT
    assert op.traceparent is not None and op.traceparent.split("-")[1] == HOST_TRACEPARENT.split("-")[1]


def test_without_an_sdk_the_intent_keeps_the_authorizing_traceparent(modes_db: Database) -> None:
    assert not trace.get_current_span().is_recording()
    app = ModesApp(env=modes_db.library_env(create_table=False))
    try:
        given, plain = Thing(label="given"), Thing(label="plain")
        op = app.intend(given, "test.idempotent", target="https://partner.test/x", traceparent=HOST_TRACEPARENT,
                        payload={"n": 1, "note": "", "token": "secretref:test-token"})
        untraced = app.intend(plain, "test.idempotent", target="https://partner.test/x",
                              payload={"n": 2, "note": "", "token": "secretref:test-token"})
        app.save(given, op, plain, untraced)
    finally:
        app.close()
    assert op.traceparent == HOST_TRACEPARENT and untraced.traceparent is None
    assert not tracing.INTENT_SPANS._spans


def _post_ticket(desk: ReceiptDesk, label: str, headers: dict[str, str]) -> UUID:
    response = desk.client.post("/v1/commands/make_ticket", content=json.dumps({"label": label}).encode(),
                                headers={**auth("viewer"), "Content-Type": "application/json", **headers})
    assert response.status_code == 201, response.text
    return UUID(response.json()["operation_id"])


def test_a_command_sent_with_a_traceparent_intends_in_that_trace(database_url: str) -> None:
    seen: list[CommandContext] = []

    class Recorded(CommandContext):
        def __init__(self, **fields: object) -> None:
            super().__init__(**fields)  # type: ignore[arg-type]
            seen.append(self)

    with patch("ledger.receipt_runner.CommandContext", Recorded), receipt_desk(database_url) as desk:
        traced = _post_ticket(desk, "traced", {"traceparent": HOST_TRACEPARENT, "tracestate": "vendor=1"})
        untraced = _post_ticket(desk, "untraced", {})
        garbled = _post_ticket(desk, "garbled", {"traceparent": "not-a-traceparent"})
        ops = {op_id: desk.store.app.get_operation(op_id) for op_id in (traced, untraced, garbled)}
    assert ops[traced].traceparent == HOST_TRACEPARENT
    assert ops[untraced].traceparent is None and ops[garbled].traceparent is None
    assert [(ctx.traceparent, ctx.tracestate) for ctx in seen] == [(HOST_TRACEPARENT, "vendor=1"), (None, None),
                                                                   (None, None)]


def test_a_commands_intent_span_is_a_child_of_the_callers_span(database_url: str, spans: Spans) -> None:  # noqa: F811
    with receipt_desk(database_url) as desk:
        op_id = _post_ticket(desk, "traced", {"traceparent": HOST_TRACEPARENT})
        op = desk.store.app.get_operation(op_id)
    (intent,) = spans.named("intend ")
    assert intent.parent is not None and tracing.traceparent_of(intent.parent) == HOST_TRACEPARENT
    assert op.traceparent == tracing.traceparent_of(intent.context)
