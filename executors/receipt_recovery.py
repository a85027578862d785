"""Recovery of receipts whose owner died: a successor adopts a pending receipt once its lease
expired (or its owner released it), fenced by a new epoch, and completes it from the stored
request, without the client asking again (issue 15 item 5).

Pending receipts are found by following the notification log's receipt events
(:class:`ReceiptLog`); each is looked at again when its lease would expire. Recovery runs in its
own thread, apart from renewal, so neither starves the other.

A receipt adopted ``max_adoptions`` times without completing is given up on
(``ReceiptRecoveryStopped``, ``ledger.receipt_decisions.recovery_gives_up``): it is on the
attention queue as ``receipt_stuck`` until an operator resolves it or the client retries.

Source: issue 15 item 5; issue 31 item 4; DESIGN §7 ("recovery is the normal path").
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

import structlog
from eventsourcing.persistence import IntegrityError
from eventsourcing.utils import get_topic

from ledger.application import LedgerApplication
from ledger.errors import CommandIncompleteError, ReceiptPendingError
from ledger.receipt_decisions import recovery_gives_up
from ledger.receipt_runner import ReceiptRunner
from ledger.receipts import PENDING, RECEIPT_EVENTS, Receipt

log = structlog.get_logger("opledger.receipts")

DEFAULT_RECOVERY_INTERVAL_SECONDS = 1.0
"""Time between recovery passes, seconds."""
DEFAULT_RECOVERY_BATCH = 20
"""At most this many receipts are looked at (and perhaps adopted) per pass."""
DEFAULT_MAX_ADOPTIONS = 3
"""Recovery adopts one receipt at most this many times; then it waits for the client's retry."""
LOG_PAGE = 1000


class ReceiptLog:
    """Follows the receipt events of the host's notification log: ``read()`` returns
    ``(receipt id, event class name)`` of the events appended since the last call."""

    def __init__(self, app: LedgerApplication) -> None:
        self.app = app
        self.names = {get_topic(cls): cls.__name__ for cls in RECEIPT_EVENTS}
        self.position: int | None = None

    def read(self, limit: int = LOG_PAGE) -> list[tuple[UUID, str]]:
        found: list[tuple[UUID, str]] = []
        while True:
            page = self.app.recorder.select_notifications(
                start=self.position, limit=limit, topics=list(self.names),
                inclusive_of_start=self.position is None)
            for notification in page:
                rid = notification.originator_id
                found.append((rid if isinstance(rid, UUID) else UUID(rid), self.names[notification.topic]))
                self.position = notification.id
            if len(page) < limit:
                return found


@dataclass(frozen=True)
class ReceiptRecoveryConfig:
    """Recovery settings.

    Attributes:
        interval_seconds: time between passes, seconds.
        batch_size: receipts looked at per pass.
        max_adoptions: adoptions per receipt before recovery leaves it to the client.
    """

    interval_seconds: float = DEFAULT_RECOVERY_INTERVAL_SECONDS
    batch_size: int = DEFAULT_RECOVERY_BATCH
    max_adoptions: int = DEFAULT_MAX_ADOPTIONS


@dataclass
class RecoveryCounts:
    """``recovered`` (adopted and completed), ``failed`` (adopted, still incomplete), ``waiting``
    (owned by a live lease), ``stopped`` (given up on this pass: now on the attention queue)."""

    recovered: int = 0
    failed: int = 0
    waiting: int = 0
    stopped: int = 0


class ReceiptRecoveryService:
    """Adopts and completes pending receipts whose owners are gone.

    Args:
        runner: the receipt runner (its store, clock and commands).
        config: :class:`ReceiptRecoveryConfig`.
    """

    def __init__(self, *, runner: ReceiptRunner, config: ReceiptRecoveryConfig | None = None) -> None:
        self.runner = runner
        self.config = config or ReceiptRecoveryConfig()
        self.log = ReceiptLog(runner.app)
        self.pending: dict[UUID, datetime | None] = {}  # receipt id -> when to look again (None: now)

    def run_once(self, now: datetime) -> RecoveryCounts:
        """Follow the log, then look at up to ``batch_size`` pending receipts that are due.

        Returns:
            :class:`RecoveryCounts`.
        """
        for rid, name in self.log.read():
            if name in ("ReceiptCompleted", "ReceiptExpired"):
                self.pending.pop(rid, None)
            else:
                self.pending[rid] = None
        counts = RecoveryCounts()
        due = [rid for rid, at in self.pending.items() if at is None or at <= now][: self.config.batch_size]
        for rid in due:
            if any(o.receipt_id == rid for o in self.runner.owned.snapshot()):
                self.pending[rid] = now + timedelta(seconds=self.runner.lease_seconds)
                continue  # this process runs it now
            try:
                receipt = self.runner.load(rid)
                if receipt is None or receipt.state != PENDING:
                    self.pending.pop(rid, None)
                    continue
                assert receipt.lease_expires_at is not None
                if not receipt.released and receipt.lease_expires_at > now:
                    self.pending[rid] = receipt.lease_expires_at
                    counts.waiting += 1
                    continue
                if recovery_gives_up(receipt, now, self.config.max_adoptions):
                    counts.stopped += self._stop(receipt, now)
                    self.pending[rid] = now + timedelta(seconds=self.runner.lease_seconds)
                    continue
                answer = self.runner.recover(rid, max_adoptions=self.config.max_adoptions)
                if answer is None:
                    self.pending[rid] = now + timedelta(seconds=self.runner.lease_seconds)
                else:
                    counts.recovered += 1
                    self.pending.pop(rid, None)
            except (CommandIncompleteError, ReceiptPendingError) as exc:
                counts.failed += 1
                self.pending[rid] = now + timedelta(seconds=self.runner.lease_seconds)
                log.warning("receipt recovery did not complete", receipt_id=str(rid), error=str(exc))
            except Exception as exc:  # one bad receipt never stops recovery
                counts.failed += 1
                self.pending[rid] = now + timedelta(seconds=self.runner.lease_seconds)
                log.warning("receipt recovery failed", receipt_id=str(rid), error=f"{type(exc).__name__}: {exc}")
        return counts

    def _stop(self, receipt: Receipt, now: datetime) -> int:
        """Record that recovery gives up on ``receipt`` (issue 31 item 4); 1 when recorded, 0
        when another process moved it first (it is looked at again on a later pass)."""
        receipt.stop_recovery(adoptions=receipt.adoptions, now=now)
        try:
            self.runner.app.save(receipt)
        except IntegrityError:
            return 0
        log.warning("receipt recovery gave up; the receipt is on the attention queue", receipt_id=str(receipt.id),
                    command=receipt.scope, adoptions=receipt.adoptions, reason=receipt.stop_reason)
        return 1

    def run(self, stop: threading.Event) -> None:
        """Recover every ``interval_seconds`` until ``stop`` is set (the loop only)."""
        while not stop.is_set():
            try:
                self.run_once(self.runner.clock.now())
            except Exception:
                log.exception("receipt recovery pass failed")
            stop.wait(self.config.interval_seconds)
