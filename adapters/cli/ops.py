"""Operator commands: inspect operations, the attention queue, and record operator decisions."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

import typer
from rich.table import Table

from adapters.cli.common import DatabaseOption, JsonOption, UserErrors, cell, console, fail, print_json, settings
from ledger.approvals import load_policy, purpose_of
from ledger.declarations import Classification
from ledger.errors import CorruptRecordError, UnknownIntegrationError
from ledger.operation import Operation
from ledger.redaction import mask_url
from ledger.status import Status
from projections.rows import AttentionMark, StatusRow
from projections.status import StatusProjection

if TYPE_CHECKING:
    from adapters.runtime import Store

ops_app = typer.Typer(help="Inspect operations.", no_args_is_help=True)
projections_app = typer.Typer(help="Maintain read models.", no_args_is_help=True)

_BASE_FIELDS = {"originator_id", "originator_version", "timestamp", "originator_topic"}
ROW_COLUMNS = ("operation_id", "integration", "status", "attempts", "attention", "updated_at")
ATTENTION_COLUMNS = ("operation_id", "integration", "attention", "attention_detail", "ambiguity_reason",
                     "failure_category", "attempts", "updated_at")


def _store(database_url: str | None, *, write: bool = False) -> AbstractContextManager[Store]:
    from adapters.runtime import open_store

    return open_store(settings(database_url), write=write)


def _uuid(text: str) -> UUID:
    try:
        return UUID(text)
    except ValueError:
        fail(f"{text!r} is not an operation id (a UUID)")


def _rows_table(rows: list[StatusRow], title: str, columns: tuple[str, ...] = ROW_COLUMNS) -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        data = row.as_json()
        data["attention_detail"] = _detail_text(data["attention_detail"])
        table.add_row(*(cell(data[c]) for c in columns))
    return table


def _detail_text(detail: dict[str, Any] | None) -> str | None:
    """An attention detail on one line: ``topic=... version=4 position=123`` (the error last)."""
    if not detail:
        return None
    return " ".join(f"{key}={value}" for key, value in detail.items() if value is not None)


@ops_app.command("list")
def list_ops(
    status: str = typer.Option(None, help="only this status"),
    limit: int = typer.Option(100, min=1, max=100_000),
    database_url: str = DatabaseOption,
    json_output: bool = JsonOption,
) -> None:
    """List operations, newest first."""
    if status is not None and status not in {s.value for s in Status}:
        fail(f"unknown status {status!r}; one of: {', '.join(s.value for s in Status)}")
    with UserErrors(), _store(database_url) as store:
        rows = store.view.list(status=status, limit=limit)
    if json_output:
        print_json([r.as_json() for r in rows])
    else:
        console.print(_rows_table(rows, f"operations ({len(rows)})"))


@ops_app.command("show")
def show(operation_id: str, database_url: str = DatabaseOption, json_output: bool = JsonOption) -> None:
    """Show one operation's status row and decoded state (secrets and internal fields redacted)."""
    op_id = _uuid(operation_id)
    with UserErrors(), _store(database_url) as store:
        row = store.view.get(op_id)
        try:
            op = store.app.get_operation(op_id)
        except CorruptRecordError as exc:
            if row is None:
                raise
            data = _undecodable(row, exc)
        else:
            data = _decoded(store.app, op, row)
    if json_output:
        print_json(data)
        return
    table = Table(show_header=False, title=f"operation {op_id}")
    for key, value in data.items():
        table.add_row(key, cell(_detail_text(value) if key == "attention_detail" else value))
    console.print(table)


