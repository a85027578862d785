"""Operator actions over HTTP: resolve with evidence, retry a blocked settlement, cancel, approve
or deny. Each runs the same function as the CLI (``adapters.operator.perform``) as the principal
of the request's bearer token, with the role the action needs. A keyed command's receipt that
recovery gave up on is resolved at ``/v1/receipts/{id}/resolve`` (``retry`` or ``abandon``;
``adapters.receipt_attention.perform_on_receipt``, as ``opledger resolve``), by an operator.

Source: issue 13 item 2; issue 31 item 4.
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Request

from adapters.http.auth import ACTION_ROLES, TokenGrant, principal_with
from adapters.http.observe import store_of
from adapters.http.problems import PROBLEM_RESPONSES, Problem, reject_unknown_query
from adapters.http.schemas import (
    ActionResult,
    ApproveBody,
    DenyBody,
    EvidenceBody,
    ReasonBody,
    ReceiptActionResult,
    ReceiptResolveBody,
    ResolveBody,
)
from adapters.operator import ActionKind, OperatorAction, perform
from adapters.receipt_attention import perform_on_receipt

router = APIRouter(prefix="/v1/operations", tags=["operator actions"], responses=PROBLEM_RESPONSES,
                   dependencies=[Depends(reject_unknown_query)])
OperationId = Annotated[UUID, Path(description="the operation id (a UUID)")]
Operator = Annotated[TokenGrant, Depends(principal_with(ACTION_ROLES["resolve"]))]
Approver = Annotated[TokenGrant, Depends(principal_with(ACTION_ROLES["approve"]))]


receipts_router = APIRouter(prefix="/v1/receipts", tags=["operator actions"], responses=PROBLEM_RESPONSES,
                            dependencies=[Depends(reject_unknown_query)])
ReceiptId = Annotated[UUID, Path(description="the receipt id (its transaction id, a UUID)")]


def _writable(request: Request) -> None:
    if not request.app.state.writable:
        raise Problem(409, "Conflict", "this server opened the SQLite store read-only (a worker owns it): "
                                       "operator actions need `opledger serve --write` with no worker running, "
                                       "or the CLI once the worker stops, or PostgreSQL")


def _run(request: Request, operation_id: UUID, kind: ActionKind, grant: TokenGrant, **fields: str) -> Any:
    store = store_of(request)
    _writable(request)
    # An approval carries the token's roles: the approval policy decides with them (issue 14).
    return perform(store, operation_id, OperatorAction(kind, grant.principal, roles=tuple(grant.roles), **fields))


@router.post("/{operation_id}/resolve", response_model=ActionResult,
             summary="Resolve an ambiguous operation or a blocked settlement with evidence (operator)")
def resolve(request: Request, grant: Operator, operation_id: OperationId, body: ResolveBody) -> Any:
    return _run(request, operation_id, "resolve", grant, resolution=body.resolution, evidence=body.evidence)


@router.post("/{operation_id}/retry-settlement", response_model=ActionResult,
             summary="Retry a blocked settlement without new egress (operator)")
def retry_settlement(request: Request, grant: Operator, operation_id: OperationId, body: EvidenceBody) -> Any:
    return _run(request, operation_id, "retry_settlement", grant, evidence=body.evidence)


@router.post("/{operation_id}/cancel", response_model=ActionResult,
             summary="Request cancellation; a worker honours it before egress (operator)")
def cancel(request: Request, grant: Operator, operation_id: OperationId, body: ReasonBody) -> Any:
    return _run(request, operation_id, "cancel", grant, reason=body.reason)


@router.post("/{operation_id}/approve", response_model=ActionResult,
             summary="Approve an operation whose integration requires approval (approver)")
def approve(request: Request, grant: Approver, operation_id: OperationId, body: ApproveBody | None = None) -> Any:
    # The body is optional, but one that is sent is read: malformed JSON or a member is a 422.
    return _run(request, operation_id, "approve", grant)


@router.post("/{operation_id}/deny", response_model=ActionResult,
             summary="Refuse an operation awaiting approval; it fails without egress (approver)")
def deny(request: Request, grant: Approver, operation_id: OperationId, body: DenyBody) -> Any:
    return _run(request, operation_id, "deny", grant, reason=body.reason)


@receipts_router.post("/{receipt_id}/resolve", response_model=ReceiptActionResult,
                      summary="Resolve a keyed command's receipt that recovery gave up on: retry or abandon (operator)")
def resolve_receipt(request: Request, grant: Operator, receipt_id: ReceiptId, body: ReceiptResolveBody) -> Any:
    _writable(request)
    return perform_on_receipt(store_of(request), receipt_id, principal=grant.principal, resolution=body.resolution,
                              evidence=body.evidence)
