"""The observe API's bodies, as pydantic models: they are the published OpenAPI (``docs/openapi.json``).

Source: issue 13 item 2.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ledger.intents import MAX_EVIDENCE_CHARS, MAX_REASON_CHARS

TEXT_PATTERN = r"^[^\x00-\x1f]*$"
"""Query and path text: printable, no control characters (a store cannot hold a NUL)."""


class OperationSummary(BaseModel):
    """One operation's status row (the status read model), payload-free."""

    kind: Literal["operation"] = Field(default="operation", description="on the attention queue: an operation "
                                                                         "(a receipt's row is a ReceiptAttention)")
    operation_id: str
    version: int
    tenant: str
    integration: str
    integration_version: int
    delivery_mode: str
    status: str = Field(description="derived from execution and settlement (docs/adr/0001-operation-lifecycle.md)")
    execution: str = Field(description="the execution state; after settlement it keeps the outcome")
    settlement: str
    approval: str
    attempts: int
    max_attempts: int
    epoch: int
    worker_id: str | None
    lease_expires_at: datetime | None
    next_due_at: datetime | None
    remote_id: str | None
    attention: str | None
    disposition: str | None
    failure_category: str | None
    ambiguity_reason: str | None
    cancel_requested: bool
    source_entity_type: str
    source_entity_id: str
    source_entity_version: int
    effect_index: int
    created_at: datetime
    updated_at: datetime
    attention_detail: dict[str, Any] | None = None


class ReceiptAttention(BaseModel):
    """A keyed command whose idempotency receipt recovery gave up on: on the attention queue as
    ``receipt_stuck`` until an operator resolves it (``POST /v1/receipts/{id}/resolve``) or the
    client retries with the same key (issue 31 item 4)."""

    kind: Literal["receipt"]
    id: str = Field(description="the entry's id, for a reader of any kind of entry: the receipt id")
    receipt_id: str = Field(description="the receipt's id: the transaction id its answers carry")
    attention: Literal["receipt_stuck"]
    attention_detail: dict[str, Any] = Field(description="command, adoptions (recovery's runs of it), reason (the "
                                                         "last run's error class), epoch")
    command: str
    principal: str = Field(description="who sent the request")
    status: str = Field(description="the receipt's state: pending")
    actions: list[Literal["retry", "abandon"]] = Field(description="the resolutions an operator may record")
    created_at: datetime
    updated_at: datetime = Field(description="when recovery gave up on it")


class ArchivedLateAttention(BaseModel):
    """A callback that arrived for an operation ``opledger archive`` had already moved out of the
    store: kept apart (never appended to it) and on the attention queue as ``late_after_archive``
    until an operator acknowledges it (``opledger resolve ID --resolution acknowledge``;
    docs/adr/0010-archives.md §4)."""

    kind: Literal["archived"]
    id: str = Field(description="the entry's id, for a reader of any kind of entry: the operation id")
    operation_id: str
    integration: str = Field(description="the integration whose callback route it came in on")
    attention: Literal["late_after_archive"]
    attention_detail: dict[str, Any] = Field(description="segment (the archive segment holding the operation), "
                                                         "callback_id, outcome, remote_status, detail")
    updated_at: datetime = Field(description="when it arrived")


class ReceiptResolveBody(BaseModel):
    """Resolve a receipt recovery gave up on: ``retry`` (recovery runs it again at once, with a
    fresh budget of adoptions) or ``abandon`` (answered 409 ``command_abandoned``, nothing
    applied), with the evidence checked."""

    model_config = ConfigDict(extra="forbid", strict=True)

    resolution: Literal["retry", "abandon"]
    evidence: str = Field(min_length=1, max_length=MAX_EVIDENCE_CHARS, pattern=r"\S")


class ReceiptEvent(BaseModel):
    """One receipt event an action recorded."""

    version: int
    at: str
    event: str


class ReceiptActionResult(BaseModel):
    """What a receipt resolution recorded, and the receipt's state after it."""

    receipt_id: str
    action: Literal["resolve"]
    resolution: Literal["retry", "abandon"]
    status: str = Field(description="pending (retry: recovery adopts it again) or completed (abandon)")
    recorded: list[ReceiptEvent]


