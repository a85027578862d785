"""The small parts of tracing: W3C traceparent parsing and formatting, outcome names, which
exporter the ``OTEL_*`` environment asks for, and a poll's span (``executors.calls.make_call``)
(issue 31 item 1)."""

from __future__ import annotations

import pytest

from adapters.trace_export import configure_tracing, wanted_exporter
from executors.calls import make_call
from executors.flights import InFlight
from ledger import tracing
from ledger.clock import FakeClock
from ledger.egress import EgressRequest
from ledger.outcomes import Ambiguous, Failed, FailureCategory, StillRunning, Succeeded
from ledger.status import ExecutionState as E
from tests.tracing import Spans, spans  # noqa: F401 (spans: the fixture)
from tests.unit.builders import build

VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize("text", [None, "", "garbage", VALID.upper(), "ff" + VALID[2:],
                                  "00-" + "0" * 32 + "-b7ad6b7169203331-01", "00-0af7651916cd43dd8448eb211c80319c-"
                                  + "0" * 16 + "-01", VALID + "-extra"])
def test_invalid_traceparents_name_no_context(text: str | None) -> None:
    assert tracing.span_context_of(text) is None
    assert tracing.context_of(text) is None


def test_a_traceparent_round_trips() -> None:
    context = tracing.span_context_of(VALID)
    assert context is not None and context.is_remote and context.trace_flags.sampled
    assert tracing.traceparent_of(context) == VALID
    assert tracing.traceparent_of(tracing.span_context_of(VALID[:-2] + "00")) == VALID[:-2] + "00"  # type: ignore[arg-type]


def test_outcome_names_and_error_types_carry_no_detail() -> None:
    assert tracing.outcome_name(Succeeded(status_code=200)) == "succeeded"
    assert tracing.outcome_name(StillRunning()) == "still_running"
    assert tracing.outcome_name(None) == "none"
    assert tracing.outcome_name(Failed(FailureCategory.REJECTED, retryable=False, detail="secret-ish")) == "failed"
    assert tracing.outcome_name(Ambiguous(reason="timeout", detail="x")) == "ambiguous"


@pytest.mark.parametrize(("env", "wanted"), [
    ({}, None),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "otlp"),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, "otlp"),
    ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, None),
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, None),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, None),
])
def test_the_environment_chooses_the_exporter(env: dict[str, str], wanted: str | None) -> None:
    assert wanted_exporter(env) == wanted


def test_nothing_is_set_up_when_the_environment_asks_for_nothing() -> None:
    from opentelemetry import trace

    before = trace.get_tracer_provider()
    configure_tracing("opledger-test", env={})()
    assert trace.get_tracer_provider() is before


def test_a_poll_runs_in_its_span_and_sends_its_traceparent(spans: Spans) -> None:  # noqa: F811
    built = build(E.ACCEPTED)
    op = built.op
    op.traceparent = VALID  # as the intent stored it
    sent: list[str | None] = []

    class Poller:
        def poll(self, request: EgressRequest, remote_id: str) -> StillRunning:
            sent.append(request.traceparent)
            return StillRunning(remote_status="running")

    request = EgressRequest(operation_id=op.id, attempt_id=op.last_attempt_id, attempt_number=op.attempts,  # type: ignore[arg-type]
                            integration=op.integration_name, delivery_mode=op.delivery_mode, target=op.target,
                            payload={}, traceparent=op.traceparent)
    flight = InFlight(op=op, epoch=op.epoch, kind="poll", request=request, policy=built.integration.retry,
                      adapter=Poller())  # type: ignore[arg-type]
    finished = make_call(flight, FakeClock(built.now))
    assert isinstance(finished.outcome, StillRunning)
    (poll,) = spans.named("poll ")
    assert poll.parent is not None and tracing.traceparent_of(poll.parent) == VALID
    assert [tracing.traceparent_of(link.context) for link in poll.links] == [VALID]
    assert poll.attributes is not None and poll.attributes[tracing.OPERATION_TYPE] == "receive"
    assert poll.attributes[tracing.OUTCOME] == "still_running" and poll.attributes[tracing.MESSAGE_ID] == str(op.id)
    assert sent == [tracing.traceparent_of(poll.context)]
