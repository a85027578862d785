"""What an operator reads and does, in one place for the CLI, the HTTP API and the console.

Reading: an operation described (execution, settlement, outcome kept after settlement, approval,
source with its settlement action, trace id), its timeline; payload fields redacted by their
classification. Doing: resolve with evidence, retry a blocked settlement, cancel, approve or deny,
each recorded by the operation's own command and reported in the user's words when refused
("cannot approve: the operation is already claimed").

Source: issue 13 items 2 and 6; DESIGN §9.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID, uuid4

from eventsourcing.application import AggregateNotFoundError

from adapters.refusals import save_refusable
from ledger.approvals import ApprovalPolicy, default_policy, load_policy, purpose_of
from ledger.budgets import budget_levels, window_bounds, window_id
from ledger.declarations import DEFAULT_APPROVAL_VALID_SECONDS, Classification
from ledger.errors import (
    ApprovalRefusedError,
    CorruptRecordError,
    IllegalTransitionError,
    OperationInArchiveError,
    OperationNotFoundError,
    OperatorActionRefusedError,
    UnknownIntegrationError,
)
from ledger.operation import Operation
from ledger.redaction import mask_url
from ledger.refusals import WriteKind
from ledger.status import ACTIVE_STATES
from migrations.drivers import archives_of, database_driver
from projections.rows import AttentionMark, StatusRow
from projections.status import StatusProjection

if TYPE_CHECKING:
    from adapters.runtime import Store

_BASE_FIELDS = {"originator_id", "originator_version", "timestamp", "originator_topic"}
ActionKind = Literal["resolve", "retry_settlement", "cancel", "approve", "deny"]
_VERBS = {"grant_approval": "approve", "deny_approval": "deny", "resolve": "resolve", "request_cancel": "cancel",
          "cancel": "cancel"}
_STATE_WORDS = {"claimed": "already claimed by a worker", "dispatching": "already being sent",
                "accepted": "already accepted by the provider", "succeeded": "already succeeded",
                "failed": "already failed", "cancelled": "already cancelled", "settled": "already settled",
                "ambiguous": "ambiguous (resolve it first)", "settlement_blocked": "blocked in settlement",
                "settlement settled": "already settled", "settlement none": "not finished yet",
                "settlement pending": "waiting for its settlement", "settlement not_required":
                "finished without a settlement"}


def trace_id(traceparent: str | None) -> str | None:
    """The trace id of a W3C ``traceparent`` (``00-<trace id>-<span id>-<flags>``), or None."""
    parts = (traceparent or "").split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None


def redacted(app: Any, name: str | None, version: int | None, payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with every field not classified ``public`` replaced by ``[secret]``,
    ``[internal]`` or ``[unclassified]`` (an unknown declaration redacts everything)."""
    try:
        declaration = app.registry.get(name, version)
    except UnknownIntegrationError:
        declaration = None
    out = {}
    for key, value in payload.items():
        kind = declaration.classification_of(key) if declaration else None
        out[key] = value if kind is Classification.PUBLIC else f"[{kind.value if kind else 'unclassified'}]"
    return out


def settlement_action(app: Any, op: Operation) -> str | None:
    """``entity_type.method`` the outcome settles through, or None when none is declared."""
    try:
        declaration = app.registry.get(op.integration_name, op.integration_version)
    except UnknownIntegrationError:
        return None
    settlement = getattr(declaration, "settlement", None)
    return f"{settlement.entity_type}.{settlement.method}" if settlement is not None else None


def describe(app: Any, op: Operation, row: StatusRow | None) -> dict[str, Any]:
    """An operation whose events all decode, as JSON-ready data (``ops show``, the API)."""
    return {
        "operation_id": str(op.id), "status": op.status.value, "execution": op.execution.value,
        "settlement": op.settlement.value, "outcome": op.execution.value if op.execution.value in
        ("succeeded", "failed", "ambiguous", "cancelled") else None,
        "integration": op.integration_name, "integration_version": op.integration_version,
        "integration_digest": op.integration_digest, "code_digest": op.code_digest or None,
        "tenant": op.tenant, "delivery_mode": op.delivery_mode.value, "approval": op.approval,
        "attempts": op.attempts, "max_attempts": op.max_attempts, "epoch": op.epoch,
        "attention": op.attention, "disposition": op.disposition, "failure": op.failure,
        "last_retry_reason": op.last_retry_reason, "ambiguity_reason": op.ambiguity_reason,
        "remote_id": op.remote_id, "target": mask_url(op.target) if op.target else op.target,
        "approval_detail": approval_detail(app, op), "budget_wait": op.budget_wait,
        "budgets": budget_detail(app, op),
        "remote_status": op.remote_status, "follow": op.follow,
        "follow_until": op.follow_until.isoformat() if op.follow_until else None,
        "cancel": op.cancel_outcome,
        "payload": redacted(app, op.integration_name, op.integration_version, op.payload),
        "source": {"entity_type": op.source.entity_type, "entity_id": str(op.source.entity_id),
                   "entity_version": op.source.entity_version, "effect_index": op.source.effect_index,
                   "action": settlement_action(app, op)},
        "principal": op.principal, "traceparent": op.traceparent, "trace_id": trace_id(op.traceparent),
        "authority": authority(op), "settles": settles(op),
        "excerpt": op.excerpt, "created_at": op.created_on.isoformat(), "updated_at": op.modified_on.isoformat(),
        "version": op.version, "projection_lag": row is None or row.version != op.version,
    }


