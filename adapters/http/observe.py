"""The read-only observe API: operations (filtered, paginated by cursor), one operation (with
the actions the token may take on it), its timeline, the attention and approval queues, an
entity's operations, and who the token is (``/v1/me``). Any role may read.

Source: issue 13 item 2; DESIGN §9.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import replace
from datetime import UTC, datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import WithJsonSchema

from adapters.archive_reads import show_any, timeline_any
from adapters.http.auth import TokenGrant, principal_with
from adapters.http.operator_view import offers_for, role_actions, trace_link
from adapters.http.problems import PROBLEM_RESPONSES, Problem, reject_unknown_query
from adapters.http.schemas import (
    TEXT_PATTERN,
    ArchivedLateAttention,
    OperationDetail,
    OperationPage,
    OperationSummary,
    ReceiptAttention,
    SignedIn,
    TimelineEntry,
)
from adapters.receipt_attention import attention_queue
from adapters.runtime import Store
from ledger.status import ExecutionState, Status
from projections.rows import StatusRow
from projections.view import OperationFilter

router = APIRouter(prefix="/v1", tags=["observe"], responses=PROBLEM_RESPONSES,
                   dependencies=[Depends(reject_unknown_query)])
Reader = Annotated[TokenGrant, Depends(principal_with(None))]
Text = Annotated[str | None, Query(max_length=200, pattern=TEXT_PATTERN)]
DateTimeText = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time", "maxLength": 64})]
"""An RFC 3339 date-time, parsed by :func:`parse_since` (pydantic's own datetime also takes
numbers as Unix times, which the schema does not allow)."""
Limit = Annotated[int, Query(ge=1, le=500, description="rows per page")]
OperationId = Annotated[UUID, Path(description="the operation id (a UUID)")]
CURSOR_FORMAT = "opledger-cursor"
Cursor = Annotated[str, Query(max_length=400, json_schema_extra={"format": CURSOR_FORMAT},
                              description="next_cursor of the previous page (opaque); empty for the first")]


def store_of(request: Request) -> Store:
    """The open store of the app serving ``request``."""
    store: Store = request.app.state.store
    return store


def encode_cursor(row: StatusRow) -> str:
    """An opaque cursor after ``row`` (its creation time and id)."""
    raw = json.dumps([row.created_at.isoformat(), str(row.operation_id)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    """The position a cursor names.

    Raises:
        Problem: 400 when it is not a cursor this API gave out.
    """
    try:
        at, op_id = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        when = datetime.fromisoformat(at)
        if when.tzinfo is None:
            raise ValueError("naive")
        return when, UUID(op_id)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise Problem(400, "Bad request", "cursor is not one this API gave out; start without it") from None


def _page(store: Store, where: OperationFilter) -> OperationPage:
    rows = store.queries.search(replace(where, limit=where.limit + 1))  # one more: is there a next page?
    more = len(rows) > where.limit
    rows = rows[:where.limit]
    return OperationPage(items=[OperationSummary.model_validate(r.as_json()) for r in rows],
                         next_cursor=encode_cursor(rows[-1]) if more and rows else None)


_LEAP_SECOND = re.compile(r"(T\d\d:\d\d):60")


def parse_since(text: str | None) -> datetime | None:
    """An RFC 3339 date-time with its zone (``2026-01-01T00:00:00Z``), as UTC; None for None.

    A leap second (``:60``) counts as the second before it.

    Raises:
        Problem: 422 when it is not one.
    """
    if text is None:
        return None
    normal = _LEAP_SECOND.sub(r"\1:59", text.upper().replace("Z", "+00:00"))
    try:
        when = datetime.fromisoformat(normal)
    except ValueError:
        when = None
    if when is None or when.tzinfo is None or "T" not in normal:
        raise Problem(422, "Invalid input", f"since must be an RFC 3339 date-time with a zone, e.g. "
                                            f"2026-01-01T00:00:00Z (got {text[:60]!r})")
    try:
        return when.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 has no UTC instant
        return datetime.min.replace(tzinfo=UTC)


@router.get("/operations", response_model=OperationPage, summary="List operations, newest first")
def list_operations(
    request: Request, _: Reader,
    status: Annotated[Status | None, Query(description="a status; an outcome status also finds settled ones")] = None,
    integration: Text = None, tenant: Text = None,
    attention: Annotated[str | None, Query(max_length=200, pattern=TEXT_PATTERN,
                                           description="an attention reason, or * for any")] = None,
    outcome: Annotated[ExecutionState | None, Query(description="execution outcome, settled or not")] = None,
    since: Annotated[DateTimeText | None, Query(description="created at or after this RFC 3339 date-time "
                                                            "(with zone)")] = None,
    cursor: Cursor = "",
    limit: Limit = 50,
) -> OperationPage:
    where = OperationFilter(status=status.value if status else None, integration=integration, tenant=tenant,
                            attention=attention, outcome=outcome.value if outcome else None, since=parse_since(since),
                            after=decode_cursor(cursor) if cursor else None, limit=limit)
    return _page(store_of(request), where)


@router.get("/me", response_model=SignedIn, summary="Who the bearer token is, and what its roles allow")
def get_me(request: Request, grant: Reader) -> SignedIn:
    return SignedIn(principal=grant.principal, roles=grant.roles, actions=role_actions(grant),
                    writable=request.app.state.writable)


@router.get("/operations/{operation_id}", response_model=OperationDetail,
            summary="One operation, with the actions the token may take on it now")
def get_operation(request: Request, grant: Reader, operation_id: OperationId) -> Any:
    store = store_of(request)
    detail = show_any(store, operation_id, store.settings.archive_dir)
    if "archived" in detail:  # read from its archive segment: nothing may be done to it
        detail.update(actions=[], withheld=[])
    else:
        detail.update(offers_for(store, operation_id, grant, writable=request.app.state.writable))
    detail["trace_url"] = trace_link(request.app.state.trace_url_template, detail.get("trace_id"))
    return detail


@router.get("/operations/{operation_id}/timeline", response_model=list[TimelineEntry],
            summary="An operation's events, oldest first")
def get_timeline(request: Request, _: Reader, operation_id: OperationId) -> Any:
    store = store_of(request)
    return timeline_any(store, operation_id, store.settings.archive_dir)


@router.get("/operations/{operation_id}/evidence", response_model=dict[str, Any],
            summary="The operation's evidence document (as `opledger evidence ID`)")
def get_evidence(request: Request, _: Reader, operation_id: OperationId) -> Any:
    from adapters.evidence import export

    return export(store_of(request), operation_id)


@router.get("/attention", response_model=list[OperationSummary | ReceiptAttention | ArchivedLateAttention],
            summary="The attention queue: why automated progress stopped, oldest first (operations, keyed "
                    "commands whose receipt recovery gave up on: kind receipt, reason receipt_stuck, and callbacks "
                    "for archived operations: kind archived, reason late_after_archive)")
def get_attention(
    request: Request, grant: Reader,
    reason: Annotated[str | None, Query(max_length=200, pattern=TEXT_PATTERN)] = None,
    limit: Limit = 100,
) -> Any:
    rows = attention_queue(store_of(request), limit, reason)
    # A receipt row's actions are what this token may do now, as an operation's are: resolving
    # a receipt needs a role that may resolve, on a server that writes.
    may = "resolve" in role_actions(grant) and request.app.state.writable
    return [{**row, "actions": row["actions"] if may else []} if row.get("kind") == "receipt" else row for row in rows]


@router.get("/approvals", response_model=OperationPage, summary="Operations waiting for an approver")
def get_approvals(request: Request, _: Reader, cursor: Cursor = "",
                  limit: Limit = 50) -> OperationPage:
    where = OperationFilter(status="pending", approval="required", limit=limit,
                            after=decode_cursor(cursor) if cursor else None)
    return _page(store_of(request), where)


@router.get("/entities/{entity_type}/{entity_id}/operations", response_model=OperationPage,
            summary="The operations an entity's transitions authorized, newest first")
def get_entity_operations(
    request: Request, _: Reader,
    entity_type: Annotated[str, Path(max_length=300, pattern=TEXT_PATTERN,
                                     description="the entity's type as recorded (module:Class)")],
    entity_id: Annotated[UUID, Path()],
    cursor: Cursor = "",
    limit: Limit = 50,
) -> OperationPage:
    where = OperationFilter(entity_type=entity_type, entity_id=entity_id, limit=limit,
                            after=decode_cursor(cursor) if cursor else None)
    return _page(store_of(request), where)
