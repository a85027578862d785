"""Stateful property test of the ``Operation`` aggregate (DESIGN §4 invariants 1-4).

Hypothesis drives one operation with any sequence of commands: random fencing epochs (mostly
current, sometimes stale or from the future), times that only move forward, random arguments
within each command's documented domain, and an occasional naive datetime. Every call must
either record at most one event or raise one of the typed errors of ``ledger.errors``, never
anything else, and a refused command must leave the aggregate untouched. After every step:

1. a terminal execution state (succeeded, failed, cancelled) never changes again;
2. ``attempts <= max_attempts``;
3. ambiguous is left only through ``Resolved``, and a non-idempotent operation never schedules
   a retry of an attempt that may have applied;
4. at most one ``Settled`` event is ever recorded.

At the end, replaying the recorded events reproduces the aggregate exactly.
Source: docs/adr/0001-operation-lifecycle.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from builders import PAYLOAD, T0, integration, replay, source, state_of
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ledger import lifecycle
from ledger.commands import RESOLUTIONS_FOR_AMBIGUOUS, RESOLUTIONS_FOR_BLOCKED
from ledger.declarations import DeliveryMode
from ledger.errors import LedgerError
from ledger.operation import Operation
from ledger.outcomes import FailureCategory
from ledger.status import TERMINAL_EXECUTION_STATES, derive_status
from ledger.status import ExecutionState as E

EPOCH_OFFSETS = st.sampled_from([0, 0, 0, 0, 0, 0, -1, 1, -2])
"""Mostly the current epoch, so commands get through; sometimes a stale or unknown one."""
STEP = st.sampled_from([0, 1, 1, 1, 2, 3, 5, 10, 30, 90, 200])
"""Seconds the clock moves before a command (never backwards): mostly a little, so leases
often hold and operations get far; sometimes a lot, so leases and deadlines run out."""
NAIVE = st.sampled_from([False] * 15 + [True])
ATTEMPT = st.sampled_from(["latest", "latest", "latest", "none", "unknown"])
CATEGORIES = st.sampled_from(list(FailureCategory))
CALLBACK_IDS = st.sampled_from(["cb-1", "cb-2", "cb-3", "cb-4"])
RESOLUTIONS = st.sampled_from(sorted(set(RESOLUTIONS_FOR_AMBIGUOUS) | set(RESOLUTIONS_FOR_BLOCKED)))

COMMAND_ARGS: dict[str, dict[str, st.SearchStrategy[Any]]] = {}
"""Argument strategies of each command method of the machine, filled by ``@command``."""


def command(**strategies: st.SearchStrategy[Any]) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register a machine method as a command reachable through ``any_command``.

    One rule draws the command, rather than one rule per command, so the guided rules below
    are chosen about as often as a random command and walks reach deep states.
    """

    def register(method: Callable[..., None]) -> Callable[..., None]:
        COMMAND_ARGS[method.__name__] = strategies
        return method

    return register


