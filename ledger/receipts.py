"""The idempotency receipt: the durable record behind one inbound ``Idempotency-Key`` request.

A receipt is an ``eventsourcing`` aggregate in the host application's own store, so the
command's entity and operation events and the receipt's terminal ``ReceiptCompleted(envelope)`` are
saved in one transaction (``ledger.inbound``). Its id is the stable transaction id
``uuid5(principal, scope, key)`` (scope: the command name); its fingerprint covers what the
caller asked, so the same key with another request is told apart from a retry.

Life of a receipt (guards in the command methods, ``apply`` only assigns; STYLE rule 1)::

    Opened ──▶ pending (owner, epoch, lease) ──ReceiptCompleted──▶ completed ──ReceiptExpired──▶ expired
                 │  ▲ ReceiptLeaseRenewed / ReceiptReleased / ReceiptAdopted (epoch+1)          │
                 └──┘                                                       └─ReceiptReopened─▶ pending

A pending receipt that recovery adopted ``max_adoptions`` times without completing it gets
``ReceiptRecoveryStopped``: it is on the attention queue (``receipt_stuck``) until it moves on,
which ``ReceiptResolved`` records first (an operator's ``retry`` or ``abandon``, the client's
retry adopting it, or its owner completing it after all).

Source: issue 15 items 2, 5, 6; issue 31 item 4; docs/adr/0006-idempotency-receipts.md.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any, ClassVar
from uuid import UUID, uuid5

from eventsourcing.domain import Aggregate

from ledger.clock import require_utc
from ledger.codec import LedgerEvent
from ledger.declarations import canonical_json
from ledger.errors import IllegalTransitionError, InvalidArgumentError, ReceiptFencedError
from ledger.intents import MAX_EVIDENCE_CHARS, check_operator_text, require_principal
from ledger.receipt_answers import (
    ABANDONED_CODE,
    APPLIED,
    KEPT_HEADERS,
    NOT_APPLIED,
    PROBLEM_JSON,
    V1_GENERIC_BODY,
    V1_NOT_APPLIED_BODY,
    V1_NOT_APPLIED_MESSAGE,
    Envelope,
    abandoned_envelope,
    problem_body,
)

# What this module offers, the answers included (``ledger.receipt_answers``, split from here).
__all__ = [
    "ABANDONED_CODE", "APPLIED", "COMPLETED", "EXPIRED", "KEPT_HEADERS", "NOT_APPLIED", "OPERATOR_RESOLUTIONS",
    "PENDING", "PROBLEM_JSON", "RECEIPT_EVENTS", "RECEIPT_NAMESPACE", "V1_GENERIC_BODY", "V1_NOT_APPLIED_BODY",
    "V1_NOT_APPLIED_MESSAGE", "Envelope", "Receipt", "abandoned_envelope", "problem_body", "receipt_id",
    "request_fingerprint",
]

RECEIPT_NAMESPACE = UUID("0c6f4f2e-9a51-5d7b-8e3a-2b4f61d9c7a5")
"""Fixed uuid5 namespace of receipt ids (transaction ids). Changing it would orphan every receipt."""

PENDING = "pending"
"""ReceiptOpened (or adopted, reopened); the handler's result is not committed. Moves on by ReceiptCompleted,
or by ReceiptAdopted after the owner's lease expired or it released the receipt."""
COMPLETED = "completed"
"""Terminal: the envelope is committed and replayed for the same key and fingerprint. Moves on
only by ReceiptExpired, after the retention."""
EXPIRED = "expired"
"""Past its retention: no longer replayed; the same key opens a new generation (ReceiptReopened)."""


def receipt_id(principal: str, scope: str, key: str) -> UUID:
    """The stable transaction id of a keyed request: ``uuid5`` over principal, scope and key.

    Args:
        principal: who sent the request (the bearer token's principal).
        scope: the command name (a key is scoped per command; ADR 0006).
        key: the ``Idempotency-Key`` value (the sf-string's content).

    Returns:
        The receipt's id; the same three always give the same id.
    """
    return uuid5(RECEIPT_NAMESPACE, canonical_json([principal, scope, key]).decode())


def request_fingerprint(request: dict[str, Any]) -> str:
    """``sha256:<hex>`` of a canonical request (``ledger.inbound.canonical_request``): route,
    command, principal and canonical body. Timestamps and generated ids are never in it.

    Raises:
        ValueError: the request is not plain JSON data.
    """
    return "sha256:" + hashlib.sha256(canonical_json(request)).hexdigest()


