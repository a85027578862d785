"""One simulation run: the real aggregate and executor services, several workers, a simulated
provider and clock, and faults, all decided by one seeded random source; the oracle checks each
step.

A run has two phases:

1. **Faults** (``steps`` steps). Each step, the seed picks an actor: the host (a new account
   and its intent, co-committed), the status projection, a worker (the next service of its
   cycle: egress, outcomes, settlement, leases, the due-work pass), or the clock (a short
   advance, sometimes past the lease). Before a worker's step it may crash (its calls in flight
   are lost; a new worker starts a little later) or pause past its lease and then carry on (a
   zombie). Providers draw their faults per call; settlement methods raise on purpose.
2. **Drain.** No new faults; workers, projection and clock run until every operation is
   settled or on the attention queue, jumping the clock to the next thing due when nothing
   moves (deadlines included), so "everything ends" is checked, not assumed.

Nothing reads the wall clock, the OS random source or thread timing: the same seed (and the
same disabled faults) gives the same trace, byte for byte.

Source: issue 11; docs/simulation.md.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from eventsourcing.persistence import OperationalError, ProgrammingError, StoredEvent
from eventsourcing.utils import get_topic

from adapters.simulation.budgets import BudgetWatch
from adapters.simulation.callbacks import SimCallbacks
from adapters.simulation.egress import SimulatedEgress
from adapters.simulation.faults import (
    CRASH_CHANCE,
    PAUSE_CHANCE,
    ROW_REFUSED_CHANCE,
    SETTLEMENT_FAULT_CHANCE,
    STORE_DOWN_CHANCE,
    Fault,
    FaultPlan,
)
from adapters.simulation.lro import CancelPlan, SimLroProvider
from adapters.simulation.model import (
    ADAPTER,
    LEASE_SECONDS,
    LRO_ADAPTER,
    MODES,
    POPO,
    SettlementFaults,
    SimApp,
    settlement_denied,
    sim_settlement_policy,
)
from adapters.simulation.oracle import Oracle, Violation
from adapters.simulation.provider import SimProvider
from executors.commit import Counts
from executors.runtime import Worker, WorkerConfig
from ledger.clock import FakeClock
from ledger.operation import Operation
from projections.memory_view import MemoryStatusStore
from projections.rows import StatusRow
from projections.status import StatusProjection

T0 = datetime(2030, 1, 1, tzinfo=UTC)
STAGES = ("egress", "outcomes", "polling", "settlement", "leases", "claims")
"""A worker's cycle, in ``executors.runtime.Worker.run_once``'s order."""
EGRESS_SLOTS = 8
DRAIN_LIMIT_SECONDS = 3600.0
"""Simulated time the drain may take at most (longer than every declared deadline)."""
DRAIN_ROUNDS = 2000
REFUSABLE = (Operation.Claimed, Operation.AttemptStarted, Operation.LeaseRenewed, Operation.Succeeded,
             Operation.Failed, Operation.Accepted, Operation.RetryScheduled, Operation.BudgetExhausted,
             Operation.RemoteStatusObserved, Operation.CallbackReceived, Operation.Cancelled,
             Operation.DeadlineExceeded, Operation.Settled)
"""The event types the ``row_refused`` fault refuses for its operation: every write a worker or
a callback makes for it, but not what a refusal leaves (``Ambiguous``, ``SettlementBlocked``,
``WriteRefused``), which a store refusing those too would leave nothing to show for it."""


@dataclass(frozen=True)
class SimConfig:
    """What a run does.

    Attributes:
        operations: intents the host commits during the fault phase.
        steps: steps of the fault phase.
        workers: worker processes at once.
        disabled: numbers of faults not to inject (``FaultPlan``; shrinking sets it).
    """

    operations: int = 20
    steps: int = 400
    workers: int = 2
    disabled: frozenset[int] = frozenset()


@dataclass
class RunResult:
    """What a run did: its trace, the faults it injected, the first violation (if any) and the
    honesty of its outcomes."""

    seed: int
    config: SimConfig
    violation: Violation | None
    trace: list[str]
    injected: list[tuple[int, Fault]]
    honesty: dict[str, Counter[str]]
    operations: int
    simulated_seconds: float

    def focus(self) -> list[str]:
        """The trace lines about the failing operation, and every crash, pause and start: the
        story of the violation without the rest of the run."""
        if self.violation is None or self.violation.operation_id is None:
            return self.trace
        short = self.violation.operation_id.hex[:8]
        marks = (short, "crashes", "pauses", "resumes", " starts", "past the lease", "store is down", "oracle",
                 "store refuses")
        return [line for line in self.trace if any(mark in line for mark in marks)]

    @property
    def faults(self) -> Counter[str]:
        """Faults injected, by kind."""
        return Counter(kind.value for _, kind in self.injected)


@dataclass
class _SimWorker:
    worker: Worker
    name: str
    stage: int = 0
    paused_until: datetime | None = None


@dataclass
class _World:
    seed: int
    config: SimConfig
    rng: random.Random
    faults: FaultPlan
    clock: FakeClock
    app: SimApp
    provider: SimProvider
    store: MemoryStatusStore
    projection: StatusProjection
    oracle: Oracle
    budgets: BudgetWatch
    callbacks: SimCallbacks
    lro: SimLroProvider
    cancels: CancelPlan = field(default_factory=CancelPlan)
    refused_rows: set[tuple[UUID, str]] = field(default_factory=set)  # (operation, topic): row_refused
    workers: list[_SimWorker | None] = field(default_factory=list)
    restarts: dict[int, datetime] = field(default_factory=dict)
    generations: Counter[int] = field(default_factory=Counter)
    created: int = 0
    trace: list[str] = field(default_factory=list)
    quiet: bool = False  # the drain: no new faults

    def log(self, step: int | str, actor: str, text: str) -> None:
        elapsed = (self.clock.now() - T0).total_seconds()
        self.trace.append(f"{step:>5} t={elapsed:9.3f} {actor:<10} {text}")


def run_seed(seed: int, config: SimConfig | None = None) -> RunResult:
    """Run one seed; stop at the first violation.

    Args:
        seed: the run's seed (everything it decides comes from ``random.Random(seed)``).
        config: :class:`SimConfig`.

    Returns:
        :class:`RunResult`.
    """
    config = config or SimConfig()
    world = _build(seed, config)
    try:
        violation = _fault_phase(world) or _drain(world) or world.oracle.final()
        if violation is not None:
            world.log("!", "oracle", str(violation))
        return RunResult(seed=seed, config=config, violation=violation, trace=world.trace,
                         injected=list(world.faults.injected), honesty=world.oracle.honesty(),
                         operations=world.created,
                         simulated_seconds=(world.clock.now() - T0).total_seconds())
    finally:
        for slot in world.workers:
            if slot is not None:
                slot.worker.close()
        world.app.close()


def _build(seed: int, config: SimConfig) -> _World:
    rng = random.Random(seed)
    faults = FaultPlan(rng=rng, disabled=config.disabled)
    clock = FakeClock(T0)
    SettlementFaults.reset()
    app = SimApp(env=POPO, clock=clock)
    provider = SimProvider(faults=faults, clock=clock)
    callbacks = SimCallbacks(app=app, faults=faults, rng=rng, clock=clock)
    provider.on_applied = callbacks.on_applied
    store = MemoryStatusStore(clock=clock)
    projection = StatusProjection(app=app, view=store.open_view())
    world = _World(seed=seed, config=config, rng=rng, faults=faults, clock=clock, app=app, provider=provider,
                   store=store, projection=projection, oracle=Oracle(app, provider, callbacks=callbacks.genuine),
                   budgets=BudgetWatch(provider, clock, app), callbacks=callbacks,
                   lro=SimLroProvider(truth=provider, faults=faults, clock=clock))
    world.workers = [_start_worker(world, i) for i in range(config.workers)]
    _refuse_rows_of(world)
    return world


def _refuse_rows_of(world: _World) -> None:
    """Make the store refuse the rows of ``world.refused_rows`` (as a trigger would), whole
    batches with them, and take everything else (``Fault.ROW_REFUSED``)."""
    recorder = world.app.recorder
    insert = recorder.insert_events

    def insert_events(stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        for stored in stored_events:
            if (stored.originator_id, stored.topic) in world.refused_rows:
                raise ProgrammingError(f"simulated: a trigger refuses {stored.topic.rsplit('.', 1)[-1]} of "
                                       f"{str(stored.originator_id).replace('-', '')[:8]}")
        return insert(stored_events, **kwargs)

    recorder.insert_events = insert_events  # type: ignore[method-assign]


def _start_worker(world: _World, index: int) -> _SimWorker:
    world.generations[index] += 1
    name = f"w{index}.{world.generations[index]}"
    egress = SimulatedEgress(clock=world.clock, faults=world.faults, rng=world.rng, slots=EGRESS_SLOTS,
                             lease_seconds=LEASE_SECONDS)
    worker = Worker(app=world.app, view=world.store.open_view(), adapters={ADAPTER: world.budgets,
                                                                          LRO_ADAPTER: world.lro},
                    clock=world.clock, rng=random.Random(world.rng.getrandbits(64)), egress=egress,
                    config=WorkerConfig(worker_id=name, lease_seconds=LEASE_SECONDS, egress_slots=EGRESS_SLOTS,
                                        inline_egress=True, settlement_policy=sim_settlement_policy),
                    on_committed=world.projection.offer)
    return _SimWorker(worker=worker, name=name)


def _fault_phase(world: _World) -> Violation | None:
    for step in range(world.config.steps):
        _restart_due(world, step)
        _step(world, step)
        violation = _check(world, step)
        if violation is not None:
            return violation
    return None


def _check(world: _World, step: int | str) -> Violation | None:
    """Run the oracle over what the step committed; its event lines go into the trace."""
    violation = world.oracle.check() or _budget_check(world)
    for source, lines in (("  provider", world.provider.lines), ("  callback", world.callbacks.lines),
                          ("  ledger", world.oracle.lines)):
        for line in lines:
            world.log(step, source, line)
        lines.clear()
    return violation


def _budget_check(world: _World) -> Violation | None:
    """The budget oracle over the requests that reached the provider (``adapters.simulation.budgets``)."""
    found = world.budgets.check()
    return Violation(*found) if found is not None else None


def _step(world: _World, step: int) -> None:
    rng, now = world.rng, world.clock.now()
    for line in world.cancels.run_due(world.app, now):
        world.log(step, "operator", line)
    actors: list[tuple[str, int]] = [("clock", 2), ("projection", 2), ("callbacks", 1)]
    if world.created < world.config.operations:
        actors.append(("host", 2))
    for index, slot in enumerate(world.workers):
        if slot is not None and (slot.paused_until is None or slot.paused_until <= now):
            actors.append((f"worker{index}", 4))
    actor = rng.choices([a for a, _ in actors], weights=[w for _, w in actors])[0]
    if actor == "clock":
        jump = rng.random() < 0.03  # every process stalls at once (a VM pause): leases lapse
        seconds = LEASE_SECONDS + rng.uniform(0.5, 3) if jump else min(rng.expovariate(3.0), 5.0)
        world.clock.advance(seconds)
        world.log(step, "clock", f"+{seconds:.3f}s" + (" (past the lease)" if jump else ""))
    elif actor == "projection":
        applied = world.projection.run_once()
        if applied:
            world.log(step, "projection", f"applied {applied}")
    elif actor == "callbacks":
        world.callbacks.run_once(now)
    elif actor == "host":
        _create(world, step)
    else:
        _worker_step(world, step, int(actor.removeprefix("worker")))


def _create(world: _World, step: int) -> None:
    mode = world.rng.choice([*MODES, None])  # None: a long-running operation (sim.lro)
    account, op_id = world.app.open_account(world.seed, world.created, mode)
    world.created += 1
    note = ""
    if mode is None and (delay := world.cancels.consider(world.faults, op_id, world.clock.now())) is not None:
        note = f"; an operator cancels it in {delay:.1f}s"
    if world.faults.chance(Fault.SETTLEMENT_RAISES, SETTLEMENT_FAULT_CHANCE):
        times = world.rng.randint(1, 4)
        SettlementFaults.remaining[account.id] = times
        note = f"; its settlement raises {times}x"
    if settlement_denied(account.id):
        note += "; the host denies its settlement"
    world.log(step, "host", f"intent {_short(op_id)} {mode.value if mode else 'lro'}{note}")


def _worker_step(world: _World, step: int, index: int) -> None:
    slot = world.workers[index]
    assert slot is not None
    now = world.clock.now()
    if slot.paused_until is not None:  # a zombie wakes and carries on where it stopped
        world.log(step, slot.name, "resumes after a pause")
        slot.paused_until = None
    elif not world.quiet and world.faults.chance(Fault.CRASH, CRASH_CHANCE):
        lost = list(slot.worker.egress.in_flight)
        slot.worker.close()
        world.workers[index] = None
        world.restarts[index] = now + timedelta(seconds=world.rng.uniform(0.5, 5.0))
        world.log(step, slot.name, f"crashes before {STAGES[slot.stage]} with {len(lost)} calls in flight")
        return
    elif not world.quiet and world.faults.chance(Fault.PAUSE, PAUSE_CHANCE):
        slot.paused_until = now + timedelta(seconds=LEASE_SECONDS + world.rng.uniform(1.0, 10.0))
        world.log(step, slot.name, f"pauses before {STAGES[slot.stage]}")
        return
    if not world.quiet and world.faults.chance(Fault.ROW_REFUSED, ROW_REFUSED_CHANCE):
        _refuse_rows(world, step, slot.name)
    injected = len(world.faults.injected)
    if not world.quiet and world.faults.chance(Fault.STORE_DOWN, STORE_DOWN_CHANCE):
        _store_down_step(world, step, slot, now)
        return
    counts = _run_stage(slot, now)
    if counts.busy or len(world.faults.injected) != injected:
        world.log(step, slot.name, f"{STAGES[slot.stage]}: {_counts(counts)}")
    slot.stage = (slot.stage + 1) % len(STAGES)


def _refuse_rows(world: _World, step: int, actor: str) -> None:
    """From now on the store refuses one open operation's events of one drawn type."""
    open_ops = [op_id for op_id, seen in world.oracle.ops.items() if not seen.ended and not seen.settled]
    if not open_ops:
        return
    op_id, event = world.rng.choice(open_ops), world.rng.choice(REFUSABLE)
    world.refused_rows.add((op_id, get_topic(event)))
    world.log(step, actor, f"the store refuses {event.__name__} of {_short(op_id)} from now on (a trigger)")


