"""One call of an attempt, a lookup, a poll or a remote cancel: the lease, budget and approval
checks just before egress (:func:`held_back`), the adapter call, and the executor's own checks of
what came back (:func:`checked`: an adapter's exception or wrong value is an
``Ambiguous(adapter_error)``, never lost; every text field is redacted of the request's secrets).

:func:`make_call` makes the call now, in the thread that calls it (an egress thread, or inline);
``executors.loop_calls`` starts it on the adapter's own event loop instead and checks what came
back when it completes. Both go through the functions here, so the two paths cannot differ in
what they check.

Source: DESIGN §7 ("nothing leaves without a live lease"); issue 14 items 1, 2 and 3.
"""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import datetime
from typing import Any, TypeVar

import structlog

from executors.flights import FOLLOW_KINDS, Finished, InFlight
from ledger import tracing
from ledger.approvals import void_reason
from ledger.clock import Clock
from ledger.facts import FactKind, storable_fact
from ledger.outcomes import (
    Accepted,
    Ambiguous,
    CancelConfirmed,
    CancelRefused,
    Failed,
    FailureCategory,
    StillRunning,
    Succeeded,
)
from ledger.redaction import redact
from ledger.tracing import Span

log = structlog.get_logger("opledger.egress")

_Redactable = TypeVar("_Redactable")

OUTCOME_TYPES = (Succeeded, Accepted, Failed, Ambiguous)
"""What an adapter call may return (``ledger.egress.Adapter``; a lookup may also return None)."""
POLL_TYPES = (Succeeded, Failed, Ambiguous, CancelConfirmed, StillRunning)
"""What a poll may return (``ledger.egress.RemoteOperations.poll``)."""
CANCEL_TYPES = (CancelConfirmed, CancelRefused)
"""What a remote cancel may return (``ledger.egress.RemoteOperations.cancel``)."""


def open_span(flight: InFlight) -> Span:
    """Start ``flight``'s span (``ledger.tracing.start_call_span``: an attempt's, a lookup's, a
    poll's or a cancel's) and put its ``traceparent`` on the request; the caller ends it
    (:func:`close_span`)."""
    request = flight.request
    span = tracing.start_call_span(flight.kind, integration=request.integration, operation_id=request.operation_id,
                                   traceparent=flight.op.traceparent, attempt_id=request.attempt_id,
                                   attempt_number=request.attempt_number, epoch=flight.epoch,
                                   delivery_mode=request.delivery_mode.value)
    if span.is_recording():
        flight.request = replace(request, traceparent=tracing.traceparent_of(span.get_span_context()))
    return span


def close_span(span: Span, finished: Finished) -> Finished:
    """Record ``finished``'s outcome on ``span`` and end it; returns ``finished``."""
    tracing.set_outcome(span, finished.outcome)
    span.end()
    return finished


def make_call(flight: InFlight, clock: Clock) -> Finished:
    """Make ``flight``'s call now, in this thread, inside its span (current meanwhile), whose
    ``traceparent`` the request carries; never raises (an adapter's error is an
    ``Ambiguous(adapter_error)`` outcome)."""
    span = open_span(flight)
    with tracing.current(span):
        finished = held_back(flight, clock)
        if finished is None:
            value: object = None
            error: BaseException | None = None
            try:
                value = _invoke(flight)
            except KeyboardInterrupt:  # reaches only an inline call, in the main thread: the user's stop
                span.end()
                raise
            except BaseException as exc:  # an adapter bug (even SystemExit) must not kill the thread, lose the call
                error = exc
            finished = checked(flight, value, error)
    return close_span(span, finished)


def held_back(flight: InFlight, clock: Clock) -> Finished | None:
    """The result of ``flight`` when nothing of it may leave now, checked immediately before
    egress (at ``clock.now()``); None when it may go.

    A send whose lease expired, whose call budget window is closing or whose approval expired
    fails as not sent (the mode retries it later); a lookup, poll or cancel that may not go is
    marked ``lost``: not asking says nothing, whoever holds the operation next asks again.
    """
    request = flight.request
    if flight.kind in FOLLOW_KINDS:
        not_after = flight.op.lease_expires_at
        if flight.op.remote_id is None or (not_after is not None and clock.now() >= not_after):
            flight.lost = True  # the poll lease lapsed: whoever holds it now asks
            return Finished(request.operation_id, None)
        return None
    reason = _held_back(flight, flight.op.lease_expires_at, clock.now())
    if reason is None:
        return None
    if flight.kind == "lookup":
        # Not asking says nothing about the attempt, which may have applied: record
        # nothing; whoever reclaims the operation asks again (found by the simulator).
        flight.lost = True
        return Finished(request.operation_id, None)
    return Finished(request.operation_id, Failed(
        FailureCategory.CONNECT, retryable=True, egress=False, detail=f"{reason}; nothing was sent"))


def remote_id_of(flight: InFlight) -> str | None:
    """The remote operation a poll or a cancel follows (None for a send or a lookup)."""
    return flight.op.remote_id if flight.kind in FOLLOW_KINDS else None


