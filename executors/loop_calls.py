"""Calls started on an adapter's own event loop, with no thread per call in flight
(docs/adr/0009-egress-event-loop.md, step 2).

An adapter that offers ``start_call`` (``ledger.egress.StartsCalls``: the webhook and LRO
adapters) makes its calls on its own event loop. Egress hands such a call here from the worker's
cycle: :meth:`LoopCalls.start` opens the call's span and starts the call. The lease, budget and
approval checks (``executors.calls.held_back``) run in the call's ``may_start``, which the
adapter calls on its loop immediately before anything is sent: a loop busy with thousands of
calls may start one seconds after it was handed over, and nothing may leave once the lease is
gone. The future's done-callback, on the loop's thread, checks what came back
(``executors.calls.checked``), closes the span and hands the ``Finished`` result to egress, whose
outcome service records it exactly as it records a thread's.

A call bounds itself by its total deadline on the loop. Should the loop fail to end it (a loop
stalled by a bug), :meth:`LoopCalls.give_up` cancels it ``give_up_seconds`` after it started
and the adapter's ``stalled`` value (a timeout after sending) stands for it, so it holds its
egress slot no longer than a blocking caller would wait. A call the loop has not started yet is
not given up on: it has sent nothing, and its checks still run before it is.

Source: issue 30 items 2 and 3; DESIGN §7 (checks before egress, never after).
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any

from executors.calls import checked, close_span, held_back, open_span, remote_id_of
from executors.flights import Finished, InFlight
from ledger.clock import Clock
from ledger.egress import NOT_STARTED, StartedCall
from ledger.tracing import Span

PRUNE_AFTER = 1024
"""Ended calls' entries the give-up heap may hold beyond twice the calls running before it is
rebuilt without them (amortised: each entry is dropped once)."""


@dataclass(slots=True)
class _Call:
    """A call started here and not ended: its future, when the loop let it start (monotonic),
    and the result that stands for it when its checks held it back."""

    future: Future[Any] | None = None
    give_up_seconds: float = 0.0
    started_at: float | None = None
    held: Finished | None = None


class LoopCalls:
    """Starts calls on their adapters' event loops and hands their results back.

    Args:
        clock: the worker's clock (the checks before egress read it).
        finish: takes each call's result, from whichever thread ends the call (the loop's, or
            the one starting or giving up on it); thread-safe.
    """

    def __init__(self, *, clock: Clock, finish: Callable[[Finished], None]) -> None:
        self.clock = clock
        self._finish = finish
        self._lock = threading.Lock()
        # Calls not ended yet, by sequence number, and a heap of (monotonic time to look at
        # them again, sequence number). Ended calls leave the dictionary at once; their heap
        # entry (two numbers) goes when its time comes or the heap is pruned.
        self._running: dict[int, _Call] = {}
        self._give_up_at: list[tuple[float, int]] = []
        self._sequence = 0

    def __len__(self) -> int:
        """Calls started here and not ended yet."""
        return len(self._running)

    def start(self, flight: InFlight) -> None:
        """Start ``flight``'s call on its adapter's loop (``flight.adapter`` has ``start_call``),
        or hand back at once the result of a call whose adapter raised when asked to start it.
        Never raises, never blocks on the provider."""
        span = open_span(flight)
        adapter: Any = flight.adapter
        call = _Call()  # known before the loop may ask ``may_start``
        with self._lock:
            self._sequence += 1
            key = self._sequence
            self._running[key] = call
        try:
            started: StartedCall = adapter.start_call(flight.kind, flight.request, remote_id_of(flight),
                                                      may_start=partial(self._may_start, call, flight))
        except KeyboardInterrupt:  # the user's stop, in the worker's thread
            self._forget(key)
            span.end()
            raise
        except BaseException as exc:  # an adapter bug (even SystemExit): recorded as the threads record it
            self._forget(key)
            self._finish(close_span(span, checked(flight, None, exc)))
            return
        with self._lock:
            call.future, call.give_up_seconds = started.future, started.give_up_seconds
            heapq.heappush(self._give_up_at, (time.monotonic() + started.give_up_seconds, key))
        started.future.add_done_callback(partial(self._ended, key, flight, span, started))

    def _forget(self, key: int) -> None:
        with self._lock:
            self._running.pop(key, None)

    def _may_start(self, call: _Call, flight: InFlight) -> bool:
        """On the loop, immediately before the call could send: the checks before egress."""
        with self._lock:
            call.started_at = time.monotonic()
        call.held = held_back(flight, self.clock)
        return call.held is None

    def give_up(self) -> int:
        """Cancel the calls their loop did not end by their give-up time (monotonic, counted
        from when they started); each is handed back as its adapter's ``stalled`` value. Cheap
        when none is due (a heap).

        Returns:
            How many calls were given up on.
        """
        now, due = time.monotonic(), []
        with self._lock:
            if len(self._give_up_at) > 2 * len(self._running) + PRUNE_AFTER:
                # Mostly ended calls' entries (a long deadline keeps them for long): rebuilt from
                # the running ones, so the heap stays within a small multiple of the calls in flight.
                self._give_up_at = [entry for entry in self._give_up_at if entry[1] in self._running]
                heapq.heapify(self._give_up_at)
            while self._give_up_at and self._give_up_at[0][0] <= now:
                key = heapq.heappop(self._give_up_at)[1]
                call = self._running.get(key)
                if call is None:
                    continue
                if call.started_at is None:  # not started: nothing sent; look again later
                    heapq.heappush(self._give_up_at, (now + call.give_up_seconds, key))
                elif call.started_at + call.give_up_seconds > now:
                    heapq.heappush(self._give_up_at, (call.started_at + call.give_up_seconds, key))
                elif call.future is not None:
                    due.append(call.future)
        # Outside the lock: cancelling runs the done-callback in this thread.
        return sum(1 for future in due if future.cancel())

    def _ended(self, key: int, flight: InFlight, span: Span, started: StartedCall, future: Future[Any]) -> None:
        """The done-callback: on the loop's thread, or in :meth:`give_up`'s for a cancelled call."""
        with self._lock:
            call = self._running.pop(key, None)
        if future.cancelled():
            finished = _guarded(flight, started.stalled)
        elif (error := future.exception()) is not None:
            finished = checked(flight, None, error)
        elif (value := future.result()) is NOT_STARTED and call is not None and call.held is not None:
            finished = call.held
        else:
            finished = checked(flight, value)
        self._finish(close_span(span, finished))


def _guarded(flight: InFlight, value: Callable[[], Any]) -> Finished:
    try:
        return checked(flight, value())
    except BaseException as exc:  # an adapter bug in its stalled value: still a recorded result
        return checked(flight, None, exc)