class Receipt(Aggregate):
    """The receipt of one keyed request (DESIGN §3 'receipt'). Build with :meth:`open`."""

    class Event(LedgerEvent, Aggregate.Event):
        """Base of receipt events; ``timestamp`` is the injected ``now`` (UTC)."""

    class ReceiptOpened(Event, Aggregate.Created):
        """Committed before the handler runs, with the canonical request it will run from."""

        principal: str
        scope: str
        key: str
        fingerprint: str
        request: dict[str, Any]
        owner: str
        epoch: int
        lease_expires_at: datetime

        def apply(self, r: Receipt) -> None:
            r.principal, r.scope, r.key = self.principal, self.scope, self.key
            r.generation = 1
            r.adoptions = 0
            r.release_reason = r.stop_reason = r.recovery_stopped_at = None
            r._begin(self.fingerprint, self.request, self.owner, self.epoch, self.lease_expires_at)

    class ReceiptAdopted(Event):
        """A successor took over a pending receipt whose lease expired or was released."""

        owner: str
        epoch: int
        lease_expires_at: datetime

        def apply(self, r: Receipt) -> None:
            r.owner, r.epoch, r.lease_expires_at, r.released = self.owner, self.epoch, self.lease_expires_at, False
            r.adoptions += 1

    class ReceiptLeaseRenewed(Event):
        """The owner's supervisor extended its lease."""

        epoch: int
        lease_expires_at: datetime

        def apply(self, r: Receipt) -> None:
            r.lease_expires_at = self.lease_expires_at

    class ReceiptReleased(Event):
        """The owner gave the receipt up (its handler threw): anyone may adopt it at once."""

        epoch: int
        reason: str

        def apply(self, r: Receipt) -> None:
            r.released = True
            r.release_reason = self.reason

    class ReceiptCompleted(Event):
        """Terminal: the complete envelope, co-committed with the handler's effects."""

        class_version: ClassVar[int] = 2
        epoch: int
        status: int
        headers: list[list[str]]
        body: bytes
        outcome: str
        error_code: str | None
        error_message: str | None
        retryable: bool
        operation_ids: list[UUID]

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """v1 stored only the broad outcome: a documented generic envelope (guide,
            'Inbound commands')."""
            applied = state.pop("outcome") == APPLIED
            state.update(
                status=200 if applied else 422,
                headers=[["content-type", "application/json" if applied else PROBLEM_JSON]],
                body=V1_GENERIC_BODY % APPLIED.encode() if applied else V1_NOT_APPLIED_BODY,
                outcome=APPLIED if applied else NOT_APPLIED,
                error_code=None if applied else "not_applied",
                error_message=None if applied else V1_NOT_APPLIED_MESSAGE,
                retryable=False,
                operation_ids=[],
            )

        def apply(self, r: Receipt) -> None:
            r.state = COMPLETED
            r.completed_at = self.timestamp
            r.operation_ids = list(self.operation_ids)
            r.envelope = Envelope(status=self.status, headers=tuple((n, v) for n, v in self.headers),
                                  body=self.body, outcome=self.outcome, error_code=self.error_code,
                                  error_message=self.error_message, retryable=self.retryable,
                                  transaction_id=r.id)

    class ReceiptRecoveryStopped(Event):
        """Recovery gave up: it adopted the receipt ``adoptions`` times and the handler never
        completed (``reason``: the last release's, e.g. the exception's class name). ``scope``
        (the command) is repeated here so a reader needs no other record to label it."""

        scope: str
        epoch: int
        adoptions: int
        reason: str

        def apply(self, r: Receipt) -> None:
            r.recovery_stopped_at = self.timestamp
            r.stop_reason = self.reason

    class ReceiptResolved(Event):
        """A stopped receipt moved on; recorded before what moved it, in the same save.
        ``resolution``: ``retry`` (an operator: recovery adopts it again, with a fresh budget of
        adoptions), ``abandon`` (an operator: it is answered ``not_applied``, its
        ``ReceiptCompleted`` follows), ``adopted`` (the client's retry with the same key adopted
        it, or recovery under a raised limit; ``principal`` is then the adopting owner's token)
        or ``completed`` (its owner completed it after all; its owner token)."""

        scope: str
        principal: str
        resolution: str
        evidence: str

        def apply(self, r: Receipt) -> None:
            r.recovery_stopped_at = None
            r.stop_reason = None
            if self.resolution == "retry":
                r.adoptions = 0
                r.released = True

    class ReceiptExpired(Event):
        """Past retention: the envelope is no longer replayed."""

        def apply(self, r: Receipt) -> None:
            r.state = EXPIRED

    class ReceiptReopened(Event):
        """The same key after expiry: a new generation of the receipt, pending again."""

        fingerprint: str
        request: dict[str, Any]
        owner: str
        epoch: int
        lease_expires_at: datetime

        def apply(self, r: Receipt) -> None:
            r.generation += 1
            r._begin(self.fingerprint, self.request, self.owner, self.epoch, self.lease_expires_at)

    # ------------------------------------------------------------------ state

    def __init__(self) -> None:
        # Every field is assigned by ReceiptOpened.apply; declared here for readers and type checkers.
        self.principal: str = ""
        self.scope: str = ""
        self.key: str = ""
        self.fingerprint: str = ""
        self.request: dict[str, Any] = {}
        self.owner: str = ""
        self.epoch: int = 0
        self.lease_expires_at: datetime | None = None
        self.released: bool = False
        self.state: str = PENDING
        self.generation: int = 0
        self.adoptions: int = 0
        self.envelope: Envelope | None = None
        self.completed_at: datetime | None = None
        self.operation_ids: list[UUID] = []
        self.release_reason: str | None = None
        self.recovery_stopped_at: datetime | None = None
        self.stop_reason: str | None = None

    def _begin(self, fingerprint: str, request: dict[str, Any], owner: str, epoch: int,
               lease_expires_at: datetime) -> None:
        self.fingerprint, self.request = fingerprint, dict(request)
        self.owner, self.epoch, self.lease_expires_at = owner, epoch, lease_expires_at
        self.released = False
        self.state = PENDING
        self.envelope = None
        self.completed_at = None
        self.operation_ids = []

    # ------------------------------------------------------------------ commands

    @classmethod
    def open(cls, *, principal: str, scope: str, key: str, request: dict[str, Any], owner: str,
             now: datetime, lease_seconds: float) -> Receipt:
        """A new pending receipt owned by ``owner`` under epoch 1 (commit it before the handler).

        Args:
            principal, scope, key: what the id is derived from (:func:`receipt_id`).
            request: the canonical request (plain JSON data).
            owner: the owner token (``serve`` process and request).
            now: UTC-aware instant.
            lease_seconds: the owner lease's length, seconds (> 0).
        """
        now = require_utc(now, "now")
        return cls._create(cls.ReceiptOpened, id=receipt_id(principal, scope, key), principal=principal, scope=scope,
                           key=key, fingerprint=request_fingerprint(request), request=request, owner=owner,
                           epoch=1, lease_expires_at=_expiry(now, lease_seconds), timestamp=now)

    def adopt(self, *, owner: str, now: datetime, lease_seconds: float) -> int:
        """Take over a pending receipt whose lease expired or was released; returns the new epoch.

        Raises:
            IllegalTransitionError: not pending, or its owner's lease is live.
        """
        now = require_utc(now, "now")
        if self.state != PENDING:
            raise IllegalTransitionError("adopt", self.state)
        if not self.released and self.lease_expires_at is not None and self.lease_expires_at > now:
            raise IllegalTransitionError("adopt", "owned", f"the lease of {self.owner} is live")
        if self.recovery_stopped_at is not None:  # the client's retry (or a raised limit) moves it on
            self._resolved(owner, "adopted", "", now)
        self.trigger_event(self.ReceiptAdopted, owner=owner, epoch=self.epoch + 1,
                           lease_expires_at=_expiry(now, lease_seconds), timestamp=now)
        return self.epoch

    def renew(self, *, epoch: int, now: datetime, lease_seconds: float) -> None:
        """Extend the owner's lease.

        Raises:
            ReceiptFencedError: another epoch owns it, or it is no longer pending.
        """
        now = require_utc(now, "now")
        self._check_owner(epoch, "renew")
        self.trigger_event(self.ReceiptLeaseRenewed, epoch=epoch, lease_expires_at=_expiry(now, lease_seconds),
                           timestamp=now)

    def release(self, *, epoch: int, reason: str, now: datetime) -> None:
        """Give a pending receipt up so that a retry or recovery may adopt it at once.

        Raises:
            ReceiptFencedError: another epoch owns it, or it is no longer pending.
        """
        self._check_owner(epoch, "release")
        self.trigger_event(self.ReceiptReleased, epoch=epoch, reason=reason, timestamp=require_utc(now, "now"))

    def complete(self, *, epoch: int, envelope: Envelope, operation_ids: list[UUID], now: datetime) -> None:
        """Record the terminal envelope (save it with the handler's aggregates, in one call).

        Raises:
            ReceiptFencedError: another epoch owns it, or it is no longer pending.
        """
        self._check_owner(epoch, "complete")
        if self.recovery_stopped_at is not None:  # its owner finished after recovery gave up
            self._resolved(self.owner, "completed", "", require_utc(now, "now"))
        self.trigger_event(self.ReceiptCompleted, epoch=epoch, status=envelope.status,
                        headers=[list(h) for h in envelope.headers],
                        body=envelope.body, outcome=envelope.outcome, error_code=envelope.error_code,
                        error_message=envelope.error_message, retryable=envelope.retryable,
                        operation_ids=list(operation_ids), timestamp=require_utc(now, "now"))

    def expire(self, *, now: datetime) -> None:
        """Stop replaying a completed receipt (the retention service decides when).

        Raises:
            IllegalTransitionError: not completed.
        """
        if self.state != COMPLETED:
            raise IllegalTransitionError("expire", self.state)
        self.trigger_event(self.ReceiptExpired, timestamp=require_utc(now, "now"))

    def reopen(self, *, request: dict[str, Any], owner: str, now: datetime, lease_seconds: float) -> int:
        """Start a new generation of an expired receipt; returns the new epoch.

        Raises:
            IllegalTransitionError: not expired.
        """
        now = require_utc(now, "now")
        if self.state != EXPIRED:
            raise IllegalTransitionError("reopen", self.state)
        self.trigger_event(self.ReceiptReopened, fingerprint=request_fingerprint(request), request=request,
                           owner=owner, epoch=self.epoch + 1, lease_expires_at=_expiry(now, lease_seconds),
                           timestamp=now)
        return self.epoch

    def stop_recovery(self, *, adoptions: int, now: datetime) -> None:
        """Record that recovery gives up on this receipt (``ReceiptRecoveryStopped``); it is then
        on the attention queue. Recovery decides when (``ledger.receipt_decisions.recovery_gives_up``).

        Raises:
            IllegalTransitionError: not pending, or already stopped.
        """
        if self.state != PENDING or self.recovery_stopped_at is not None:
            raise IllegalTransitionError("stop_recovery", "stopped" if self.state == PENDING else self.state)
        self.trigger_event(self.ReceiptRecoveryStopped, scope=self.scope, epoch=self.epoch, adoptions=adoptions,
                           reason=self.release_reason or "lease_expired", timestamp=require_utc(now, "now"))

    def resolve(self, *, principal: str, resolution: str, evidence: str, now: datetime) -> None:
        """An operator's decision on a receipt recovery gave up on: ``retry`` (recovery adopts
        it again at once, with a fresh budget of adoptions: after the handler's fault is fixed)
        or ``abandon`` (it is completed ``not_applied``, 409 ``command_abandoned``, retryable
        with a new key; the client's retry with this key gets that answer). Nothing the
        handler did was committed: a handler's effects commit only with ``ReceiptCompleted``.

        Args:
            principal: who decides.
            resolution: ``retry`` or ``abandon``.
            evidence: what the operator checked (required; on the receipt's record).
            now: UTC-aware instant.

        Raises:
            InvalidArgumentError: an unknown resolution, or missing evidence or principal.
            IllegalTransitionError: recovery has not given up on it (not on the attention queue).
        """
        now = require_utc(now, "now")
        if resolution not in OPERATOR_RESOLUTIONS:
            raise InvalidArgumentError(f"a receipt's resolution is one of {', '.join(OPERATOR_RESOLUTIONS)}, "
                                       f"not {resolution!r}")
        require_principal(principal)
        check_operator_text("evidence", evidence, MAX_EVIDENCE_CHARS, required=True)
        if self.state != PENDING or self.recovery_stopped_at is None:
            raise IllegalTransitionError("resolve", self.state if self.state != PENDING else "not_stopped",
                                         "recovery has not given up on it")
        self._resolved(principal, resolution, evidence, now)
        if resolution == "abandon":
            self.complete(epoch=self.epoch, envelope=abandoned_envelope(self.id), operation_ids=[], now=now)

    def _resolved(self, principal: str, resolution: str, evidence: str, now: datetime) -> None:
        self.trigger_event(self.ReceiptResolved, scope=self.scope, principal=principal, resolution=resolution,
                           evidence=evidence, timestamp=now)

    def _check_owner(self, epoch: int, command: str) -> None:
        if self.state != PENDING or epoch != self.epoch:
            raise ReceiptFencedError(self.id, command, epoch, self.epoch, self.state)


OPERATOR_RESOLUTIONS = ("retry", "abandon")
"""What an operator may decide for a receipt recovery gave up on (:meth:`Receipt.resolve`)."""
def _expiry(now: datetime, lease_seconds: float) -> datetime:
    if not lease_seconds > 0:
        raise InvalidArgumentError(f"a receipt lease must be positive seconds, not {lease_seconds!r}")
    return now + timedelta(seconds=lease_seconds)


RECEIPT_EVENTS: tuple[type[Receipt.Event], ...] = (
    Receipt.ReceiptOpened, Receipt.ReceiptAdopted, Receipt.ReceiptLeaseRenewed, Receipt.ReceiptReleased,
    Receipt.ReceiptCompleted, Receipt.ReceiptExpired, Receipt.ReceiptReopened, Receipt.ReceiptRecoveryStopped,
    Receipt.ReceiptResolved)
"""Every receipt event class (followers select the log by their topics)."""
