"""The outbound adapter seam: what an executor hands an adapter, and what comes back.

One small protocol (STYLE rule 6): ``send`` performs one egress and returns an ``Outcome``
value; ``lookup`` answers "did you receive operation X?" for ``recoverable_remote_id`` mode.
An adapter whose provider accepts work as a remote operation may also follow it
(:class:`RemoteOperations`: ``poll`` and ``cancel``, values too). An adapter that makes its
calls on an event loop of its own may also start them without blocking (:class:`StartsCalls`):
the worker then holds no thread per call in flight (docs/adr/0009-egress-event-loop.md, step 2).
Adapters never raise for a provider's behaviour, only for bugs (STYLE rule 5).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable
from uuid import UUID

from ledger.declarations import DeliveryMode
from ledger.outcomes import CancelOutcome, Outcome, PollResult


@dataclass(frozen=True, slots=True)
class EgressRequest:
    """One attempt's request, built by the executor after ``AttemptStarted`` was committed.

    Attributes:
        operation_id: the operation id; also the ``Idempotency-Key`` and ``webhook-id`` (stable
            across attempts).
        attempt_id: this attempt's id (``X-Attempt-Id`` on HTTP).
        attempt_number: 1-based.
        integration: the integration name.
        delivery_mode: the declared mode; adapters use it (e.g. redirects are never followed in
            non-idempotent modes).
        target: the URL to call.
        payload: the payload with secret references already resolved (never stored; left out
            of ``repr`` so a logged request never shows a resolved secret).
        traceparent: the W3C trace context to send.
        timeout_seconds: the request timeout, seconds.
        tenant: the tenant.
        headers: extra HTTP headers to send with the request; an adapter's own headers
            (signature, idempotency key, attempt id, ...) take precedence.
        secrets: values to redact from anything the adapter returns: the resolved secrets in
            ``payload`` and its ``internal`` text values (``executors.secrets.resolve_payload``);
            filled by the worker, never stored, left out of ``repr``. The worker redacts every
            outcome with them again (``executors.egress.redact_outcome``).
    """

    operation_id: UUID
    attempt_id: UUID
    attempt_number: int
    integration: str
    delivery_mode: DeliveryMode
    target: str | None
    payload: Mapping[str, Any] = field(repr=False)
    traceparent: str | None = None
    timeout_seconds: float = 10.0
    tenant: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = field(default=(), repr=False)


class Adapter(Protocol):
    """An outbound provider adapter."""

    def send(self, request: EgressRequest) -> Outcome:
        """Perform one egress and classify the result (DESIGN §5)."""
        ...

    def lookup(self, request: EgressRequest) -> Outcome | None:
        """Ask the provider whether it received ``request.operation_id``.

        Returns:
            The remote result when the provider knows the operation; ``None`` when it says it
            never received it (safe to retry); an ``Ambiguous`` when the lookup itself failed.
        """
        ...


@runtime_checkable
class RemoteOperations(Protocol):
    """What an adapter offers to follow a remote operation it started (AIP-151 shape).

    An adapter with these methods has its accepted operations polled by the worker
    (``executors.polling``); one without them leaves them to a callback or their deadline.
    Both return values, never raise for a provider's behaviour (STYLE rule 5).

    Source: issue 12 items 1 and 4; docs/adr/0004-accepted-work.md.
    """

    def poll(self, request: EgressRequest, remote_id: str) -> PollResult:
        """Ask for the remote operation ``remote_id``'s state.

        Returns:
            ``Succeeded`` (done, with a response), ``Failed(REMOTE_FAILED)`` (done, with an
            error), ``CancelConfirmed`` (done, cancelled), ``Ambiguous(reason="remote_lost")``
            (the provider no longer knows it), or ``StillRunning`` (not done, or no answer).
        """
        ...

    def cancel(self, request: EgressRequest, remote_id: str) -> CancelOutcome:
        """Ask the provider to cancel ``remote_id``.

        Returns:
            ``CancelConfirmed`` when the provider says it is cancelled, else ``CancelRefused``.
        """
        ...


def can_follow(adapter: object) -> bool:
    """Whether ``adapter`` implements :class:`RemoteOperations` (``poll`` and ``cancel``).

    The same answer as ``isinstance(adapter, RemoteOperations)`` at a fraction of its cost
    (a runtime protocol check costs about half a millisecond; outcomes ask it per accepted call).
    """
    return callable(getattr(adapter, "poll", None)) and callable(getattr(adapter, "cancel", None))


CallKind = Literal["send", "lookup", "poll", "cancel"]
"""Which of an adapter's calls: :meth:`Adapter.send`, :meth:`Adapter.lookup`,
:meth:`RemoteOperations.poll` or :meth:`RemoteOperations.cancel`."""


@dataclass(frozen=True, slots=True)
class StartedCall:
    """A call an adapter started on its own event loop (:meth:`StartsCalls.start_call`).

    Attributes:
        future: completes, on the adapter's loop thread, with what the blocking method of the
            same kind would have returned; it should never fail (an exception is an adapter
            bug, which the worker records as ``Ambiguous(adapter_error)``). Cancelling it
            cancels the call.
        give_up_seconds: how long after ``may_start`` let it go the call must have ended,
            seconds: its total deadline plus a grace for the loop. A call not ended by then (a
            loop stalled by a bug) is cancelled and :attr:`stalled` stands for its result.
        stalled: the result of a call given up on (what a timeout after sending means for
            that kind of call).
    """

    future: Future[Any]
    give_up_seconds: float
    stalled: Callable[[], Any]


@runtime_checkable
class StartsCalls(Protocol):
    """What an adapter offers to make its calls without blocking the caller: each is started
    on the adapter's own event loop and its result comes back through a future.

    The worker then makes the calls of this adapter with no thread per call in flight. It
    checks the lease, the budget window and the approval in ``may_start``, which the adapter
    calls on its loop immediately before the call's first byte could leave: a loop that is busy
    may start a call well after it was handed over. Adapters without it (the fake, the
    simulator's, host-written ones) are called on the worker's egress threads.

    Source: docs/adr/0009-egress-event-loop.md (step 2); issue 30 items 2 and 3.
    """

    def start_call(self, kind: CallKind, request: EgressRequest, remote_id: str | None = None, *,
                   may_start: Callable[[], bool] | None = None) -> StartedCall:
        """Start one call of ``kind`` for ``request`` (``remote_id`` for a poll or a cancel)
        and return at once; never blocks on the provider.

        Args:
            may_start: asked once, on the adapter's loop, before anything of the call is sent;
                when it returns False the call sends nothing and its future completes with
                :data:`NOT_STARTED`.

        Raises:
            ValueError: the adapter does not make calls of ``kind``.
        """
        ...


class _NotStarted:
    """The type of :data:`NOT_STARTED`."""

    def __repr__(self) -> str:
        return "NOT_STARTED"


NOT_STARTED = _NotStarted()
"""What a call's future completes with when its ``may_start`` said no: nothing was sent."""


def starts_calls(adapter: object) -> bool:
    """Whether ``adapter`` implements :class:`StartsCalls` (as :func:`can_follow`, without the
    cost of a runtime protocol check)."""
    return callable(getattr(adapter, "start_call", None))