def _store_down_step(world: _World, step: int, slot: _SimWorker, now: datetime) -> None:
    """Run the worker's stage while the store refuses every write; the worker handles it as
    ``Worker._cycle`` does (``Worker.outage``) and starts its cycle over."""
    app = world.app
    refusal = OperationalError("simulated: server closed the connection unexpectedly")

    def refuse(*objs: Any, **kwargs: Any) -> Any:
        raise refusal

    app.save = refuse  # type: ignore[method-assign]
    try:
        _run_stage(slot, now)
        note = "nothing to write"
    except OperationalError as exc:
        slot.worker.outage(exc)
        note = "its commit failed; it starts its cycle over"
    finally:
        del app.save  # the class's method again
    world.log(step, slot.name, f"{STAGES[slot.stage]}: the store is down, {note}")
    slot.stage = 0


def _run_stage(slot: _SimWorker, now: datetime) -> Counts:
    worker = slot.worker
    stages: dict[str, Callable[[datetime], Counts]] = {
        "egress": worker.egress.run_once, "outcomes": worker.outcomes.run_once, "polling": worker.polling.run_once,
        "settlement": worker.settlement.run_once, "leases": worker.leases.run_once, "claims": worker.claims.run_once}
    return stages[STAGES[slot.stage]](now)


