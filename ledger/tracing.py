"""OpenTelemetry spans of an operation's life, by the messaging semantic conventions.

The operation is the message; the ledger is the intermediary. One trace shows::

    host's span
      └ intend <integration>     PRODUCER  send     (its context is the intent's stored traceparent)
          ├ attempt <integration>   CONSUMER  process  (one per attempt; retries are siblings)
          ├ lookup <integration>    CONSUMER  process  (asking the provider after a lost answer)
          ├ poll <integration>      CONSUMER  receive  (one per poll of accepted work)
          ├ cancel <integration>    CONSUMER  process  (a remote cancel)
          ├ callback <integration>  CONSUMER  process  (one per accepted callback, in ``serve``)
          └ settle <integration>    INTERNAL  settle   (with the settled entity's version)

Every consumer-side span is a child of the stored creation context and links to it too (the
conventions require the link; a parent is allowed for a single message), so it stays in the
host's trace across processes and hours. The outgoing request of an attempt, lookup, poll or
cancel carries that span's ``traceparent``, so the provider's spans join the trace.

Attributes are ids, names, numbers and outcome kinds only: never a payload field, a target URL,
a header, a failure's detail text or a secret (the secret canary checks spans too).

Only ``opentelemetry-api`` is used here. Without an SDK every call is a no-op returning a
non-recording span that carries its parent's context, so the stored ``traceparent`` is the
authorizing request's, as before; the cost is a few microseconds per span (docs/performance.md).
The ``opledger[otel]`` extra installs the SDK and the OTLP/HTTP exporter, which ``opledger
worker`` and ``serve`` set up from the standard ``OTEL_*`` variables (``adapters.trace_export``).

Source: DESIGN §9 ("Traces"); OpenTelemetry semantic conventions, messaging spans; W3C Trace
Context; issue 31 item 1.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any
from uuid import UUID

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

TRACER_NAME = "opledger"
SYSTEM = "opledger"
"""``messaging.system``: the ledger is the intermediary."""

# Attribute names: the conventions' where they have one, ``opledger.*`` otherwise.
MESSAGING_SYSTEM = "messaging.system"
OPERATION_NAME = "messaging.operation.name"
OPERATION_TYPE = "messaging.operation.type"
DESTINATION = "messaging.destination.name"
"""The integration: the declared kind of operation, a low-cardinality name."""
MESSAGE_ID = "messaging.message.id"
"""The operation id."""
ERROR_TYPE = "error.type"
ATTEMPT_ID = "opledger.attempt.id"
ATTEMPT_NUMBER = "opledger.attempt.number"
EPOCH = "opledger.epoch"
DELIVERY_MODE = "opledger.delivery_mode"
OUTCOME = "opledger.outcome"
"""What came back: ``succeeded``, ``accepted``, ``failed``, ``ambiguous``, ``still_running``,
``cancel_confirmed``, ``cancel_refused``, ``none`` (nothing was asked), or a callback's result."""
CALLBACK_ID = "opledger.callback.id"
ENTITY_VERSION = "opledger.settlement.entity_version"
"""The settled entity's version after its action."""
SETTLEMENT_RESULT = "opledger.settlement.result"
"""``settled``, ``failed`` (to retry), ``blocked``, or ``none`` (nothing recorded)."""

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_PROPAGATOR = TraceContextTextMapPropagator()
_tracer: Tracer = trace.get_tracer(TRACER_NAME)


_own_provider = False
_UNSET = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


def set_tracer_provider(provider: trace.TracerProvider | None) -> None:
    """Make opledger's spans with ``provider`` instead of the global one (None: the global one
    again). For tests and hosts that keep a provider of their own; ``opledger worker`` and
    ``serve`` set the global provider (``adapters.trace_export``)."""
    global _tracer, _own_provider
    _tracer = provider.get_tracer(TRACER_NAME) if provider is not None else trace.get_tracer(TRACER_NAME)
    _own_provider = provider is not None


