"""The state of an ``Operation``, declared once: every field its events assign, with its type.

The events (``ledger.events``) assign these fields, the commands (``ledger.commands``) check
them, and the decisions (``ledger.decisions``) read them: all three name this one class, which
``Operation`` inherits (through ``ledger.commands.OperationCommands``). It holds annotations
only: ``Operation.Intended.apply`` gives every field its first value.

Source: issue 33 item 1 ("the operation's state declared once"); docs/adr/0001-operation-lifecycle.md.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from ledger.callbacks import ProgressReport
from ledger.declarations import DeliveryMode
from ledger.identity import Source
from ledger.status import ExecutionState, SettlementState


class OperationState:
    """The fields of an operation (annotations only; a mixin of ``ledger.operation.Operation``).

    The decisions take any object of this class (in practice an ``Operation``); unit tests may
    pass a plain object with the fields a decision reads.
    """

    tenant: str
    principal: str
    traceparent: str | None
    integration_name: str
    integration_version: int
    integration_digest: str
    code_digest: str
    opledger_version: str
    opledger_commit: str
    delivery_mode: DeliveryMode
    max_attempts: int
    deadlines: dict[str, float]
    settlement_max_attempts: int
    payload: dict[str, Any]
    target: str | None
    fingerprint: str
    source: Source
    approval: str
    execution: ExecutionState
    settlement: SettlementState
    state_entered_at: datetime
    due_at: datetime
    epoch: int
    worker_id: str | None
    lease_expires_at: datetime | None
    attempts: int
    open_attempt_id: UUID | None
    last_attempt_id: UUID | None
    possibly_applied: bool
    remote_id: str | None
    remote_status: str | None
    callback_ids: set[str]
    callback_signed_at: dict[str, datetime]
    last_progress: ProgressReport | None
    late_observation: dict[str, Any] | None
    cancel_requested: bool
    cancel_reason: str | None
    failure: dict[str, Any] | None
    last_retry_reason: str | None
    ambiguity_reason: str | None
    excerpt: str
    settlement_attempts: int
    settlement_due_at: datetime | None
    settlement_error: str | None
    settled_entity_version: int | None
    settlement_block_code: str | None
    outcome_attempt_id: UUID | None
    outcome_epoch: int | None
    source_action: str
    on_behalf_of: list[dict[str, str]]
    disposition: str | None
    lease_takeovers: int
    resolution: str | None
    declaration_mismatch: str | None
    approval_fingerprint: str | None
    approval_purpose: str | None
    approval_expires_at: datetime | None
    approved_by: str | None
    approval_voided: str | None
    budget_wait: str | None
    budget_wait_until: datetime | None
    follow: str | None
    follow_until: datetime | None
    remote_overdue: bool
    cancel_refused: bool
    write_refused: str | None
    write_refused_error: str | None


_FIRST_VALUES: dict[str, Any] = {
    "epoch": 0,
    "worker_id": None,
    "lease_expires_at": None,
    "attempts": 0,
    "open_attempt_id": None,
    "last_attempt_id": None,
    "possibly_applied": False,
    "remote_id": None,
    "remote_status": None,
    "last_progress": None,
    "late_observation": None,
    "cancel_requested": False,
    "cancel_reason": None,
    "failure": None,
    "last_retry_reason": None,
    "ambiguity_reason": None,
    "excerpt": "",
    "settlement_attempts": 0,
    "settlement_due_at": None,
    "settlement_error": None,
    "settled_entity_version": None,
    "settlement_block_code": None,
    "outcome_attempt_id": None,
    "outcome_epoch": None,
    "disposition": None,
    "lease_takeovers": 0,
    "resolution": None,
    "declaration_mismatch": None,
    "approval_fingerprint": None,
    "approval_purpose": None,
    "approval_expires_at": None,
    "approved_by": None,
    "approval_voided": None,
    "budget_wait": None,
    "budget_wait_until": None,
    "follow": None,
    "follow_until": None,
    "remote_overdue": False,
    "cancel_refused": False,
    "write_refused": None,
    "write_refused_error": None,
}
"""The immutable first values of :func:`not_yet_happened`, built once (an intent applies them
on the producer's hot path)."""


def not_yet_happened() -> dict[str, Any]:
    """The fields an operation starts with that no event has set yet: no lease, no attempt, no
    answer, no settlement, nothing on the attention queue (read by ``Operation.Intended.apply``).

    Returns:
        A new dict (field name to first value) on every call, with new mutable containers, so no
        two operations share one.
    """
    return {**_FIRST_VALUES, "callback_ids": set(), "callback_signed_at": {}}