def _restart_due(world: _World, step: int | str) -> None:
    now = world.clock.now()
    for index, at in sorted(world.restarts.items()):
        if at <= now:
            del world.restarts[index]
            world.workers[index] = _start_worker(world, index)
            world.log(step, world.workers[index].name, "starts")  # type: ignore[union-attr]


def _drain(world: _World) -> Violation | None:
    world.quiet = world.faults.quiet = True
    end = world.clock.now() + timedelta(seconds=DRAIN_LIMIT_SECONDS)
    for _ in range(DRAIN_ROUNDS):
        _restart_due(world, "drain")
        moved = world.callbacks.run_once(world.clock.now()) > 0
        requested = world.cancels.run_due(world.app, world.clock.now())
        for line in requested:
            world.log("drain", "operator", line)
        moved = world.projection.run_once() > 0 or bool(requested) or moved
        for slot in world.workers:
            if slot is None or (slot.paused_until is not None and slot.paused_until > world.clock.now()):
                continue
            for _ in STAGES:
                if slot.paused_until is not None:
                    world.log("drain", slot.name, "resumes after a pause")
                    slot.paused_until = None
                counts = _run_stage(slot, world.clock.now())
                if counts.busy:
                    moved = True
                    world.log("drain", slot.name, f"{STAGES[slot.stage]}: {_counts(counts)}")
                slot.stage = (slot.stage + 1) % len(STAGES)
        violation = _check(world, "drain")
        if violation is not None:
            return violation
        # Planned callbacks (late ones, replays) are delivered before the run ends.
        if (_all_ended(world) and world.callbacks.next_event_at() is None) or world.clock.now() >= end:
            return None
        if not moved:
            _jump(world, end)
    return None


