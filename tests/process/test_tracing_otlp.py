"""One trace across processes, exported over OTLP/HTTP (issue 31 item 1, acceptance): a host (this
test) intends a callback-mode operation inside its own span; a worker process tries it (503 once,
then accepted); the reference partner calls back; a ``serve`` process records the callback; the
worker settles. Every span reaches a small OTLP receiver this test runs, and together they are
the spans of ``ledger.tracing``, parented on the intent's producer span and linked to it, with no
payload value or secret in any attribute. A command sent to another ``serve`` with the host's
``traceparent`` produces an operation in the same trace.

PostgreSQL only: a worker and a writing ``serve`` share the store.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from uuid import UUID

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from adapters.partner import start_partner_process
from adapters.processes import ServeProcess, WorkerProcess, spawn_serve
from ledger import tracing
from ledger.config import Database
from ledger.declarations import DeliveryMode
from tests.apps import ModesApp
from tests.callback_desk import CALLBACK_SECRET
from tests.conftest import SECRET, drop_schema, new_postgres_url, require_postgres, wait_until
from tests.loopback import QuietHandler
from tests.process.conftest import spawning, worker_env
from tests.receipt_desk import migrate_commands

pytestmark = [pytest.mark.postgres, pytest.mark.process]
TOKENS = json.dumps({"client-token-0123456789": {"principal": "cli", "roles": ["viewer"]}})
SECRETS = ("tok_test_secret_value", "tok_demo_secret_value", SECRET, CALLBACK_SECRET, "internal note",
           "client-token-0123456789")
"""Values no span may carry: the resolved secrets, the webhook and callback secrets, the
``internal`` payload value and the API token."""


@dataclass
class Received:
    """A span as the receiver got it."""

    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, object]
    links: list[tuple[str, str]]
    texts: list[str] = field(default_factory=list)


def _value(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver: ``POST /v1/traces`` (protobuf), spans kept in memory."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ReceiverHandler)
        self.spans: list[Received] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def add(self, request: ExportTraceServiceRequest) -> None:
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    attributes = {a.key: _value(a.value) for a in span.attributes}
                    texts = [span.name, span.status.message, *map(str, attributes.values())]
                    for event in span.events:
                        texts += [event.name, *(str(_value(a.value)) for a in event.attributes)]
                    with self.lock:
                        self.spans.append(Received(
                            service=str(resource.get("service.name")), name=span.name, kind=span.kind,
                            trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(), attributes=attributes,
                            links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links], texts=texts))

    def named(self, prefix: str, trace_id: str) -> list[Received]:
        with self.lock:
            return [s for s in self.spans if s.name.startswith(prefix) and s.trace_id == trace_id]


class _ReceiverHandler(QuietHandler):
    server: Receiver

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.read_body()
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != "/v1/traces":
            self.send_response(404)
            self.end_headers()
            return
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.server.add(request)
        self.answer(ExportTraceServiceResponse().SerializeToString(), {"Content-Type": "application/x-protobuf"})


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def host_tracer(receiver: Receiver) -> Iterator[TracerProvider]:
    """This test as the host: its spans, and the intents it makes, exported to the receiver."""
    provider = TracerProvider(resource=Resource.create({"service.name": "test-host"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.url + "/v1/traces")))
    tracing.set_tracer_provider(provider)
    try:
        yield provider
    finally:
        tracing.set_tracer_provider(None)
        provider.shutdown()


@pytest.fixture
def serves(tmp_path: Path) -> Iterator[Callable[..., ServeProcess]]:
    yield from spawning(spawn_serve, tmp_path, "serve")


@dataclass
class Store:
    url: str


@pytest.fixture
def commands_store() -> Iterator[Store]:
    """A second fresh PostgreSQL schema, for the commands application."""
    require_postgres()
    url, schema = new_postgres_url()
    try:
        yield Store(url)
    finally:
        drop_schema(schema)


def otel_env(receiver: Receiver) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_TRACES_SAMPLER": "parentbased_always_on"}


def _settled(db: Database, op_id: UUID) -> bool:
    app = ModesApp(env=db.library_env(create_table=False))
    try:
        return app.get_operation(op_id).status.value == "settled"
    finally:
        app.close()


def test_one_trace_from_the_host_through_worker_and_serve(
        modes_db: Database, database_url: str, commands_store: Store, tmp_path: Path, receiver: Receiver,
        host_tracer: TracerProvider,
        workers: Callable[..., WorkerProcess], serves: Callable[..., ServeProcess]) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("a worker and a writing serve at once need PostgreSQL")
    commands_url = commands_store.url
    migrate_commands(commands_url)  # one application per store: the commands serve has its own
    callbacks = serves({**worker_env(database_url, app="tests.apps:ModesApp",
                                     OPLEDGER_SECRET_CALLBACK_TEST_CALLBACK=CALLBACK_SECRET), **otel_env(receiver)})
    commands = serves({**worker_env(commands_url, app="tests.apps:CommandsApp", OPLEDGER_API_TOKENS=TOKENS),
                       **otel_env(receiver)})
    with start_partner_process(log_path=tmp_path / "partner.db", secret=SECRET,
                               callback_secret=CALLBACK_SECRET) as partner:
        fault = httpx.post(partner.url + "/_control/faults", json={
            "path": "/provision", "fault": {"status": 503, "retry_after": "0", "times": 1}})
        assert fault.status_code == 200, fault.text
        app = ModesApp(env=modes_db.library_env(create_table=False))
        try:
            with host_tracer.get_tracer("host").start_as_current_span("host command") as host:
                op_id = app.make(DeliveryMode.CALLBACK, partner.url + "/provision")
                traceparent = tracing.current_traceparent()
                assert traceparent is not None
                sent = httpx.post(commands.url + "/v1/commands/make_ticket", json={"label": "traced"},
                                  headers={"Authorization": "Bearer client-token-0123456789",
                                           "traceparent": traceparent})
                assert sent.status_code == 201, sent.text
        finally:
            app.close()
        worker = workers({**worker_env(database_url, app="tests.apps:ModesApp",
                                       OPLEDGER_CALLBACK_BASE_URL=callbacks.url), **otel_env(receiver)})
        wait_until(lambda: _settled(modes_db, op_id), timeout=60, what="the callback operation settled")
        assert partner.log.received_count(op_id) == 2  # the 503, then the accepted delivery
        worker.terminate()  # flushes its spans
    trace_id = f"{host.get_span_context().trace_id:032x}"
    host_id = f"{host.get_span_context().span_id:016x}"

    def complete() -> bool:
        return bool(receiver.named("settle ", trace_id) and receiver.named("callback ", trace_id)
                    and len(receiver.named("intend ", trace_id)) == 2)

    wait_until(complete, timeout=30, what="every span of the trace at the receiver")
    intents = {s.attributes[tracing.DESTINATION]: s for s in receiver.named("intend ", trace_id)}
    intent = intents["test.callback"]
    assert intent.service == "test-host" and intent.parent_id == host_id
    assert intent.kind == ProtoSpan.SPAN_KIND_PRODUCER and intent.attributes[tracing.MESSAGE_ID] == str(op_id)
    attempts = sorted(receiver.named("attempt ", trace_id), key=lambda s: int(str(s.attributes[tracing.ATTEMPT_NUMBER])))
    assert [(s.service, s.attributes[tracing.OUTCOME]) for s in attempts] == \
        [("opledger-worker", "failed"), ("opledger-worker", "accepted")]
    (callback,) = receiver.named("callback ", trace_id)
    (settle,) = receiver.named("settle ", trace_id)
    assert callback.service == "opledger-serve" and callback.attributes[tracing.OUTCOME] == "recorded"
    assert settle.service == "opledger-worker" and settle.attributes[tracing.SETTLEMENT_RESULT] == "settled"
    assert isinstance(settle.attributes[tracing.ENTITY_VERSION], int)
    for span in (*attempts, callback, settle):  # children of the intent, and linked to it
        assert span.parent_id == intent.span_id and (trace_id, intent.span_id) in span.links, span
        assert span.attributes[tracing.MESSAGE_ID] == str(op_id)
    for span in attempts:
        assert span.kind == ProtoSpan.SPAN_KIND_CONSUMER and span.attributes[tracing.DELIVERY_MODE] == "callback"
        assert {tracing.ATTEMPT_ID, tracing.EPOCH} <= span.attributes.keys()
    assert attempts[0].attributes[tracing.ATTEMPT_ID] != attempts[1].attributes[tracing.ATTEMPT_ID]
    # The command sent with the host's traceparent: its intent is in the same trace, under the
    # commands serve's HTTP server span, which is the host span's child.
    command_intent = intents["test.idempotent"]
    assert command_intent.service == "opledger-serve"
    with receiver.lock:
        by_id = {s.span_id: s for s in receiver.spans if s.trace_id == trace_id}
    ancestors, at = [], command_intent
    while at.parent_id in by_id:
        at = by_id[at.parent_id]
        ancestors.append(at.span_id)
    assert at.parent_id == host_id or host_id in ancestors
    # No payload value or secret in any span of any process.
    with receiver.lock:
        texts = [text for span in receiver.spans for text in span.texts]
    for secret in SECRETS:
        assert not [text for text in texts if secret in text], secret
