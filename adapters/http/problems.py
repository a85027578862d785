"""Errors as RFC 9457 problem details (``application/problem+json``), never a traceback.

Ledger errors are translated here, once: not found 404, refused by the operation's state 409,
bad input 422, the store owned elsewhere 409, anything else unexpected 500 (logged, not shown).

Source: RFC 9457; issue 13 item 2.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import psycopg_pool
import structlog
from eventsourcing.persistence import InterfaceError, OperationalError
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from ledger.archives import ArchiveError
from ledger.errors import (
    CorruptRecordError,
    InvalidArgumentError,
    LedgerError,
    OperationNotFoundError,
    OperatorActionRefusedError,
    ReceiptNotFoundError,
    StoreLockedError,
    WriteRefusedError,
)
from ledger.outages import is_transient, refresh_connections

log = structlog.get_logger("opledger.http")
MEDIA_TYPE = "application/problem+json"


class ProblemDetail(BaseModel):
    """An RFC 9457 problem: ``type`` (``about:blank``: the status says it all), ``title``,
    ``status``, ``detail`` for people, the extension members ``code`` (stable, for machines) and
    ``retryable`` (whether the same request may succeed later), and ``errors`` for invalid fields."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    code: str
    retryable: bool
    errors: list[dict[str, Any]] | None = None


DEFAULT_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                 405: "method_not_allowed", 409: "conflict", 413: "body_too_large", 415: "unsupported_media_type",
                 422: "invalid_request", 500: "internal_error", 503: "unavailable"}
"""The ``code`` of a problem raised without one, by status (``error`` for any other status)."""


def default_retryable(status: int) -> bool:
    """Whether a problem of ``status`` raised without an explicit ``retryable`` is retryable:
    503 (unavailable for now) and 429 (too many requests) are; every other status is not (a 500
    is a bug that the same request meets again; a 4xx is the request's own)."""
    return status in (429, 503)


STORE_ERRORS: tuple[type[Exception], ...] = (psycopg.OperationalError, psycopg.InterfaceError,
                                             psycopg_pool.PoolTimeout, OperationalError, InterfaceError,
                                             sqlite3.OperationalError)
"""Errors that may mean the store is unreachable for now (``ledger.outages.is_transient`` decides)."""
RETRY_AFTER_SECONDS = 1
"""``Retry-After`` of a 503 while the store is unreachable, seconds."""
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ProblemDetail, "content": {MEDIA_TYPE: {}}, "description": title}
    for code, title in ((400, "Bad request"), (401, "Unauthorized"), (403, "Forbidden"), (404, "Not found"),
                        (409, "Conflict"), (422, "Invalid input"), (503, "Store unavailable"))
}
"""``responses=`` for routes: every problem status documented in the OpenAPI."""


class Problem(Exception):
    """Raise to answer with a problem+json response."""

    def __init__(self, status: int, title: str, detail: str | None = None, *,
                 headers: dict[str, str] | None = None, errors: list[dict[str, Any]] | None = None,
                 code: str | None = None, retryable: bool | None = None) -> None:
        super().__init__(detail or title)
        self.body = ProblemDetail(title=title, status=status, detail=detail, errors=errors,
                                  code=code or DEFAULT_CODES.get(status, "error"),
                                  retryable=default_retryable(status) if retryable is None else retryable)
        self.headers = headers


def problem_response(problem: Problem) -> JSONResponse:
    """The response for ``problem``."""
    return JSONResponse(problem.body.model_dump(exclude_none=True), status_code=problem.body.status,
                        media_type=MEDIA_TYPE, headers=problem.headers)


