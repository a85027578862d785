"""The transition table: which command may run from which state.

This table is the single source of the lifecycle's rules: the ``Operation`` aggregate checks it,
the table-driven tests are generated from it, and docs/adr/0001-operation-lifecycle.md renders
it. Commands not listed in ``BY_EXECUTION`` are governed by ``BY_SETTLEMENT``.
"""

from __future__ import annotations

from ledger.status import ACTIVE_STATES
from ledger.status import ExecutionState as E
from ledger.status import SettlementState as S

ACTIVE: frozenset[E] = ACTIVE_STATES
"""Non-terminal, non-ambiguous execution states; each has a deadline."""

BY_EXECUTION: dict[str, frozenset[E]] = {
    "grant_approval": frozenset({E.PENDING}),
    "deny_approval": frozenset({E.PENDING}),
    "void_approval": frozenset({E.PENDING}),
    # From a leased state: by its holder (with its epoch), or unleased once the lease lapsed.
    "wait_for_budget": frozenset({E.PENDING, E.CLAIMED, E.DISPATCHING}),
    "claim": ACTIVE,  # from claimed/dispatching/accepted only once the lease has expired
    "flag_declaration_mismatch": ACTIVE,
    "renew_lease": frozenset({E.CLAIMED, E.DISPATCHING, E.ACCEPTED}),
    "start_attempt": frozenset({E.CLAIMED}),
    "accept": frozenset({E.DISPATCHING}),
    "observe_remote_status": frozenset({E.ACCEPTED}),
    "mark_remote_unknown": frozenset({E.ACCEPTED}),
    "receive_callback": frozenset({E.DISPATCHING, E.ACCEPTED}),
    "succeed": frozenset({E.DISPATCHING, E.ACCEPTED}),
    "fail": frozenset({E.CLAIMED, E.DISPATCHING, E.ACCEPTED}),
    "mark_ambiguous": frozenset({E.DISPATCHING, E.ACCEPTED}),
    "schedule_retry": frozenset({E.DISPATCHING}),
    "request_cancel": ACTIVE,
    "cancel": frozenset({E.PENDING, E.CLAIMED, E.ACCEPTED}),
    "cancel_failed": frozenset({E.DISPATCHING, E.ACCEPTED}),
    "exceed_deadline": ACTIVE,
    "exhaust_budget": frozenset({E.CLAIMED, E.DISPATCHING}),
}

BY_SETTLEMENT: dict[str, frozenset[S]] = {
    "fail_settlement": frozenset({S.PENDING}),
    "block_settlement": frozenset({S.PENDING}),
    "settle": frozenset({S.PENDING}),
}

RESOLVABLE_EXECUTION: frozenset[E] = frozenset({E.AMBIGUOUS})
RESOLVABLE_SETTLEMENT: frozenset[S] = frozenset({S.BLOCKED})
"""``resolve`` runs when execution is ambiguous or settlement is blocked."""

IN_EVERY_STATE: tuple[str, ...] = ("note_refused_write",)
"""Commands allowed in every state, which change neither execution nor settlement state: any
write may be refused by the store (``WriteRefused``, issue 35)."""

COMMANDS: tuple[str, ...] = (*BY_EXECUTION, *BY_SETTLEMENT, "resolve", *IN_EVERY_STATE)
"""Every command method of the aggregate except the constructor ``intend``."""
