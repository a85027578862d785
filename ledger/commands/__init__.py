"""The commands of the ``Operation`` aggregate, one module per concern: the guards every
transition passes, then one past-tense event each (STYLE rule 1: checks here, ``apply`` bodies
only assign).

Each command checks its row of the transition table (``ledger.transitions``), the caller's
fencing epoch and the time it is given, and records one event of ``ledger.events``. Every refusal
is a named ``IllegalTransitionError`` subclass (``ledger.transition_errors``). No method
reads the wall clock: ``now`` is passed in, UTC-aware. Provider text goes through
``ledger.facts.storable_fact`` and derived times through ``ledger.time_limits.require_later``.

Source: docs/adr/0001-operation-lifecycle.md; DESIGN §4.
"""

from __future__ import annotations

from ledger.commands.approval import ApprovalCommands
from ledger.commands.attempt import AttemptCommands
from ledger.commands.intent import IntentCommands
from ledger.commands.lease import LeaseCommands
from ledger.commands.operator import (
    RESOLUTIONS,
    RESOLUTIONS_FOR_AMBIGUOUS,
    RESOLUTIONS_FOR_BLOCKED,
    RESOLUTIONS_FOR_LATE_OBSERVATION,
    RESOLUTIONS_FOR_REFUSED_WRITE,
    RESOLUTIONS_FOR_REMOTE_UNKNOWN,
    OperatorCommands,
)
from ledger.commands.remote import RemoteCommands
from ledger.commands.settlement import SETTLEMENT_BLOCK_CODES, SettlementCommands

__all__ = [
    "RESOLUTIONS",
    "RESOLUTIONS_FOR_AMBIGUOUS",
    "RESOLUTIONS_FOR_BLOCKED",
    "RESOLUTIONS_FOR_LATE_OBSERVATION",
    "RESOLUTIONS_FOR_REFUSED_WRITE",
    "RESOLUTIONS_FOR_REMOTE_UNKNOWN",
    "SETTLEMENT_BLOCK_CODES",
    "OperationCommands",
]


class OperationCommands(IntentCommands, ApprovalCommands, LeaseCommands, AttemptCommands, RemoteCommands,
                        SettlementCommands, OperatorCommands):
    """The command methods of :class:`ledger.operation.Operation` (a mixin it inherits).

    Each raises a subclass of :class:`~ledger.errors.IllegalTransitionError`
    (``ledger.transition_errors``, one per rule), :class:`~ledger.errors.StaleEpochError`,
    :class:`~ledger.errors.LeaseExpiredError` or
    :class:`~ledger.errors.AttemptBudgetExceededError` on a command the lifecycle does not
    allow, and records nothing then.
    """