def _decoded(app: Any, op: Operation, row: StatusRow | None) -> dict[str, Any]:
    """What ``ops show`` prints for an operation whose events all decode."""
    return {
        "operation_id": str(op.id), "status": op.status.value, "execution": op.execution.value,
        "settlement": op.settlement.value, "integration": f"{op.integration_name} v{op.integration_version}",
        "delivery_mode": op.delivery_mode.value, "attempts": f"{op.attempts}/{op.max_attempts}",
        "epoch": op.epoch, "attention": op.attention, "disposition": op.disposition,
        "failure": op.failure, "last_retry_reason": op.last_retry_reason,
        "ambiguity_reason": op.ambiguity_reason, "remote_id": op.remote_id,
        "target": mask_url(op.target) if op.target else op.target,
        "payload": _redacted(app, op.integration_name, op.integration_version, op.payload),
        "source": {"entity_type": op.source.entity_type, "entity_id": str(op.source.entity_id),
                   "entity_version": op.source.entity_version, "effect_index": op.source.effect_index},
        "principal": op.principal, "traceparent": op.traceparent, "excerpt": op.excerpt,
        "approval": _approval(app, op),
        "budget_wait": op.budget_wait,
        "projection_lag": row is None or row.version != op.version,
    }


def _approval(app: Any, op: Operation) -> dict[str, Any] | None:
    """What ``ops show`` says of an operation's approval: its state, the purpose it is (or would
    be) granted for, by whom, until when, and why it was last voided."""
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


def _undecodable(row: StatusRow, exc: CorruptRecordError) -> dict[str, Any]:
    """What ``ops show`` prints for an operation with a stored event this code cannot decode:
    its status row (the last state that decoded) and the record that stops it."""
    data = row.as_json()
    if data["attention_detail"] is None:  # the projection has not met the record yet
        mark = AttentionMark.of(exc)
        data["attention"], data["attention_detail"] = mark.reason, json.loads(mark.detail)
    keys = ("operation_id", "status", "execution", "settlement", "integration", "integration_version",
            "delivery_mode", "attempts", "max_attempts", "epoch", "attention", "attention_detail", "disposition",
            "remote_id", "version", "updated_at")
    return {**{key: data[key] for key in keys}, "decodes_up_to_version": row.version, "error": str(exc)}


@ops_app.command("timeline")
def timeline(operation_id: str, database_url: str = DatabaseOption, json_output: bool = JsonOption) -> None:
    """Show the operation's own events, oldest first (secrets never shown)."""
    op_id = _uuid(operation_id)
    with UserErrors(), _store(database_url) as store:
        try:
            store.app.get_operation(op_id)  # a clear error when it does not exist
        except CorruptRecordError:
            pass  # it exists: the timeline shows its events up to the damaged one
        entries = timeline_entries(store.app, op_id)
    if json_output:
        print_json(entries)
        return
    table = Table(title=f"timeline of {op_id}")
    for column in ("#", "at", "event", "details"):
        table.add_column(column)
    for entry in entries:
        details = ", ".join(f"{k}={v}" for k, v in entry["details"].items())
        table.add_row(cell(entry["version"]), cell(entry["at"]), cell(entry["event"]), cell(details))
    console.print(table)


def timeline_entries(app: Any, op_id: UUID) -> list[dict[str, Any]]:
    """The operation's events as JSON-ready dicts, payload fields redacted by classification."""
    entries: list[dict[str, Any]] = []
    name, version = None, None
    events = iter(app.events.get(op_id))
    while True:
        try:
            event = next(events)
        except StopIteration:
            break
        except CorruptRecordError as exc:  # show what decodes, then say where it stops
            entries.append({"version": exc.position, "at": "", "event": "CORRUPT", "details": {"error": str(exc)}})
            break
        fields = {k: v for k, v in vars(event).items() if k not in _BASE_FIELDS}
        if isinstance(event, Operation.Intended):
            name, version = event.integration_name, event.integration_version
            fields["payload"] = _redacted(app, name, version, event.payload)
            fields["target"] = mask_url(event.target) if event.target else event.target
        entries.append({
            "version": event.originator_version,
            "at": event.timestamp.isoformat(),
            "event": type(event).__name__,
            "details": {k: (str(v) if isinstance(v, (UUID, datetime)) else v) for k, v in fields.items()},
        })
    return entries


