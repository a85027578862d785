"""Which answer a keyed request gets for the receipt's state: one pure function, table-tested.

``decide_request`` is asked by the HTTP route, by recovery (a successor adopting a receipt whose
owner died) and by the code that settles a commit of unknown fate; nothing else restates it.
``renewal_interval`` and ``expirable`` are the lease and retention rules.

=====================================  ==========================================================
receipt                                answer
=====================================  ==========================================================
none                                   :class:`Open`: commit ``Opened``, then run the handler
expired (past retention, swept)        :class:`Reopen`: a new generation, whatever the request
another fingerprint                    :class:`Mismatch`: 422, nothing recorded
completed                              :class:`Replay`: the envelope byte for byte
pending, owner's lease live            :class:`InFlight`: 409 ``idempotency_receipt_pending``, 1 s
pending, lease expired or released     :class:`Adopt`: take over (epoch + 1) and run it
=====================================  ==========================================================

Source: issue 15 items 3-6; IETF draft-ietf-httpapi-idempotency-key-header-07 (400/409/422);
docs/adr/0006-idempotency-receipts.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from eventsourcing.application import AggregateNotFoundError

from ledger.clock import require_utc
from ledger.errors import IntentConflictError, OperationNotFoundError, PayloadError, UnrepresentableTimeError
from ledger.receipts import COMPLETED, EXPIRED, PENDING, Envelope, Receipt
from ledger.status import TERMINAL_EXECUTION_STATES, SettlementState, Status

PENDING_RETRY_AFTER_SECONDS = 1
"""``Retry-After`` of a 409 pending answer, seconds (a delta-seconds integer, RFC 9110 §10.2.3).

