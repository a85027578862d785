"""The oracle: checks every recorded event against the lifecycle's invariants and against the
simulated provider's ground truth, as the run goes, and grades each outcome's honesty at the end.

It reads the ledger's notification log after every step (only what is new), so a violation is
reported at the first step that commits it. The checks, each named by the invariant it holds
(ADR 0001's table, plus issue 11's):

- ``terminal_is_forever`` (1): nothing claims or starts an attempt after a terminal outcome.
- ``attempt_budget`` (2): attempts started never exceed the declared ``max_attempts``.
- ``ambiguous_not_retried`` (3): an attempt that may have applied is never followed by another,
  in a mode that forbids it, without an operator's ``Resolved``; and a provider of such a mode
  never applies an effect twice.
- ``settled_once`` (4): ``Settled`` at most once, and the entity holds exactly one result, the
  recorded one.
- ``epoch_fencing`` (5): claims raise the epoch by one; lease holders write under the current
  epoch.
- ``outcome_matches_truth``: ``Succeeded`` only if the provider applied the effect; ``Failed``
  (or an unambiguous end of budget or deadline) only if it did not.
- ``everything_ends`` (6): at the end, every operation is settled or on the attention queue.
- ``refusal_respected`` (issue 35): after ``WriteRefused`` (the store refused a write for the
  operation alone) nothing claims it or starts an attempt until an operator acts (``Resolved``
  or ``CancelRequested``): nothing is sent again; a ``WriteRefused`` its lease holder recorded is
  fenced like any holder's act.
- ``settlement_governed`` (issue 32): every ``Settled``, ``SettlementFailed`` and
  ``SettlementBlocked`` names the attempt whose outcome the ledger recorded (the latest attempt
  when the outcome was recorded) and the epoch it was recorded under; no entity is changed by a
  settlement the host's policy denies (``adapters.simulation.model.settlement_denied``, the
  ground truth) or one blocked for its entity type: such an operation is never ``Settled`` and
  its entity holds no result.
- ``callback_authenticated`` (7): a recorded callback is one the provider signed
  (``adapters.simulation.callbacks``), with the outcome it sent; ``callback_once`` (4): each
  recorded once; a callback records an outcome only while none is recorded, and a late one is
  only an observation.

Source: docs/adr/0001-operation-lifecycle.md ("Invariants"); issue 11 ("The oracle").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from adapters.simulation.model import Account, SimApp, settlement_denied
from adapters.simulation.provider import SimProvider
from ledger.decisions import due_at
from ledger.declarations import DeliveryMode
from ledger.operation import Operation

REPEAT_FORBIDDEN = frozenset({DeliveryMode.NON_IDEMPOTENT, DeliveryMode.RECOVERABLE_REMOTE_ID, DeliveryMode.CALLBACK})
"""Modes whose provider applies every delivery, so an attempt that may have applied must not be
followed by another without an operator (DESIGN §5). Stated here, not read from ``ledger.modes``:
the oracle must not share a bug with the code it checks."""
OUTCOME_EVENTS = (Operation.Succeeded, Operation.Failed, Operation.Ambiguous, Operation.Cancelled,
                  Operation.DeadlineExceeded, Operation.BudgetExhausted, Operation.ApprovalDenied)
"""Events that record an outcome (a callback or a resolution does too, when it says how it ended)."""
SETTLEMENT_EVENTS = (Operation.Settled, Operation.SettlementFailed, Operation.SettlementBlocked)
LEASE_HOLDER_EVENTS = (Operation.LeaseRenewed, Operation.AttemptStarted, Operation.Succeeded, Operation.Failed,
                       Operation.Ambiguous, Operation.RetryScheduled, Operation.BudgetExhausted,
                       Operation.Accepted)


@dataclass(frozen=True)
class Violation:
    """An invariant a run broke: which, for which operation, and what was seen."""

    invariant: str
    operation_id: UUID | None
    detail: str

    def __str__(self) -> str:
        op = f" operation {self.operation_id}" if self.operation_id else ""
        return f"{self.invariant}:{op}: {self.detail}"


@dataclass
class _Seen:
    """What the oracle knows of one operation from its events."""

    mode: DeliveryMode
    max_attempts: int
    entity_id: UUID
    epoch: int = 0
    attempts: int = 0
    terminal: str | None = None
    possibly_applied_open: bool = False  # an attempt may have applied; no Resolved since
    ended: bool = False  # an outcome is recorded (terminal, or ambiguous)
    callbacks: set[str] = field(default_factory=set)
    settled: int = 0
    refused: bool = False  # WriteRefused recorded, no operator's act since
    last_attempt: UUID | None = None  # the latest AttemptStarted's
    outcome: tuple[UUID | None, int] | None = None  # (attempt, epoch) of the latest outcome recorded
    events: list[str] = field(default_factory=list)


class Oracle:
    """Checks a simulation run as it goes.

    Args:
        app: the run's host application (its notification log is read).
        provider: the run's provider (the ground truth).
        callbacks: ``(operation id, callback id, outcome)`` of every callback the provider signed
            (``SimCallbacks.genuine``, filled as they are sent).
    """

    def __init__(self, app: SimApp, provider: SimProvider,
                 callbacks: set[tuple[UUID, str, str]] | None = None) -> None:
        self.app = app
        self.provider = provider
        self.genuine_callbacks = callbacks if callbacks is not None else set()
        self.ops: dict[UUID, _Seen] = {}
        self.lines: list[str] = []  # one per ledger event read; the run moves them to its trace
        self._position = 0
        self._provider_changes = 0
        self._final: dict[UUID, Operation] | None = None

    def check(self) -> Violation | None:
        """Read the events committed since the last check; return the first violation, if any."""
        while True:
            notifications = self.app.recorder.select_notifications(start=self._position + 1, limit=500)
            if not notifications:
                break
            for notification in notifications:
                self._position = notification.id
                if not notification.topic.startswith("ledger."):
                    continue
                event = self.app.mapper.to_domain_event(notification)
                if not isinstance(event, Operation.Event):
                    continue  # a call budget window's event (checked by adapters.simulation.budgets)
                violation = self._event(event)
                if violation is not None:
                    return violation
        return self._provider_truth()

    def _event(self, event: Any) -> Violation | None:
        self.lines.append(f"{event.originator_id.hex[:8]} {type(event).__name__}{_facts(event)}")
        if isinstance(event, Operation.Intended):
            self.ops[event.originator_id] = _Seen(DeliveryMode(event.delivery_mode), event.max_attempts,
                                                  event.source_entity_id)
            return None
        seen = self.ops[event.originator_id]
        seen.events.append(type(event).__name__)
        op_id = event.originator_id
        violation = self._refusal(event, seen, op_id)
        if violation is not None:
            return violation
        if isinstance(event, Operation.Claimed):
            if seen.terminal is not None:
                return Violation("terminal_is_forever", op_id, f"claimed after {seen.terminal}")
            if event.epoch != seen.epoch + 1:
                return Violation("epoch_fencing", op_id, f"claimed at epoch {event.epoch} after {seen.epoch}")
            seen.epoch = event.epoch
        elif isinstance(event, LEASE_HOLDER_EVENTS) and event.epoch != seen.epoch:
            return Violation("epoch_fencing", op_id, f"{type(event).__name__} under epoch {event.epoch}, "
                             f"current {seen.epoch}")
        elif isinstance(event, Operation.BudgetWaited) and event.epoch not in (None, seen.epoch):
            # A wait its holder recorded (and gave up its lease with) is fenced like any holder's act.
            return Violation("epoch_fencing", op_id, f"BudgetWaited under epoch {event.epoch}, current {seen.epoch}")
        if isinstance(event, Operation.AttemptStarted):
            seen.last_attempt = event.attempt_id
            return self._attempt(seen, op_id)
        violation = self._governed(event, seen, op_id)
        if violation is not None:
            return violation
        if isinstance(event, (Operation.CallbackReceived, Operation.LateObservationRecorded)):
            violation = self._callback(event, seen, op_id)
            if violation is not None:
                return violation
        return self._outcome(event, seen, op_id)

    def _refusal(self, event: Any, seen: _Seen, op_id: UUID) -> Violation | None:
        if isinstance(event, Operation.WriteRefused):
            if event.epoch not in (None, seen.epoch):
                return Violation("epoch_fencing", op_id,
                                 f"WriteRefused under epoch {event.epoch}, current {seen.epoch}")
            seen.refused = True
        elif isinstance(event, (Operation.Resolved, Operation.CancelRequested)):
            seen.refused = False
        elif seen.refused and isinstance(event, (Operation.Claimed, Operation.AttemptStarted)):
            return Violation("refusal_respected", op_id, f"{type(event).__name__} after WriteRefused, without an "
                             "operator's act")
        return None

    def _callback(self, event: Any, seen: _Seen, op_id: UUID) -> Violation | None:
        if (op_id, event.callback_id, event.outcome) not in self.genuine_callbacks:
            return Violation("callback_authenticated", op_id,
                             f"{type(event).__name__} {event.callback_id} ({event.outcome}) was never sent by the "
                             "provider")
        if event.callback_id in seen.callbacks:
            return Violation("callback_once", op_id, f"callback {event.callback_id} recorded twice")
        seen.callbacks.add(event.callback_id)
        late = isinstance(event, Operation.LateObservationRecorded)
        if late and not seen.ended:
            return Violation("terminal_is_forever", op_id, "a late observation before any outcome was recorded")
        if not late and seen.ended and event.outcome != "progress":
            return Violation("terminal_is_forever", op_id, f"CallbackReceived({event.outcome}) after the outcome "
                             f"{seen.terminal or 'ambiguous'}")
        if not late and event.outcome == "succeeded" and self.provider.applied[op_id] == 0:
            return Violation("outcome_matches_truth", op_id, "a callback says succeeded, but the provider never "
                             "applied it")
        return None

    def _attempt(self, seen: _Seen, op_id: UUID) -> Violation | None:
        if seen.terminal is not None:
            return Violation("terminal_is_forever", op_id, f"attempt started after {seen.terminal}")
        seen.attempts += 1
        if seen.attempts > seen.max_attempts:
            return Violation("attempt_budget", op_id, f"attempt {seen.attempts} of {seen.max_attempts}")
        if seen.possibly_applied_open and seen.mode in REPEAT_FORBIDDEN:
            return Violation("ambiguous_not_retried", op_id,
                             f"{seen.mode.value}: another attempt after one that may have applied, "
                             "without Resolved")
        return None

    def _outcome(self, event: Any, seen: _Seen, op_id: UUID) -> Violation | None:
        if isinstance(event, Operation.Settled):
            return self._settled(seen, op_id)
        _follow(event, seen)
        # A read_only call has no effect, so whether it "applied" says nothing about the outcome.
        if seen.mode is DeliveryMode.READ_ONLY:
            return None
        applied = self.provider.applied[op_id] > 0
        if isinstance(event, Operation.Succeeded) and not applied:
            return Violation("outcome_matches_truth", op_id, "Succeeded, but the provider never applied it")
        if isinstance(event, Operation.Cancelled) and applied:
            return Violation("outcome_matches_truth", op_id, "Cancelled, but the provider applied it")
        if applied and (isinstance(event, Operation.Failed) or (
                isinstance(event, (Operation.BudgetExhausted, Operation.DeadlineExceeded)) and not event.ambiguous)):
            return Violation("outcome_matches_truth", op_id,
                             f"{type(event).__name__} says nothing applied, but the provider applied it")
        return None

    def _governed(self, event: Any, seen: _Seen, op_id: UUID) -> Violation | None:
        if isinstance(event, OUTCOME_EVENTS) or (
                isinstance(event, Operation.CallbackReceived) and event.outcome in ("succeeded", "failed")) or (
                isinstance(event, Operation.Resolved) and event.resolution in ("succeeded", "failed")):
            seen.outcome = (seen.last_attempt, seen.epoch)
        if not isinstance(event, SETTLEMENT_EVENTS):
            return None
        name = type(event).__name__
        if seen.outcome is None or (event.attempt_id, event.epoch) != seen.outcome:
            return Violation("settlement_governed", op_id, f"{name} names attempt {event.attempt_id} epoch "
                             f"{event.epoch}; the recorded outcome is {seen.outcome}")
        denied = settlement_denied(seen.entity_id)
        if isinstance(event, Operation.Settled) and denied:
            return Violation("settlement_governed", op_id, "Settled, but the host's policy denies settling its "
                             "entity")
        if isinstance(event, Operation.SettlementBlocked) and event.code:  # denied or mismatched
            account: Account = self.app.repository.get(seen.entity_id)
            if account.results:
                return Violation("settlement_governed", op_id, f"SettlementBlocked ({event.code}), but the entity "
                                 f"holds {account.results}")
        return None

    def _settled(self, seen: _Seen, op_id: UUID) -> Violation | None:
        seen.settled += 1
        if seen.settled > 1:
            return Violation("settled_once", op_id, f"Settled recorded {seen.settled} times")
        account: Account = self.app.repository.get(seen.entity_id)
        op: Operation = self.app.repository.get(op_id)
        if account.results != [op.execution.value]:
            return Violation("settled_once", op_id,
                             f"the entity holds {account.results}, the operation ended {op.execution.value}")
        return None

    def _provider_truth(self) -> Violation | None:
        # Only an idempotent provider dedupes (and read_only has no effect): an effect applied
        # twice anywhere is a duplicate charge, whatever the code's rules say.
        if self.provider.changes == self._provider_changes:
            return None
        self._provider_changes = self.provider.changes
        for op_id, times in self.provider.applied.items():
            seen = self.ops.get(op_id)
            if seen is not None and times > 1 and seen.mode is not DeliveryMode.READ_ONLY:
                return Violation("ambiguous_not_retried", op_id,
                                 f"{seen.mode.value}: the provider applied the effect {times} times")
        return None

    def final(self) -> Violation | None:
        """After the run's drain: every operation settled, or on the attention queue with nothing
        left to do but an operator's decision."""
        for op_id, op in self._load_all().items():
            if op.status.value == "settled" or (op.attention is not None and due_at(op) is None):
                continue
            return Violation("everything_ends", op_id,
                             f"left {op.status.value} ({op.execution.value}/{op.settlement.value}), attention "
                             f"{op.attention}, next due {due_at(op)}")
        return None

    def _load_all(self) -> dict[UUID, Operation]:
        # Loaded once, after the run (the final check and the honesty table read the same).
        if self._final is None or len(self._final) != len(self.ops):
            self._final = {op_id: self.app.repository.get(op_id) for op_id in self.ops}
        return self._final

    def honesty(self) -> dict[str, Counter[str]]:
        """Per delivery mode, how each operation ended against the truth:

        - ``strong``: ``succeeded`` and applied, or ``failed`` and not applied;
        - ``weak_applied`` / ``weak_not_applied``: ambiguous, while the provider knows (honest,
          but an operator has to look); ``weak_lookup``: of those, in a mode whose provider
          could have been asked;
        - ``cancelled`` and ``other``.
        """
        table: dict[str, Counter[str]] = {}
        loaded = self._load_all()
        for op_id, seen in self.ops.items():
            op = loaded[op_id]
            applied = self.provider.applied[op_id] > 0
            row = table.setdefault(seen.mode.value, Counter())
            execution = op.execution.value
            if execution in ("succeeded", "failed"):
                row["strong"] += 1
            elif execution == "ambiguous":
                row["weak_applied" if applied else "weak_not_applied"] += 1
                if seen.mode is DeliveryMode.RECOVERABLE_REMOTE_ID:
                    row["weak_lookup"] += 1
            elif execution == "cancelled":
                row["cancelled"] += 1
            else:
                row["other"] += 1
        return table