def _redacted(app: Any, name: str | None, version: int | None, payload: dict[str, Any]) -> dict[str, Any]:
    try:
        declaration = app.registry.get(name, version)
    except UnknownIntegrationError:
        declaration = None
    out = {}
    for key, value in payload.items():
        kind = declaration.classification_of(key) if declaration else None
        out[key] = value if kind is Classification.PUBLIC else f"[{kind.value if kind else 'unclassified'}]"
    return out


def attention(limit: int = typer.Option(100, min=1), database_url: str = DatabaseOption,
              json_output: bool = JsonOption) -> None:
    """The operator attention queue: why automated progress stopped, oldest first."""
    with UserErrors(), _store(database_url) as store:
        rows = store.view.attention(limit)
    if json_output:
        print_json([r.as_json() for r in rows])
    else:
        console.print(_rows_table(rows, f"needs attention ({len(rows)})", ATTENTION_COLUMNS))


def _operator_write(database_url: str | None, operation_id: str,
                    command: Callable[[Operation, datetime, Any], object]) -> None:
    op_id = _uuid(operation_id)
    with UserErrors(), _store(database_url, write=True) as store:
        op = store.app.get_operation(op_id)
        command(op, store.app.clock.now(), store.app)
        store.app.save(op)
        if store.owner:
            # This process owns the SQLite store: bring the status view up to date now. On
            # PostgreSQL the workers' projection leader does it within moments.
            StatusProjection(app=store.app, view=store.view).catch_up()
        console.print(f"operation {op_id}: {op.status.value}")


def resolve(
    operation_id: str,
    resolution: str = typer.Option(..., help="succeeded | failed | retry | abandon | retry_settlement"),
    evidence: str = typer.Option(..., help="what you checked (shown on the timeline)"),
    principal: str = typer.Option("operator", help="who decides"),
    database_url: str = DatabaseOption,
) -> None:
    """Record an operator's decision on an ambiguous operation or a blocked settlement."""
    _operator_write(database_url, operation_id, lambda op, now, app: op.resolve(
        now=now, principal=principal, resolution=resolution, evidence=evidence))


def cancel(
    operation_id: str,
    reason: str = typer.Option("", help="why"),
    principal: str = typer.Option("operator"),
    database_url: str = DatabaseOption,
) -> None:
    """Request cancellation; a worker honours it before egress."""
    _operator_write(database_url, operation_id, lambda op, now, app: op.request_cancel(
        now=now, principal=principal, reason=reason))


RoleOption = typer.Option(None, "--role", help="the approver's roles (the default policy needs 'approver')")


def approve(
    operation_id: str,
    deny: bool = typer.Option(False, "--deny", help="refuse instead of approving"),
    reason: str = typer.Option("", help="why (required with --deny)"),
    principal: str = typer.Option("operator"),
    role: list[str] = RoleOption,
    fingerprint: str = typer.Option(None, help="the fingerprint you reviewed (ops show); refused if it changed"),
    database_url: str = DatabaseOption,
) -> None:
    """Approve (or --deny) an operation whose integration requires approval. The approval is
    bound to the operation's fingerprint, the declaration's purpose and expires after its
    ``approval_valid_seconds``; the policy (OPLEDGER_APPROVAL_POLICY, default: the 'approver'
    role, no self-approval) decides who may approve."""
    if deny and not reason:
        fail("--deny needs --reason")

    def command(op: Operation, now: datetime, app: Any) -> None:
        if deny:
            op.deny_approval(now=now, principal=principal, reason=reason)
            return
        declaration = app.registry.get(op.integration_name, op.integration_version)
        op.grant_approval(now=now, principal=principal, roles=role or (), purpose=declaration.approval_purpose,
                          valid_seconds=declaration.approval_valid_seconds, fingerprint=fingerprint,
                          policy=load_policy(settings(database_url).approval_policy))

    _operator_write(database_url, operation_id, command)


@projections_app.command("rebuild")
def rebuild(database_url: str = DatabaseOption) -> None:
    """Rebuild the status projection from zero into a new table and swap it in."""
    with UserErrors(), _store(database_url, write=True) as store:
        n = StatusProjection(app=store.app, view=store.view).rebuild()
    console.print(f"rebuilt the status projection from {n} events")
