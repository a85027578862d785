"""Calls started on an adapter's own event loop (``executors.loop_calls``, ADR 0009 step 2): the
checks before egress run when the call is started, the span closes when it completes, what comes
back is checked as on the threads, and a call its loop never ends is given up on."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

from executors.egress import EgressConfig, EgressService
from executors.flights import Finished, InFlight
from ledger import tracing
from ledger.clock import FakeClock
from ledger.egress import NOT_STARTED, CallKind, EgressRequest, StartedCall, starts_calls
from ledger.outcomes import Ambiguous, Failed, FailureCategory, Succeeded
from ledger.status import ExecutionState as E
from tests.tracing import Spans, spans  # noqa: F401 (spans: the fixture)
from tests.unit.builders import LEASE_SECONDS, Built, build

SECRET_VALUE = "tok_live_0123456789"


class Looping:
    """An adapter that starts its calls as futures the test completes (``StartsCalls``); the
    test plays its loop with :meth:`run`."""

    def __init__(self, *, give_up_seconds: float = 30.0, fail_to_start: bool = False) -> None:
        self.started: list[tuple[CallKind, EgressRequest, Future[Any], Callable[[], bool]]] = []
        self.give_up_seconds = give_up_seconds
        self.fail_to_start = fail_to_start

    def start_call(self, kind: CallKind, request: EgressRequest, remote_id: str | None = None, *,
                   may_start: Callable[[], bool] | None = None) -> StartedCall:
        if self.fail_to_start:
            raise RuntimeError(f"cannot start: {SECRET_VALUE}")
        future: Future[Any] = Future()
        self.started.append((kind, request, future, may_start or (lambda: True)))
        return StartedCall(future=future, give_up_seconds=self.give_up_seconds,
                           stalled=lambda: Ambiguous(reason="timeout", detail="the loop never ended it"))

    def run(self, index: int = 0, value: object = None) -> None:
        """As the loop would: ask ``may_start``, then end the call with ``value`` (when given)."""
        _, _, future, may_start = self.started[index]
        if not may_start():
            future.set_result(NOT_STARTED)
        elif value is not None:
            future.set_result(value)

    def send(self, request: EgressRequest) -> Succeeded:
        raise AssertionError("a call of an adapter with a loop must not be made on a thread")

    def lookup(self, request: EgressRequest) -> None:
        raise AssertionError("a call of an adapter with a loop must not be made on a thread")


def _flight(built: Built, adapter: object) -> InFlight:
    op = built.op
    request = EgressRequest(operation_id=op.id, attempt_id=op.last_attempt_id, attempt_number=op.attempts,  # type: ignore[arg-type]
                            integration=op.integration_name, delivery_mode=op.delivery_mode, target=op.target,
                            payload={}, secrets=(SECRET_VALUE,))
    return InFlight(op=op, epoch=op.epoch, kind="send", request=request, policy=built.integration.retry,
                    adapter=adapter, started_at=built.now)  # type: ignore[arg-type]


def _taken(egress: EgressService, wait: float = 2.0) -> list[Finished]:
    assert egress.wait(wait), "no call finished"
    return [finished for _, finished in egress.take_finished()]


def test_a_call_runs_on_the_adapters_loop_without_a_thread(spans: Spans) -> None:  # noqa: F811
    built = build(E.DISPATCHING)
    adapter = Looping()
    egress = EgressService(clock=FakeClock(built.now), config=EgressConfig())
    assert starts_calls(adapter)
    egress.submit(_flight(built, adapter))
    ((kind, request, _, _),) = adapter.started
    assert kind == "send" and egress.on_loops == 1 and egress.threads == 0
    assert spans.named("attempt ") == []  # the span is open while the call is in flight
    # Run on another thread, as the adapter's loop does; the done-callback hands it over.
    threading.Thread(target=adapter.run, args=(0, Succeeded(excerpt=f"echo {SECRET_VALUE}"))).start()
    (finished,) = _taken(egress)
    assert isinstance(finished.outcome, Succeeded) and SECRET_VALUE not in finished.outcome.excerpt
    assert egress.on_loops == 0 and egress.threads == 0 and not egress.in_flight
    (span,) = spans.named("attempt ")
    assert span.attributes is not None and span.attributes[tracing.OUTCOME] == "succeeded"
    assert request.traceparent == tracing.traceparent_of(span.context)  # sent with the span's context


def test_the_lease_is_checked_when_the_loop_starts_the_call() -> None:
    built = build(E.DISPATCHING)
    adapter = Looping()
    clock = FakeClock(built.now)
    egress = EgressService(clock=clock, config=EgressConfig())
    egress.submit(_flight(built, adapter))
    clock.advance(LEASE_SECONDS + 1)  # a busy loop starts the call after its lease ran out
    adapter.run(0, Succeeded())
    (finished,) = _taken(egress, 0.0)  # nothing left
    assert isinstance(finished.outcome, Failed) and finished.outcome.category is FailureCategory.CONNECT
    assert not finished.outcome.egress and egress.on_loops == 0


@pytest.mark.parametrize(("complete", "reason"), [
    (lambda future: future.set_exception(RuntimeError(f"boom {SECRET_VALUE}")), "adapter_error"),
    (lambda future: future.set_result("not an outcome"), "adapter_error"),
])
def test_what_comes_back_is_checked_as_on_the_threads(complete: Callable[[Future[Any]], None], reason: str) -> None:
    built = build(E.DISPATCHING)
    adapter = Looping()
    egress = EgressService(clock=FakeClock(built.now), config=EgressConfig())
    egress.submit(_flight(built, adapter))
    assert adapter.started[0][3]()  # the loop starts it
    complete(adapter.started[0][2])
    (finished,) = _taken(egress)
    assert isinstance(finished.outcome, Ambiguous) and finished.outcome.reason == reason
    assert SECRET_VALUE not in (finished.outcome.detail or "")


def test_an_adapter_that_cannot_start_a_call_leaves_an_ambiguous_outcome() -> None:
    built = build(E.DISPATCHING)
    egress = EgressService(clock=FakeClock(built.now), config=EgressConfig())
    egress.submit(_flight(built, Looping(fail_to_start=True)))
    (finished,) = _taken(egress, 0.0)
    assert isinstance(finished.outcome, Ambiguous) and finished.outcome.reason == "adapter_error"
    assert "RuntimeError" in (finished.outcome.detail or "") and SECRET_VALUE not in (finished.outcome.detail or "")
    assert egress.on_loops == 0


def test_a_call_its_loop_never_ends_is_given_up_on() -> None:
    built = build(E.DISPATCHING)
    adapter = Looping(give_up_seconds=0.05)
    egress = EgressService(clock=FakeClock(built.now), config=EgressConfig())
    egress.submit(_flight(built, adapter))
    threading.Event().wait(0.1)
    egress.run_once(built.now)
    assert egress.on_loops == 1 and egress.take_finished() == []  # never started: nothing sent, kept
    adapter.run(0)  # started, then the loop stalls
    egress.run_once(built.now)
    assert egress.take_finished() == []  # not yet its time, counted from the start
    threading.Event().wait(0.1)
    egress.run_once(built.now)
    (finished,) = _taken(egress, 0.0)
    assert isinstance(finished.outcome, Ambiguous) and finished.outcome.detail == "the loop never ended it"
    assert adapter.started[0][2].cancelled() and egress.on_loops == 0


def test_inline_egress_calls_the_blocking_methods() -> None:
    # The simulator and the tests' inline workers make every call in run_once, in order.
    built = build(E.DISPATCHING)

    class Both(Looping):
        def send(self, request: EgressRequest) -> Succeeded:
            return Succeeded()

    adapter = Both()
    egress = EgressService(clock=FakeClock(built.now), config=EgressConfig(inline=True))
    egress.submit(_flight(built, adapter))
    egress.run_once(built.now)
    (finished,) = _taken(egress, 0.0)
    assert isinstance(finished.outcome, Succeeded) and adapter.started == []


def test_ended_calls_leave_no_memory_behind() -> None:
    # A long deadline keeps an ended call's give-up entry for long; the heap is pruned of them.
    from executors.loop_calls import PRUNE_AFTER, LoopCalls

    built = build(E.DISPATCHING)
    adapter = Looping(give_up_seconds=3600.0)
    ended: list[Finished] = []
    calls = LoopCalls(clock=FakeClock(built.now), finish=ended.append)
    for _ in range(3 * PRUNE_AFTER):
        calls.start(_flight(built, adapter))
    for index in range(len(adapter.started)):
        adapter.run(index, Succeeded())
    assert len(ended) == 3 * PRUNE_AFTER and len(calls) == 0
    assert calls.give_up() == 0
    assert len(calls._give_up_at) <= PRUNE_AFTER


class _Blocking:
    """An adapter with no event loop of its own (its calls take an egress thread)."""

    def send(self, request: EgressRequest) -> Succeeded:
        return Succeeded()


@pytest.mark.parametrize(("adapters", "room"), [
    ([_Blocking()], 4),  # the free threads: a row it cannot claim is not chosen
    ([Looping()], 64),  # the free slots
    ([_Blocking(), Looping()], 32),  # the free threads, but never fewer than the floor
])
def test_a_pass_chooses_no_more_rows_than_it_can_claim(adapters: list[object], room: int) -> None:
    from executors.capacity import MIXED_PASS_FLOOR, PassCapacity

    assert MIXED_PASS_FLOOR == 32
    egress = EgressService(clock=FakeClock(), config=EgressConfig(slots=64, per_host=64, threads=4))
    capacity = PassCapacity(egress=egress, adapters=adapters, adapter_of=lambda op: adapters[0])  # type: ignore[arg-type,return-value]
    assert capacity.room() == room