def enabled() -> bool:
    """Whether spans are made at all: a tracer provider is set (an SDK's, or another
    implementation's). Without one the span functions below return at once, doing what the
    API's no-op would (the stored context passes on unchanged) at a fraction of its cost."""
    return _own_provider or not isinstance(trace.get_tracer_provider(), _UNSET)


def span_context_of(traceparent: str | None) -> SpanContext | None:
    """The remote span context a W3C ``traceparent`` names, or None when it is absent or invalid
    (version ``ff``, an all-zero trace or span id). Pure.

    Source: W3C Trace Context §3.2.
    """
    found = _TRACEPARENT.match(traceparent) if traceparent else None
    if found is None or found.group(1) == "ff":
        return None
    trace_id, span_id = int(found.group(2), 16), int(found.group(3), 16)
    if not trace_id or not span_id:
        return None
    return SpanContext(trace_id=trace_id, span_id=span_id, is_remote=True,
                       trace_flags=TraceFlags(int(found.group(4), 16) & 0xFF))


def traceparent_of(context: SpanContext) -> str | None:
    """The W3C ``traceparent`` of ``context`` (version 00), or None when it is invalid. Pure."""
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def context_of(traceparent: str | None, tracestate: str | None = None) -> Context | None:
    """An OpenTelemetry context whose current span is the remote one ``traceparent`` (and
    ``tracestate``) name, or None when ``traceparent`` is absent or invalid: what the command
    route hands to a handler (``ledger.inbound.CommandContext.trace``)."""
    if span_context_of(traceparent) is None:
        return None
    carrier = {"traceparent": traceparent or ""}
    if tracestate:
        carrier["tracestate"] = tracestate
    return _PROPAGATOR.extract(carrier)


def current_traceparent() -> str | None:
    """The ``traceparent`` of the current span, or None when there is none."""
    return traceparent_of(trace.get_current_span().get_span_context())


def current_trace() -> tuple[str | None, str | None]:
    """The W3C ``traceparent`` and ``tracestate`` of the current span (None for each absent)."""
    context = trace.get_current_span().get_span_context()
    parent = traceparent_of(context)
    state = context.trace_state.to_header() if parent is not None and context.trace_state else ""
    return parent, state or None


def _parent(traceparent: str | None) -> tuple[Context | None, list[Link]]:
    """The context to start a consumer-side span in, and its link: both the stored creation
    context (``traceparent``); the current context and no link without one."""
    stored = span_context_of(traceparent)
    if stored is None:
        return None, []
    return trace.set_span_in_context(NonRecordingSpan(stored)), [Link(stored)]


def _common(name: str, operation_type: str, integration: str, operation_id: UUID) -> dict[str, AttributeValue]:
    return {MESSAGING_SYSTEM: SYSTEM, OPERATION_NAME: name, OPERATION_TYPE: operation_type,
            DESTINATION: integration, MESSAGE_ID: str(operation_id)}


@contextmanager
def _span(name: str, parent: Context | None, kind: SpanKind, attributes: dict[str, AttributeValue],
          links: list[Link]) -> Iterator[Span]:
    """A current span that, on an exception, records only its type (``error.type``): an
    exception's message may quote what a provider or a host said."""
    with _tracer.start_as_current_span(name, context=parent, kind=kind, attributes=attributes, links=links,
                                       record_exception=False, set_status_on_exception=False) as span:
        try:
            yield span
        except BaseException as exc:
            span.set_attribute(ERROR_TYPE, type(exc).__name__)
            span.set_status(trace.StatusCode.ERROR)
            raise


# ---------------------------------------------------------------------------- the intent


