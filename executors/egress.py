"""Egress: the adapter calls of attempts (and lookups) whose ``AttemptStarted`` has committed.

The service owns the calls in flight and the threads that make them; it never writes to the
ledger. Each call's result comes back as an outcome value (STYLE rule 5) through
:meth:`EgressService.take_finished`, for the outcome service to record. With ``inline=True`` no
thread is started and :meth:`EgressService.run_once` makes the queued calls itself, in order:
the deterministic simulator and the tests drive it so.

Concurrency (ADR 0002, "Egress concurrency"): a pool of daemon threads sized by need, up to
``slots`` calls at once. A thread is started only when a call is queued and no thread is idle,
so an instant provider keeps a few threads and a 100 ms one as many as its calls in flight.
At most ``per_host`` of the slots go to one target host (scheme, host and port of the target
URL), so one slow partner cannot take them all; the due-work pass asks :meth:`free_slots` per
host before it claims, so no claimed operation waits here for a slot.

Source: DESIGN §7 ("record AttemptStarted before egress"); docs/adr/0002-executor-services.md.
"""

from __future__ import annotations

import queue
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any, TypeVar
from urllib.parse import urlsplit
from uuid import UUID

import structlog

from executors.commit import Counts
from ledger.clock import Clock
from ledger.declarations import RetryPolicy
from ledger.egress import Adapter, EgressRequest
from ledger.facts import FactKind, storable_fact
from ledger.operation import Operation
from ledger.outcomes import (
    Accepted,
    Ambiguous,
    CancelConfirmed,
    CancelOutcome,
    CancelRefused,
    Failed,
    FailureCategory,
    Outcome,
    StillRunning,
    Succeeded,
)
from ledger.redaction import redact

log = structlog.get_logger("opledger.egress")

_Redactable = TypeVar("_Redactable")

DEADLINE_GRACE_SECONDS = 5.0
"""How long past a call's total deadline its lease may still be renewed, seconds: time to
queue the call, close the connection and record the outcome on a loaded machine."""

OUTCOME_TYPES = (Succeeded, Accepted, Failed, Ambiguous)
"""What an adapter call may return (``ledger.egress.Adapter``; a lookup may also return None)."""
POLL_TYPES = (Succeeded, Failed, Ambiguous, CancelConfirmed, StillRunning)
"""What a poll may return (``ledger.egress.RemoteOperations.poll``)."""
CANCEL_TYPES = (CancelConfirmed, CancelRefused)
"""What a remote cancel may return (``ledger.egress.RemoteOperations.cancel``)."""
FOLLOW_KINDS = frozenset({"poll", "cancel"})
"""Call kinds that follow accepted work (``executors.polling``); the others are attempts'."""
DEFAULT_EGRESS_SLOTS = 256
"""Concurrent egress calls per worker (threads are started as calls need them). By Little's law
a worker sending 1,000 calls/s to a provider answering in 100 ms needs 100 in flight, plus the
calls waiting to be recorded: 256 leaves room (docs/performance.md, the latency rows)."""
DEFAULT_PER_HOST_SLOTS = 128
"""Concurrent egress calls per worker to one target host: half the slots, so one slow partner
leaves the other half to every other host."""


@dataclass(frozen=True)
class EgressConfig:
    """Egress settings.

    Attributes:
        slots: concurrent calls at most (and threads at most).
        per_host: concurrent calls at most to one target host (``target_host``); operations
            without a target URL (in-process adapters) are bounded by ``slots`` only.
        inline: start no thread; ``run_once`` makes the queued calls, one after the other.
    """

    slots: int = DEFAULT_EGRESS_SLOTS
    per_host: int = DEFAULT_PER_HOST_SLOTS
    inline: bool = False


def target_host(target: str | None) -> str | None:
    """The host a call to ``target`` goes to, for the per-host bound: ``scheme://host:port``
    lowercased (RFC 3986 §6.2.2.1: scheme and host are case-insensitive), or None without a
    target or when it does not parse."""
    if not target:
        return None
    try:
        parts = urlsplit(target)
        return f"{parts.scheme.lower()}://{(parts.hostname or '').lower()}:{parts.port or ''}"
    except ValueError:  # a malformed port: the adapter reports it; the host bound does not apply
        return None