def _rows(world: _World) -> list[StatusRow]:
    """Every operation's status row, the projection caught up first (cheaper than loading each
    operation; the final check loads them)."""
    while world.projection.run_once():
        pass
    view = world.projection.view
    return [row for op_id in world.oracle.ops if (row := view.get(op_id)) is not None]


def _ended(row: StatusRow) -> bool:
    # On the attention queue with nothing scheduled: only an operator moves it now. An operation
    # flagged for attention that still has work due (a lease that keeps expiring) goes on.
    return row.status == "settled" or (row.attention is not None and row.next_due_at is None)


def _all_ended(world: _World) -> bool:
    rows = _rows(world)
    return len(rows) == len(world.oracle.ops) and all(_ended(row) for row in rows)


def _jump(world: _World, end: datetime) -> None:
    """Nothing moved: move the clock to the next thing due (a call's answer, a retry, a lease's
    or deadline's end, a paused or crashed worker's return), at least a millisecond on."""
    now = world.clock.now()
    times = [t for t in world.restarts.values()]
    if (at := world.callbacks.next_event_at()) is not None:
        times.append(at)
    if (cancel_at := world.cancels.next_at()) is not None:
        times.append(cancel_at)
    for slot in world.workers:
        if slot is None:
            continue
        if slot.paused_until is not None:
            times.append(slot.paused_until)
        egress = slot.worker.egress
        if isinstance(egress, SimulatedEgress) and (at := egress.next_event_at()) is not None:
            times.append(at)
        times += [held.next_at for held in slot.worker.polling.held.values() if not held.in_flight]
    times += [row.next_due_at for row in _rows(world) if not _ended(row) and row.next_due_at is not None]
    target = min([t for t in times if t > now], default=end)
    world.clock.set(max(min(target, end), now + timedelta(milliseconds=1)))


def _counts(counts: Counts) -> str:
    return ", ".join(f"{name} {value}" for name, value in vars(counts).items() if value) or "nothing"


def _short(op_id: UUID) -> str:
    return op_id.hex[:8]
