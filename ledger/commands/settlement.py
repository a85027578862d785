"""The settlement commands: a failed try, a blocked settlement, the settlement itself (invariant 4).

A mixin of ``ledger.operation.Operation``; the rules every command keeps are in ``ledger.commands``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from ledger import decisions
from ledger.clock import require_utc
from ledger.commands.base import CommandBase
from ledger.decisions import OutcomeRef
from ledger.errors import InvalidArgumentError
from ledger.facts import FactKind, storable_fact
from ledger.status import ExecutionState
from ledger.transition_errors import SettlementTriesExhaustedError

if TYPE_CHECKING:
    pass

E = ExecutionState

SETTLEMENT_BLOCK_CODES = ("", "settlement_entity_mismatch", "settlement_denied")
"""``SettlementBlocked.code``: the rule that blocked a settlement, which is its attention
reason; ``""`` for a settlement that kept failing or could not run (attention
``settlement_blocked``). Source: issue 32 items 1 and 2."""


class SettlementCommands(CommandBase):
    """The settlement commands of the ``Operation`` aggregate."""

    def fail_settlement(self, *, now: datetime, error: str, retry_at: datetime,
                        settles: OutcomeRef | None = None) -> None:
        """Record a failed settlement action, to retry at ``retry_at`` without new egress.

        Args:
            settles: the outcome the settler read (``SettlementOutcome.ref``); None: the
                recorded one. Either way the event names the recorded outcome's attempt and epoch.

        Raises:
            IllegalTransitionError: settlement not pending, or the last try is used (record
                ``block_settlement`` instead).
            StaleSettlementError: ``settles`` is not the recorded outcome
                (``ledger.decisions.settlement_fence_problem``).
        """
        self._allow_settlement("fail_settlement")
        self._fence_settlement(settles)
        if not decisions.settlement_try_left(self.settlement_attempts, self.settlement_max_attempts):
            raise SettlementTriesExhaustedError("fail_settlement", "settlement pending",
                                         "settlement tries are used up; block it instead")
        self.trigger_event(self.SettlementFailed, timestamp=require_utc(now), error=error,
                           retry_at=require_utc(retry_at, "retry_at"), attempt_id=self.outcome_attempt_id,
                           epoch=self.outcome_epoch)

    def block_settlement(self, *, now: datetime, reason: str, code: str = "",
                         settles: OutcomeRef | None = None) -> None:
        """Stop settling and ask an operator (``SettlementBlocked``).

        Args:
            reason: what stopped it, in words (bounded when stored).
            code: the rule that stopped it, which becomes the attention reason
                (``settlement_entity_mismatch``, ``settlement_denied``), or ``""``.
            settles: as for :meth:`fail_settlement`.

        Raises:
            InvalidArgumentError: an unknown ``code``.
            StaleSettlementError: as for :meth:`fail_settlement`.
        """
        self._allow_settlement("block_settlement")
        self._fence_settlement(settles)
        if code not in SETTLEMENT_BLOCK_CODES:
            raise InvalidArgumentError(f"unknown settlement block code {code!r}")
        self.trigger_event(self.SettlementBlocked, timestamp=require_utc(now),
                           reason=storable_fact(reason, FactKind.DETAIL), code=code,
                           attempt_id=self.outcome_attempt_id, epoch=self.outcome_epoch)

    def settle(self, *, now: datetime, entity_version: int, principal: str | None = None,
               traceparent: str | None = None, settles: OutcomeRef | None = None) -> None:
        """Record that the entity action ran (``Settled``), naming the attempt whose outcome it
        settled and its epoch; save it with the entity in one ``save()``. A second settlement
        raises (invariant 4).

        Raises:
            StaleSettlementError: as for :meth:`fail_settlement`.
        """
        self._allow_settlement("settle")
        self._fence_settlement(settles)
        self.trigger_event(self.Settled, timestamp=require_utc(now), entity_version=entity_version,
                           principal=principal or self.principal,
                           traceparent=traceparent if traceparent is not None else self.traceparent,
                           attempt_id=self.outcome_attempt_id, epoch=self.outcome_epoch)