class OperationPage(BaseModel):
    """A page of operations, newest first; pass ``next_cursor`` as ``cursor`` for the next one."""

    items: list[OperationSummary]
    next_cursor: str | None = Field(description="null on the last page")


class SourceOut(BaseModel):
    """The entity transition that authorized the operation, and the action its outcome settles through."""

    entity_type: str
    entity_id: str
    entity_version: int
    effect_index: int
    action: str | None = Field(description="entity_type.method of the settlement action, if declared")


class BudgetLevelOut(BaseModel):
    """One call budget level a call of the operation counts against (outermost first: global,
    integration, tenant), with its current window by the server's clock (issue 14 item 1)."""

    level: Literal["global", "integration", "tenant"]
    scope: str = Field(description="the level's key: (global), the integration's name, or name|tenant=T")
    calls_per_window: int
    window_seconds: float
    window_start: datetime = Field(description="the current window, UTC, aligned to the Unix epoch")
    window_end: datetime
    calls_used: int = Field(description="calls given out in the current window (sends and lookups)")
    waiting_until: datetime | None = Field(
        description="set on the level the operation waits for (its last BudgetWaited), until that window ends")


class DelegationOut(BaseModel):
    """One link of the delegation chain: the principal acted for, in its role."""

    principal: str
    role: str


class AuthorityOut(BaseModel):
    """The chain of authority recorded with the intent and handed to the settlement action
    (issue 32 item 4)."""

    source_action: str | None = Field(description="the entity's command or event that authorized the intent")
    principal: str = Field(description="who authorized it")
    on_behalf_of: list[DelegationOut] = Field(description="whom the principal acted for, first link first")
    principal_chain: list[str] = Field(description="the principal, then each principal it acted for")
    traceparent: str | None
    trace_id: str | None
    integration_digest: str = Field(description="the declaration the operation runs under")
    code_digest: str | None = Field(description="the host module that intended it: the digest the host gave, "
                                                "or by default the module declaring its application")
    opledger_version: str | None = Field(default=None, description="the opledger version that recorded the intent")
    opledger_commit: str | None = Field(default=None, description="the commit that opledger was built from "
                                                                  "(unknown when it could not tell)")


class SettlesOut(BaseModel):
    """The recorded outcome a settlement settles (issue 32 item 3)."""

    attempt_id: str | None = Field(description="the attempt whose outcome was recorded; null: it ended without one")
    epoch: int | None = Field(description="the fencing epoch the outcome was recorded under")
    blocked_by: str | None = Field(description="the rule that blocked the settlement: settlement_entity_mismatch "
                                               "or settlement_denied")


class ActionOfferOut(BaseModel):
    """An operator action the operation's state, the token's roles and the approval policy
    allow now (``ledger.operator_actions``; issue 31 item 5)."""

    action: Literal["resolve", "retry_settlement", "cancel", "approve", "deny"] = Field(
        description="the route under /v1/operations/{id}/ (retry_settlement: /retry-settlement)")
    resolutions: list[str] = Field(description="for resolve: the resolutions it may record now (acknowledge for a "
                                               "late observation); empty for the others")


class WithheldActionOut(BaseModel):
    """An action the operation's state allows but this token may not take here, and why."""

    action: Literal["resolve", "retry_settlement", "cancel", "approve", "deny"]
    reason: str = Field(description="e.g. needs the approver role; the approval policy's refusal; a read-only server")