@dataclass
class InFlight:
    """A call this worker started and has not recorded yet.

    Attributes:
        op: the operation as committed just before the call (the outcome is recorded on it).
        epoch: the fencing epoch the attempt was started under.
        kind: ``"send"``, ``"lookup"``, or for accepted work ``"poll"`` or ``"cancel"``
            (``executors.polling``, which records their results).
        request: what was handed to the adapter.
        policy: the retry policy the outcome is decided with.
        adapter: the adapter that makes the call.
        lost: the lease could not be renewed; the result, when it comes, is not recorded.
        stale: ``op`` may hold changes a failed commit applied in memory only (the store was
            unreachable); it is reloaded (:meth:`EgressService.refresh`) before it is used.
        started_at: when the attempt was committed (the worker's clock); with the request's
            ``timeout_seconds`` it gives :attr:`deadline_at`.
        send_by: the end of the call budget window the attempt's call was counted in; a call
            not made by then is not made (``executors.budgets``).
    """

    op: Operation
    epoch: int
    kind: str
    request: EgressRequest
    policy: RetryPolicy
    adapter: Adapter
    lost: bool = False
    stale: bool = False
    started_at: datetime | None = None
    overdue_logged: bool = False
    send_by: datetime | None = None

    @property
    def deadline_at(self) -> datetime | None:
        """When this call should have ended: its start, plus the request's total deadline
        (``timeout_seconds``, which the adapter enforces), plus ``DEADLINE_GRACE_SECONDS``.
        Leases are not renewed past it (issue 14 item 6); None when the start is unknown."""
        if self.started_at is None:
            return None
        return self.started_at + timedelta(seconds=self.request.timeout_seconds + DEADLINE_GRACE_SECONDS)

    @cached_property
    def host(self) -> str | None:
        """The target host the per-host bound counts this call against."""
        return target_host(self.request.target)


@dataclass(frozen=True, slots=True)
class Finished:
    """A call's result: the operation it was for, and the outcome (``None``: a lookup found
    that the provider never received the operation). A poll's is a ``PollResult``, a cancel's
    a ``CancelOutcome``."""

    operation_id: UUID
    outcome: Outcome | StillRunning | CancelOutcome | None


