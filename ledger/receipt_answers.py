"""The answers a receipt replays: the terminal envelope of a keyed command, the problem+json
body of an error (RFC 9457, with the typed members ``code`` and ``retryable``), the generic
answers of version 1 receipts, and the answer of a receipt an operator abandoned.

Split from ``ledger.receipts`` (which re-exports every name here) so the aggregate's module
holds the receipt's life and this one what it answers.

Source: issue 15 items 2, 3; issue 31 item 4; docs/adr/0006-idempotency-receipts.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from ledger.declarations import canonical_json

APPLIED = "applied"
"""The handler ran and its effects committed with the envelope."""
NOT_APPLIED = "not_applied"
"""A deterministic refusal before any effect (invalid request, unknown entity, typed refusal)."""

KEPT_HEADERS = ("content-type", "location", "etag")
"""Response headers always kept in the envelope (lower case); the handler may mark more."""


@dataclass(frozen=True)
class Envelope:
    """The complete terminal response of a command, replayed byte for byte.

    Attributes:
        status: HTTP status code.
        headers: ``(name, value)`` pairs in order; names lower case.
        body: the response body bytes.
        outcome: :data:`APPLIED` or :data:`NOT_APPLIED`.
        error_code: the typed error's code (``None`` when applied).
        error_message: its message for people.
        retryable: whether the client may retry the command with a *new* key and succeed.
        transaction_id: the receipt id (``None`` on the keyless fast path).
    """

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    outcome: str = APPLIED
    error_code: str | None = None
    error_message: str | None = None
    retryable: bool = False
    transaction_id: UUID | None = None


PROBLEM_JSON = "application/problem+json"
"""The media type of every error body (RFC 9457)."""


def problem_body(*, status: int, title: str, code: str, detail: str, retryable: bool,
                 transaction_id: UUID | None = None, errors: list[dict[str, Any]] | None = None,
                 extra: dict[str, Any] | None = None) -> bytes:
    """An RFC 9457 problem+json body with the typed members ``code`` and ``retryable`` (and the
    transaction id when there is one, and any ``extra`` extension members, RFC 9457 §3.2),
    compact and key-ordered so replays are byte-identical."""
    data: dict[str, Any] = {"type": "about:blank", "title": title, "status": status, "detail": detail,
                            "code": code, "retryable": retryable, **(extra or {})}
    if transaction_id is not None:
        data["transaction_id"] = str(transaction_id)
    if errors:
        data["errors"] = errors
    return canonical_json(data)


V1_GENERIC_BODY = b'{"outcome":"%s","detail":"recorded by opledger receipts v1, which kept only the outcome"}'
"""The body an applied v1 receipt replays (``%s``: ``applied``), with status 200."""
V1_NOT_APPLIED_MESSAGE = "the command was not applied (v1 receipt: no detail kept)"
"""The error message of a ``not_applied`` v1 receipt (v1 kept no code, message or retryability)."""
V1_NOT_APPLIED_BODY = problem_body(status=422, title="Invalid input", code="not_applied",
                                   detail=V1_NOT_APPLIED_MESSAGE, retryable=False, extra={"outcome": NOT_APPLIED})
"""The body a ``not_applied`` v1 receipt replays, with status 422: an error, so problem+json
(RFC 9457) with ``code`` and ``retryable`` like every other error (issue 15 item 3)."""


ABANDONED_CODE = "command_abandoned"
"""The error code of the answer an abandoned receipt replays."""


def abandoned_envelope(rid: UUID) -> Envelope:
    """The terminal answer of a receipt an operator abandoned: 409 problem+json, ``not_applied``,
    retryable with a new key (the operator's evidence stays on the record, not in the answer)."""
    message = ("an operator abandoned this request after its handler kept failing; nothing was applied. "
               "Send it again with a new Idempotency-Key")
    body = problem_body(status=409, title="Conflict", code=ABANDONED_CODE, detail=message, retryable=True,
                        transaction_id=rid)
    return Envelope(status=409, headers=(("content-type", PROBLEM_JSON),), body=body, outcome=NOT_APPLIED,
                    error_code=ABANDONED_CODE, error_message=message, retryable=True, transaction_id=rid)
