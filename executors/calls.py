"""One call of an attempt, a lookup, a poll or a remote cancel, made now by the thread that
calls :func:`make_call`: the lease, budget and approval checks just before egress, the adapter call, and
the executor's own checks of what came back (an adapter's exception or wrong value is an
``Ambiguous(adapter_error)``, never lost; every text field is redacted of the request's secrets).

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

log = structlog.get_logger("opledger.egress")

_Redactable = TypeVar("_Redactable")

OUTCOME_TYPES = (Succeeded, Accepted, Failed, Ambiguous)
"""What an adapter call may return (``ledger.egress.Adapter``; a lookup may also return None)."""
POLL_TYPES = (Succeeded, Failed, Ambiguous, CancelConfirmed, StillRunning)
"""What a poll may return (``ledger.egress.RemoteOperations.poll``)."""
CANCEL_TYPES = (CancelConfirmed, CancelRefused)
"""What a remote cancel may return (``ledger.egress.RemoteOperations.cancel``)."""


def make_call(flight: InFlight, clock: Clock) -> Finished:
    """Make ``flight``'s call now, in this thread, inside its span (``ledger.tracing.call_span``:
    an attempt's, a lookup's, a poll's or a cancel's), whose ``traceparent`` the request carries;
    never raises (an adapter's error is an ``Ambiguous(adapter_error)`` outcome)."""
    request, op = flight.request, flight.op
    with tracing.call_span(flight.kind, integration=request.integration, operation_id=request.operation_id,
                           traceparent=op.traceparent, attempt_id=request.attempt_id,
                           attempt_number=request.attempt_number, epoch=flight.epoch,
                           delivery_mode=request.delivery_mode.value) as span:
        if span.is_recording():
            flight.request = replace(request, traceparent=tracing.traceparent_of(span.get_span_context()))
        finished = _call(flight, clock)
        tracing.set_outcome(span, finished.outcome)
    return finished


def _call(flight: InFlight, clock: Clock) -> Finished:
    request, not_after = flight.request, flight.op.lease_expires_at
    if flight.kind in FOLLOW_KINDS:
        return _follow(flight, clock)
    held_back = _held_back(flight, not_after, clock.now())
    if held_back is not None:
        if flight.kind == "lookup":
            # Not asking says nothing about the attempt, which may have applied: record
            # nothing; whoever reclaims the operation asks again (found by the simulator).
            flight.lost = True
            return Finished(request.operation_id, None)
        # A send fails as not sent; the mode retries it later.
        return Finished(request.operation_id, Failed(
            FailureCategory.CONNECT, retryable=True, egress=False, detail=f"{held_back}; nothing was sent"))
    outcome: object  # checked below: an adapter's bug must not reach the ledger as a value
    try:
        if flight.kind == "send":
            outcome = flight.adapter.send(request)
        else:
            outcome = flight.adapter.lookup(request)
    except KeyboardInterrupt:  # reaches only an inline call, in the main thread: the user's stop
        raise
    except BaseException as exc:  # an adapter bug (even SystemExit) must not kill the thread or lose the attempt
        log.exception("adapter raised", operation_id=str(request.operation_id))
        return Finished(request.operation_id, Ambiguous(reason="adapter_error",
                                                        detail=adapter_error_text(exc, request.secrets)))
    if not isinstance(outcome, OUTCOME_TYPES) and not (outcome is None and flight.kind == "lookup"):
        # An adapter bug too: the call was made, so what it did is unknown.
        log.error("adapter returned no outcome", operation_id=str(request.operation_id),
                  returned=type(outcome).__name__)
        return Finished(request.operation_id, Ambiguous(
            reason="adapter_error", detail=f"the adapter returned {type(outcome).__name__}, not an outcome"))
    return Finished(request.operation_id, redact_outcome(outcome, request.secrets)
                    if outcome is not None else None)


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


def _follow(flight: InFlight, clock: Clock) -> Finished:
    """A poll or a remote cancel of accepted work; never raises. A poll that fails says
    nothing (``StillRunning``); a cancel that fails is a retryable ``CancelRefused``."""
    request, remote_id = flight.request, flight.op.remote_id
    not_after = flight.op.lease_expires_at
    if remote_id is None or (not_after is not None and clock.now() >= not_after):
        flight.lost = True  # the poll lease lapsed: whoever holds it now asks
        return Finished(request.operation_id, None)
    adapter: Any = flight.adapter
    result: object
    try:
        result = adapter.poll(request, remote_id) if flight.kind == "poll" else adapter.cancel(request, remote_id)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # an adapter bug must not kill the thread
        log.exception("adapter raised", operation_id=str(request.operation_id), kind=flight.kind)
        result = None
        text = adapter_error_text(exc, request.secrets)
    else:
        text = f"the adapter returned {type(result).__name__}"
    allowed = POLL_TYPES if flight.kind == "poll" else CANCEL_TYPES
    if not isinstance(result, allowed):
        if result is not None:
            log.error("adapter returned no outcome", operation_id=str(request.operation_id), kind=flight.kind)
        result = (StillRunning(detail=text) if flight.kind == "poll"
                  else CancelRefused(reason=text, retryable=True))
    return Finished(request.operation_id, redact_outcome(result, request.secrets))


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