def authority(op: Operation) -> dict[str, Any]:
    """The chain of authority recorded with the intent and handed to the settlement action
    (``ledger.SettlementOutcome``): the source action, the principal and whom it acted for,
    the trace, the declaration's and the host module's digests (issue 32 item 4), and the
    opledger version and commit that recorded the intent (issue 31 item 2; None for intents
    recorded before it)."""
    return {
        "source_action": op.source_action or None,
        "principal": op.principal,
        "on_behalf_of": [{"principal": link["principal"], "role": link.get("role", "")} for link in op.on_behalf_of],
        "principal_chain": [op.principal, *(link["principal"] for link in op.on_behalf_of)],
        "traceparent": op.traceparent, "trace_id": trace_id(op.traceparent),
        "integration_digest": op.integration_digest, "code_digest": op.code_digest or None,
        "opledger_version": op.opledger_version or None, "opledger_commit": op.opledger_commit or None,
    }


def settles(op: Operation) -> dict[str, Any] | None:
    """The recorded outcome a settlement settles: its attempt and epoch (what ``Settled``,
    ``SettlementFailed`` and ``SettlementBlocked`` name; issue 32 item 3), and the rule that
    blocked it, if one did; None before an outcome."""
    if op.settlement.value == "none":
        return None
    attempt = op.outcome_attempt_id
    return {"attempt_id": str(attempt) if attempt is not None else None, "epoch": op.outcome_epoch,
            "blocked_by": op.settlement_block_code}


def approval_detail(app: Any, op: Operation) -> dict[str, Any] | None:
    """An operation's approval: its state, the purpose it is (or would be) granted for, by
    whom, until when, and why it was last voided; None when none is required (issue 14)."""
    if op.approval == "not_required":
        return None
    try:
        declared = app.registry.get(op.integration_name, op.integration_version).approval_purpose
    except UnknownIntegrationError:
        declared = ""
    return {"state": op.approval, "purpose": op.approval_purpose or purpose_of(op.integration_name, declared),
            "fingerprint": op.fingerprint, "approved_by": op.approved_by,
            "expires_at": op.approval_expires_at.isoformat() if op.approval_expires_at else None,
            "voided": op.approval_voided}


def budget_detail(app: Any, op: Operation) -> list[dict[str, Any]]:
    """The call budgets a call of ``op`` counts against, outermost first (global, integration,
    tenant: ``ledger.budgets.budget_levels``), each with its current window (UTC, by the
    application's clock), the calls given out in it, and whether ``op`` waits for it now
    (its last ``BudgetWaited`` named it, recorded while pending, or by a reclaim or a lookup
    while claimed or dispatching, and that window has not ended).
    Empty when no budget applies or the declaration is unknown (issue 14 item 1)."""
    try:
        declaration = app.registry.get(op.integration_name, op.integration_version)
    except UnknownIntegrationError:
        return []
    now = app.clock.now()
    until = op.budget_wait_until
    waiting = op.budget_wait if until is not None and until > now and op.execution in ACTIVE_STATES else None
    out = []
    for level in budget_levels(declaration, op.tenant, getattr(app, "global_budget", None)):
        start, end = window_bounds(now, level.window_seconds)
        try:
            used = app.repository.get(window_id(level.scope, start)).calls
        except AggregateNotFoundError:
            used = 0
        out.append({"level": level.level.value, "scope": level.scope, "calls_per_window": level.limit,
                    "window_seconds": level.window_seconds, "window_start": start.isoformat(),
                    "window_end": end.isoformat(), "calls_used": used,
                    "waiting_until": until.isoformat() if waiting == level.scope and until else None})
    return out