def _invoke(flight: InFlight) -> object:
    adapter: Any = flight.adapter
    request = flight.request
    if flight.kind == "send":
        return adapter.send(request)
    if flight.kind == "lookup":
        return adapter.lookup(request)
    remote_id = remote_id_of(flight)
    return adapter.poll(request, remote_id) if flight.kind == "poll" else adapter.cancel(request, remote_id)


def checked(flight: InFlight, value: object, error: BaseException | None = None) -> Finished:
    """What ``flight``'s call came back with (``value``, or the exception ``error`` the adapter
    raised) as a result the ledger may record: a bug's exception or a value of the wrong type
    becomes ``Ambiguous(adapter_error)`` for a send or a lookup, ``StillRunning`` for a poll and a
    retryable ``CancelRefused`` for a cancel; every text field is redacted. Never raises."""
    request = flight.request
    if flight.kind in FOLLOW_KINDS:
        return _follow_checked(flight, value, error)
    if error is not None:
        log.error("adapter raised", operation_id=str(request.operation_id), exc_info=error)
        return Finished(request.operation_id, Ambiguous(reason="adapter_error",
                                                        detail=adapter_error_text(error, request.secrets)))
    if not isinstance(value, OUTCOME_TYPES) and not (value is None and flight.kind == "lookup"):
        # An adapter bug too: the call was made, so what it did is unknown.
        log.error("adapter returned no outcome", operation_id=str(request.operation_id),
                  returned=type(value).__name__)
        return Finished(request.operation_id, Ambiguous(
            reason="adapter_error", detail=f"the adapter returned {type(value).__name__}, not an outcome"))
    return Finished(request.operation_id, redact_outcome(value, request.secrets) if value is not None else None)


def _follow_checked(flight: InFlight, value: object, error: BaseException | None) -> Finished:
    """A poll's or a remote cancel's result: one that fails says nothing for a poll
    (``StillRunning``), a retryable ``CancelRefused`` for a cancel."""
    request = flight.request
    if error is not None:
        log.error("adapter raised", operation_id=str(request.operation_id), kind=flight.kind, exc_info=error)
        value, text = None, adapter_error_text(error, request.secrets)
    else:
        text = f"the adapter returned {type(value).__name__}"
    allowed = POLL_TYPES if flight.kind == "poll" else CANCEL_TYPES
    if not isinstance(value, allowed):
        if value is not None:
            log.error("adapter returned no outcome", operation_id=str(request.operation_id), kind=flight.kind)
        value = (StillRunning(detail=text) if flight.kind == "poll"
                 else CancelRefused(reason=text, retryable=True))
    return Finished(request.operation_id, redact_outcome(value, request.secrets))


def _held_back(flight: InFlight, not_after: datetime | None, now: datetime) -> str | None:
    """Why nothing of ``flight`` may leave at ``now`` (UTC), checked just before egress; None
    when it may go."""
    if not_after is not None and now >= not_after:
        # This process stalled between recording the attempt and sending it: another
        # worker may own the operation now, so nothing may leave (DESIGN §7).
        return "lease expired before egress"
    if flight.send_by is not None and now >= flight.send_by:
        # Counted in a call budget window that ends within its send margin
        # (``executors.budgets.send_margin``) while this worker was slow: calling now would
        # reach the provider in the next window and spend its calls.
        return "the call budget window was closing before egress"
    if flight.kind == "send" and void_reason(flight.op, now) is not None:
        # The approval held when the claim was decided, but expired before this send (a slow
        # commit, a stalled worker): egress needs an unexpired approval (issue 14 item 2); the
        # retry finds the approval void and waits for a new one.
        return "the approval expired before egress"
    return None


def adapter_error_text(exc: BaseException, hidden: tuple[str, ...]) -> str:
    """An adapter's exception as storable text: ``Type: message`` with every form of ``hidden``
    redacted first, then escaped and bounded (``ledger.facts``, ``DETAIL``). Pure.

    Source: issue 14 item 3 ("exception text from adapters is redacted and bounded").
    """
    try:
        text = str(exc)
    except BaseException:  # an exception whose own str() raises still gets a reason
        text = "(its message could not be read)"
    # Redacted before it is cut, so a cut can never leave a secret's prefix unmatched.
    return storable_fact(redact(f"{type(exc).__name__}: {text}", hidden), FactKind.DETAIL)


def redact_outcome(outcome: _Redactable, hidden: tuple[str, ...]) -> _Redactable:
    """Return ``outcome`` with every text field redacted of ``hidden`` (``ledger.redaction``):
    the executor's own pass over what any adapter returns, not only the webhook adapter. Pure."""
    if not hidden:
        return outcome
    value_object: Any = outcome  # every outcome, poll result and cancel outcome is a dataclass
    changes: dict[str, Any] = {f.name: redact(value, hidden) for f in fields(value_object)
                               if isinstance(value := getattr(outcome, f.name), str) and value}
    return replace(value_object, **changes) if changes else outcome