class OperationMachine(RuleBasedStateMachine):
    """One operation, any sequence of commands."""

    op: Operation
    now: datetime

    @initialize(
        mode=st.sampled_from(list(DeliveryMode)),
        max_attempts=st.integers(min_value=1, max_value=4),
        requires_approval=st.booleans(),
        settlement_attempts=st.one_of(st.none(), st.integers(min_value=1, max_value=3)),
    )
    def intend(self, mode: DeliveryMode, max_attempts: int, requires_approval: bool,
               settlement_attempts: int | None) -> None:
        settlement = (None if settlement_attempts is None else
                      {"entity_type": "app.orders:Order", "method": "record", "max_attempts": settlement_attempts})
        integ = integration(
            delivery_mode=mode.value,
            retry={"max_attempts": max_attempts, "base_backoff_seconds": 1.0, "max_backoff_seconds": 60.0},
            # Short deadlines, so random walks reach them.
            deadlines={"pending": 600.0, "claimed": 120.0, "dispatching": 180.0, "accepted": 900.0},
            requires_approval=requires_approval,
            settlement=settlement,
        )
        self.now = T0
        self.op = Operation.intend(now=self.now, integration=integ, source=source(), payload=PAYLOAD)
        self.events: list[Any] = list(self.op.collect_events())
        self.terminal: E | None = None
        self.other_attempt: UUID = uuid4()

    # ------------------------------------------------------------------ helpers

    def _time(self, step: int, naive: bool = False) -> datetime:
        self.now += timedelta(seconds=step)
        return self.now.replace(tzinfo=None) if naive else self.now

    def _epoch(self, offset: int) -> int:
        return self.op.epoch + offset

    def _attempt(self, which: str) -> UUID | None:
        if which == "latest":
            return self.op.last_attempt_id
        return None if which == "none" else self.other_attempt

    def _run(self, command: Callable[[], Any]) -> None:
        before = self.op.execution
        snapshot = state_of(self.op)
        try:
            command()
        except LedgerError:
            # A refused command records nothing and changes nothing. Any other exception
            # propagates and fails the test: commands raise only typed ledger errors.
            assert list(self.op.collect_events()) == []
            assert state_of(self.op) == snapshot
            return
        new = list(self.op.collect_events())
        assert len(new) <= 1, new
        self.events.extend(new)
        self._check_step(before, new)

    def _check_step(self, before: E, new: list[Any]) -> None:
        after = self.op.execution
        # Invariant 1: a terminal execution state never changes.
        if before in TERMINAL_EXECUTION_STATES:
            assert after is before, (before, after, new)
        # Invariant 3: ambiguous is left only through an operator's Resolved.
        if before is E.AMBIGUOUS and after is not E.AMBIGUOUS:
            assert [type(e) for e in new] == [Operation.Resolved], new
        if self.op.delivery_mode in (DeliveryMode.NON_IDEMPOTENT, DeliveryMode.CALLBACK):
            for event in new:
                if isinstance(event, Operation.RetryScheduled):
                    assert not event.possibly_applied
                if isinstance(event, Operation.AttemptStarted):
                    assert before is not E.AMBIGUOUS

    # ------------------------------------------------------------------ invariants

    @invariant()
    def terminal_is_forever(self) -> None:
        if self.terminal is not None:
            assert self.op.execution is self.terminal
        elif self.op.execution in TERMINAL_EXECUTION_STATES:
            self.terminal = self.op.execution

    @invariant()
    def attempts_within_budget(self) -> None:
        assert 0 <= self.op.attempts <= self.op.max_attempts

    @invariant()
    def settled_at_most_once(self) -> None:
        assert sum(isinstance(e, Operation.Settled) for e in self.events) <= 1

    @invariant()
    def derived_views_are_consistent(self) -> None:
        op = self.op
        assert op.status is derive_status(op.execution, op.settlement)
        # Invariant 6: every active state has a deadline; ambiguous waits on the attention queue.
        if op.execution in lifecycle.ACTIVE:
            assert op.deadline_at is not None
        else:
            assert op.deadline_at is None
        if op.execution is E.AMBIGUOUS and op.disposition != "abandoned":
            assert op.attention in ("ambiguous", "budget_exhausted", "write_refused")
        if op.write_refused is not None:  # issue 35: waits for an operator, on the attention queue
            assert op.next_due_at is None
            assert op.attention == "write_refused" or op.disposition == "abandoned"

    def teardown(self) -> None:
        if getattr(self, "events", None):
            assert state_of(replay(self.events)) == state_of(self.op)

    # ------------------------------------------------------------------ commands
    # One method per command, called by ``any_command`` from whatever state the operation is in.

    @rule(data=st.data())
    def any_command(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(COMMAND_ARGS)), label="command")
        kwargs = data.draw(st.fixed_dictionaries(COMMAND_ARGS[name]), label=name)
        getattr(self, name)(**kwargs)

    @command(step=STEP, naive=NAIVE)
    def grant_approval(self, step: int, naive: bool) -> None:
        self._run(lambda: self.op.grant_approval(now=self._time(step, naive), principal="approver", roles={"approver"}))

    @command(step=STEP, offset=st.none() | EPOCH_OFFSETS)
    def wait_for_budget(self, step: int, offset: int | None) -> None:
        # Unleased (None), or by a holder with a current or stale epoch.
        epoch = None if offset is None else self._epoch(offset)
        self._run(lambda: self.op.wait_for_budget(now=self._time(step), scope="s",
                                                  until=self._time(step) + timedelta(seconds=2), epoch=epoch))

    @command(step=STEP)
    def void_approval(self, step: int) -> None:
        self._run(lambda: self.op.void_approval(now=self._time(step)))

    @command(step=STEP)
    def deny_approval(self, step: int) -> None:
        self._run(lambda: self.op.deny_approval(now=self._time(step), principal="approver", reason="no"))

    @command(step=STEP, naive=NAIVE, lease=st.integers(min_value=1, max_value=90))
    def claim(self, step: int, naive: bool, lease: int) -> None:
        self._run(lambda: self.op.claim(now=self._time(step, naive), worker_id="w", lease_seconds=lease))

    @command(step=STEP, digest=st.sampled_from(["sha256:a", "sha256:b"]))
    def flag_declaration_mismatch(self, step: int, digest: str) -> None:
        self._run(lambda: self.op.flag_declaration_mismatch(now=self._time(step), worker_id="w2",
                                                            declared_digest=digest))

    @command(step=STEP, offset=EPOCH_OFFSETS, lease=st.integers(min_value=1, max_value=90))
    def renew_lease(self, step: int, offset: int, lease: int) -> None:
        self._run(lambda: self.op.renew_lease(epoch=self._epoch(offset), now=self._time(step), lease_seconds=lease))

    @command(step=STEP, naive=NAIVE, offset=EPOCH_OFFSETS)
    def start_attempt(self, step: int, naive: bool, offset: int) -> None:
        self._run(lambda: self.op.start_attempt(epoch=self._epoch(offset), now=self._time(step, naive),
                                                attempt_id=uuid4(), request_fingerprint="r"))

    @command(step=STEP, offset=EPOCH_OFFSETS, which=ATTEMPT)
    def accept(self, step: int, offset: int, which: str) -> None:
        attempt = self._attempt(which)
        self._run(lambda: self.op.accept(epoch=self._epoch(offset), now=self._time(step),
                                         attempt_id=attempt, remote_id="remote-1", follow="poll",
                                         follow_until=self._time(step) + timedelta(seconds=600)))

    @command(step=st.sampled_from([0, 5, 60, 300, 1000]))
    def mark_remote_unknown(self, step: int) -> None:
        self._run(lambda: self.op.mark_remote_unknown(now=self._time(step)))

    @command(step=STEP, offset=EPOCH_OFFSETS, status=st.sampled_from(["queued", "running", "done"]))
    def observe_remote_status(self, step: int, offset: int, status: str) -> None:
        self._run(lambda: self.op.observe_remote_status(epoch=self._epoch(offset), now=self._time(step),
                                                        remote_status=status))

    @command(step=STEP, naive=NAIVE, callback_id=CALLBACK_IDS,
          outcome=st.sampled_from(["succeeded", "failed", "progress"]))
    def receive_callback(self, step: int, naive: bool, callback_id: str, outcome: str) -> None:
        self._run(lambda: self.op.receive_callback(now=self._time(step, naive), callback_id=callback_id,
                                                   outcome=outcome, remote_status=outcome))

    @command(step=STEP, offset=EPOCH_OFFSETS, which=ATTEMPT)
    def succeed(self, step: int, offset: int, which: str) -> None:
        attempt = self._attempt(which)
        self._run(lambda: self.op.succeed(epoch=self._epoch(offset), now=self._time(step), attempt_id=attempt))

    @command(step=STEP, offset=EPOCH_OFFSETS, which=ATTEMPT, category=CATEGORIES, retryable=st.booleans())
    def fail(self, step: int, offset: int, which: str, category: FailureCategory, retryable: bool) -> None:
        attempt = self._attempt(which)
        self._run(lambda: self.op.fail(epoch=self._epoch(offset), now=self._time(step), attempt_id=attempt,
                                       category=category, retryable=retryable))

    @command(step=STEP, offset=EPOCH_OFFSETS, which=ATTEMPT)
    def mark_ambiguous(self, step: int, offset: int, which: str) -> None:
        attempt = self._attempt(which)
        self._run(lambda: self.op.mark_ambiguous(epoch=self._epoch(offset), now=self._time(step),
                                                 attempt_id=attempt, reason="timeout"))

    @command(step=STEP, naive=NAIVE, offset=EPOCH_OFFSETS, which=ATTEMPT, category=CATEGORIES,
          retry_in=st.integers(min_value=-30, max_value=300), possibly_applied=st.booleans())
    def schedule_retry(self, step: int, naive: bool, offset: int, which: str, category: FailureCategory,
                       retry_in: int, possibly_applied: bool) -> None:
        attempt = self._attempt(which)

        def command() -> None:
            now = self._time(step, naive)
            self.op.schedule_retry(epoch=self._epoch(offset), now=now, attempt_id=attempt,
                                   retry_at=self.now + timedelta(seconds=retry_in), category=category,
                                   reason="retry", possibly_applied=possibly_applied)

        self._run(command)

    @command(step=STEP)
    def request_cancel(self, step: int) -> None:
        self._run(lambda: self.op.request_cancel(now=self._time(step), principal="alice", reason="asked"))

    @command(step=STEP, offset=st.one_of(st.none(), EPOCH_OFFSETS))
    def cancel(self, step: int, offset: int | None) -> None:
        epoch = None if offset is None else self._epoch(offset)
        self._run(lambda: self.op.cancel(now=self._time(step), epoch=epoch, reason="asked"))

    @command(step=STEP, offset=EPOCH_OFFSETS)
    def cancel_failed(self, step: int, offset: int) -> None:
        self._run(lambda: self.op.cancel_failed(epoch=self._epoch(offset), now=self._time(step), reason="no"))

    @command(step=st.sampled_from([0, 5, 60, 300, 1000]), naive=NAIVE)
    def exceed_deadline(self, step: int, naive: bool) -> None:
        self._run(lambda: self.op.exceed_deadline(now=self._time(step, naive)))

    @command(step=STEP, offset=EPOCH_OFFSETS, possibly_applied=st.booleans())
    def exhaust_budget(self, step: int, offset: int, possibly_applied: bool) -> None:
        self._run(lambda: self.op.exhaust_budget(epoch=self._epoch(offset), now=self._time(step),
                                                 last_attempt_possibly_applied=possibly_applied))

    @command(step=STEP, retry_in=st.integers(min_value=0, max_value=60))
    def fail_settlement(self, step: int, retry_in: int) -> None:
        self._run(lambda: self.op.fail_settlement(now=self._time(step), error="busy",
                                                  retry_at=self.now + timedelta(seconds=retry_in)))

    @command(step=STEP)
    def block_settlement(self, step: int) -> None:
        self._run(lambda: self.op.block_settlement(now=self._time(step), reason="stuck"))

    @command(step=STEP, naive=NAIVE, entity_version=st.integers(min_value=1, max_value=50))
    def settle(self, step: int, naive: bool, entity_version: int) -> None:
        self._run(lambda: self.op.settle(now=self._time(step, naive), entity_version=entity_version))

    @command(step=STEP, resolution=RESOLUTIONS)
    def resolve(self, step: int, resolution: str) -> None:
        self._run(lambda: self.op.resolve(now=self._time(step), principal="operator", resolution=resolution,
                                          evidence="checked the partner's records"))

    @command(step=STEP, kind=st.sampled_from(["claim", "outcome", "renewal"]), offset=st.none() | EPOCH_OFFSETS)
    def note_refused_write(self, step: int, kind: str, offset: int | None) -> None:
        epoch = None if offset is None else self._epoch(offset)
        self._run(lambda: self.op.note_refused_write(now=self._time(step), kind=kind, error="P0001: refused",
                                                     epoch=epoch))

    # ------------------------------------------------------------------ guided steps
    # Each rule above is called from any state, so most calls are refused. These rules take the
    # natural next step from the current state (current epoch, a small time step), so random
    # walks also get deep into the lifecycle: retries, acceptance, callbacks, resolution and
    # settlement. They run the same commands through the same checks.

    @precondition(lambda self: self.op.execution is E.PENDING)
    @rule(lease=st.integers(min_value=30, max_value=90))
    def guided_pending(self, lease: int) -> None:
        if self.op.approval == "required":
            self._run(lambda: self.op.grant_approval(now=self._time(1), principal="approver", roles={"approver"}))
        wait = max(0, math.ceil((self.op.due_at - self.now).total_seconds()))
        self._run(lambda: self.op.claim(now=self._time(wait), worker_id="w", lease_seconds=lease))

    @precondition(lambda self: self.op.execution is E.CLAIMED)
    @rule()
    def guided_claimed(self) -> None:
        self._run(lambda: self.op.start_attempt(epoch=self.op.epoch, now=self._time(1), attempt_id=uuid4(),
                                                request_fingerprint="r"))

    @precondition(lambda self: self.op.execution is E.DISPATCHING)
    @rule(step=st.sampled_from(["accept", "succeed", "fail", "ambiguous", "retry", "retry_applied",
                                "callback", "exhaust", "exhaust_applied"]))
    def guided_dispatching(self, step: str) -> None:
        op, epoch, attempt = self.op, self.op.epoch, self.op.last_attempt_id
        commands: dict[str, Callable[[], Any]] = {
            "accept": lambda: op.accept(epoch=epoch, now=self._time(1), attempt_id=attempt, remote_id="lro-1"),
            "succeed": lambda: op.succeed(epoch=epoch, now=self._time(1), attempt_id=attempt),
            "fail": lambda: op.fail(epoch=epoch, now=self._time(1), attempt_id=attempt,
                                    category=FailureCategory.REJECTED, retryable=False),
            "ambiguous": lambda: op.mark_ambiguous(epoch=epoch, now=self._time(1), attempt_id=attempt,
                                                   reason="timeout"),
            "retry": lambda: op.schedule_retry(epoch=epoch, now=self._time(1), attempt_id=attempt,
                                               retry_at=self.now, category=FailureCategory.CONNECT,
                                               reason="refused", possibly_applied=False),
            "retry_applied": lambda: op.schedule_retry(epoch=epoch, now=self._time(1), attempt_id=attempt,
                                                       retry_at=self.now, category=FailureCategory.TIMEOUT,
                                                       reason="lost response", possibly_applied=True),
            "callback": lambda: op.receive_callback(now=self._time(1), callback_id=f"cb-{uuid4()}",
                                                    outcome="succeeded"),
            "exhaust": lambda: op.exhaust_budget(epoch=epoch, now=self._time(1),
                                                 last_attempt_possibly_applied=False),
            "exhaust_applied": lambda: op.exhaust_budget(epoch=epoch, now=self._time(1),
                                                         last_attempt_possibly_applied=True),
        }
        self._run(commands[step])

    @precondition(lambda self: self.op.execution is E.ACCEPTED)
    @rule(step=st.sampled_from(["observe", "progress", "callback_succeeded", "callback_failed", "succeed",
                                "ambiguous", "cancel", "cancel_failed"]))
    def guided_accepted(self, step: str) -> None:
        op, epoch = self.op, self.op.epoch
        if step in ("cancel", "cancel_failed"):
            self._run(lambda: op.request_cancel(now=self._time(1), principal="alice"))
        commands: dict[str, Callable[[], Any]] = {
            "observe": lambda: op.observe_remote_status(epoch=epoch, now=self._time(1), remote_status="running"),
            "progress": lambda: op.receive_callback(now=self._time(1), callback_id="cb-p", outcome="progress"),
            "callback_succeeded": lambda: op.receive_callback(now=self._time(1), callback_id="cb-s",
                                                              outcome="succeeded"),
            "callback_failed": lambda: op.receive_callback(now=self._time(1), callback_id="cb-f", outcome="failed"),
            "succeed": lambda: op.succeed(epoch=epoch, now=self._time(1), attempt_id=op.last_attempt_id),
            "ambiguous": lambda: op.mark_ambiguous(epoch=epoch, now=self._time(1), reason="poll failed"),
            "cancel": lambda: op.cancel(now=self._time(1), epoch=epoch),
            "cancel_failed": lambda: op.cancel_failed(epoch=epoch, now=self._time(1), reason="too late"),
        }
        self._run(commands[step])

    @precondition(lambda self: self.op.execution is E.AMBIGUOUS or self.op.settlement.value == "blocked")
    @rule(resolution=RESOLUTIONS)
    def guided_operator(self, resolution: str) -> None:
        self._run(lambda: self.op.resolve(now=self._time(1), principal="operator", resolution=resolution,
                                          evidence="checked the partner's records"))

    @precondition(lambda self: self.op.settlement.value == "pending")
    @rule(step=st.sampled_from(["settle", "fail", "block"]))
    def guided_settlement(self, step: str) -> None:
        op = self.op
        commands: dict[str, Callable[[], Any]] = {
            "settle": lambda: op.settle(now=self._time(1), entity_version=7),
            "fail": lambda: op.fail_settlement(now=self._time(1), error="busy",
                                               retry_at=self.now + timedelta(seconds=1)),
            "block": lambda: op.block_settlement(now=self._time(1), reason="stuck"),
        }
        self._run(commands[step])


OperationMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestOperationProperties = OperationMachine.TestCase


def test_machine_covers_every_command() -> None:
    assert set(COMMAND_ARGS) == set(lifecycle.COMMANDS)
