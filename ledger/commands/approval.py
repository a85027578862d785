"""The approval commands: grant, void and deny (issue 14 item 2).

A mixin of ``ledger.operation.Operation``; the rules every command keeps are in ``ledger.commands``.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import TYPE_CHECKING

from ledger.approvals import ApprovalPolicy, ApprovalRequest, default_policy, purpose_of, roles_of, void_reason
from ledger.clock import require_utc
from ledger.commands.base import CommandBase
from ledger.declarations import DEFAULT_APPROVAL_VALID_SECONDS
from ledger.errors import ApprovalRefusedError
from ledger.intents import MAX_PURPOSE_CHARS, MAX_REASON_CHARS, check_operator_text, require_principal
from ledger.status import APPROVAL_REQUIRED, ExecutionState
from ledger.time_limits import require_later
from ledger.transition_errors import ApprovalAlreadyDecidedError, ApprovalStillValidError

if TYPE_CHECKING:
    pass

E = ExecutionState


class ApprovalCommands(CommandBase):
    """The approval commands of the ``Operation`` aggregate."""

    def approval_request(self, approver: str, roles: Collection[str], purpose: str = "") -> ApprovalRequest:
        """What an approval policy decides on when ``approver`` with ``roles`` asks to approve
        this operation (``purpose``: the declaration's, "execute <integration>" when empty). Pure.

        Source: issue 14 item 2.
        """
        return ApprovalRequest(integration=self.integration_name, purpose=purpose_of(self.integration_name, purpose),
                               intended_by=self.principal, approver=approver, roles=roles_of(roles),
                               tenant=self.tenant)

    def grant_approval(self, *, now: datetime, principal: str, roles: Collection[str] = (),
                       purpose: str = "", valid_seconds: float = DEFAULT_APPROVAL_VALID_SECONDS,
                       fingerprint: str | None = None, policy: ApprovalPolicy = default_policy) -> None:
        """Record an approver's consent (``ApprovalGranted``), bound to this operation's
        fingerprint, a purpose and an expiry. Egress is refused once it expires.

        Args:
            now: UTC-aware instant of the grant.
            principal: who approves.
            roles: the approver's roles; the default policy needs ``approver``.
            purpose: the declaration's ``approval_purpose`` ("execute <integration>" when empty).
            valid_seconds: how long it allows egress, seconds (the declaration's
                ``approval_valid_seconds``).
            fingerprint: the fingerprint the approver saw; when given it must be the operation's.
            policy: who may approve what (``ledger.approvals``).

        Raises:
            IllegalTransitionError: not pending, or approval not required or already decided.
            ApprovalRefusedError: the policy refuses this approver (e.g. a self-approval), or the
                approval names another fingerprint.
            InvalidArgumentError: a blank principal, a purpose over 200 characters.

        Source: issue 14 item 2.
        """
        now = require_utc(now)
        self._allow("grant_approval")
        require_principal(principal)
        if self.approval != APPROVAL_REQUIRED:
            raise ApprovalAlreadyDecidedError("grant_approval", self.execution.value, f"approval is {self.approval}")
        if fingerprint is not None and fingerprint != self.fingerprint:
            raise ApprovalRefusedError(f"the approval names fingerprint {fingerprint!r}, but operation {self.id} has "
                                       f"{self.fingerprint!r}: look at the operation again")
        purpose = purpose_of(self.integration_name, purpose)
        check_operator_text("purpose", purpose, MAX_PURPOSE_CHARS)
        refusal = policy(self.approval_request(principal, roles, purpose))
        if refusal is not None:
            raise ApprovalRefusedError(f"approval of operation {self.id} refused: {refusal}")
        self.trigger_event(self.ApprovalGranted, timestamp=now, principal=principal, fingerprint=self.fingerprint,
                           purpose=purpose, expires_at=require_later(now, valid_seconds, "valid_seconds"))

    def void_approval(self, *, now: datetime) -> str:
        """Record that the granted approval no longer allows egress (``ApprovalVoided``): it
        expired, or was granted for another fingerprint. The operation waits for a new approval,
        or ends at its pending deadline.

        Returns:
            The reason (``ledger.approvals.void_reason``).

        Raises:
            IllegalTransitionError: not pending, or the approval still holds.
        """
        now = require_utc(now)
        self._allow("void_approval")
        reason = void_reason(self, now)
        if reason is None:
            raise ApprovalStillValidError("void_approval", self.execution.value, "the approval holds")
        self.trigger_event(self.ApprovalVoided, timestamp=now, reason=reason)
        return reason

    def deny_approval(self, *, now: datetime, principal: str, reason: str) -> None:
        """Record an approver's refusal (``ApprovalDenied``): the operation fails, nothing sent.

        Raises:
            IllegalTransitionError: not pending, or approval not required or already decided.
        """
        self._allow("deny_approval")
        require_principal(principal)
        check_operator_text("reason", reason, MAX_REASON_CHARS)
        if self.approval != APPROVAL_REQUIRED:
            raise ApprovalAlreadyDecidedError("deny_approval", self.execution.value, f"approval is {self.approval}")
        self.trigger_event(self.ApprovalDenied, timestamp=require_utc(now), principal=principal, reason=reason)
