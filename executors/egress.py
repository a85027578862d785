"""Egress: the adapter calls of attempts (and lookups) whose ``AttemptStarted`` has committed.

The service owns the calls in flight and the threads that make them; it never writes to the
ledger. Each call's result comes back as an outcome value (STYLE rule 5) through
:meth:`EgressService.take_finished`, for the outcome service to record. With ``inline=True`` no
thread is started and :meth:`EgressService.run_once` makes the queued calls itself, in order:
the deterministic simulator and the tests drive it so.

Two ways to make a call (docs/adr/0009-egress-event-loop.md):

- **On the adapter's own event loop**, for an adapter that offers ``start_call``
  (``ledger.egress.StartsCalls``: the webhook and LRO adapters): started from the worker's cycle
  with no thread per call (``executors.loop_calls``); a call in flight costs a coroutine, so
  the slots can be many (``DEFAULT_EGRESS_SLOTS``).
- **On an egress thread**, for the others (the fake, the simulator's, host-written adapters):
  a pool of daemon threads sized by need, up to ``threads``. A thread is started only when a
  call is queued and no thread is idle, so an instant provider keeps a few threads and a 100 ms
  one as many as its calls in flight; the due-work pass claims no more of these calls than
  there are threads free (:meth:`EgressService.free_threads`).

At most ``slots`` calls are in flight in all, and at most ``per_host`` to one target host
(scheme, host and port of the target URL), so one slow partner cannot take them all; the
due-work pass asks :meth:`EgressService.free_slots` per host before it claims, so no claimed
operation waits here for a slot.

Source: DESIGN §7 ("record AttemptStarted before egress"); docs/adr/0002-executor-services.md;
docs/adr/0009-egress-event-loop.md.
"""

from __future__ import annotations

import queue
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar
from uuid import UUID

import structlog

from executors.calls import make_call
from executors.commit import Counts
from executors.flights import Finished, InFlight
from executors.loop_calls import LoopCalls
from ledger import config as defaults
from ledger.clock import Clock
from ledger.egress import starts_calls
from ledger.operation import Operation

log = structlog.get_logger("opledger.egress")

_Redactable = TypeVar("_Redactable")

DEFAULT_EGRESS_SLOTS = defaults.DEFAULT_EGRESS_SLOTS
"""Concurrent egress calls per worker (``ledger.config.DEFAULT_EGRESS_SLOTS``). By Little's law
a worker recording 1,000 outcomes a second from a provider answering in one second needs 1,000
calls in flight. A call on an adapter's event loop costs a coroutine and a connection, no thread
(docs/adr/0009-egress-event-loop.md measures the memory), so 2,048 of them are cheap."""
DEFAULT_PER_HOST_SLOTS = defaults.DEFAULT_EGRESS_PER_HOST
"""Concurrent egress calls per worker to one target host: half the slots, so one slow partner
leaves the other half to every other host."""
DEFAULT_EGRESS_THREADS = defaults.DEFAULT_WORKER_THREADS
"""Egress threads per worker at most, for adapters that block (no ``start_call``): a thread per
call in flight. By Little's law 100 in flight serve 1,000 calls/s to a 100 ms provider; 256
leaves room (docs/performance.md, the latency rows)."""