class EgressService:
    """Makes the adapter calls of committed attempts.

    Args:
        clock: the worker's clock (a call whose lease ran out before it was made is not made).
        config: :class:`EgressConfig`.
    """

    def __init__(self, *, clock: Clock, config: EgressConfig | None = None) -> None:
        self.clock = clock
        self.config = config or EgressConfig()
        self.in_flight: dict[UUID, InFlight] = {}
        self._per_host: Counter[str] = Counter()
        self._stale = False  # some call's operation is stale (``mark_stale``, ``put_back``)
        self._tasks: queue.Queue[InFlight | None] = queue.Queue()
        self._finished: queue.Queue[Finished] = queue.Queue()
        # Daemon threads, not concurrent.futures: a call that hangs must not hold the process
        # past its stop grace (the executor's threads are joined at interpreter exit).
        self._threads: list[threading.Thread] = []
        self.wake = threading.Event()
        """Set when a call finishes, or from outside to make the worker look now (:meth:`wait`)."""
        self._idle = 0  # threads waiting for a call; guarded by _lock
        self._waiting = 0  # calls queued and not yet taken by a thread; guarded by _lock
        self._lock = threading.Lock()

    @property
    def threads(self) -> int:
        """Egress threads started so far (they grow by need up to ``slots``, and stay)."""
        return len(self._threads)

    def free_slots(self, host: str | None = None) -> int:
        """How many more calls may start now: in all, or to ``host`` (``target_host``)."""
        free = self.config.slots - len(self.in_flight)
        if host is None:
            return free
        return min(free, self.config.per_host - self._per_host[host])

    def submit(self, flight: InFlight) -> None:
        """Queue ``flight``'s call; its result comes back through :meth:`take_finished`."""
        self.track(flight)
        self._tasks.put(flight)
        if not self.config.inline:
            self._grow()

    def track(self, flight: InFlight) -> None:
        """Count ``flight`` as in flight (against its host too) until its result is taken; for
        an egress that queues calls its own way (the simulator's), then calls :meth:`call`."""
        self.in_flight[flight.op.id] = flight
        if (host := flight.host) is not None:
            self._per_host[host] += 1

    def finish(self, finished: Finished) -> None:
        """Hand back a call's result (for an egress that makes calls its own way)."""
        self._finished.put(finished)
        self.wake.set()

    def _grow(self) -> None:
        # One more thread when more calls wait than threads are idle, up to ``slots``. Both
        # counts change together under the lock (here and in ``_loop``), so a call taken from
        # the queue but not yet counted cannot hide a missing thread.
        with self._lock:
            self._waiting += 1
            if self._waiting > self._idle and len(self._threads) < self.config.slots:
                thread = threading.Thread(target=self._loop, name=f"egress-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                self._idle += 1  # counted idle until it takes its first call
                thread.start()

    def run_once(self, now: datetime) -> Counts:
        """Inline, make every queued call now, in order; otherwise nothing (the threads make
        them). Returns empty counts: recording is the outcome service's."""
        if self.config.inline:
            while True:
                try:
                    flight = self._tasks.get_nowait()
                except queue.Empty:
                    break
                if flight is not None:
                    self.finish(self.call(flight))
        return Counts()

    def take_finished(self) -> list[tuple[InFlight, Finished]]:
        """The calls finished since the last take, each with its flight; the flight is no
        longer in flight afterwards. A result whose flight was lost is dropped (logged)."""
        done: list[tuple[InFlight, Finished]] = []
        while True:
            try:
                item = self._finished.get_nowait()
            except queue.Empty:
                return done
            flight = self.in_flight.pop(item.operation_id, None)
            if flight is not None and (host := flight.host) is not None:
                self._per_host[host] -= 1
                if not self._per_host[host]:
                    del self._per_host[host]
            if flight is None or flight.lost:
                log.info("late outcome dropped: this worker no longer holds the operation",
                         operation_id=str(item.operation_id))
                continue
            done.append((flight, item))

    def put_back(self, taken: list[tuple[InFlight, Finished]]) -> None:
        """Return results taken by :meth:`take_finished` that could not be recorded (the store
        was unreachable): their calls count as in flight again (their leases are renewed) and
        the next take returns them. An outcome in hand is never dropped for an outage."""
        for flight, item in taken:
            flight.stale = self._stale = True  # the failed commit may have applied the outcome in memory
            self.track(flight)
            self._finished.put(item)

    def mark_stale(self) -> None:
        """After a failed commit (an outage): every call's operation may hold changes applied
        in memory but never stored, so each is reloaded before it is used again."""
        for flight in self.in_flight.values():
            flight.stale = True
        self._stale = bool(self.in_flight)

    def refresh(self, load: Callable[[list[UUID]], Mapping[UUID, Operation]]) -> None:
        """Reload the operations of stale calls (one query, ``load``); raises what ``load``
        raises (the store still away: they stay stale)."""
        if not self._stale:  # the usual case: no outage since the last refresh, nothing to scan
            return
        stale = [op_id for op_id, flight in self.in_flight.items() if flight.stale]
        if not stale:
            self._stale = False
            return
        for op_id, op in load(stale).items():
            flight = self.in_flight.get(op_id)
            if flight is not None:
                flight.op, flight.stale = op, False

    def wait(self, seconds: float) -> bool:
        """Block up to ``seconds`` (monotonic) or until :attr:`wake` is set (a call finished, or
        someone asked the worker to look now: a NOTIFY), whichever is first.

        Returns:
            True when woken (a finished call's result waits for :meth:`take_finished`).
        """
        woken = self.wake.wait(seconds)
        self.wake.clear()
        return woken

    def close(self) -> None:
        """Stop the threads (calls under way finish on their own, unrecorded)."""
        for _ in self._threads:
            self._tasks.put(None)

    def _loop(self) -> None:
        while (flight := self._tasks.get()) is not None:
            with self._lock:
                self._idle -= 1
                self._waiting -= 1
            self.finish(self.call(flight))
            with self._lock:
                self._idle += 1

    def call(self, flight: InFlight) -> Finished:
        """Make ``flight``'s call now, in this thread; never raises (an adapter's error is an
        ``Ambiguous(adapter_error)`` outcome)."""
        request, not_after = flight.request, flight.op.lease_expires_at
        if flight.kind in FOLLOW_KINDS:
            return self._follow(flight)
        if not_after is not None and self.clock.now() >= not_after:
            # This process stalled between recording the attempt and sending it: another
            # worker may own the operation now, so nothing may leave (DESIGN §7).
            if flight.kind == "lookup":
                # Not asking says nothing about the attempt, which may have applied: record
                # nothing; whoever reclaims the operation asks again (found by the simulator).
                flight.lost = True
                return Finished(request.operation_id, None)
            return Finished(request.operation_id, Failed(
                FailureCategory.CONNECT, retryable=True, egress=False,
                detail="lease expired before egress; nothing was sent"))
        if flight.send_by is not None and self.clock.now() >= flight.send_by:
            # Counted in a call budget window that ends within its send margin
            # (``executors.budgets.send_margin``) while this worker was slow: calling now would
            # reach the provider in the next window and spend its calls. Nothing leaves.
            if flight.kind == "lookup":
                # As above: record nothing; whoever reclaims the operation asks again.
                flight.lost = True
                return Finished(request.operation_id, None)
            # A send fails as not sent; the mode retries it later.
            return Finished(request.operation_id, Failed(
                FailureCategory.CONNECT, retryable=True, egress=False,
                detail="the call budget window was closing before egress; nothing was sent"))
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


    def _follow(self, flight: InFlight) -> Finished:
        """A poll or a remote cancel of accepted work; never raises. A poll that fails says
        nothing (``StillRunning``); a cancel that fails is a retryable ``CancelRefused``."""
        request, remote_id = flight.request, flight.op.remote_id
        not_after = flight.op.lease_expires_at
        if remote_id is None or (not_after is not None and self.clock.now() >= not_after):
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
