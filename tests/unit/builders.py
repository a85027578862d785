"""Build ``Operation`` aggregates in a chosen state by driving them through legal commands.

Tests never set attributes by hand: every state is reached the way a worker, an approver or an
operator would reach it, so a builder that stops working is itself a lifecycle regression.
Source: docs/adr/0001-operation-lifecycle.md (the transition table).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from eventsourcing.domain import Aggregate

from ledger.application import LedgerApplication
from ledger.declarations import Integration
from ledger.identity import Source
from ledger.operation import Operation
from ledger.outcomes import FailureCategory
from ledger.status import ExecutionState as E
from ledger.status import SettlementState as S

UTC = UTC
T0 = datetime(2026, 1, 1, tzinfo=UTC)
LEASE_SECONDS = 60.0
"""Lease length the builder claims with; every step advances the clock by one second."""

ENTITY_TYPE = "app.orders:Order"


class PlainEntity(Aggregate):
    """A source entity with no events of its own: its creation is its only transition."""


def in_memory_app(*integrations: Integration) -> tuple[LedgerApplication, PlainEntity]:
    """A ledger application declaring ``integrations`` on the in-memory event store
    (``eventsourcing.popo``), and a new, not yet saved :class:`PlainEntity` to intend from."""

    class App(LedgerApplication):
        pass

    App.integrations = list(integrations)
    return App(env={"PERSISTENCE_MODULE": "eventsourcing.popo"}), PlainEntity()


def declaration(**overrides: Any) -> dict[str, Any]:
    """Return a valid declaration as plain data, with top-level ``overrides`` applied."""
    data: dict[str, Any] = {
        "name": "payments.charge",
        "version": 1,
        "adapter": "webhook",
        "delivery_mode": "idempotent",
        "endpoint": "https://partner.example/charges",
        "retry": {"max_attempts": 3, "base_backoff_seconds": 1.0, "max_backoff_seconds": 60.0},
        "deadlines": {"pending": 3600.0, "claimed": 300.0, "dispatching": 600.0, "accepted": 86_400.0},
        "settlement": {"entity_type": ENTITY_TYPE, "method": "record_charge", "max_attempts": 3},
        "payload": {"amount": "public", "currency": "public", "note": "internal", "card": "secret"},
    }
    for key, value in overrides.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def integration(**overrides: Any) -> Integration:
    """Return a parsed declaration (see :func:`declaration`)."""
    return Integration.parse(declaration(**overrides))


def source(**overrides: Any) -> Source:
    """Return a source transition with a fresh entity id unless given."""
    values: dict[str, Any] = {
        "tenant": "tenant-a",
        "entity_type": ENTITY_TYPE,
        "entity_id": uuid4(),
        "entity_version": 2,
        "effect_index": 0,
    }
    values.update(overrides)
    return Source(**values)


PAYLOAD: Mapping[str, Any] = {"amount": 1250, "currency": "EUR", "note": "order 17", "card": "secretref:card-17"}

EXECUTION_STATES: tuple[E, ...] = tuple(E)
SETTLEMENT_STATES: tuple[S, ...] = tuple(S)


@dataclass
class Built:
    """An operation and the builder's clock (``now`` is the instant of the last command)."""

    op: Operation
    now: datetime
    integration: Integration
    events: list[Any] = field(default_factory=list)
    naive: bool = False
    """When set, :meth:`tick` and :meth:`at` hand out naive datetimes (to test the refusal)."""

    def at(self, instant: datetime) -> datetime:
        """Return ``instant`` as commands should receive it (naive when ``naive`` is set)."""
        return instant.replace(tzinfo=None) if self.naive else instant

    def tick(self, seconds: float = 1.0) -> datetime:
        """Advance the clock and return the new instant."""
        self.now += timedelta(seconds=seconds)
        return self.at(self.now)

    @property
    def epoch(self) -> int:
        return self.op.epoch

    @property
    def attempt_id(self) -> UUID | None:
        return self.op.last_attempt_id

    def collect(self) -> list[Any]:
        """Move the operation's pending events into ``events`` and return the new ones."""
        new = list(self.op.collect_events())
        self.events.extend(new)
        return new


