"""Operator actions over HTTP: resolve with evidence, retry a blocked settlement, cancel, approve
or deny. Each runs the same function as the CLI (``adapters.operator.perform``) as the principal
of the request's bearer token, with the role the action needs.

Source: issue 13 item 2.
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Request

from adapters.http.auth import ACTION_ROLES, TokenGrant, principal_with
from adapters.http.observe import store_of
from adapters.http.problems import PROBLEM_RESPONSES, Problem, reject_unknown_query
from adapters.http.schemas import ActionResult, ApproveBody, DenyBody, EvidenceBody, ReasonBody, ResolveBody
from adapters.operator import ActionKind, OperatorAction, perform

router = APIRouter(prefix="/v1/operations", tags=["operator actions"], responses=PROBLEM_RESPONSES,
                   dependencies=[Depends(reject_unknown_query)])
OperationId = Annotated[UUID, Path(description="the operation id (a UUID)")]
Operator = Annotated[TokenGrant, Depends(principal_with(ACTION_ROLES["resolve"]))]
Approver = Annotated[TokenGrant, Depends(principal_with(ACTION_ROLES["approve"]))]


def _run(request: Request, operation_id: UUID, kind: ActionKind, grant: TokenGrant, **fields: str) -> Any:
    store = store_of(request)
    if not request.app.state.writable:
        raise Problem(409, "Conflict", "this server opened the SQLite store read-only (a worker owns it): "
                                       "operator actions need `opledger serve --write` with no worker running, "
                                       "or the CLI once the worker stops, or PostgreSQL")
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
