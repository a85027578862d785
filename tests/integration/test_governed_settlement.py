"""Governed settlement (issue 32): the entity's type is checked at the intent and again at the
settlement, and a settlement names, and is fenced to, the outcome it settles. Both backends."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from uuid import UUID, uuid4

import pytest
from eventsourcing.persistence import OperationalError

from adapters.fake import FakeAdapter
from adapters.http.schemas import OperationDetail
from adapters.operator import describe
from executors.commit import Committer, Counts
from executors.runtime import Worker, WorkerConfig
from executors.settlement import SettlementService
from ledger import failpoints
from ledger.clock import FakeClock
from ledger.config import Database
from ledger.errors import LedgerError, SettlementEntityMismatchError
from ledger.intents import Delegation
from ledger.operation import Operation
from ledger.outcomes import Succeeded
from ledger.settlement import SettlementRequest
from projections.status import StatusProjection
from projections.views import open_view
from tests.apps import Thing
from tests.governed import INTEGRATION, TARGET, TRACE, ChangedApp, GovernedApp, Stranger, Witness
from tests.stores import migrated_store


@pytest.fixture
def governed_db(database: Database) -> Database:
    migrated_store(database, GovernedApp)
    return database


@pytest.fixture
def app(governed_db: Database, clock: FakeClock) -> Iterator[GovernedApp]:
    app = GovernedApp(env=governed_db.library_env(create_table=False), clock=clock)
    yield app
    app.close()


def succeed(app: GovernedApp, op_id: UUID, clock: FakeClock) -> UUID:
    """Claim, attempt and succeed the operation (committed, not settled); the attempt id."""
    now = clock.now()
    op = app.get_operation(op_id)
    epoch = op.claim(now=now, worker_id="w1", lease_seconds=30)
    attempt = uuid4()
    op.start_attempt(epoch=epoch, now=now, attempt_id=attempt, request_fingerprint="f")
    op.succeed(epoch=epoch, now=now, attempt_id=attempt)
    app.save(op)
    return attempt


def settle(app: GovernedApp, ops: list[Operation], clock: FakeClock) -> None:
    SettlementService(committer=Committer(app)).commit(ops, clock.now(), Counts())


def events_of(app: GovernedApp, op_id: UUID) -> list[Operation.Event]:
    return list(app.repository.event_store.get(op_id))


def test_an_intent_from_an_entity_of_another_type_is_refused(app: GovernedApp) -> None:
    stranger = Stranger(label="s")
    with pytest.raises(SettlementEntityMismatchError) as refused:
        app.intend(stranger, INTEGRATION, target=TARGET, payload={"n": 1})
    assert "tests.apps:Thing" in str(refused.value) and "tests.governed:Stranger" in str(refused.value)
    assert isinstance(refused.value, LedgerError)


def test_a_declaration_changed_to_another_entity_type_blocks_without_calling_the_action(
        app: GovernedApp, governed_db: Database, clock: FakeClock) -> None:
    op_id, thing_id = app.make()
    attempt = succeed(app, op_id, clock)
    app.close()
    changed = ChangedApp(env=governed_db.library_env(create_table=False), clock=clock)
    try:
        settle(changed, [changed.get_operation(op_id)], clock)
        op = changed.get_operation(op_id)
        assert op.status.value == "settlement_blocked"
        assert op.attention == "settlement_entity_mismatch"
        assert "tests.apps:Thing" in op.settlement_error and "tests.governed:Stranger" in op.settlement_error
        thing = changed.repository.get(thing_id)
        assert isinstance(thing, Thing) and thing.results == [] and thing.version == 1
        blocked = events_of(changed, op_id)[-1]
        assert isinstance(blocked, Operation.SettlementBlocked)
        assert (blocked.code, blocked.attempt_id, blocked.epoch) == ("settlement_entity_mismatch", attempt, 1)
    finally:
        changed.close()


def test_settled_names_the_attempt_and_epoch_of_the_recorded_outcome(app: GovernedApp, clock: FakeClock) -> None:
    op_id, thing_id = app.make()
    attempt = succeed(app, op_id, clock)
    settle(app, [app.get_operation(op_id)], clock)
    settled = events_of(app, op_id)[-1]
    assert isinstance(settled, Operation.Settled)
    assert (settled.attempt_id, settled.epoch) == (attempt, 1)
    assert app.repository.get(thing_id).results == ["succeeded"]


def test_a_zombie_settlement_from_a_stale_epoch_is_refused_and_the_entity_is_unchanged(
        app: GovernedApp, clock: FakeClock) -> None:
    op_id, thing_id = app.make()
    now = clock.now()
    # Worker A claims and records its attempt, then gets its response.
    op = app.get_operation(op_id)
    epoch = op.claim(now=now, worker_id="a", lease_seconds=30)
    first = uuid4()
    op.start_attempt(epoch=epoch, now=now, attempt_id=first, request_fingerprint="f")
    app.save(op)
    zombie = app.get_operation(op_id)
    zombie.succeed(epoch=epoch, now=now, attempt_id=first)
    # Its outcome commit does not land (the failpoint), but A goes on with its copy.
    with failpoints.raise_at("outcome:before", OperationalError("connection lost during COMMIT")), \
            pytest.raises(OperationalError):
        app.save(zombie)
    # Its lease lapses; worker B takes over, retries with the same key and records a failure.
    clock.advance(31)
    later = clock.now()
    fresh = app.get_operation(op_id)
    b_epoch = fresh.claim(now=later, worker_id="b", lease_seconds=30)
    fresh.schedule_retry(epoch=b_epoch, now=later, attempt_id=first, retry_at=later, category="server_error",
                         reason="worker_lost", possibly_applied=True)
    b_epoch = fresh.claim(now=later, worker_id="b", lease_seconds=30)
    second = uuid4()
    fresh.start_attempt(epoch=b_epoch, now=later, attempt_id=second, request_fingerprint="f")
    fresh.fail(epoch=b_epoch, now=later, category="rejected", retryable=False, attempt_id=second, detail="no")
    app.save(fresh)
    # A, the zombie, settles the outcome it holds: refused, logged, the entity untouched.
    zombie_settler = SettlementService(committer=Committer(app))
    zombie_settler.offer(zombie)
    zombie_settler.run_once(later + timedelta(seconds=1))
    stored = app.get_operation(op_id)
    assert stored.settlement.value == "pending" and not any(
        isinstance(e, (Operation.Settled, Operation.SettlementBlocked, Operation.SettlementFailed))
        for e in events_of(app, op_id))
    assert app.repository.get(thing_id).results == []
    # The recorded outcome (B's) settles once, naming B's attempt and epoch.
    settle(app, [stored], clock)
    settled = events_of(app, op_id)[-1]
    assert isinstance(settled, Operation.Settled) and (settled.attempt_id, settled.epoch) == (second, b_epoch)
    assert app.repository.get(thing_id).results == ["failed"]


class Gate:
    """A settlement policy an operator can change: denies while ``allow`` is False, and keeps
    every request it was asked."""

    def __init__(self) -> None:
        self.allow = False
        self.asked: list[SettlementRequest] = []

    def __call__(self, request: SettlementRequest) -> str | None:
        self.asked.append(request)
        return None if self.allow else f"{request.principal_chain[0]} may not settle {request.entity_type}"


def run_worker(app: GovernedApp, database: Database, clock: FakeClock, policy: Gate, cycles: int = 5) -> None:
    view = open_view(database)
    projection = StatusProjection(app=app, view=view)
    worker = Worker(app=app, view=view, adapters={"fake": FakeAdapter(script=lambda r: Succeeded(status_code=200))},
                    clock=clock, rng=random.Random(3), projection=projection, on_committed=projection.offer,
                    config=WorkerConfig(worker_id="gov", inline_egress=True, settlement_policy=policy))
    try:
        for _ in range(cycles):
            worker.run_once()
            clock.advance(1)
    finally:
        worker.close()
        view.close()


def test_a_denying_policy_blocks_and_an_operator_retry_after_it_allows_settles_once(
        app: GovernedApp, governed_db: Database, clock: FakeClock) -> None:
    gate = Gate()
    op_id, thing_id = app.make()
    run_worker(app, governed_db, clock, gate)
    op = app.get_operation(op_id)
    assert (op.execution.value, op.status.value, op.attention) == ("succeeded", "settlement_blocked",
                                                                  "settlement_denied")
    assert "system may not settle tests.apps:Thing" in op.settlement_error
    assert app.repository.get(thing_id).results == []
    asked = gate.asked[0]
    assert (asked.method, asked.declared_method, asked.operation.id) == ("on_result", "on_result", op_id)
    assert isinstance(asked.entity, Thing) and asked.outcome.result == "succeeded"
    # Nothing more happens by itself; the operator retries once the policy allows.
    run_worker(app, governed_db, clock, gate)
    assert app.get_operation(op_id).settlement.value == "blocked"
    gate.allow = True
    op = app.get_operation(op_id)
    op.resolve(now=clock.now(), principal="operator:1", resolution="retry_settlement",
               evidence="the settlement policy now allows clerks to settle things")
    app.save(op)
    run_worker(app, governed_db, clock, gate)
    op = app.get_operation(op_id)
    assert (op.status.value, op.attention) == ("settled", None)
    assert app.repository.get(thing_id).results == ["succeeded"]
    assert sum(isinstance(e, Operation.Settled) for e in events_of(app, op_id)) == 1


def test_the_settlement_method_receives_the_chain_of_authority(app: GovernedApp, clock: FakeClock) -> None:
    Witness.seen.clear()
    op_id, _ = app.witness()
    attempt = succeed(app, op_id, clock)
    settle(app, [app.get_operation(op_id)], clock)
    (outcome,) = Witness.seen
    op = app.get_operation(op_id)
    assert (outcome.attempt_id, outcome.epoch) == (attempt, 1)
    assert outcome.integration_digest == op.integration_digest and outcome.integration_digest.startswith("sha256:")
    assert outcome.code_digest == "sha256:host-module"
    assert outcome.principal_chain == ("clerk:7", "customer:42")
    assert outcome.on_behalf_of == (Delegation("customer:42", "customer"),)
    assert (outcome.traceparent, outcome.source_action) == (TRACE, "Opened")


def test_operators_see_the_chain_of_authority_and_the_settled_outcome(app: GovernedApp, clock: FakeClock) -> None:
    op_id, _ = app.witness()
    attempt = succeed(app, op_id, clock)
    settle(app, [app.get_operation(op_id)], clock)
    shown = describe(app, app.get_operation(op_id), None)  # ops show, the observe API, the evidence document
    authority = shown["authority"]
    assert authority["principal_chain"] == ["clerk:7", "customer:42"]
    assert authority["on_behalf_of"] == [{"principal": "customer:42", "role": "customer"}]
    assert (authority["source_action"], authority["traceparent"], authority["code_digest"]) == (
        "Opened", TRACE, "sha256:host-module")
    assert authority["integration_digest"].startswith("sha256:")
    assert shown["settles"] == {"attempt_id": str(attempt), "epoch": 1, "blocked_by": None}
    OperationDetail.model_validate(shown)
