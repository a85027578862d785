"""Approvals bound to one operation's purpose, fingerprint and expiry (issue 14 item 2). Pure.

An approval names the operation (by recording on it), the fingerprint it was granted for, the
declaration's purpose (``approval_purpose``, e.g. "refund above 1,000 EUR") and an expiry
(``approval_valid_seconds`` after the grant). A pluggable policy decides who may approve what:
any callable taking an :class:`ApprovalRequest` and returning None (allowed) or the reason for
refusing; the default, :func:`default_policy`, needs the ``approver`` role and refuses a
self-approval. Egress is refused unless an unexpired approval matches the current fingerprint:
:func:`void_reason` is that one rule, asked by ``Operation.claim`` (which refuses) and by the
due-work pass (which records ``ApprovalVoided`` so the operation waits for a new approval, or
ends at its pending deadline).

Source: issue 14 item 2; DESIGN §7 ("budgets and approvals are checked before egress").
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from ledger.errors import ConfigurationError
from ledger.status import APPROVAL_GRANTED

__all__ = [
    "APPROVER_ROLE",
    "LEGACY_FINGERPRINT",
    "ApprovalRequest",
    "ApprovalPolicy",
    "default_policy",
    "load_policy",
    "purpose_of",
    "void_reason",
]

APPROVER_ROLE = "approver"
"""The role :func:`default_policy` asks of an approver."""
LEGACY_FINGERPRINT = ""
"""The fingerprint of an approval recorded before approvals were bound (``ApprovalGranted`` v1):
it is honoured for the operation it was recorded on, without expiry."""


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What a policy decides on.

    Attributes:
        integration: the integration name.
        purpose: the declaration's approval purpose.
        intended_by: the principal recorded on the intent.
        approver: the principal asking to approve.
        roles: the approver's roles (from its bearer token, or ``opledger approve --role``).
        tenant: the operation's tenant.
    """

    integration: str
    purpose: str
    intended_by: str
    approver: str
    roles: frozenset[str]
    tenant: str


ApprovalPolicy = Callable[[ApprovalRequest], "str | None"]
"""Decides whether ``request.approver`` may approve: returns None, or the reason it may not."""


def default_policy(request: ApprovalRequest) -> str | None:
    """The default policy: the approver needs the ``approver`` role, and may not approve an
    operation it intended (four eyes). Pure.

    Returns:
        None when allowed, else the reason.
    """
    if APPROVER_ROLE not in request.roles:
        return f"{request.approver!r} does not have the {APPROVER_ROLE!r} role"
    if request.approver == request.intended_by:
        return f"{request.approver!r} intended this operation and may not approve it (self-approval)"
    return None


def load_policy(topic: str | None) -> ApprovalPolicy:
    """Return the policy named ``module:function`` (``OPLEDGER_APPROVAL_POLICY``), or the default.

    Raises:
        ConfigurationError: the name does not resolve to a callable.
    """
    if not topic:
        return default_policy
    checked: Callable[[ApprovalRequest], str | None] = resolve_policy(topic, "approval")
    return checked


def resolve_policy(topic: str, kind: str) -> Callable[..., str | None]:
    """The callable named ``module:function`` by a policy setting (approval, settlement).

    Args:
        topic: ``module:function``.
        kind: the policy's kind, for the message (``approval``, ``settlement``).

    Raises:
        ConfigurationError: the name does not resolve, or not to a callable.
    """
    from eventsourcing.utils import resolve_topic

    try:
        policy = resolve_topic(topic)
    except Exception as exc:  # the library raises TopicError, or the module's own import error
        raise ConfigurationError(f"{kind} policy {topic!r} does not resolve: {exc}") from None
    if not callable(policy):
        raise ConfigurationError(f"{kind} policy {topic!r} is not callable")
    found: Callable[..., str | None] = policy
    return found


def purpose_of(integration_name: str, purpose: str) -> str:
    """The purpose an approval is granted for: the declared one, else "execute <integration>"."""
    return purpose or f"execute {integration_name}"


class _Approved(Protocol):
    approval: str
    approval_fingerprint: str | None
    approval_expires_at: datetime | None
    fingerprint: str


def void_reason(op: _Approved, now: datetime) -> str | None:
    """Why ``op``'s granted approval no longer allows egress at ``now``, or None. Pure.

    Returns:
        ``"approval_expired"`` at or after its expiry; ``"approval_fingerprint_mismatch"`` when
        it was granted for another fingerprint; None when it holds (or none was granted).
    """
    if op.approval != APPROVAL_GRANTED:
        return None
    if op.approval_fingerprint not in (None, LEGACY_FINGERPRINT, op.fingerprint):
        return "approval_fingerprint_mismatch"
    if op.approval_expires_at is not None and now >= op.approval_expires_at:
        return "approval_expired"
    return None


def roles_of(values: Collection[str]) -> frozenset[str]:
    """The roles as a frozen set of non-blank names."""
    return frozenset(v.strip() for v in values if v and v.strip())
