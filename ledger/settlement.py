"""The settlement contract: what an entity's declared action receives (DESIGN §1.5).

The executor loads the source entity, calls ``entity.<method>(outcome)`` with a
:class:`SettlementOutcome`, and saves the entity together with the operation's ``Settled`` in
one ``save()``, so the action's effect and the settlement fact commit together or not at all.
An action should only record facts on the entity; raising marks the settlement failed and it is
retried with backoff, never with new egress.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from eventsourcing.utils import TopicError, get_topic, resolve_topic

from ledger.approvals import resolve_policy
from ledger.decisions import OutcomeRef
from ledger.declarations import Integration
from ledger.intents import Delegation
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
        attempt_id: the attempt whose outcome the ledger recorded (None when the operation
            ended without one: cancelled, denied, or past its deadline before any attempt).
        epoch: the fencing epoch that outcome was recorded under.
        integration_digest: the digest of the declaration the operation ran under.
        code_digest: the digest of the host module that intended it (as given to ``intend``).
        source_action: the entity's command or event that authorized the intent.
        on_behalf_of: the delegation chain: ``principal`` acted on behalf of the first link.
        tenant: the operation's tenant.
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
    attempt_id: UUID | None = None
    epoch: int | None = None
    integration_digest: str = ""
    code_digest: str = ""
    source_action: str = ""
    on_behalf_of: tuple[Delegation, ...] = ()
    tenant: str = ""

    @property
    def principal_chain(self) -> tuple[str, ...]:
        """Who authorized it, the acting principal first, then each principal it acted for."""
        return (self.principal, *(link.principal for link in self.on_behalf_of))

    @property
    def ref(self) -> OutcomeRef:
        """The outcome this settles, as the settlement commands fence it."""
        return OutcomeRef(self.attempt_id, self.epoch)

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
            attempt_id=op.outcome_attempt_id,
            epoch=op.outcome_epoch,
            integration_digest=op.integration_digest,
            code_digest=op.code_digest,
            source_action=op.source_action,
            on_behalf_of=tuple(Delegation(link["principal"], link.get("role", "")) for link in op.on_behalf_of),
            tenant=op.tenant,
        )


def entity_type_problem(declared: str, entity_type: type) -> str | None:
    """Why an entity of ``entity_type`` is not the one a declaration settles into, or None. Pure
    (but for importing ``declared``, which the library caches).

    The declaration's ``settlement.entity_type`` is a topic (``module:Class``); it names the
    entity's class when it resolves to that very class, or, when it does not resolve here, when
    it spells the class's own topic. Asked by ``LedgerApplication.intend`` (which refuses) and
    by the settlement executor (which blocks, ``settlement_entity_mismatch``): a declaration
    may change between the intent and its settlement.

    Returns:
        None, or ``"<declared> is not <actual>"``.

    Source: issue 32 item 1.
    """
    actual = get_topic(entity_type)
    if actual == declared:
        return None
    try:
        if resolve_topic(declared) is entity_type:
            return None
    except TopicError:
        pass
    return f"the declaration settles into {declared}, but the entity is a {actual}"


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


@dataclass(frozen=True, slots=True)
class SettlementRequest:
    """What a settlement policy decides on, asked before every settlement (issue 32 item 2).

    Attributes:
        operation: the operation being settled (read it; never change it).
        outcome: what the entity's action would receive: the result, the attempt and epoch it
            settles, the principal chain, the trace, the declaration and module digests.
        entity: the source entity, as loaded (read it; never change it).
        entity_type: the declaration's ``settlement.entity_type``.
        method: the entity method the executor is about to call.
        declared_method: the declaration's ``settlement.method``.
    """

    operation: Operation
    outcome: SettlementOutcome
    entity: Any
    entity_type: str
    method: str
    declared_method: str

    @property
    def principal_chain(self) -> tuple[str, ...]:
        """The acting principal, then each principal it acted for (``SettlementOutcome``)."""
        return self.outcome.principal_chain


SettlementPolicy = Callable[[SettlementRequest], "str | None"]
"""Decides whether a settlement may change the entity: returns None, or the reason it may not
(the operation then ends ``SettlementBlocked``, attention ``settlement_denied``)."""


def default_settlement_policy(request: SettlementRequest) -> str | None:
    """The default settlement policy: exactly the declared method may be called. Pure.

    Returns:
        None when ``request.method`` is the declared one, else the reason.

    Source: issue 32 item 2.
    """
    if request.method != request.declared_method:
        return f"only the declared settlement method {request.declared_method!r} may be called, not {request.method!r}"
    return None


def load_settlement_policy(topic: str | None) -> SettlementPolicy:
    """Return the policy named ``module:function`` (``OPLEDGER_SETTLEMENT_POLICY``), or the
    default.

    Raises:
        ConfigurationError: the name does not resolve to a callable.
    """
    if not topic:
        return default_settlement_policy
    checked: SettlementPolicy = resolve_policy(topic, "settlement")
    return checked
