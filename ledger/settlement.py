"""The settlement contract: what an entity's declared action receives (DESIGN §1.5).

The executor loads the source entity, calls ``entity.<method>(outcome)`` with a
:class:`SettlementOutcome`, and saves the entity together with the operation's ``Settled`` in
one ``save()``, so the action's effect and the settlement fact commit together or not at all.
An action should only record facts on the entity; raising marks the settlement failed and it is
retried with backoff, never with new egress.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from eventsourcing.utils import TopicError, resolve_topic

from ledger.declarations import Integration
from ledger.operation import Operation


@dataclass(frozen=True, slots=True)
class SettlementOutcome:
    """The outcome handed to an entity's settlement action.

    Attributes:
        operation_id: the operation being settled.
        integration: its integration name.
        result: ``succeeded``, ``failed`` or ``cancelled``.
        failure_category: why it failed (``ledger.outcomes.FailureCategory`` value), if it did.
        remote_id: the provider's id for the effect, if any.
        excerpt: the bounded, redacted response excerpt.
        principal: the principal that authorized the operation.
        traceparent: the W3C trace context of the authorizing request.
        resolved_by_operator: True when an operator's ``Resolved`` decided the result.
    """

    operation_id: UUID
    integration: str
    result: str
    failure_category: str | None
    remote_id: str | None
    excerpt: str
    principal: str
    traceparent: str | None
    resolved_by_operator: bool

    @classmethod
    def of(cls, op: Operation) -> SettlementOutcome:
        """Build the outcome of a terminal operation."""
        return cls(
            operation_id=op.id,
            integration=op.integration_name,
            result=op.execution.value,
            failure_category=(op.failure or {}).get("category") if op.execution.value == "failed" else None,
            remote_id=op.remote_id,
            excerpt=op.excerpt,
            principal=op.principal,
            traceparent=op.traceparent,
            resolved_by_operator=op.resolution in ("succeeded", "failed"),
        )


def settlement_target_problems(integration: Integration) -> list[tuple[str, str]]:
    """What stops ``integration``'s settlement action from ever being called, as declaration problems.

    Imports the ``entity_type`` module (the executor would, at the first settlement) and looks
    for ``method`` on the class. Called when the application is built
    (``LedgerApplication.__init__``), not when the declaration is parsed: a declaration usually
    sits above the entity class in the same module, which is not defined yet at that point.

    Args:
        integration: a parsed declaration.

    Returns:
        ``(path, message)`` pairs (``settlement.entity_type``, ``settlement.method``); empty when
        it declares no settlement or the action resolves.

    Source: DESIGN §1.5 (settlement); issue 34 item 3.
    """
    action = integration.settlement
    if action is None:
        return []
    try:
        entity_class = resolve_topic(action.entity_type)
    except TopicError as exc:
        return [("settlement.entity_type", f"{action.entity_type!r} does not import: {exc}")]
    if not isinstance(entity_class, type):
        return [("settlement.entity_type", f"{action.entity_type!r} is not a class")]
    if getattr(entity_class, action.method, None) is None:
        return [("settlement.method", f"{entity_class.__name__} has no method {action.method!r}")]
    return []
