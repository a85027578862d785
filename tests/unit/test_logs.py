"""Log lines about an operation carry its context; secrets never appear; JSON off a terminal."""

from __future__ import annotations

import io
import json
from uuid import uuid4

import structlog

from adapters.logs import OPERATION_CONTEXT, configure_logging
from ledger.status import ExecutionState as E
from tests.observe_seed import CANARY_SECRET
from tests.unit.builders import build


def test_a_line_naming_an_operation_gets_its_context_and_no_secret() -> None:
    out = io.StringIO()  # not a terminal: JSON
    configure_logging("auto", file=out)
    try:
        op = build(E.DISPATCHING).op
        attempt = op.last_attempt_id
        OPERATION_CONTEXT.remember([op])
        log = structlog.get_logger(f"test.{uuid4().hex}")  # a new logger: the configuration above
        log.warning("adapter raised", operation_id=str(op.id), payload={"iban": CANARY_SECRET},
                    authorization="Bearer abc")
        line = json.loads(out.getvalue().splitlines()[-1])
    finally:
        structlog.reset_defaults()  # later tests log as they did before
    assert line["operation_id"] == str(op.id)
    assert (line["integration"], line["tenant"], line["epoch"], line["attempt_id"]) == \
        (op.integration_name, op.tenant, 1, str(attempt))
    assert line["payload"] == "[redacted]" and line["authorization"] == "[redacted]"
    assert CANARY_SECRET not in out.getvalue()


def test_console_on_a_terminal() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    configure_logging("auto", file=out)
    try:
        structlog.get_logger(f"test.{uuid4().hex}").info("hello", operation_id="x")
    finally:
        structlog.reset_defaults()
    assert "hello" in out.getvalue() and not out.getvalue().lstrip().startswith("{")


def test_a_line_carries_the_trace_and_span_ids_of_the_current_span_or_the_intent() -> None:
    from opentelemetry import trace

    from ledger import tracing

    out = io.StringIO()
    configure_logging("json", file=out)
    intent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    inner = tracing.span_context_of("00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01")
    assert inner is not None
    try:
        op = build(E.DISPATCHING).op
        op.traceparent = intent  # as the intent stored it
        OPERATION_CONTEXT.remember([op])
        log = structlog.get_logger(f"test.{uuid4().hex}")
        log.info("outside a span", operation_id=str(op.id))
        with trace.use_span(trace.NonRecordingSpan(inner)):
            log.info("inside a span", operation_id=str(op.id))
        log.info("about nothing traced")
        outside, inside, untraced = (json.loads(line) for line in out.getvalue().splitlines()[-3:])
    finally:
        structlog.reset_defaults()
    assert (outside["trace_id"], outside["span_id"]) == ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    assert (inside["trace_id"], inside["span_id"]) == ("0af7651916cd43dd8448eb211c80319c", "00f067aa0ba902b7")
    assert "trace_id" not in untraced and "span_id" not in untraced
