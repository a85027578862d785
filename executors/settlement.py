"""Settlement: apply a terminal outcome to the source entity, once (DESIGN §1.5, §7).

The change loads the entity, calls its declared action with a ``SettlementOutcome`` and records
``Settled``; the commit saves entity and operation in one ``save()``, so the action's effect and
the settlement fact commit together. A failing action is recorded as ``SettlementFailed`` and
retried with backoff, without any new egress, and after the declared number of tries becomes
``SettlementBlocked`` with an attention reason (``ledger.decisions.after_settlement_failure``).
An entity whose changes cannot be stored blocks its settlement the same way; other operations
of the batch settle.

An outcome recorded by this worker is settled in the commit that records it (``co_settle``):
one commit per finished call instead of two. Only the first of an entity's operations in that
batch, and only when no other settlement of that entity waits, so the per-entity order stays
``settlement_order``'s; the others are offered to the next settlement pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import structlog
from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import Aggregate
from eventsourcing.utils import get_topic

from executors.commit import Change, CommitResult, Committer, Counts, RefusalNote
from ledger import tracing
from ledger.application import LedgerApplication
from ledger.decisions import (
    OutcomeRef,
    RetrySettlement,
    Settle,
    after_settlement_failure,
    due_work,
    settlement_fence_problem,
    settlement_order,
)
from ledger.errors import LedgerError, StaleSettlementError, UnknownIntegrationError
from ledger.facts import describe
from ledger.operation import Operation
from ledger.refusals import WriteKind
from ledger.settlement import (
    SettlementOutcome,
    SettlementPolicy,
    SettlementRequest,
    default_settlement_policy,
    entity_type_problem,
)
from projections.loading import load_aggregates

log = structlog.get_logger("opledger.settlement")


@dataclass(frozen=True)
class SettlementConfig:
    """Settlement's settings (the backoff and tries are declared per integration).

    Attributes:
        policy: asked before every settlement whether it may change the entity
            (``ledger.settlement.SettlementPolicy``; ``OPLEDGER_SETTLEMENT_POLICY``); the
            default allows exactly the declared method.
    """

    policy: SettlementPolicy = default_settlement_policy


def recorded_outcomes(ops: Sequence[Operation]) -> dict[UUID, OutcomeRef]:
    """The outcome each of ``ops`` holds as read now: what its settlement must still find
    recorded when it commits (``settle_change``'s ``expected``)."""
    return {op.id: OutcomeRef(op.outcome_attempt_id, op.outcome_epoch) for op in ops}


def settle_change(app: LedgerApplication, now: datetime, entities: dict[UUID, Aggregate] | None = None, *,
                  expected: Mapping[UUID, OutcomeRef] | None = None,
                  policy: SettlementPolicy = default_settlement_policy) -> Change:
    """Return the change that settles an operation (re-runnable against a fresh load).

    Before the entity's action runs, the outcome is fenced (``ledger.decisions
    .settlement_fence_problem``): an operation whose recorded outcome is not the one the settler
    read (``expected``) is refused with ``StaleSettlementError`` and logged, and its entity is
    not touched; and the entity's type is checked against the declaration's
    ``settlement.entity_type`` again (it may have changed since the intent): a mismatch blocks
    the settlement (``settlement_entity_mismatch``) without calling the action. Then
    ``policy`` is asked (a policy that raises denies): a denial blocks it
    (``settlement_denied``, with the policy's reason), without calling the action.

    Args:
        app: the host application.
        now: UTC-aware instant.
        entities: source entities already loaded in one query, by id. Each is used once: a
            re-run after a conflicting batch loads the entity afresh.
        expected: by operation id, the outcome the settler read (:func:`recorded_outcomes`);
            an operation not in it is fenced against its own recorded outcome (an outcome
            recorded in the same change: its command is fenced by the lease's epoch).
        policy: the settlement policy (``SettlementConfig.policy``).

    Source: issue 32 items 1, 2 and 3.
    """
    preloaded = entities if entities is not None else {}
    read = expected if expected is not None else {}

    def change(op: Operation) -> Sequence[Aggregate]:
        settles = read.get(op.id) or OutcomeRef(op.outcome_attempt_id, op.outcome_epoch)
        problem = settlement_fence_problem(op, settles)
        if problem is not None:
            log.warning("settlement refused (fenced)", operation_id=str(op.id), problem=problem)
            raise StaleSettlementError(op.id, problem)
        try:
            declaration = app.registry.get(op.integration_name, op.integration_version)
        except UnknownIntegrationError as exc:
            op.block_settlement(now=now, reason=f"{exc}; declare it in the worker's application", settles=settles)
            return []
        action = declaration.settlement
        if action is None:  # declared without settlement after the fact: nothing can apply it
            op.block_settlement(now=now, reason="the declaration names no settlement action", settles=settles)
            return []
        try:
            entity = preloaded.pop(op.source.entity_id, None) or app.repository.get(op.source.entity_id)
        except AggregateNotFoundError:
            op.block_settlement(now=now, reason=f"source entity {op.source.entity_id} not found", settles=settles)
            return []
        mismatch = entity_type_problem(action.entity_type, type(entity))
        if mismatch is not None:
            log.warning("settlement blocked: entity type mismatch", operation_id=str(op.id), problem=mismatch)
            op.block_settlement(now=now, code="settlement_entity_mismatch", settles=settles,
                                reason=f"{mismatch} (declared {action.entity_type}, "
                                       f"entity {get_topic(type(entity))}); the action was not called")
            return []
        method = getattr(entity, action.method, None)
        if method is None:
            op.block_settlement(now=now, reason=f"{type(entity).__name__} has no method {action.method!r}",
                                settles=settles)
            return []
        outcome = SettlementOutcome.of(op)
        denied = _ask(policy, SettlementRequest(operation=op, outcome=outcome, entity=entity,
                                                entity_type=action.entity_type, method=action.method,
                                                declared_method=action.method))
        if denied is not None:
            log.warning("settlement denied by the policy", operation_id=str(op.id), reason=denied)
            op.block_settlement(now=now, code="settlement_denied", settles=settles,
                                reason=f"denied by the settlement policy: {denied}")
            return []
        try:
            method(outcome)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the host's action failed (even by SystemExit): a fact to record
            error = describe(exc)
            log.warning("settlement action failed", operation_id=str(op.id), error=error)
            decision = after_settlement_failure(tries_used=op.settlement_attempts, max_tries=op.settlement_max_attempts,
                                                backoff_seconds=action.backoff_seconds, now=now)
            if isinstance(decision, RetrySettlement):
                op.fail_settlement(now=now, error=error, retry_at=decision.at, settles=settles)
            else:
                op.block_settlement(now=now, reason=error, settles=settles)
            return []
        op.settle(now=now, entity_version=entity.version, settles=settles)
        return [entity]

    return tracing.traced_settlement(change)  # each settlement in its span (DESIGN §9)


def _ask(policy: SettlementPolicy, request: SettlementRequest) -> str | None:
    """The policy's answer; a policy that raises denies (fails closed), with its error."""
    try:
        answer = policy(request)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # the host's policy failed: nothing it did not allow may happen
        return f"the policy raised {describe(exc)}"
    if answer is not None and not isinstance(answer, str):
        return f"the policy answered {type(answer).__name__}, not None or a reason"
    return answer


def load_entities(app: LedgerApplication, ops: Sequence[Operation]) -> dict[UUID, Aggregate]:
    """The source entities of ``ops`` in one query; empty when one does not load (settlement
    then loads each entity itself and records what fails)."""
    if not ops:
        return {}
    try:
        return load_aggregates(app, [op.source.entity_id for op in ops])
    except LedgerError:
        return {}


def first_per_entity(ops: Sequence[Operation]) -> list[Operation]:
    """One operation per source entity, the one whose settlement goes first
    (``ledger.decisions.settlement_order``): two settlements of one entity in one batch would
    conflict on its version, and the order must not depend on which worker saw what first."""
    chosen: dict[UUID, Operation] = {}
    for op in sorted(ops, key=settlement_order):
        chosen.setdefault(op.source.entity_id, op)
    return list(chosen.values())


class CoSettlement:
    """Settles an operation in the commit that records its outcome, when settlement is then
    due (``due_work``): outcome, entity change and ``Settled`` commit together, one commit per
    finished call instead of two. Made by :meth:`SettlementService.co_settle`.

    Calling it with an operation (its outcome applied) returns the aggregates to save with it
    (the entity), or none when it does not settle in this commit: not one of the chosen,
    settlement not due, or loading the entity raised (the next settlement pass then settles it
    and records what fails). It never raises, so trouble with an entity never costs an outcome.

    Attributes:
        entity_saved: ids of the operations for which an entity was returned: if their commit
            fails, the entity may be what could not be stored.
    """

    def __init__(self, chosen: set[UUID], settle: Change, now: datetime) -> None:
        self._chosen = chosen
        self._settle = settle
        self._now = now
        self.entity_saved: set[UUID] = set()

    def __call__(self, op: Operation) -> Sequence[Aggregate]:
        if op.id not in self._chosen or not isinstance(due_work(op, self._now), Settle):
            return []
        try:
            saved = self._settle(op)
        except Exception as exc:  # e.g. an entity record that does not load: the next pass settles it
            log.warning("settlement left to the next pass", operation_id=str(op.id), error=describe(exc))
            return []
        if saved:
            self.entity_saved.add(op.id)
        return saved


class SettlementService:
    """Settles operations whose outcome was just recorded by this worker.

    Settlement retries that come due later are found by the claim service's due-work pass
    (``ledger.decisions.Settle``), which uses :func:`settle_change` in its own commit.

    Args:
        committer: the worker's write side.
        config: :class:`SettlementConfig`.
    """

    def __init__(self, *, committer: Committer, config: SettlementConfig | None = None) -> None:
        self.committer = committer
        self.config = config or SettlementConfig()
        self._offered: dict[UUID, Operation] = {}

    def offer(self, op: Operation) -> None:
        """Hand over an operation just committed; it is settled by the next :meth:`run_once`
        if settlement is due (else nothing)."""
        self._offered[op.id] = op

    def co_settle(self, ops: Sequence[Operation], now: datetime) -> CoSettlement:
        """A step for the change that records an outcome (:class:`CoSettlement`) at ``now``
        (UTC), for the operations ``ops`` of one batch: the first of each entity's operations
        there, when no other settlement of that entity waits, may settle in that commit. Their
        entities are loaded here, in one query."""
        waiting = {op.source.entity_id for op in self._offered.values()}
        chosen = first_per_entity([op for op in ops if op.source.entity_id not in waiting])
        app = self.committer.app
        change = settle_change(app, now, load_entities(app, chosen), policy=self.config.policy)
        return CoSettlement({op.id for op in chosen}, change, now)

    def run_once(self, now: datetime) -> Counts:
        """Settle the offered operations due at ``now``, one per source entity per batch (two
        settlements of one entity in one batch would conflict on its version).

        Returns:
            :class:`Counts` of what was committed.
        """
        counts = Counts()
        due = [op for op in self._offered.values() if isinstance(due_work(op, now), Settle)]
        chosen = first_per_entity(due)
        # Settled now, or nothing to settle yet (a later retry is found by the due-work pass);
        # an entity's other due settlements stay offered for the next batch.
        waiting = {op.id for op in due} - {op.id for op in chosen}
        self._offered = {op_id: op for op_id, op in self._offered.items() if op_id in waiting}
        if chosen:
            self.commit(chosen, now, counts)
        return counts

    def commit(self, ops: list[Operation], now: datetime, counts: Counts,
               changes: list[tuple[Operation, Change]] | None = None) -> CommitResult:
        """Settle ``ops`` (plus any other ``changes``) in one batch; an operation whose
        settlement cannot be stored has it blocked, with the error, in a second batch (with
        ``WriteRefused`` when the database refused it for that operation alone, issue 35).

        Returns:
            The first batch's :class:`CommitResult`.
        """
        app = self.committer.app
        change = settle_change(app, now, load_entities(app, ops), expected=recorded_outcomes(ops),
                               policy=self.config.policy)
        result = self.committer.commit([*(changes or []), *((op, change) for op in ops)], counts)
        settled = {op.id for op in ops}
        blocked = [op_id for op_id in result.failed if op_id in settled]
        if not blocked:
            return result

        def block(op: Operation) -> None:
            op.block_settlement(now=now, reason=f"the settlement could not be stored: {result.failed[op.id]}")

        # A write the database refused for the operation alone also records ``WriteRefused``
        # (issue 35): nothing is settled or sent again until an operator acts.
        refused = {op_id: RefusalNote(WriteKind.SETTLEMENT, result.refused[op_id], None, block)
                   for op_id in blocked if op_id in result.refused}
        if refused:
            self.committer.record_refusals(refused, now, counts)
        fresh = self.committer.load([op_id for op_id in blocked if op_id not in refused])

        def blocked_change(op: Operation) -> Sequence[Aggregate]:
            block(op)
            return []

        self.committer.commit([(op, blocked_change) for op in fresh.values()], counts)
        return result