@dataclass(frozen=True)
class EgressConfig:
    """Egress settings.

    Attributes:
        slots: concurrent calls at most, on event loops and threads together.
        per_host: concurrent calls at most to one target host (``target_host``); operations
            without a target URL (in-process adapters) are bounded by ``slots`` only.
        threads: egress threads at most: calls in flight of adapters that block.
        inline: start no thread and no call on an event loop; ``run_once`` makes the queued
            calls, one after the other (blocking adapters and those with a loop alike).
    """

    slots: int = DEFAULT_EGRESS_SLOTS
    per_host: int = DEFAULT_PER_HOST_SLOTS
    threads: int = DEFAULT_EGRESS_THREADS
    inline: bool = False


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
        self._loop_calls = LoopCalls(clock=clock, finish=self.finish)
        self.wake = threading.Event()
        """Set when a call finishes, or from outside to make the worker look now (:meth:`wait`)."""
        self._idle = 0  # threads waiting for a call; guarded by _lock
        self._waiting = 0  # calls queued and not yet taken by a thread; guarded by _lock
        self._lock = threading.Lock()
        # ``in_flight`` and the per-host counts may change from more than one thread (a
        # submitting one, the one taking results): each change, and each walk over them,
        # holds this lock.
        self._books = threading.Lock()

    def flights(self) -> list[InFlight]:
        """The calls in flight now (a copy: safe to walk while calls are submitted)."""
        with self._books:
            return list(self.in_flight.values())

    @property
    def threads(self) -> int:
        """Egress threads started so far (they grow by need up to ``config.threads``, and stay)."""
        return len(self._threads)

    @property
    def on_loops(self) -> int:
        """Calls started on adapters' event loops and not ended yet."""
        return len(self._loop_calls)

    def free_threads(self) -> int:
        """How many more calls of blocking adapters may start now: ``config.threads`` less
        those queued for a thread or on one (inline: ``slots``, no thread is used)."""
        if self.config.inline:
            return self.free_slots()
        with self._lock:
            return self.config.threads - self._waiting - (len(self._threads) - self._idle)

    def free_slots(self, host: str | None = None) -> int:
        """How many more calls may start now: in all, or to ``host`` (``target_host``)."""
        free = self.config.slots - len(self.in_flight)
        if host is None:
            return free
        return min(free, self.config.per_host - self._per_host[host])

    def room(self, adapter: object, host: str | None) -> int:
        """How many more calls of ``adapter`` to ``host`` may start now: the free slots (to
        that host), and no more than the free threads when the adapter blocks."""
        free = self.free_slots(host)
        return free if starts_calls(adapter) else min(free, self.free_threads())

    def submit(self, flight: InFlight) -> None:
        """Start ``flight``'s call on its adapter's event loop, or queue it for a thread (or for
        ``run_once``, inline); its result comes back through :meth:`take_finished`."""
        self.track(flight)
        if self.config.inline:
            self._tasks.put(flight)
        elif starts_calls(flight.adapter):
            self._loop_calls.start(flight)
        else:
            self._tasks.put(flight)
            self._grow()

    def track(self, flight: InFlight) -> None:
        """Count ``flight`` as in flight (against its host too) until its result is taken; for
        an egress that queues calls its own way (the simulator's), then calls :meth:`call`."""
        with self._books:
            self.in_flight[flight.op.id] = flight
            if (host := flight.host) is not None:
                self._per_host[host] += 1

    def finish(self, finished: Finished) -> None:
        """Hand back a call's result (for an egress that makes calls its own way)."""
        self._finished.put(finished)
        self.wake.set()

    def _grow(self) -> None:
        # One more thread when more calls wait than threads are idle, up to ``threads``. Both
        # counts change together under the lock (here and in ``_loop``), so a call taken from
        # the queue but not yet counted cannot hide a missing thread.
        with self._lock:
            self._waiting += 1
            if self._waiting > self._idle and len(self._threads) < self.config.threads:
                thread = threading.Thread(target=self._loop, name=f"egress-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                self._idle += 1  # counted idle until it takes its first call
                thread.start()

    def run_once(self, now: datetime) -> Counts:
        """Inline, make every queued call now, in order; otherwise give up on calls their event
        loop did not end in time (``LoopCalls.give_up``; the threads and loops make the calls).
        Returns empty counts: recording is the outcome service's."""
        if not self.config.inline:
            self._loop_calls.give_up()
        else:
            while True:
                try:
                    flight = self._tasks.get_nowait()
                except queue.Empty:
                    break
                if flight is not None:
                    self.finish(make_call(flight, self.clock))
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
            with self._books:
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
        flights = self.flights()
        for flight in flights:
            flight.stale = True
        self._stale = bool(flights)

    def refresh(self, load: Callable[[list[UUID]], Mapping[UUID, Operation]]) -> None:
        """Reload the operations of stale calls (one query, ``load``); raises what ``load``
        raises (the store still away: they stay stale)."""
        if not self._stale:  # the usual case: no outage since the last refresh, nothing to scan
            return
        stale = [flight.op.id for flight in self.flights() if flight.stale]
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
        """Stop the threads (calls under way, on threads or loops, finish on their own,
        unrecorded)."""
        for _ in self._threads:
            self._tasks.put(None)

    def _loop(self) -> None:
        while (flight := self._tasks.get()) is not None:
            with self._lock:
                self._idle -= 1
                self._waiting -= 1
            self.finish(make_call(flight, self.clock))
            with self._lock:
                self._idle += 1