def describe_undecodable(row: StatusRow, exc: CorruptRecordError) -> dict[str, Any]:
    """An operation with a stored event this code cannot decode: its status row (the last state
    that decoded) and the record that stops it."""
    data = row.as_json()
    if data["attention_detail"] is None:  # the projection has not met the record yet
        mark = AttentionMark.of(exc)
        data["attention"], data["attention_detail"] = mark.reason, json.loads(mark.detail)
    keys = ("operation_id", "status", "execution", "settlement", "integration", "integration_version",
            "delivery_mode", "attempts", "max_attempts", "epoch", "attention", "attention_detail", "disposition",
            "remote_id", "version", "updated_at")
    return {**{key: data[key] for key in keys}, "decodes_up_to_version": row.version, "error": str(exc)}


def show(store: Store, op_id: UUID) -> dict[str, Any]:
    """``describe`` (or ``describe_undecodable``) of one operation.

    Raises:
        OperationNotFoundError: no such operation.
        CorruptRecordError: its first record does not decode and it has no status row.
    """
    row = store.queries.get(op_id)
    try:
        op = get_or_archived(store.app, op_id)
    except CorruptRecordError as exc:
        if row is None:
            raise
        return describe_undecodable(row, exc)
    return describe(store.app, op, row)


def get_or_archived(app: Any, op_id: UUID) -> Operation:
    """``app.get_operation``, naming the archive segment of an operation ``opledger archive``
    moved out of the hot store (docs/adr/0010-archives.md).

    Raises:
        OperationNotFoundError: no such operation.
        OperationInArchiveError: it was archived (a subclass of the above: its message names the
            segment, the final status and how to read it back).
        CorruptRecordError: as ``get_operation``.
    """
    try:
        found_op: Operation = app.get_operation(op_id)
        return found_op
    except OperationNotFoundError:
        found = archives_of(app).archive_lookup([op_id]).get(op_id)
        if found is None:
            raise
        raise OperationInArchiveError(op_id, *found) from None


def event_entry(app: Any, event: Any, name: str | None, version: int | None) -> dict[str, Any]:
    """One event as a timeline entry, payload redacted (``name``/``version``: its integration)."""
    fields = {k: v for k, v in vars(event).items() if k not in _BASE_FIELDS}
    if isinstance(event, Operation.Intended):
        fields["payload"] = redacted(app, event.integration_name, event.integration_version, event.payload)
        fields["target"] = mask_url(event.target) if event.target else event.target
    return {
        "version": event.originator_version,
        "at": event.timestamp.isoformat(),
        "event": type(event).__name__,
        "details": {k: (str(v) if isinstance(v, (UUID, datetime)) else v) for k, v in fields.items()},
    }


def timeline_entries(app: Any, op_id: UUID) -> list[dict[str, Any]]:
    """The operation's events as JSON-ready dicts, oldest first, payload fields redacted; a
    record that does not decode ends the list as a ``CORRUPT`` entry saying where it stops."""
    return entries_of(app, app.events.get(op_id))


def entries_of(app: Any, events: Iterable[Any]) -> list[dict[str, Any]]:
    """:func:`timeline_entries` of one operation's ``events`` (oldest first), however they are
    read: from the store, or decoded from an archive segment (``adapters.archive_reads``)."""
    entries: list[dict[str, Any]] = []
    name, version = None, None
    remaining = iter(events)
    while True:
        try:
            event = next(remaining)
        except StopIteration:
            break
        except CorruptRecordError as exc:
            entries.append({"version": exc.position, "at": "", "event": "CORRUPT", "details": {"error": str(exc)}})
            break
        if isinstance(event, Operation.Intended):
            name, version = event.integration_name, event.integration_version
        entries.append(event_entry(app, event, name, version))
    return entries


def catch_up_status(store: Store) -> int:
    """Bring the status view up to date from this process where it may: always where it owns the
    SQLite store; on PostgreSQL only while no worker leads the projection (the leadership lease
    decides; a leading worker gets there within moments). Returns the events applied."""
    if store.owner:
        return StatusProjection(app=store.app, view=store.view).catch_up()
    if database_driver(store.settings.database).shared:
        holder = f"operator:{uuid4().hex[:12]}"
        return StatusProjection(app=store.app, view=store.view, holder=holder).catch_up()
    return 0