The rule: 1 s, whatever the lease. A live owner usually completes within milliseconds and the
server cannot know how long a handler will run; the lease's remainder (up to the whole lease)
would make every duplicate wait as long as a crash recovery. ``Retry-After`` is the *least* wait:
``adapters.client.CommandClient`` waits the larger of it and its own doubling backoff, so polls
of a long handler thin out. A dead owner's lease runs out by itself and the next try adopts it.
Source: tryout R12; docs/adr/0006-idempotency-receipts.md."""


@dataclass(frozen=True)
class Open:
    """No receipt: open one (epoch 1) and run the handler."""


@dataclass(frozen=True)
class Reopen:
    """The receipt expired: open its next generation and run the handler."""


@dataclass(frozen=True)
class Mismatch:
    """The key was used for another request (fingerprint differs): 422, nothing recorded."""

    fingerprint: str


@dataclass(frozen=True)
class Replay:
    """Terminal: replay ``envelope`` exactly."""

    envelope: Envelope


@dataclass(frozen=True)
class InFlight:
    """Another owner runs it now: 409 with ``Retry-After: retry_after_seconds``."""

    retry_after_seconds: int


@dataclass(frozen=True)
class Adopt:
    """Pending with no live owner: take it over and run it from the stored request."""


RequestDecision = Open | Reopen | Mismatch | Replay | InFlight | Adopt


def decide_request(receipt: Receipt | None, fingerprint: str | None, now: datetime) -> RequestDecision:
    """Decide the answer to a keyed request (or, with ``fingerprint=None``, to recovery).

    Args:
        receipt: the stored receipt, or None when the id has no records.
        fingerprint: the request's fingerprint; None when recovery asks (it runs the stored
            request, so there is nothing to compare).
        now: UTC-aware instant (on PostgreSQL, the database's clock).

    Returns:
        One of :class:`Open`, :class:`Reopen`, :class:`Mismatch`, :class:`Replay`,
        :class:`InFlight`, :class:`Adopt` (see the module's table).
    """
    now = require_utc(now, "now")
    if receipt is None:
        return Open()
    if receipt.state == EXPIRED:
        return Reopen()
    if fingerprint is not None and fingerprint != receipt.fingerprint:
        return Mismatch(fingerprint=receipt.fingerprint)
    if receipt.state == COMPLETED:
        assert receipt.envelope is not None
        return Replay(envelope=receipt.envelope)
    assert receipt.state == PENDING and receipt.lease_expires_at is not None
    remaining = (receipt.lease_expires_at - now).total_seconds()
    if receipt.released or remaining <= 0:
        return Adopt()
    return InFlight(retry_after_seconds=PENDING_RETRY_AFTER_SECONDS)


@dataclass(frozen=True)
class Refusal:
    """A deterministic refusal raised inside a handler: the terminal ``not_applied`` answer."""

    status: int
    code: str
    message: str


REFUSALS: tuple[tuple[type[Exception], int, str], ...] = (
    (AggregateNotFoundError, 404, "unknown_entity"),
    (OperationNotFoundError, 404, "unknown_operation"),
    (PayloadError, 422, "invalid_payload"),
    (UnrepresentableTimeError, 422, "unrepresentable_time"),
    (IntentConflictError, 409, "intent_conflict"),
)
"""The exceptions a handler may raise that refuse the request deterministically: the same request
on the same state is refused the same way every time, and nothing was applied. Each is
``(class, status, code)``; the first matching class wins."""


def refusal_of(exc: BaseException) -> Refusal | None:
    """Whether an exception a handler raised is a deterministic refusal of the request (a terminal
    ``not_applied`` envelope, replayed for the same key) or a thrown error (None: the receipt stays
    pending and retryable, and recovery may run it again).

    The rule: an error that judges the *request* (the entity or operation it names does not
    exist; the payload, target or tenant the ledger was asked to intend is refused by the
    declaration, ``PayloadError``; a time it implies cannot be represented; the same transition
    was already intended with other content) is a refusal, because running it again gives the
    same answer. Everything else stays pending, because a retry, a deploy or an operator can
    change the answer: store errors, declaration and configuration errors
    (``UnknownIntegrationError``, ``DeclarationError``), corrupt records, and the handler's own
    bugs, including a broken precondition of the ledger (``InvalidArgumentError``,
    ``NaiveDatetimeError``). A handler's own typed refusal is ``CommandRefused``.

    Source: issue 15 item 4 ("deterministic validation failures ... become terminal"; "thrown
    errors ... leave the receipt pending"); docs/adr/0006-idempotency-receipts.md; tryout R4.
    """
    for kind, status, code in REFUSALS:
        if isinstance(exc, kind):
            message = f"no entity {exc}" if kind is AggregateNotFoundError else str(exc)
            return Refusal(status=status, code=code, message=message)
    return None


def renewal_interval(requested_seconds: float, lease_seconds: float) -> float:
    """How often the owner's supervisor renews: the requested interval, clamped to a third of
    the lease (so two renewals can fail and the lease still holds), seconds.

    Raises:
        ValueError: a non-positive lease or interval.

    Source: issue 15 item 5; DESIGN §7 ("heartbeat before the lease is a third gone").
    """
    if not (lease_seconds > 0 and requested_seconds > 0):
        raise ValueError(f"lease and interval must be positive seconds ({lease_seconds!r}, {requested_seconds!r})")
    return min(requested_seconds, lease_seconds / 3)


def needs_renewal(lease_expires_at: datetime, now: datetime, lease_seconds: float) -> bool:
    """Whether a lease should be renewed now: less than two thirds of it is left."""
    return (lease_expires_at - require_utc(now, "now")).total_seconds() < lease_seconds * 2 / 3


def operation_resolved(execution: object, settlement: SettlementState, status: Status) -> bool:
    """Whether an operation a command authorized needs nothing more: settled, or terminal with no
    settlement to make. Ambiguous or blocked operations wait for an operator: unresolved."""
    if status is Status.SETTLED:
        return True
    return execution in TERMINAL_EXECUTION_STATES and settlement is SettlementState.NOT_REQUIRED


def expirable(receipt: Receipt, now: datetime, retention_seconds: float) -> bool:
    """Whether the retention sweep may expire ``receipt`` now: completed at least
    ``retention_seconds`` ago. A pending receipt never expires; the caller also keeps one whose
    operations are unresolved (:func:`operation_resolved`).

    Source: issue 15 item 6.
    """
    if receipt.state != COMPLETED or receipt.completed_at is None:
        return False
    return receipt.completed_at + timedelta(seconds=retention_seconds) <= require_utc(now, "now")


def recovery_gives_up(receipt: Receipt, now: datetime, max_adoptions: int) -> bool:
    """Whether recovery stops adopting ``receipt`` and hands it to an operator. Pure.

    The rule: a pending receipt nobody owns (its lease expired, or its owner released it) that
    recovery already adopted ``max_adoptions`` times, and that is not already stopped. Its handler
    threw on every run; running it again unattended would only repeat that, so it goes on the
    attention queue (``receipt_stuck``) instead of waiting silently for the client's retry.

    Args:
        receipt: the stored receipt.
        now: UTC-aware instant (on PostgreSQL, the database's clock).
        max_adoptions: the recovery service's limit (``OPLEDGER_RECEIPT_MAX_ADOPTIONS``).

    Source: issue 31 item 4 ("stuck receipts are operator work"); issue 15 item 5.
    """
    now = require_utc(now, "now")
    if receipt.state != PENDING or receipt.recovery_stopped_at is not None:
        return False
    owned = not receipt.released and receipt.lease_expires_at is not None and receipt.lease_expires_at > now
    return not owned and receipt.adoptions >= max_adoptions