def translate(exc: LedgerError) -> Problem:
    """A ledger error as the problem an HTTP client should see."""
    if isinstance(exc, OperationNotFoundError):
        return Problem(404, "Not found", str(exc), code="operation_not_found")
    if isinstance(exc, ReceiptNotFoundError):
        return Problem(404, "Not found", str(exc), code="receipt_not_found")
    if isinstance(exc, OperatorActionRefusedError):
        return Problem(409, "Conflict", str(exc), code="action_refused")
    if isinstance(exc, StoreLockedError):
        return Problem(409, "Conflict", str(exc), code="store_locked")
    if isinstance(exc, InvalidArgumentError):
        return Problem(422, "Invalid input", str(exc), code="invalid_argument")
    if isinstance(exc, WriteRefusedError):  # issue 35: that operation's problem; the server goes on
        return Problem(422, "Write refused", str(exc), code="write_refused")
    if isinstance(exc, CorruptRecordError):
        return Problem(409, "Conflict", f"{exc} (the operation is on the attention queue)", code="corrupt_record")
    if isinstance(exc, ArchiveError):  # an archived operation's segment missing or tampered with
        return Problem(409, "Conflict", str(exc), code="archive_unreadable")
    return Problem(400, "Bad request", str(exc))


def reject_unknown_query(request: Request) -> None:
    """A router dependency: a query parameter the route does not declare, or one given twice, is
    refused (422), so a misspelt filter (``?stauts=failed``) never silently returns everything."""
    route = request.scope.get("route")
    if route is None:
        return
    allowed: set[str] = set()
    pending = [route.dependant]
    while pending:  # the route's own query parameters and its dependencies'
        dependant = pending.pop()
        allowed.update(param.alias for param in dependant.query_params)
        pending.extend(dependant.dependencies)
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        raise Problem(422, "Invalid input", f"unknown query parameter(s) {', '.join(map(repr, unknown))}; "
                                            f"this route takes {', '.join(sorted(allowed)) or 'none'}",
                      code="unknown_query_parameter")
    repeated = sorted({key for key in request.query_params if len(request.query_params.getlist(key)) > 1})
    if repeated:  # every parameter here takes one value; the last of several would silently win
        raise Problem(422, "Invalid input", f"query parameter(s) {', '.join(map(repr, repeated))} given more than once",
                      code="repeated_query_parameter")


def install(app: FastAPI) -> None:
    """Answer every error of ``app`` with problem+json."""

    @app.exception_handler(Problem)
    async def on_problem(request: Request, exc: Problem) -> JSONResponse:
        return problem_response(exc)

    @app.exception_handler(LedgerError)
    async def on_ledger_error(request: Request, exc: LedgerError) -> JSONResponse:
        return problem_response(translate(exc))

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else None
        title = {404: "Not found", 405: "Method not allowed"}.get(exc.status_code, "Error")
        return problem_response(Problem(exc.status_code, title, detail, headers=getattr(exc, "headers", None)))

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"location": ".".join(str(p) for p in e.get("loc", ())), "message": e.get("msg", "")}
                  for e in exc.errors()]
        detail = "; ".join(f"{e['location']}: {e['message']}" for e in errors)
        return problem_response(Problem(422, "Invalid input", detail, errors=errors))

    async def on_store_error(request: Request, exc: Exception) -> JSONResponse:
        if not is_transient(exc):
            raise exc  # not an outage: the generic handler below answers 500
        # The store is unreachable for now (a restart, terminated connections): a retryable
        # answer, not a 500; dead pooled connections are replaced for the next request.
        store = getattr(request.app.state, "store", None)
        if store is not None:
            refresh_connections(store.app, store.view)
        log.warning("store unreachable answering a request", path=request.url.path, error=str(exc))
        return problem_response(Problem(503, "Store unavailable", "the store is unreachable for now; retry later",
                                        code="store_unavailable",
                                        headers={"Retry-After": str(RETRY_AFTER_SECONDS)}))

    for kind in STORE_ERRORS:
        app.add_exception_handler(kind, on_store_error)

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error answering a request", path=request.url.path)
        return problem_response(Problem(500, "Internal server error", "the error is in the server's log"))