def _follow(event: Any, seen: _Seen) -> None:
    """Update what the oracle knows of an operation from one of its outcome events."""
    if isinstance(event, (Operation.Succeeded, Operation.Failed, Operation.Cancelled)):
        seen.terminal = type(event).__name__
        seen.ended = True
    elif isinstance(event, Operation.CallbackReceived) and event.outcome in ("succeeded", "failed"):
        seen.terminal = f"CallbackReceived({event.outcome})"
        seen.ended = True
    elif isinstance(event, Operation.Ambiguous):
        seen.possibly_applied_open = True
        seen.ended = True
    elif isinstance(event, Operation.RetryScheduled):
        seen.possibly_applied_open = seen.possibly_applied_open or event.possibly_applied
    elif isinstance(event, (Operation.BudgetExhausted, Operation.DeadlineExceeded)):
        seen.ended = True
        if event.ambiguous:  # waits for an operator, who may still retry
            seen.possibly_applied_open = True
        else:
            seen.terminal = seen.terminal or type(event).__name__
    elif isinstance(event, Operation.Resolved):
        seen.possibly_applied_open = False
        if event.resolution == "retry":
            seen.ended = False


FACTS = ("epoch", "worker_id", "attempt_number", "reason", "category", "status_code", "possibly_applied", "state",
         "ambiguous", "resolution", "error", "kind")


def _facts(event: Any) -> str:
    """The event's facts worth a trace line, ``(name=value, ...)``."""
    found = [f"{name}={getattr(event, name)}" for name in FACTS if getattr(event, name, None) not in (None, "")]
    return f" ({', '.join(found)})" if found else ""
