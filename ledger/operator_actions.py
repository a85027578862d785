"""Which operator actions an operation's state allows now: the rule an operator's tools ask
before offering a button or a command, so none offers what the aggregate would refuse. Pure.

Each answer comes from the same guard the aggregate's command runs: ``resolve`` from
``Operation.resolution_refusal``, ``cancel`` from the transition table (``ledger.lifecycle``) and
the request already recorded, ``approve`` and ``deny`` from the table, the approval state and the
approval policy (``ledger.approvals``). Who may take an action (a bearer token's roles) is the
caller's rule; the approval policy is asked here because it decides on the approver.

Source: issue 31 item 5 ("only the actions that role and that operation's state allow");
docs/adr/0001-operation-lifecycle.md.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ledger import lifecycle
from ledger.approvals import ApprovalPolicy, default_policy
from ledger.commands import RESOLUTIONS
from ledger.status import APPROVAL_REQUIRED

if TYPE_CHECKING:
    from ledger.operation import Operation

__all__ = ["ACTIONS", "ActionName", "ActionOffer", "approval_refusal", "state_allows"]

ActionName = Literal["resolve", "retry_settlement", "cancel", "approve", "deny"]
ACTIONS: tuple[ActionName, ...] = ("resolve", "retry_settlement", "cancel", "approve", "deny")
"""Every operator action, in the order a console shows them (the routes under
``/v1/operations/{id}/`` and the CLI's commands)."""
RETRY_SETTLEMENT = "retry_settlement"
"""The resolution taken by its own action (``retry_settlement``), not offered under ``resolve``."""


@dataclass(frozen=True, slots=True)
class ActionOffer:
    """One action the operation's state allows now.

    Attributes:
        action: one of :data:`ACTIONS`.
        resolutions: for ``resolve``, the resolutions it may record now, in
            ``ledger.commands.RESOLUTIONS`` order (``acknowledge`` for a late observation);
            empty for the other actions.
    """

    action: ActionName
    resolutions: tuple[str, ...] = ()


def state_allows(op: Operation) -> tuple[ActionOffer, ...]:
    """The operator actions ``op``'s recorded state allows now, whoever asks. Pure.

    Args:
        op: the operation, loaded.

    Returns:
        Offers in :data:`ACTIONS` order: ``resolve`` with the resolutions
        ``Operation.resolution_refusal`` allows; ``retry_settlement`` when that resolution is
        allowed; ``cancel`` while execution is active and no cancellation was requested yet (a
        second request records nothing); ``approve`` and ``deny`` while pending with approval
        required. An approver's own standing is :func:`approval_refusal`'s to say.
    """
    allowed = [r for r in RESOLUTIONS if op.resolution_refusal(r) is None]
    offers: list[ActionOffer] = []
    resolutions = tuple(r for r in allowed if r != RETRY_SETTLEMENT)
    if resolutions:
        offers.append(ActionOffer("resolve", resolutions))
    if RETRY_SETTLEMENT in allowed:
        offers.append(ActionOffer("retry_settlement"))
    if op.execution in lifecycle.BY_EXECUTION["request_cancel"] and not op.cancel_requested:
        offers.append(ActionOffer("cancel"))
    if op.execution in lifecycle.BY_EXECUTION["grant_approval"] and op.approval == APPROVAL_REQUIRED:
        offers.extend((ActionOffer("approve"), ActionOffer("deny")))
    return tuple(offers)


def approval_refusal(op: Operation, approver: str, roles: Collection[str], purpose: str = "",
                     policy: ApprovalPolicy = default_policy) -> str | None:
    """Why ``policy`` would refuse ``approver`` (with ``roles``) an approval of ``op``, or None.

    Args:
        op: an operation awaiting approval.
        approver: the principal who would approve.
        roles: its roles (a bearer token's, or the CLI's ``--role``).
        purpose: the declaration's ``approval_purpose`` ("execute <integration>" when empty).
        policy: the approval policy the store runs with (``ledger.approvals.load_policy``).

    Returns:
        None, or the policy's reason (e.g. a self-approval), as ``Operation.grant_approval``
        would raise it.

    Source: issue 14 item 2.
    """
    return policy(op.approval_request(approver, roles, purpose))
