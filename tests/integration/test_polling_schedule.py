"""The poll schedule with the injected clock, in memory (POPO store, in-memory status view, inline
egress, the shipped ``FakeRemoteOperations``): backoff to the cap, ``Retry-After``, the slow rate
after the accepted deadline, and what is (not) recorded along the way.

Source: issue 12 item 2; ADR 0004.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from uuid import UUID

import pytest

from adapters.fake import FakeRemoteOperations
from executors.runtime import Worker, WorkerConfig
from ledger.adapter_names import register_adapter
from ledger.application import LedgerApplication
from ledger.clock import FakeClock
from ledger.declarations import DeliveryMode
from ledger.egress import EgressRequest
from ledger.outcomes import PollResult, StillRunning, Succeeded
from ledger.status import ExecutionState as E
from ledger.status import SettlementState as S
from projections.memory_view import MemoryStatusStore
from projections.status import StatusProjection
from tests.apps import Thing, declaration

POPO = {"PERSISTENCE_MODULE": "eventsourcing.popo"}
STEP_SECONDS = 0.1


class FollowApp(LedgerApplication):
    name = "follow"
    integrations = [declaration(
        DeliveryMode.IDEMPOTENT, name="test.follow", adapter=register_adapter("fake_lro"),
        deadlines={"pending": 300, "claimed": 60, "dispatching": 60, "accepted": 40},
        polling={"initial_delay_seconds": 1, "max_interval_seconds": 8, "overdue_interval_seconds": 20,
                 "limit_seconds": 600})]

    def make(self) -> UUID:
        thing = Thing(label="t")
        op = self.intend(thing, "test.follow", target="https://provider.test/ops", payload={"n": 1})
        self.save(thing, op)
        return op.id


@pytest.fixture
def app(clock: FakeClock) -> Iterator[FollowApp]:
    app = FollowApp(env=POPO, clock=clock)
    yield app
    app.close()


def _worker(app: FollowApp, clock: FakeClock, adapter: FakeRemoteOperations) -> Worker:
    store = MemoryStatusStore(clock=clock)
    view = store.open_view()
    return Worker(app=app, view=view, adapters={"fake_lro": adapter}, clock=clock, rng=random.Random(1),
                  config=WorkerConfig(worker_id="w", lease_seconds=10, inline_egress=True, poll_lease_seconds=60),
                  projection=StatusProjection(app=app, view=view))


def _run(worker: Worker, clock: FakeClock, seconds: float) -> None:
    for _ in range(round(seconds / STEP_SECONDS)):
        worker.run_once()
        clock.advance(STEP_SECONDS)


def _events(app: FollowApp, op_id: UUID) -> list[str]:
    return [type(e).__name__ for e in app.events.get(op_id)]


def test_polls_back_off_to_the_cap_and_unchanged_polls_record_nothing(app: FollowApp, clock: FakeClock) -> None:
    times: list[datetime] = []

    def script(request: EgressRequest, remote_id: str, n: int) -> PollResult:
        times.append(clock.now())
        return StillRunning(remote_status="running") if n <= 5 else Succeeded()

    adapter = FakeRemoteOperations(poll_script=script)
    op_id = app.make()
    _run(_worker(app, clock, adapter), clock, 40)
    op = app.get_operation(op_id)
    assert (op.execution, op.settlement) == (E.SUCCEEDED, S.SETTLED)
    gaps = [(b - a).total_seconds() for a, b in zip(times, times[1:])]
    # 1, 2, 4, 8, 8 s (the first change resets the backoff; the cap is 8), up to 10 % early.
    for gap, expected in zip(gaps, [1, 2, 4, 8, 8], strict=True):
        assert expected * 0.9 - STEP_SECONDS <= gap <= expected + 2 * STEP_SECONDS, gaps
    events = _events(app, op_id)
    assert events.count("RemoteStatusObserved") == 1 and events.count("LeaseRenewed") == 0
    assert events.count("Claimed") == 2  # the attempt's, and the poll lease's


def test_polls_honour_retry_after(app: FollowApp, clock: FakeClock) -> None:
    times: list[datetime] = []

    def script(request: EgressRequest, remote_id: str, n: int) -> PollResult:
        times.append(clock.now())
        return StillRunning(remote_status="running", next_check_after=15.0) if n == 1 else Succeeded()

    op_id = app.make()
    _run(_worker(app, clock, FakeRemoteOperations(poll_script=script)), clock, 25)
    assert app.get_operation(op_id).execution is E.SUCCEEDED
    assert len(times) == 2 and (times[1] - times[0]) >= timedelta(seconds=15)


def test_past_the_accepted_deadline_it_is_remote_unknown_and_polled_slowly(app: FollowApp, clock: FakeClock) -> None:
    times: list[datetime] = []
    finish_at: list[datetime] = []

    def script(request: EgressRequest, remote_id: str, n: int) -> PollResult:
        times.append(clock.now())
        return Succeeded() if finish_at and clock.now() >= finish_at[0] else StillRunning(remote_status="running")

    op_id = app.make()
    worker = _worker(app, clock, FakeRemoteOperations(poll_script=script))
    _run(worker, clock, 45)
    op = app.get_operation(op_id)
    assert op.execution is E.ACCEPTED and op.attention == "remote_unknown" and op.remote_overdue
    overdue_at = clock.now()
    _run(worker, clock, 60)
    slow = [t for t in times if t > overdue_at]
    assert 2 <= len(slow) <= 4  # every 20 s (minus jitter), not every 8 s
    finish_at.append(clock.now())
    _run(worker, clock, 25)
    op = app.get_operation(op_id)
    assert (op.execution, op.settlement, op.attention) == (E.SUCCEEDED, S.SETTLED, None)
    events = _events(app, op_id)
    assert events.count("RemoteOverdue") == 1 and events.count("Succeeded") == 1 and events.count("Settled") == 1
    assert "DeadlineExceeded" not in events
    accepted = next(e for e in app.events.get(op_id) if type(e).__name__ == "Accepted")
    assert accepted.follow == "poll" and accepted.follow_until == accepted.timestamp + timedelta(seconds=600)
