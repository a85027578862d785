"""The read-only observe API: operations (filtered, paginated by cursor), one operation, its
timeline, the attention and approval queues, an entity's operations. Any role may read.

Source: issue 13 item 2; DESIGN §9.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Query, Request

from adapters.http.auth import TokenGrant, principal_with
from adapters.http.problems import PROBLEM_RESPONSES, Problem
from adapters.http.schemas import TEXT_PATTERN, OperationDetail, OperationPage, OperationSummary, TimelineEntry
from adapters.operator import show, timeline_entries
from adapters.runtime import Store
from ledger.errors import CorruptRecordError
from ledger.status import ExecutionState, Status
from projections.rows import StatusRow
from projections.view import OperationFilter

router = APIRouter(prefix="/v1", tags=["observe"], responses=PROBLEM_RESPONSES)
Reader = Annotated[TokenGrant, Depends(principal_with(None))]
Text = Annotated[str | None, Query(max_length=200, pattern=TEXT_PATTERN)]
Limit = Annotated[int, Query(ge=1, le=500, description="rows per page")]
OperationId = Annotated[UUID, Path(description="the operation id (a UUID)")]


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
    rows = store.view.search(replace(where, limit=where.limit + 1))  # one more: is there a next page?
    more = len(rows) > where.limit
    rows = rows[:where.limit]
    return OperationPage(items=[OperationSummary.model_validate(r.as_json()) for r in rows],
                         next_cursor=encode_cursor(rows[-1]) if more and rows else None)


def _since(since: datetime | None) -> datetime | None:
    if since is not None and since.tzinfo is None:
        raise Problem(422, "Invalid input", "since needs a time zone (e.g. 2026-01-01T00:00:00Z)")
    return since


@router.get("/operations", response_model=OperationPage, summary="List operations, newest first")
def list_operations(
    request: Request, _: Reader,
    status: Annotated[Status | None, Query(description="a status; an outcome status also finds settled ones")] = None,
    integration: Text = None, tenant: Text = None,
    attention: Annotated[str | None, Query(max_length=200, pattern=TEXT_PATTERN,
                                           description="an attention reason, or * for any")] = None,
    outcome: Annotated[ExecutionState | None, Query(description="execution outcome, settled or not")] = None,
    since: Annotated[datetime | None, Query(description="created at or after (ISO 8601 with zone)")] = None,
    cursor: Annotated[str | None, Query(max_length=400)] = None,
    limit: Limit = 50,
) -> OperationPage:
    where = OperationFilter(status=status.value if status else None, integration=integration, tenant=tenant,
                            attention=attention, outcome=outcome.value if outcome else None, since=_since(since),
                            after=decode_cursor(cursor) if cursor else None, limit=limit)
    return _page(store_of(request), where)


@router.get("/operations/{operation_id}", response_model=OperationDetail, summary="One operation")
def get_operation(request: Request, _: Reader, operation_id: OperationId) -> Any:
    return show(store_of(request), operation_id)


@router.get("/operations/{operation_id}/timeline", response_model=list[TimelineEntry],
            summary="An operation's events, oldest first")
def get_timeline(request: Request, _: Reader, operation_id: OperationId) -> Any:
    store = store_of(request)
    try:
        store.app.get_operation(operation_id)  # 404 when it does not exist
    except CorruptRecordError:
        pass  # it exists: the timeline ends where its records stop decoding
    return timeline_entries(store.app, operation_id)


@router.get("/attention", response_model=list[OperationSummary],
            summary="The attention queue: why automated progress stopped, oldest first")
def get_attention(
    request: Request, _: Reader,
    reason: Annotated[str | None, Query(max_length=200, pattern=TEXT_PATTERN)] = None,
    limit: Limit = 100,
) -> Any:
    view = store_of(request).view
    rows = view.attention_of(reason, limit) if reason else view.attention(limit)
    return [r.as_json() for r in rows]


@router.get("/approvals", response_model=OperationPage, summary="Operations waiting for an approver")
def get_approvals(request: Request, _: Reader, cursor: Annotated[str | None, Query(max_length=400)] = None,
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
    cursor: Annotated[str | None, Query(max_length=400)] = None,
    limit: Limit = 50,
) -> OperationPage:
    where = OperationFilter(entity_type=entity_type, entity_id=entity_id, limit=limit,
                            after=decode_cursor(cursor) if cursor else None)
    return _page(store_of(request), where)
