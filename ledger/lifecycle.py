"""The transition table: which command may run from which state.

Computed from the machine-readable table ``ledger.transitions`` (from state, command, event,
guards, to state), the single source of the lifecycle's rules: the ``Operation`` aggregate
checks these sets, the table-driven tests are generated from them, the protocol model is
generated from the table, and docs/adr/0001-operation-lifecycle.md renders it. Commands not
listed in ``BY_EXECUTION`` are governed by ``BY_SETTLEMENT``.
"""

from __future__ import annotations

from ledger import transitions
from ledger.status import ACTIVE_STATES
from ledger.status import ExecutionState as E
from ledger.status import SettlementState as S

ACTIVE: frozenset[E] = ACTIVE_STATES
"""Non-terminal, non-ambiguous execution states; each has a deadline."""

_SETTLEMENT_COMMANDS = ("fail_settlement", "block_settlement", "settle")
_OTHER = ("intend", "resolve", "note_refused_write")  # the constructor; ``RESOLVABLE_*``; every state

BY_EXECUTION: dict[str, frozenset[E]] = {
    command: frozenset(s for s in transitions.sources(command, E) if isinstance(s, E))
    for command in transitions.commands() if command not in _SETTLEMENT_COMMANDS + _OTHER
}
"""The execution states each command may be called from: the ``source`` column of
``ledger.transitions.TRANSITIONS``. ``claim`` from claimed, dispatching or accepted needs the
lease to have expired (recovery takes it over); ``wait_for_budget`` from a leased state is
recorded by its holder (with its epoch), or unleased once the lease lapsed."""

BY_SETTLEMENT: dict[str, frozenset[S]] = {
    command: frozenset(s for s in transitions.sources(command, S) if isinstance(s, S))
    for command in _SETTLEMENT_COMMANDS
}
"""The settlement states each settlement command may be called from (the same table)."""

RESOLVABLE_EXECUTION: frozenset[E] = frozenset({E.AMBIGUOUS})
RESOLVABLE_SETTLEMENT: frozenset[S] = frozenset({S.BLOCKED})
"""``resolve`` runs when execution is ambiguous or settlement is blocked."""

IN_EVERY_STATE: tuple[str, ...] = ("note_refused_write",)
"""Commands allowed in every state, which change neither execution nor settlement state: any
write may be refused by the store (``WriteRefused``, issue 35)."""

COMMANDS: tuple[str, ...] = (*BY_EXECUTION, *BY_SETTLEMENT, "resolve", *IN_EVERY_STATE)
"""Every command method of the aggregate except the constructor ``intend``."""