@dataclass(frozen=True)
class OperatorAction:
    """One operator decision.

    Attributes:
        kind: ``resolve``, ``retry_settlement``, ``cancel``, ``approve`` or ``deny``.
        principal: who decides (from the authenticated request, or the CLI's ``--principal``).
        resolution: for ``resolve``: ``succeeded``, ``failed``, ``retry`` or ``abandon``
            (``retry_settlement`` and ``abandon`` for a blocked settlement).
        evidence: for ``resolve`` and ``retry_settlement``: what was checked.
        reason: for ``cancel`` and ``deny``: why.
    """

    kind: ActionKind
    principal: str
    resolution: str = ""
    evidence: str = ""
    reason: str = ""
    roles: tuple[str, ...] = ()
    fingerprint: str | None = None

    def apply(self, op: Operation, now: datetime, app: Any = None, policy: ApprovalPolicy = default_policy) -> None:
        """Run the operation's command for this decision (no save). An approval is bound to the
        operation's fingerprint and the declaration's purpose and validity (``app``'s registry),
        and ``policy`` decides whether this approver with ``roles`` may give it (issue 14)."""
        if self.kind == "resolve":
            op.resolve(now=now, principal=self.principal, resolution=self.resolution, evidence=self.evidence)
        elif self.kind == "retry_settlement":
            op.resolve(now=now, principal=self.principal, resolution="retry_settlement", evidence=self.evidence)
        elif self.kind == "cancel":
            op.request_cancel(now=now, principal=self.principal, reason=self.reason)
        elif self.kind == "approve":
            declaration = app.registry.get(op.integration_name, op.integration_version) if app is not None else None
            op.grant_approval(now=now, principal=self.principal, roles=self.roles, fingerprint=self.fingerprint,
                              purpose=declaration.approval_purpose if declaration else "",
                              valid_seconds=(declaration.approval_valid_seconds if declaration
                                             else DEFAULT_APPROVAL_VALID_SECONDS),
                              policy=policy)
        else:
            op.deny_approval(now=now, principal=self.principal, reason=self.reason)


def refusal(action: ActionKind, exc: IllegalTransitionError) -> str:
    """``exc`` in the operator's words: ``cannot approve: the operation is already claimed by a
    worker``."""
    verb = {"retry_settlement": "retry the settlement"}.get(action, _VERBS.get(exc.command, action))
    detail = exc.detail
    if detail.startswith("approval is "):
        approval = detail.removeprefix("approval is ")
        reason = {"not_required": "its integration does not require approval", "granted": "it is already approved",
                  "denied": "its approval was already denied"}.get(approval, detail)
    elif exc.state in _STATE_WORDS:
        reason = f"the operation is {_STATE_WORDS[exc.state]}" + (f" ({detail})" if detail else "")
    else:
        reason = f"the operation is {exc.state.replace('_', ' ')}" + (f" ({detail})" if detail else "")
    return f"cannot {verb}: {reason}"


def perform(store: Store, op_id: UUID, action: OperatorAction) -> dict[str, Any]:
    """Record ``action`` on the operation and say what was recorded.

    The status view is brought up to date at once (``catch_up_status``).

    Returns:
        ``{"operation_id", "action", "status", "recorded": [timeline entries]}``; ``recorded`` is
        empty when the decision changed nothing (a repeated cancel request).

    Raises:
        OperationNotFoundError: no such operation (``OperationInArchiveError``, naming the
            segment, when it was archived: nothing is recorded on it).
        OperatorActionRefusedError: the lifecycle does not allow it now (in the user's words).
        InvalidArgumentError: a missing evidence, principal or unknown resolution.
        WriteRefusedError: the database refused the write for this operation alone (it is on
            the attention queue as ``write_refused``).
    """
    op = get_or_archived(store.app, op_id)
    before = op.version
    try:
        action.apply(op, store.app.clock.now(), store.app, load_policy(store.settings.approval_policy))
    except IllegalTransitionError as exc:
        raise OperatorActionRefusedError(refusal(action.kind, exc)) from None
    except ApprovalRefusedError as exc:  # the approval policy's refusal, in its own words
        raise OperatorActionRefusedError(str(exc)) from None
    kind = WriteKind.CANCELLATION if action.kind == "cancel" else WriteKind.OPERATOR
    save_refusable(store.app, op, kind, store.app.clock.now())  # issue 35: WriteRefusedError
    catch_up_status(store)
    recorded = [event_entry(store.app, event, op.integration_name, op.integration_version)
                for event in store.app.events.get(op_id, gt=before)]
    return {"operation_id": str(op_id), "action": action.kind, "status": op.status.value, "recorded": recorded}
