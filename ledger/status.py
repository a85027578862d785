"""The states of an operation, documented member by member (STYLE rule 10).

Execution state and settlement state are separate fields; the single ``Status`` shown by the
projections is derived from both (``derive_status``). Source: docs/adr/0001-operation-lifecycle.md.
"""

from __future__ import annotations

from enum import StrEnum


class ExecutionState(StrEnum):
    """Where the external effect stands.

    Each member says what moves an operation out of it and which deadline applies (the
    integration's ``deadlines`` field, in seconds from entering the state).
    """

    PENDING = "pending"
    """Intended (or scheduled for retry) and waiting for a worker. Left by ``Claimed``,
    ``ApprovalDenied``, ``Cancelled`` or ``DeadlineExceeded``. Deadline: ``deadlines.pending``."""

    CLAIMED = "claimed"
    """A worker holds the lease at the current epoch; no attempt is open. Left by
    ``AttemptStarted``, ``Cancelled``, ``Failed``, ``BudgetExhausted`` or ``DeadlineExceeded``;
    a reclaim after the lease expired keeps it claimed under a new epoch.
    Deadline: ``deadlines.claimed`` (and the lease expiry for recovery)."""

    DISPATCHING = "dispatching"
    """An attempt is recorded and egress may have happened. Left by an outcome (``Succeeded``,
    ``Accepted``, ``Failed``, ``Ambiguous``, ``RetryScheduled``, ``BudgetExhausted``), a
    ``CallbackReceived`` with a final status, or ``DeadlineExceeded``. A reclaim after the lease
    expired keeps it dispatching under a new epoch; the new holder decides the open attempt by
    delivery mode. Deadline: ``deadlines.dispatching``."""

    ACCEPTED = "accepted"
    """The provider accepted the work and named a remote operation; the result comes by polling
    or callback (``Accepted.follow``). Left by ``Succeeded``, ``Failed``, ``Ambiguous``,
    ``Cancelled``, ``CallbackReceived`` with a final status, or ``DeadlineExceeded``.
    Deadline: ``deadlines.accepted``, whose passing records ``RemoteOverdue`` (attention
    ``remote_unknown``, not an outcome); then the hard limit ``Accepted.follow_until``, which
    records ``DeadlineExceeded`` (ambiguous). ADR 0004."""

    SUCCEEDED = "succeeded"
    """Terminal: the effect is known to have happened."""

    FAILED = "failed"
    """Terminal: the effect is known not to have happened, or known to have failed."""

    AMBIGUOUS = "ambiguous"
    """Egress may have happened and nothing can tell whether it did. Waits indefinitely, by
    design, for an operator's ``Resolved``; always on the attention queue (invariant 6)."""

    CANCELLED = "cancelled"
    """Terminal: cancelled before any effect, or cancelled remotely."""


class SettlementState(StrEnum):
    """Whether the outcome has been applied to the source entity."""

    NONE = "none"
    """No terminal outcome yet."""

    PENDING = "pending"
    """A terminal outcome awaits its settlement action. Left by ``Settled`` or
    ``SettlementBlocked``. Deadline: retried with backoff up to the settlement attempt limit."""

    SETTLED = "settled"
    """Terminal: the entity action ran and was saved with ``Settled`` in one commit."""

    BLOCKED = "blocked"
    """Settlement kept failing; waits for an operator's ``Resolved`` (on the attention queue)."""

    NOT_REQUIRED = "not_required"
    """Terminal: the integration declares no settlement action."""


class Status(StrEnum):
    """The one status the projections show, derived by ``derive_status``."""

    PENDING = "pending"
    CLAIMED = "claimed"
    DISPATCHING = "dispatching"
    ACCEPTED = "accepted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    AMBIGUOUS = "ambiguous"
    CANCELLED = "cancelled"
    SETTLED = "settled"
    SETTLEMENT_BLOCKED = "settlement_blocked"


ACTIVE_STATES: frozenset[ExecutionState] = frozenset(
    {ExecutionState.PENDING, ExecutionState.CLAIMED, ExecutionState.DISPATCHING, ExecutionState.ACCEPTED}
)
"""Non-terminal, non-ambiguous execution states; each has a deadline (invariant 6)."""

APPROVAL_NOT_REQUIRED = "not_required"
"""The integration needs no approval before egress."""
APPROVAL_REQUIRED = "required"
"""Egress waits for an approver's ``ApprovalGranted``."""
APPROVAL_GRANTED = "granted"
"""An approver consented; egress may go ahead."""
APPROVAL_DENIED = "denied"
"""An approver refused; the operation failed without egress."""

TERMINAL_EXECUTION_STATES: frozenset[ExecutionState] = frozenset(
    {ExecutionState.SUCCEEDED, ExecutionState.FAILED, ExecutionState.CANCELLED}
)
"""Execution states an operation never leaves (invariant 1)."""

OUTCOME_STATES: frozenset[ExecutionState] = TERMINAL_EXECUTION_STATES | {ExecutionState.AMBIGUOUS}
"""States that are an outcome: the three terminal ones plus ambiguous, which only an operator
moves on."""

TERMINAL_STATUSES: frozenset[Status] = frozenset({Status.SETTLED})
"""Statuses in which nothing more will ever happen without an operator."""

def derive_status(execution: ExecutionState, settlement: SettlementState) -> Status:
    """Return the projection status for an execution and settlement state pair.

    Args:
        execution: the execution state.
        settlement: the settlement state.

    Returns:
        ``settled`` or ``settlement_blocked`` when settlement decided, else the execution state.
    """
    if settlement is SettlementState.SETTLED:
        return Status.SETTLED
    if settlement is SettlementState.BLOCKED:
        return Status.SETTLEMENT_BLOCKED
    return Status(execution.value)


def is_quiescent(execution: ExecutionState, settlement: SettlementState) -> bool:
    """True when no automated progress remains: settled, not needing settlement, or waiting for
    an operator (ambiguous, settlement blocked)."""
    if settlement in (SettlementState.SETTLED, SettlementState.BLOCKED, SettlementState.NOT_REQUIRED):
        return True
    return execution is ExecutionState.AMBIGUOUS