class IntentSpans:
    """Producer spans of intents made but not saved yet: ended by ``LedgerApplication.save``
    when the operation's commit lands (or fails). Thread-safe and bounded: an intent a host
    never saves is ended unsaved once ``size`` newer ones wait."""

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._spans: OrderedDict[UUID, Span] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, operation_id: UUID, span: Span) -> None:
        """Hold ``span`` (a recording one) until ``operation_id`` is saved."""
        evicted: list[Span] = []
        with self._lock:
            previous = self._spans.pop(operation_id, None)
            if previous is not None:
                evicted.append(previous)
            self._spans[operation_id] = span
            while len(self._spans) > self.size:
                evicted.append(self._spans.popitem(last=False)[1])
        for old in evicted:
            old.set_attribute(ERROR_TYPE, "not_saved")
            old.end()

    def saved(self, ids: Iterable[UUID], error: BaseException | None = None) -> None:
        """End the spans of the intents among ``ids``: committed, or not (``error``)."""
        if not self._spans:  # the usual case (no SDK, or no intent in this save): nothing to look up
            return
        with self._lock:
            spans = [span for op_id in ids if (span := self._spans.pop(op_id, None)) is not None]
        for span in spans:
            if error is not None:
                span.set_attribute(ERROR_TYPE, type(error).__name__)
                span.set_status(trace.StatusCode.ERROR)
            span.end()


INTENT_SPANS = IntentSpans()


def start_intent(integration: str, traceparent: str | None) -> tuple[Span, str | None]:
    """Start the producer span of an intent of ``integration``: a child of ``traceparent`` when
    one is given, else of the current span (the host's), if any.

    Returns:
        The span (the caller sets its message id and hands it to :data:`INTENT_SPANS`) and the
        ``traceparent`` to store with the intent: the span's own when it records; otherwise the
        given one, or the current span's (no SDK: the authorizing request's, as before).
    """
    if not enabled():  # the no-op API's answer, without making its span
        return trace.INVALID_SPAN, traceparent if traceparent is not None else current_traceparent()
    given = span_context_of(traceparent)
    if traceparent is not None and given is None:
        return trace.INVALID_SPAN, traceparent  # the intent's checks refuse it, as before
    parent = trace.set_span_in_context(NonRecordingSpan(given)) if given is not None else None
    span = _tracer.start_span(f"intend {integration}", context=parent, kind=SpanKind.PRODUCER)
    if not span.is_recording():
        return span, traceparent if traceparent is not None else traceparent_of(span.get_span_context())
    span.set_attributes({MESSAGING_SYSTEM: SYSTEM, OPERATION_NAME: "intend", OPERATION_TYPE: "send",
                         DESTINATION: integration})
    return span, traceparent_of(span.get_span_context())


# ---------------------------------------------------------------------------- the worker


def start_call_span(kind: str, *, integration: str, operation_id: UUID, traceparent: str | None,
                    attempt_id: UUID | None = None, attempt_number: int | None = None, epoch: int | None = None,
                    delivery_mode: str | None = None) -> Span:
    """Start the span of one call a worker makes for an operation (not made current): ``kind``
    is ``send`` (an attempt), ``lookup``, ``poll`` or ``cancel``. A child of, and linked to, the
    stored creation context ``traceparent``. The caller records what came back
    (:func:`set_outcome`), puts :func:`traceparent_of` the span on the outgoing request and ends
    it, from any thread: a call started on an adapter's event loop ends where it completes
    (docs/adr/0009-egress-event-loop.md). ``INVALID_SPAN`` when tracing is off."""
    if not enabled():
        return trace.INVALID_SPAN
    name = "attempt" if kind == "send" else kind
    parent, links = _parent(traceparent)
    attributes = _common(name, "receive" if kind == "poll" else "process", integration, operation_id)
    for key, value in ((ATTEMPT_ID, attempt_id), (ATTEMPT_NUMBER, attempt_number), (EPOCH, epoch),
                       (DELIVERY_MODE, delivery_mode)):
        if value is not None:
            attributes[key] = str(value) if isinstance(value, UUID) else value
    return _tracer.start_span(f"{name} {integration}", context=parent, kind=SpanKind.CONSUMER,
                              attributes=attributes, links=links, record_exception=False,
                              set_status_on_exception=False)


def current(span: Span) -> AbstractContextManager[Span]:
    """Make ``span`` current for a block without ending it (a call's span while a blocking
    adapter runs in this thread); an exception leaves it as it was."""
    return trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False)