def new_operation(*, now: datetime = T0, payload: Mapping[str, Any] = PAYLOAD, **overrides: Any) -> Built:
    """Return a freshly intended (pending) operation under a declaration with ``overrides``."""
    integ = integration(**overrides)
    op = Operation.intend(now=now, integration=integ, source=source(), payload=payload)
    return Built(op=op, now=now, integration=integ)


def _claim(b: Built) -> None:
    if b.op.approval == "required":
        b.op.grant_approval(now=b.tick(), principal="approver", roles={"approver"})
    b.op.claim(now=b.tick(), worker_id="worker-1", lease_seconds=LEASE_SECONDS)


def _dispatch(b: Built) -> None:
    _claim(b)
    b.op.start_attempt(epoch=b.epoch, now=b.tick(), attempt_id=uuid4(), request_fingerprint="req-1")


def build(state: E, **overrides: Any) -> Built:
    """Return an operation in execution ``state``, reached through legal commands.

    Paths: pending = intended; claimed = claimed; dispatching = one attempt started; accepted =
    the attempt accepted and claimed by a poller; succeeded/failed/ambiguous = the attempt's outcome; cancelled =
    cancellation requested and recorded while pending.
    """
    b = new_operation(**overrides)
    op = b.op
    if state is E.PENDING:
        pass
    elif state is E.CLAIMED:
        _claim(b)
    elif state is E.DISPATCHING:
        _dispatch(b)
    elif state is E.ACCEPTED:
        _dispatch(b)
        op.accept(epoch=b.epoch, now=b.tick(), attempt_id=b.attempt_id, remote_id="remote-1", status_code=202,
                  follow="poll", follow_until=b.at(b.now + timedelta(days=30)))
        # Accepted work is unleased until a poller claims it; build it as a poller holds it.
        op.claim(now=b.tick(), worker_id="poller", lease_seconds=LEASE_SECONDS)
    elif state is E.SUCCEEDED:
        _dispatch(b)
        op.succeed(epoch=b.epoch, now=b.tick(), attempt_id=b.attempt_id, status_code=200)
    elif state is E.FAILED:
        _dispatch(b)
        op.fail(epoch=b.epoch, now=b.tick(), attempt_id=b.attempt_id, category=FailureCategory.REJECTED,
                retryable=False, status_code=422, detail="card declined")
    elif state is E.AMBIGUOUS:
        _dispatch(b)
        op.mark_ambiguous(epoch=b.epoch, now=b.tick(), attempt_id=b.attempt_id, reason="timeout")
    elif state is E.CANCELLED:
        op.request_cancel(now=b.tick(), principal="alice", reason="customer asked")
        op.cancel(now=b.tick(), reason="customer asked")
    else:  # pragma: no cover - a new state needs a path here
        raise AssertionError(f"no builder path for {state}")
    assert op.execution is state, (state, op.execution)
    b.collect()
    return b


def build_settlement(state: S, *, outcome: E = E.SUCCEEDED, **overrides: Any) -> Built:
    """Return an operation in settlement ``state``.

    none = pending execution; pending = a terminal ``outcome``; settled = settled after it;
    blocked = settlement blocked after it; not_required = the ``outcome`` under a declaration
    without a settlement action.
    """
    if state is S.NONE:
        b = build(E.PENDING, **overrides)
    elif state is S.NOT_REQUIRED:
        b = build(outcome, **{**overrides, "settlement": None})
    else:
        b = build(outcome, **overrides)
        if state is S.SETTLED:
            b.op.settle(now=b.tick(), entity_version=3)
        elif state is S.BLOCKED:
            b.op.block_settlement(now=b.tick(), reason="entity rejected the action")
    assert b.op.settlement is state, (state, b.op.settlement)
    b.collect()
    return b


def replay(events: list[Any]) -> Operation:
    """Rebuild an operation from its events: ``Intended.mutate(None)`` then each ``mutate``."""
    assert events and isinstance(events[0], Operation.Intended)
    op = events[0].mutate(None)
    for event in events[1:]:
        op = event.mutate(op)
    return op


def state_of(op: Operation) -> dict[str, Any]:
    """The aggregate's state for comparison, without the library's pending-event buffer."""
    return {k: v for k, v in vars(op).items() if k != "_pending_events"}
