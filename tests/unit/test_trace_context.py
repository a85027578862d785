"""The pure parts of tracing: W3C traceparent parsing and formatting, outcome names, and which
exporter the ``OTEL_*`` environment asks for (issue 31 item 1)."""

from __future__ import annotations

import pytest

from adapters.trace_export import configure_tracing, wanted_exporter
from ledger import tracing
from ledger.outcomes import Ambiguous, Failed, FailureCategory, StillRunning, Succeeded

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
