"""Accepted work end to end, on both backends: the worker with the ``lro`` adapter against the
reference partner's mock long-running-operation provider (a real process; its durable log is the
witness). Polling, the provider losing the operation, ``Retry-After``, cancellation in every
active state and its races, and the accepted deadline passing while the provider still runs.

Source: issue 12 (acceptance: "seed scenarios as tests on both backends"); ADR 0004.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from uuid import UUID

import httpx
import pytest

from adapters.lro import LroAdapter
from adapters.partner import PartnerProcess
from adapters.webhook import WebhookAdapter
from executors.runtime import Worker, WorkerConfig
from executors.secrets import EnvironmentSecrets
from ledger.clock import SystemClock
from ledger.config import Database
from ledger.operation import Operation
from ledger.status import ExecutionState as E
from ledger.status import SettlementState as S
from projections.status import StatusProjection
from projections.views import open_view
from tests.apps import Thing
from tests.conftest import SECRET
from tests.lro_apps import LroApp
from tests.stores import migrated_store

pytestmark = pytest.mark.process


@pytest.fixture
def lro_app(database: Database) -> Iterator[LroApp]:
    migrated_store(database, LroApp)
    app = LroApp(env=database.library_env(create_table=False))
    yield app
    app.close()


@pytest.fixture
def worker(lro_app: LroApp, database: Database) -> Iterator[Worker]:
    clock = SystemClock()  # the partner checks webhook-timestamp against its own clock
    view = open_view(database)
    adapter = LroAdapter(secret=SECRET, clock=clock)
    webhook = WebhookAdapter(secret=SECRET, clock=clock)
    running = Worker(app=lro_app, view=view, adapters={"lro": adapter, "webhook": webhook}, clock=clock,
                     config=WorkerConfig(worker_id="poller", lease_seconds=10, egress_slots=8, poll_lease_seconds=10),
                     projection=StatusProjection(app=lro_app, view=view),
                     secrets=EnvironmentSecrets({"test-token": "tok_secret_value_123"}))
    yield running
    running.close()
    adapter.close()
    webhook.close()
    view.close()


def _run_until(worker: Worker, app: LroApp, op_id: UUID, done: Callable[[Operation], bool],
               timeout: float = 20.0) -> Operation:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        worker.run_once()
        op = app.get_operation(op_id)
        if done(op) and not worker.in_flight:
            return op
        time.sleep(0.02)
    pytest.fail(f"operation {op_id} stayed {app.get_operation(op_id).status.value}")


def _settled(op: Operation) -> bool:
    return op.settlement in (S.SETTLED, S.BLOCKED) or op.execution is E.AMBIGUOUS


def _events(app: LroApp, op_id: UUID) -> list[str]:
    return [type(e).__name__ for e in app.events.get(op_id)]


def _requests(partner: PartnerProcess, op_id: UUID, kind: str) -> list:
    return [r for r in partner.log.requests(str(op_id)) if r.kind == kind and r.signature_valid]


def _lro_state(partner: PartnerProcess, op_id: UUID) -> str:
    return next(o["state"] for o in partner.log.lro_operations() if o["idempotency_key"] == str(op_id))


def _cancel(app: LroApp, op_id: UUID) -> None:
    op = app.get_operation(op_id)
    assert op.request_cancel(now=SystemClock().now(), principal="alice", reason="not needed any more")
    app.save(op)


def _result(app: LroApp, op: Operation) -> list[str]:
    thing = app.repository.get(op.source.entity_id)
    assert isinstance(thing, Thing)
    return list(thing.results)


def test_accepted_then_pending_then_success(lro_app: LroApp, worker: Worker, partner: PartnerProcess) -> None:
    op_id = lro_app.make(f"{partner.url}/lro/provision?polls=3")
    op = _run_until(worker, lro_app, op_id, _settled)
    assert (op.execution, op.settlement) == (E.SUCCEEDED, S.SETTLED)
    assert op.remote_id == f"operations/{op_id}"
    assert _result(lro_app, op) == ["succeeded"]
    assert partner.log.applied_count(op_id) == 1 and _lro_state(partner, op_id) == "succeeded"
    assert len(_requests(partner, op_id, "poll")) == 4  # three "running", then done
    events = _events(lro_app, op_id)
    # Three unchanged "running" polls record one RemoteStatusObserved, not three.
    assert events.count("RemoteStatusObserved") == 1
    assert events[-3:] == ["RemoteStatusObserved", "Succeeded", "Settled"]
    assert events.count("Settled") == 1


def test_accepted_then_pending_then_failure(lro_app: LroApp, worker: Worker, partner: PartnerProcess) -> None:
    op_id = lro_app.make(f"{partner.url}/lro/provision?polls=2&result=failure")
    op = _run_until(worker, lro_app, op_id, _settled)
    assert (op.execution, op.settlement) == (E.FAILED, S.SETTLED)
    assert op.failure is not None and op.failure["category"] == "remote_failed"
    assert "provisioning failed" in op.failure["detail"]
    assert _result(lro_app, op) == ["failed"]


def test_the_provider_loses_the_operation(lro_app: LroApp, worker: Worker, partner: PartnerProcess) -> None:
    op_id = lro_app.make(f"{partner.url}/lro/provision?polls=1&result=lost")
    op = _run_until(worker, lro_app, op_id, _settled)
    # It may have been applied and nobody can say: ambiguous, for an operator; never a guess.
    assert op.execution is E.AMBIGUOUS and op.ambiguity_reason == "remote_lost"
    assert op.attention == "ambiguous" and op.settlement is S.NONE


def test_polls_honour_retry_after(lro_app: LroApp, worker: Worker, partner: PartnerProcess) -> None:
    op_id = lro_app.make(f"{partner.url}/lro/provision?polls=2&retry_after=1")
    op = _run_until(worker, lro_app, op_id, _settled)
    assert op.execution is E.SUCCEEDED
    times = [datetime.fromisoformat(r.received_at) for r in _requests(partner, op_id, "poll")]
    gaps = [(b - a).total_seconds() for a, b in zip(times, times[1:])]
    assert len(times) == 3 and all(gap >= 0.95 for gap in gaps), gaps  # the cap alone is 0.2 s


def test_cancel_before_send(lro_app: LroApp, worker: Worker, partner: PartnerProcess) -> None:
    op_id = lro_app.make(f"{partner.url}/lro/provision?polls=50")
    _cancel(lro_app, op_id)
    op = _run_until(worker, lro_app, op_id, _settled)
    assert op.execution is E.CANCELLED and op.cancel_outcome == "cancelled"
    assert partner.log.requests(str(op_id)) == []  # nothing ever left


def test_cancel_while_accepted_wins(lro_app: LroApp, worker: Worker, partner: PartnerProcess) -> None:
    op_id = lro_app.make(f"{partner.url}/lro/provision?polls=100000")
    _run_until(worker, lro_app, op_id, lambda op: op.remote_status == "running")
    _cancel(lro_app, op_id)
    op = _run_until(worker, lro_app, op_id, _settled)
    assert (op.execution, op.settlement, op.disposition) == (E.CANCELLED, S.SETTLED, "cancelled")
    assert _lro_state(partner, op_id) == "cancelled"
    assert len(_requests(partner, op_id, "cancel")) == 1
    assert _result(lro_app, op) == ["cancelled"]


def test_cancel_during_the_attempt(lro_app: LroApp, worker: Worker, partner: PartnerProcess) -> None:
    op_id = lro_app.make(f"{partner.url}/lro/slow?polls=100000")
    httpx.post(f"{partner.url}/_control/faults", json={"path": "/lro/slow", "fault": {"delay": 1.0}}).raise_for_status()
    deadline = time.monotonic() + 10
    while not (worker.in_flight and lro_app.get_operation(op_id).execution is E.DISPATCHING):
        assert time.monotonic() < deadline, "the attempt never started"
        worker.run_once()
        time.sleep(0.02)
    _cancel(lro_app, op_id)  # while the create call is on the wire
    op = _run_until(worker, lro_app, op_id, _settled)
    # The attempt's outcome is recorded first (accepted), then the remote operation is cancelled.
    events = _events(lro_app, op_id)
    assert events.index("CancelRequested") < events.index("Accepted") < events.index("Cancelled")
    assert op.execution is E.CANCELLED and _lro_state(partner, op_id) == "cancelled"


def test_cancel_that_loses_then_success(lro_app: LroApp, worker: Worker, partner: PartnerProcess) -> None:
    op_id = lro_app.make(f"{partner.url}/lro/provision?polls=8&cancel=loses")
    _run_until(worker, lro_app, op_id, lambda op: op.remote_status == "running")
    _cancel(lro_app, op_id)
    refused = _run_until(worker, lro_app, op_id, lambda op: op.cancel_refused or op.execution is not E.ACCEPTED)
    if refused.execution is E.ACCEPTED:
        assert refused.attention == "cancel_failed"
    op = _run_until(worker, lro_app, op_id, _settled)
    # Both facts are recorded; the outcome follows the evidence: it completed despite the cancel.
    events = _events(lro_app, op_id)
    assert "CancelFailed" in events and "Succeeded" in events and "Cancelled" not in events
    assert (op.execution, op.settlement) == (E.SUCCEEDED, S.SETTLED)
    assert op.cancel_outcome == "completed despite cancel" and op.attention is None
    assert _result(lro_app, op) == ["succeeded"]


def test_cancel_racing_a_success(lro_app: LroApp, worker: Worker, partner: PartnerProcess) -> None:
    # The provider completes the operation as the cancel arrives: the cancel is accepted, but
    # the operation is done with its response.
    op_id = lro_app.make(f"{partner.url}/lro/provision?polls=100000&cancel=completes")
    _run_until(worker, lro_app, op_id, lambda op: op.remote_status == "running")
    _cancel(lro_app, op_id)
    op = _run_until(worker, lro_app, op_id, _settled)
    events = _events(lro_app, op_id)
    assert events.count("CancelRequested") == 1 and events.count("CancelFailed") == 1
    assert events.count("Succeeded") == 1 and events.count("Settled") == 1 and "Cancelled" not in events
    assert op.cancel_outcome == "completed despite cancel" and _lro_state(partner, op_id) == "succeeded"
    # A settled outcome never flips: another cancel request is refused.
    with pytest.raises(Exception, match="request_cancel"):
        op.request_cancel(now=SystemClock().now(), principal="alice")


def test_accepted_deadline_passes_while_the_provider_runs(lro_app: LroApp, worker: Worker,
                                                          partner: PartnerProcess) -> None:
    op_id = lro_app.make(f"{partner.url}/lro/provision?polls=0&after=4", integration="test.lro_short")
    overdue = _run_until(worker, lro_app, op_id, lambda op: op.remote_overdue or op.execution is not E.ACCEPTED)
    # Not failed, not ambiguous: the provider may still finish. Attention says so.
    assert overdue.execution is E.ACCEPTED and overdue.attention == "remote_unknown"
    polls_when_overdue = len(_requests(partner, op_id, "poll"))
    op = _run_until(worker, lro_app, op_id, _settled)
    assert (op.execution, op.settlement) == (E.SUCCEEDED, S.SETTLED) and op.attention is None
    events = _events(lro_app, op_id)
    assert events.count("RemoteOverdue") == 1 and events.count("Succeeded") == 1 and events.count("Settled") == 1
    assert "DeadlineExceeded" not in events and "Failed" not in events
    # Slower after the deadline: at most one poll per 0.3 s (minus jitter) over about 2.5 s.
    assert len(_requests(partner, op_id, "poll")) - polls_when_overdue <= 12
    assert _result(lro_app, op) == ["succeeded"]


def test_cancel_of_work_no_adapter_can_cancel(lro_app: LroApp, worker: Worker, partner: PartnerProcess) -> None:
    # callback mode on the webhook adapter: accepted, waiting for a callback; nothing can ask the
    # provider to cancel, so CancelFailed says so once and the operation keeps waiting.
    op_id = lro_app.make(f"{partner.url}/hook", integration="test.lro_callback")
    accepted = _run_until(worker, lro_app, op_id, lambda op: op.execution is E.ACCEPTED)
    assert accepted.follow == "callback"
    _cancel(lro_app, op_id)
    op = _run_until(worker, lro_app, op_id, lambda op: op.cancel_refused)
    for _ in range(20):  # it is not claimed again and again
        worker.run_once()
        time.sleep(0.02)
    op = lro_app.get_operation(op_id)
    events = _events(lro_app, op_id)
    assert op.execution is E.ACCEPTED and op.attention == "cancel_failed"
    assert events.count("CancelFailed") == 1 and events.count("Claimed") == 2  # the attempt's, the canceller's
    assert "cannot cancel" in (op.cancel_reason or "")


def test_cancel_after_a_lost_response_asks_again_before_it_says_cancelled(lro_app: LroApp, worker: Worker,
                                                                          partner: PartnerProcess) -> None:
    # The create call is applied and its response lost while the cancel is requested: the retry
    # (same key, safe in idempotent mode) learns the remote operation, which is then cancelled
    # at the provider. Recording Cancelled at once would leave it running unseen.
    op_id = lro_app.make(f"{partner.url}/lro/dropped?polls=100000")
    httpx.post(f"{partner.url}/_control/faults", json={"path": "/lro/dropped", "fault": {
        "delay": 1.0, "drop": True, "apply": "before", "times": 1}}).raise_for_status()
    deadline = time.monotonic() + 10
    while not (worker.in_flight and lro_app.get_operation(op_id).execution is E.DISPATCHING):
        assert time.monotonic() < deadline, "the attempt never started"
        worker.run_once()
        time.sleep(0.02)
    _cancel(lro_app, op_id)
    op = _run_until(worker, lro_app, op_id, _settled)
    events = _events(lro_app, op_id)
    assert "RetryScheduled" in events and events.count("AttemptStarted") == 2
    assert op.execution is E.CANCELLED and _lro_state(partner, op_id) == "cancelled"
    assert partner.log.applied_count(str(op_id)) == 1  # the second create was a replay


def test_a_poll_result_in_hand_outlives_a_refused_commit(lro_app: LroApp, worker: Worker,
                                                          partner: PartnerProcess) -> None:
    # The commit of the terminal poll result is refused once (a terminated connection): the
    # result is kept and recorded next cycle, not dropped and asked for again.
    from eventsourcing.persistence import OperationalError

    save, refused = lro_app.save, []

    def save_once_refused(*objs, **kwargs):  # type: ignore[no-untyped-def]
        pending = [type(e).__name__ for o in objs for e in getattr(o, "pending_events", [])]
        if "Succeeded" in pending and not refused:
            refused.append(pending)
            raise OperationalError("terminating connection due to administrator command")
        return save(*objs, **kwargs)

    lro_app.save = save_once_refused  # type: ignore[method-assign]
    op_id = lro_app.make(f"{partner.url}/lro/provision?polls=1")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not _settled(op := lro_app.get_operation(op_id)):
        worker._cycle(None)
        time.sleep(0.02)
    assert refused, "the refusal never happened"
    assert (op.execution, op.settlement) == (E.SUCCEEDED, S.SETTLED)
    assert len(_requests(partner, op_id, "poll")) == 2  # "running", then done: not asked a third time


@pytest.mark.parametrize(("event", "execution", "polls"), [
    # A poll's ending refused: ambiguous (outcome_unstorable), never polled or sent again.
    ("Succeeded", E.AMBIGUOUS, 4),
    # A new remote status refused: no longer followed; it waits for an operator as it was.
    ("RemoteStatusObserved", E.ACCEPTED, 1),
])
def test_a_poll_result_the_store_refuses_for_that_operation_waits_for_an_operator(
        event: str, execution: E, polls: int, lro_app: LroApp, worker: Worker, partner: PartnerProcess,
        database: Database) -> None:
    from tests.refusals import MESSAGE, refuse_event

    other = lro_app.make(f"{partner.url}/lro/provision?polls=3", n=1)
    op_id = lro_app.make(f"{partner.url}/lro/provision?polls=3")
    refuse_event(database, lro_app.name, op_id, getattr(Operation, event))
    op = _run_until(worker, lro_app, op_id, lambda op: op.write_refused is not None)
    assert (op.execution, op.write_refused) == (execution, "poll") and MESSAGE in (op.write_refused_error or "")
    assert op.attention == "write_refused" and op.next_due_at is None
    if execution is E.AMBIGUOUS:
        assert op.ambiguity_reason == "outcome_unstorable"
    assert _run_until(worker, lro_app, other, _settled).settlement is S.SETTLED  # the other goes on
    for _ in range(20):  # and the refused one is left alone
        worker.run_once()
        time.sleep(0.02)
    assert len(_requests(partner, op_id, "poll")) == polls and partner.log.applied_count(op_id) == 1
    assert "WriteRefused" in _events(lro_app, op_id)[-2:]
