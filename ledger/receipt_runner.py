"""Running a command under its receipt: open (committed before the handler), run, co-commit the
handler's aggregates with ``ReceiptCompleted``, and settle a commit of unknown fate by reading
the store back.

:class:`ReceiptRunner` is used by the HTTP route (``adapters.http.commands``) and by recovery
(``executors.receipt_recovery``); both ask ``ledger.receipt_decisions.decide_request`` what to do.
:class:`OwnedReceipts` is this process's renewal set: the receipts it owns while their handler
runs, each with a lock that keeps its renewal and its completion from racing each other.

Source: issue 15 items 2, 4, 5; docs/adr/0006-idempotency-receipts.md.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import structlog
from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import IntegrityError
from pydantic import ValidationError

from ledger import tracing
from ledger.application import LedgerApplication
from ledger.clock import Clock
from ledger.errors import CommandIncompleteError, ReceiptMismatchError, ReceiptPendingError, WriteRefusedError
from ledger.inbound import (
    BODY_ERROR_STATUS,
    INVALID_JSON,
    CommandContext,
    CommandRefused,
    CommandSpec,
    UnknownCommandError,
    canonical_request,
    commands_of,
    refusal_envelope,
    reply_envelope,
)
from ledger.operation import Operation
from ledger.outages import SaveFault, save_fault
from ledger.receipt_decisions import (
    Adopt,
    InFlight,
    Mismatch,
    Open,
    Reopen,
    Replay,
    RequestDecision,
    decide_request,
    refusal_of,
)
from ledger.receipts import PENDING, Envelope, Receipt, receipt_id, request_fingerprint
from ledger.refusals import WriteKind, refusal_text

log = structlog.get_logger("opledger.receipts")

DEFAULT_RECEIPT_LEASE_SECONDS = 30.0
"""An owner's lease on a pending receipt, seconds; its supervisor renews it every third."""
RETRY_AFTER_INCOMPLETE_SECONDS = 1
"""``Retry-After`` of the 503 answer when an execution threw or its commit's fate is unknown."""
MAX_RUNS = 3
"""How many times one owner runs a handler whose commit lost a version race on an entity."""


@dataclass
class Ownership:
    """One receipt this process owns: the epoch it holds, the owner token, the last confirmed
    lease expiry (UTC), and the lock its renewal and completion take."""

    receipt_id: UUID
    epoch: int
    owner: str
    lease_expires_at: datetime
    lock: threading.RLock = field(default_factory=threading.RLock)


