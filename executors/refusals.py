"""Claims refused before egress, each recorded as a fact instead of a claim: a declaration that
drifted from the one recorded at intent (issue 14 item 5), and an approval that no longer holds
(issue 14 item 2). The due-work pass (``executors.claim``) asks these before it claims.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from eventsourcing.domain import Aggregate

from executors.commit import Change
from ledger.application import LedgerApplication
from ledger.errors import DeclarationMismatchError, UnknownIntegrationError
from ledger.operation import Operation


def drifted_digest(app: LedgerApplication, op: Operation) -> str | None:
    """This worker's digest of ``op``'s declaration when it differs from the one recorded at
    intent, else None (also when the declaration is unknown here: the claim defers that).

    Args:
        app: the host application (its registry holds this worker's declarations).
        op: the operation about to be claimed.
    """
    try:
        declared = app.registry.get(op.integration_name, op.integration_version).digest()
    except UnknownIntegrationError:
        return None
    return declared if declared != op.integration_digest else None


def mismatch_change(app: LedgerApplication, now: datetime, worker_id: str, deferred: dict[UUID, str]) -> Change:
    """Refuse to claim under other rules: record ``DeclarationMismatched`` (once per digest) and
    leave the operation for a worker that declares the recorded rules.

    Args:
        app: the host application.
        now: UTC instant of the pass.
        worker_id: recorded on the event.
        deferred: filled with operation id -> the reason, which the claim service logs once and
            waits on (``ClaimConfig.defer_seconds``).

    Returns:
        A change that raises ``DeclarationMismatchError`` (nothing to record) when the
        operation no longer drifted after a reload, or was flagged already.
    """

    def change(op: Operation) -> Sequence[Aggregate]:
        declared = drifted_digest(app, op)
        if declared is None:  # reloaded after a conflict and no longer drifted
            raise DeclarationMismatchError(f"operation {op.id} no longer drifted; decided next pass")
        deferred[op.id] = (
            f"declaration_mismatch: {op.integration_name} v{op.integration_version} is recorded as "
            f"{op.integration_digest} but this worker declares {declared}; not executed under other rules "
            "(declare the recorded rules under this version, or bump the version for new rules)")
        if not op.flag_declaration_mismatch(now=now, worker_id=worker_id, declared_digest=declared):
            raise DeclarationMismatchError("already flagged")  # nothing to record
        return []

    return change


def void_approval_change(now: datetime) -> Change:
    """Record ``ApprovalVoided`` instead of claiming: egress needs an unexpired approval of the
    current fingerprint (issue 14 item 2); the operation waits for a new one."""

    def change(op: Operation) -> Sequence[Aggregate]:
        op.void_approval(now=now)
        return []

    return change