class OperationDetail(BaseModel):
    """One operation: execution and settlement separately, the outcome (kept after settlement),
    approval, attempts, epoch, remote id, source with action, trace id; payload redacted by
    classification. An operation with a record this code cannot read shows its last readable
    state and ``error`` instead."""

    model_config = ConfigDict(extra="allow")

    operation_id: str
    status: str
    execution: str
    settlement: str
    outcome: str | None = None
    integration: str
    integration_version: int
    tenant: str | None = None
    delivery_mode: str
    approval: str | None = None
    attempts: int
    max_attempts: int
    epoch: int
    attention: str | None = None
    disposition: str | None = None
    failure: dict[str, Any] | None = None
    remote_id: str | None = None
    payload: dict[str, Any] | None = None
    source: SourceOut | None = None
    trace_id: str | None = None
    traceparent: str | None = None
    authority: AuthorityOut | None = None
    settles: SettlesOut | None = Field(default=None, description="null until an outcome is recorded")
    budgets: list[BudgetLevelOut] | None = Field(
        default=None, description="the call budgets a call of it counts against; empty when none applies")
    budget_wait: str | None = Field(default=None, description="the scope of the budget level it last waited for")
    actions: list[ActionOfferOut] = Field(
        default_factory=list, description="what the requesting token may do to it now (its state, roles and the "
                                          "approval policy); empty for an operation this code cannot read")
    withheld: list[WithheldActionOut] = Field(
        default_factory=list, description="what its state allows but the requesting token may not do here, and why")
    trace_url: str | None = Field(default=None, description="its trace in the tracing UI "
                                                            "(OPLEDGER_TRACE_URL_TEMPLATE); null without either")
    error: str | None = None


class SignedIn(BaseModel):
    """Who the bearer token is, and what its roles allow (the console's header; issue 31 item 5)."""

    principal: str = Field(description="recorded on the timeline for every action taken with this token")
    roles: list[Literal["viewer", "operator", "approver"]]
    actions: list[Literal["resolve", "retry_settlement", "cancel", "approve", "deny"]] = Field(
        description="the operator actions these roles may take, where an operation's state allows them")
    writable: bool = Field(description="false: this server opened its store read-only, actions answer 409")


class TimelineEntry(BaseModel):
    """One event of an operation, oldest first; ``version`` is its place in the operation."""

    version: int | None
    at: str
    event: str
    details: dict[str, Any]


class ActionResult(BaseModel):
    """What an operator action recorded (empty ``recorded``: it changed nothing)."""

    operation_id: str
    action: str
    status: str
    recorded: list[TimelineEntry]


ACTION_BODY = ConfigDict(extra="forbid", strict=True)
"""Operator action bodies are read strictly: an unknown member or a value of the wrong type is a
422, and nothing is recorded (issue 27 item 2)."""


class ApproveBody(BaseModel):
    """Approve: no members; the body may be left out, or be ``{}``."""

    model_config = ACTION_BODY


class ResolveBody(BaseModel):
    """Resolve an ambiguous operation (``succeeded``, ``failed``, ``retry``, ``abandon``), accepted
    work past its deadline (``succeeded``, ``failed``), a blocked settlement (``abandon``), a late
    observation (``acknowledge``) or a refused write (``retry_write``) with the evidence checked."""

    model_config = ACTION_BODY

    resolution: Literal["succeeded", "failed", "retry", "abandon", "acknowledge", "retry_write"]
    evidence: str = Field(min_length=1, max_length=MAX_EVIDENCE_CHARS, pattern=r"\S")


class EvidenceBody(BaseModel):
    """Retry a blocked settlement, saying what was fixed or checked."""

    model_config = ACTION_BODY

    evidence: str = Field(min_length=1, max_length=MAX_EVIDENCE_CHARS, pattern=r"\S")


class ReasonBody(BaseModel):
    """Cancel, optionally saying why."""

    model_config = ACTION_BODY

    reason: str = Field(default="", max_length=MAX_REASON_CHARS)


class DenyBody(BaseModel):
    """Deny, saying why (required)."""

    model_config = ACTION_BODY

    reason: str = Field(min_length=1, max_length=MAX_REASON_CHARS, pattern=r"\S")


class Liveness(BaseModel):
    """The process answers HTTP; says nothing about the store."""

    status: Literal["ok"]


class Readiness(BaseModel):
    """The store is reachable, migrated for this application, and at the schema this code expects."""

    status: Literal["ready"]
    backend: str
    schema_version: str
    writable: bool


class Health(BaseModel):
    """The server and its store are usable."""

    status: Literal["ok"]
    backend: str
    writable: bool = Field(description="operator actions possible from this server")