def outcome_name(outcome: object) -> str:
    """The outcome kind of an adapter's result as a span shows it: its class in snake case
    (``Succeeded`` -> ``succeeded``, ``StillRunning`` -> ``still_running``), ``none`` for None."""
    if outcome is None:
        return "none"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(outcome).__name__).lower()


def set_outcome(span: Span, outcome: object) -> None:
    """Record on ``span`` what a call returned: the outcome kind, and for a failure or an
    ambiguity its category or reason as ``error.type`` (never its detail text)."""
    if not span.is_recording():
        return
    span.set_attribute(OUTCOME, outcome_name(outcome))
    category = getattr(outcome, "category", None) or getattr(outcome, "reason", None)
    if category is not None and type(outcome).__name__ in ("Failed", "Ambiguous"):
        span.set_attribute(ERROR_TYPE, str(getattr(category, "value", category)))
        span.set_status(trace.StatusCode.ERROR)


@contextmanager
def settle_span(*, integration: str, operation_id: UUID, traceparent: str | None) -> Iterator[Span]:
    """The current span of one settlement (``settle`` by the conventions): a child of, and
    linked to, the stored creation context. The caller sets :data:`ENTITY_VERSION` and
    :data:`SETTLEMENT_RESULT`."""
    if not enabled():
        yield trace.INVALID_SPAN
        return
    parent, links = _parent(traceparent)
    with _span(f"settle {integration}", parent, SpanKind.INTERNAL,
               _common("settle", "settle", integration, operation_id), links) as span:
        yield span


# ---------------------------------------------------------------------------- serve


@contextmanager
def callback_span(*, integration: str, operation_id: UUID, traceparent: str | None, callback_id: str,
                  attempt_id: UUID | None) -> Iterator[Span]:
    """The current span of one authenticated callback (``process``, pushed by the provider): a
    child of, and linked to, the stored creation context, and linked to the request's own span
    (the provider's trace, or the HTTP server span) when there is one."""
    if not enabled():
        yield trace.INVALID_SPAN
        return
    parent, links = _parent(traceparent)
    incoming = trace.get_current_span().get_span_context()
    if incoming.is_valid and (not links or incoming != links[0].context):
        links.append(Link(incoming))
    attributes = _common("callback", "process", integration, operation_id)
    attributes[CALLBACK_ID] = callback_id
    if attempt_id is not None:
        attributes[ATTEMPT_ID] = str(attempt_id)
    with _span(f"callback {integration}", parent, SpanKind.CONSUMER, attributes, links) as span:
        yield span


@contextmanager
def attached(context: Context | None) -> Iterator[None]:
    """Run the block with ``context`` current, unless a span is current already (the HTTP
    server's, made by an SDK from the same request headers); nothing to do for None."""
    if context is None or trace.get_current_span().get_span_context().is_valid:
        yield
        return
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


def log_ids(traceparent: str | None = None) -> Mapping[str, str]:
    """``trace_id`` and ``span_id`` for a log line: the current span's, else those of the
    stored ``traceparent`` (the intent's producer span); empty when neither is there."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        stored = span_context_of(traceparent)
        if stored is None:
            return {}
        context = stored
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}



SETTLEMENT_FACTS = {"Settled": "settled", "SettlementFailed": "failed", "SettlementBlocked": "blocked"}
"""The settlement result a span shows, by the fact the settlement recorded."""


def traced_settlement(change: Callable[[Any], Sequence[Any]]) -> Callable[[Any], Sequence[Any]]:
    """``change`` (settle one operation: ``executors.settlement.settle_change``) run inside a
    :func:`settle_span` that records its result and the settled entity's version."""

    def settle(op: Any) -> Sequence[Any]:
        with settle_span(integration=op.integration_name, operation_id=op.id, traceparent=op.traceparent) as span:
            saved = change(op)
            if span.is_recording():
                fact = type(op.pending_events[-1]).__name__ if op.pending_events else ""
                span.set_attribute(SETTLEMENT_RESULT, SETTLEMENT_FACTS.get(fact, "none"))
                if fact == "Settled" and op.settled_entity_version is not None:
                    span.set_attribute(ENTITY_VERSION, op.settled_entity_version)
            return saved

    return settle