class OwnedReceipts:
    """The receipts this process owns while their handlers run (the renewal set). Thread-safe."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._owned: dict[UUID, Ownership] = {}

    def add(self, ownership: Ownership) -> Ownership:
        with self._guard:
            self._owned[ownership.receipt_id] = ownership
        return ownership

    def drop(self, receipt_id: UUID) -> None:
        with self._guard:
            self._owned.pop(receipt_id, None)

    def snapshot(self) -> list[Ownership]:
        """The ownerships now, oldest lease first."""
        with self._guard:
            return sorted(self._owned.values(), key=lambda o: o.lease_expires_at)

    def __len__(self) -> int:
        with self._guard:
            return len(self._owned)


@dataclass(frozen=True)
class Answer:
    """A terminal answer: the envelope, and whether it is a replay (``Idempotent-Replayed``)."""

    envelope: Envelope
    replayed: bool


class ReceiptRunner:
    """Runs the host application's commands under receipts.

    Args:
        app: the host application (its store holds the receipts).
        clock: UTC clock; on PostgreSQL the database's (``StatusView.lease_clock``).
        owner_prefix: this process's name in owner tokens, e.g. ``serve:ab12cd``.
        lease_seconds: the owner lease, seconds.
        owned: the renewal set (shared with ``executors.receipt_leases``).
    """

    def __init__(self, *, app: LedgerApplication, clock: Clock, owner_prefix: str,
                 lease_seconds: float = DEFAULT_RECEIPT_LEASE_SECONDS, owned: OwnedReceipts | None = None) -> None:
        self.app = app
        self.clock = clock
        self.owner_prefix = owner_prefix
        self.lease_seconds = lease_seconds
        self.owned = owned if owned is not None else OwnedReceipts()
        self.commands = commands_of(type(app))

    def spec(self, name: str) -> CommandSpec:
        """The declared command ``name``.

        Raises:
            UnknownCommandError: none is declared.
        """
        try:
            return self.commands[name]
        except KeyError:
            raise UnknownCommandError(f"no command named {name!r}; declared: "
                                      f"{', '.join(sorted(self.commands)) or 'none'}") from None

    # ------------------------------------------------------------------ the two paths

    def run_unkeyed(self, spec: CommandSpec, principal: str, body: bytes) -> Envelope:
        """The fast path without a key: run and save, no receipt; the same envelope shape.

        Raises:
            whatever the handler or the store raise (a retry may run the command again).
        """
        request = canonical_request(spec.name, principal, body)
        for _ in range(MAX_RUNS):
            envelope, staged = self._execute(spec, request, None)
            try:
                self.app.save(*staged)
            except Exception as exc:
                fault = save_fault(exc)
                if fault is SaveFault.REFUSED:  # issue 35: answered as this command's problem
                    raise WriteRefusedError(None, WriteKind.COMMAND.value, refusal_text(exc)) from None
                if fault is SaveFault.CONFLICT:
                    continue  # an entity changed under the handler: run it again on fresh state
                raise
            return envelope
        raise CommandIncompleteError(RETRY_AFTER_INCOMPLETE_SECONDS, "the command kept conflicting with "
                                                                     "concurrent changes; retry")

    def submit(self, spec: CommandSpec, principal: str, key: str, body: bytes) -> Answer:
        """Answer a keyed request: replay, refuse, or open the receipt and run the handler.

        Returns:
            :class:`Answer` (the terminal envelope; ``replayed`` when it was recorded before).

        Raises:
            ReceiptMismatchError: the key was used for another request (422).
            ReceiptPendingError: its owner is running it (409, ``Retry-After``).
            CommandIncompleteError: the execution threw or its fate is unknown (503); pending.
        """
        request = canonical_request(spec.name, principal, body)
        fingerprint = request_fingerprint(request)
        rid = receipt_id(principal, spec.name, key)
        for _ in range(MAX_RUNS):
            receipt = self.load(rid)
            now = self.clock.now()
            decision = decide_request(receipt, fingerprint, now)
            answered = _answered(decision, spec.name, rid)
            if answered is not None:
                return answered
            owner = f"{self.owner_prefix}:{uuid.uuid4().hex[:8]}"
            if isinstance(decision, Open):
                receipt = Receipt.open(principal=principal, scope=spec.name, key=key, request=request, owner=owner,
                                       now=now, lease_seconds=self.lease_seconds)
            elif isinstance(decision, Reopen):
                assert receipt is not None
                receipt.reopen(request=request, owner=owner, now=now, lease_seconds=self.lease_seconds)
            else:
                assert isinstance(decision, Adopt) and receipt is not None
                receipt.adopt(owner=owner, now=now, lease_seconds=self.lease_seconds)
            if not self._publish(receipt, owner):
                continue  # another request opened or adopted it first: decide again
            return self._run_owned(spec, receipt, owner)
        raise ReceiptPendingError(1)

    def stored_answer(self, spec: CommandSpec, principal: str, key: str, body: bytes) -> Answer | None:
        """Answer a keyed request from what is stored, writing nothing (a read-only store).

        Returns:
            The replayed :class:`Answer` of a completed receipt for this request, or None when
            answering needs a write (no receipt yet, or one to reopen or adopt).

        Raises:
            ReceiptMismatchError: the key was used for another request (422).
            ReceiptPendingError: its owner is running it (409, ``Retry-After``).

        Source: issue 34 item 7; the IETF Idempotency-Key draft (a completed request is replayed).
        """
        request = canonical_request(spec.name, principal, body)
        rid = receipt_id(principal, spec.name, key)
        return _answered(decide_request(self.load(rid), request_fingerprint(request), self.clock.now()), spec.name,
                         rid)

    def recover(self, rid: UUID, *, max_adoptions: int) -> Answer | None:
        """Adopt a pending receipt whose owner is gone and complete it from its stored request.

        Returns:
            The answer, or None when there was nothing to adopt (completed, owned, not found, or
            adopted ``max_adoptions`` times already: it waits for the client's retry).

        Raises:
            CommandIncompleteError: the execution threw again (the receipt stays pending).
        """
        receipt = self.load(rid)
        if receipt is None or receipt.adoptions >= max_adoptions:
            return None
        if not isinstance(decide_request(receipt, None, self.clock.now()), Adopt):
            return None
        spec = self.spec(receipt.scope)
        owner = f"{self.owner_prefix}:{uuid.uuid4().hex[:8]}"
        receipt.adopt(owner=owner, now=self.clock.now(), lease_seconds=self.lease_seconds)
        if not self._publish(receipt, owner):
            return None
        log.info("receipt adopted", receipt_id=str(rid), epoch=receipt.epoch, command=spec.name)
        return self._run_owned(spec, receipt, owner)

    def load(self, rid: UUID) -> Receipt | None:
        """The stored receipt, or None."""
        if not self.app.recorder.select_events(rid, limit=1):
            return None
        try:
            found: Any = self.app.repository.get(rid)
        except AggregateNotFoundError:
            return None
        assert isinstance(found, Receipt), f"{rid} is a {type(found).__name__}"
        return found

    # ------------------------------------------------------------------ steps

    def _publish(self, receipt: Receipt, owner: str) -> bool:
        """Commit ``ReceiptOpened`` (or an adoption) before the handler runs. False: another
        request won the race. A failure of unknown fate is settled by reading the receipt back."""
        try:
            self.app.save(receipt)
            return True
        except IntegrityError:
            return False
        except Exception as exc:
            log.warning("recording the receipt failed; reading it back", receipt_id=str(receipt.id),
                        error=f"{type(exc).__name__}: {exc}")
            try:
                stored = self.load(receipt.id)
            except Exception:
                raise CommandIncompleteError(RETRY_AFTER_INCOMPLETE_SECONDS, "the receipt could not be recorded "
                                             "and the store cannot be read back yet; retry with the same key") from exc
            if stored is not None and stored.state == PENDING and stored.owner == owner:
                log.info("receipt publication of unknown fate had landed", receipt_id=str(receipt.id))
                return True  # it landed: this request owns it
            if stored is None or stored.owner != owner:
                raise CommandIncompleteError(RETRY_AFTER_INCOMPLETE_SECONDS, "the receipt could not be recorded; "
                                             "retry with the same key") from exc
            return False

    def _run_owned(self, spec: CommandSpec, receipt: Receipt, owner: str) -> Answer:
        rid, epoch = receipt.id, receipt.epoch
        assert receipt.lease_expires_at is not None
        ownership = self.owned.add(Ownership(rid, epoch, owner, receipt.lease_expires_at))
        try:
            for _ in range(MAX_RUNS):
                try:
                    envelope, staged = self._execute(spec, receipt.request, rid)
                except Exception as exc:
                    log.warning("command threw; its receipt stays pending", receipt_id=str(rid),
                                command=spec.name, error=f"{type(exc).__name__}: {exc}")
                    self._release(rid, epoch, f"{type(exc).__name__}")
                    raise CommandIncompleteError(RETRY_AFTER_INCOMPLETE_SECONDS,
                                                 "the command did not complete; retry with the same key") from exc
                operation_ids = [a.id for a in staged if isinstance(a, Operation)]
                with ownership.lock:  # no renewal of this receipt while its completion commits
                    try:
                        current = self.load(rid)
                    except Exception as exc:  # nothing was written: pending, the lease decides
                        raise CommandIncompleteError(RETRY_AFTER_INCOMPLETE_SECONDS, "the store could not be "
                                                     "read to complete the command; retry with the same key") from exc
                    if current is None or current.state != PENDING or current.epoch != epoch:
                        return self._fenced(current)
                    current.complete(epoch=epoch, envelope=envelope, operation_ids=operation_ids,
                                     now=self.clock.now())
                    try:
                        self.app.save(current, *staged)
                    except Exception as exc:
                        fault = save_fault(exc)
                        if fault is SaveFault.CONFLICT:
                            receipt = current
                            continue  # an entity (or the receipt) moved: decide again on fresh state
                        if fault is SaveFault.REFUSED:  # issue 35: nothing landed; this command's problem
                            self._release(rid, epoch, "write_refused")
                            raise WriteRefusedError(None, WriteKind.COMMAND.value, refusal_text(exc)) from None
                        return self._settle_unknown(rid, epoch, exc)
                return Answer(envelope, replayed=False)
            self._release(rid, epoch, "conflicts")
            raise CommandIncompleteError(RETRY_AFTER_INCOMPLETE_SECONDS, "the command kept conflicting with "
                                                                         "concurrent changes; retry with the same key")
        finally:
            self.owned.drop(rid)

    def _execute(self, spec: CommandSpec, request: dict[str, Any], rid: UUID | None) -> tuple[Envelope, list[Any]]:
        """Run the handler on ``request``: its envelope and the aggregates to save. Deterministic
        refusals become ``not_applied`` envelopes; anything else the handler raises propagates."""
        if request["body_error"] is not None:
            code = request.get("body_error_code", INVALID_JSON)
            return refusal_envelope(BODY_ERROR_STATUS[code], code, request["body_error"], transaction_id=rid), []
        try:
            model = spec.request.model_validate(request["body"])
        except ValidationError as exc:
            errors = [{"location": ".".join(str(p) for p in e.get("loc", ())), "message": e.get("msg", "")}
                      for e in exc.errors()]
            detail = "; ".join(f"{e['location'] or 'body'}: {e['message']}" for e in errors)
            return refusal_envelope(422, "invalid_request", detail, transaction_id=rid, errors=errors), []
        # The trace the route made current (``ledger.tracing.attached``), never part of the
        # receipt's request: a retry from another trace is the same command.
        traceparent, tracestate = tracing.current_trace()
        ctx = CommandContext(principal=request["principal"], now=self.clock.now(), transaction_id=rid,
                             traceparent=traceparent, tracestate=tracestate)
        try:
            reply = spec.handler(self.app, ctx, model)
        except CommandRefused as refused:
            return refusal_envelope(refused.status, refused.code, refused.message, retryable=refused.retryable,
                                    transaction_id=rid), []
        except Exception as exc:
            refusal = refusal_of(exc)
            if refusal is None:
                raise  # a thrown error: the receipt stays pending (ledger.receipt_decisions.refusal_of)
            log.info("command refused by the ledger", receipt_id=str(rid) if rid else None, command=spec.name,
                     code=refusal.code, error=f"{type(exc).__name__}: {exc}")
            return refusal_envelope(refusal.status, refusal.code, refusal.message, transaction_id=rid), []
        return reply_envelope(reply, rid), list(ctx.staged)

    def _settle_unknown(self, rid: UUID, epoch: int, exc: Exception) -> Answer:
        """A completion commit raised something other than a version conflict: it may or may not
        have landed. Read the store back; never run the handler again on a guess."""
        log.warning("completion commit of unknown fate; reading the store back", receipt_id=str(rid),
                    error=f"{type(exc).__name__}: {exc}")
        try:
            stored = self.load(rid)
        except Exception:
            # Still unreadable: stay pending. The lease runs out unless renewed; a retry with the
            # same key (or recovery) then reads the one truth.
            raise CommandIncompleteError(RETRY_AFTER_INCOMPLETE_SECONDS, "the command's commit has an unknown "
                                         "fate for now; retry with the same key") from exc
        if stored is not None and stored.envelope is not None and stored.state != PENDING:
            log.info("completion commit had landed", receipt_id=str(rid))
            return Answer(stored.envelope, replayed=stored.epoch != epoch)
        self._release(rid, epoch, "commit_failed")
        raise CommandIncompleteError(RETRY_AFTER_INCOMPLETE_SECONDS, "the command's commit did not land; "
                                     "retry with the same key") from exc

    def _fenced(self, current: Receipt | None) -> Answer:
        """Another epoch took the receipt over: answer from what is stored, never run again."""
        decision = decide_request(current, None, self.clock.now())
        if isinstance(decision, Replay):
            return Answer(decision.envelope, replayed=True)
        retry = decision.retry_after_seconds if isinstance(decision, InFlight) else 1
        raise ReceiptPendingError(retry, "another owner took this request over; retry with the same key")

    def _release(self, rid: UUID, epoch: int, reason: str) -> None:
        """Best effort: mark the receipt released so a retry or recovery adopts it at once (if
        this fails too, the lease simply runs out)."""
        ownership = next((o for o in self.owned.snapshot() if o.receipt_id == rid), None)
        with ownership.lock if ownership is not None else _no_lock():
            try:
                current = self.load(rid)
                if current is not None and current.state == PENDING and current.epoch == epoch:
                    current.release(epoch=epoch, reason=reason, now=self.clock.now())
                    self.app.save(current)
            except Exception as exc:
                log.warning("could not release a receipt; its lease will run out", receipt_id=str(rid),
                            error=f"{type(exc).__name__}: {exc}")
            finally:
                self.owned.drop(rid)


def _answered(decision: RequestDecision, scope: str, rid: UUID) -> Answer | None:
    """What ``decision`` answers without running anything: a replay, or the refusals; None when
    the request needs its receipt opened, reopened or adopted."""
    if isinstance(decision, Replay):
        return Answer(decision.envelope, replayed=True)
    if isinstance(decision, Mismatch):
        raise ReceiptMismatchError(f"the idempotency key was already used for another request to {scope!r} "
                                   f"(transaction {rid}); send a new key for a new request")
    if isinstance(decision, InFlight):
        raise ReceiptPendingError(decision.retry_after_seconds)
    return None


@contextmanager
def _no_lock() -> Iterator[None]:
    yield
