"""Retention: completed receipts stop replaying after the configured retention (default 24 h).

The sweep appends ``ReceiptExpired`` (the record stays; the same key then opens a new
generation). It never expires a pending receipt, nor one whose command's operations are still
unresolved (not settled, or waiting for an operator): a client retrying such a command must
still see the one answer.

Source: issue 15 item 6.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

import structlog
from eventsourcing.persistence import IntegrityError

from executors.receipt_recovery import ReceiptLog
from ledger.errors import OperationNotFoundError
from ledger.receipt_decisions import expirable, operation_resolved
from ledger.receipt_runner import ReceiptRunner
from ledger.receipts import COMPLETED, Receipt

log = structlog.get_logger("opledger.receipts")

DEFAULT_RETENTION_SECONDS = 24 * 3600.0
"""How long a completed receipt replays, seconds."""
DEFAULT_SWEEP_INTERVAL_SECONDS = 60.0
"""Time between sweeps, seconds."""
DEFAULT_SWEEP_BATCH = 500
"""At most this many receipts are expired per sweep."""
UNRESOLVED_RECHECK_SECONDS = 300.0
"""A receipt kept for its unresolved operations is looked at again after this long, seconds."""


@dataclass(frozen=True)
class ReceiptRetentionConfig:
    """Retention settings: ``retention_seconds``, ``interval_seconds``, ``batch_size``."""

    retention_seconds: float = DEFAULT_RETENTION_SECONDS
    interval_seconds: float = DEFAULT_SWEEP_INTERVAL_SECONDS
    batch_size: int = DEFAULT_SWEEP_BATCH


@dataclass
class RetentionCounts:
    """``expired``, ``kept`` (operations unresolved), ``failed``."""

    expired: int = 0
    kept: int = 0
    failed: int = 0


class ReceiptRetentionService:
    """Expires completed receipts past their retention.

    Args:
        runner: the receipt runner (its store and clock).
        config: :class:`ReceiptRetentionConfig`.
    """

    def __init__(self, *, runner: ReceiptRunner, config: ReceiptRetentionConfig | None = None) -> None:
        self.runner = runner
        self.config = config or ReceiptRetentionConfig()
        self.log = ReceiptLog(runner.app)
        self.completed: dict[UUID, datetime | None] = {}  # receipt id -> when to look again (None: now)

    def run_once(self, now: datetime) -> RetentionCounts:
        """Follow the log, then expire up to ``batch_size`` receipts past retention.

        Returns:
            :class:`RetentionCounts`.
        """
        for rid, name in self.log.read():
            if name == "ReceiptCompleted":
                self.completed[rid] = None
            elif name == "ReceiptExpired":
                self.completed.pop(rid, None)
        counts = RetentionCounts()
        due = [rid for rid, at in self.completed.items() if at is None or at <= now][: self.config.batch_size]
        for rid in due:
            try:
                receipt = self.runner.load(rid)
                if receipt is None or receipt.state != COMPLETED:
                    self.completed.pop(rid, None)
                    continue
                if not expirable(receipt, now, self.config.retention_seconds):
                    assert receipt.completed_at is not None
                    self.completed[rid] = receipt.completed_at + timedelta(seconds=self.config.retention_seconds)
                    continue
                if not self._operations_resolved(receipt):
                    counts.kept += 1
                    self.completed[rid] = now + timedelta(seconds=UNRESOLVED_RECHECK_SECONDS)
                    continue
                receipt.expire(now=now)
                self.runner.app.save(receipt)
                self.completed.pop(rid, None)
                counts.expired += 1
            except IntegrityError:
                self.completed[rid] = None  # it moved: look again next sweep
            except Exception as exc:  # one bad receipt never stops the sweep
                counts.failed += 1
                self.completed[rid] = now + timedelta(seconds=UNRESOLVED_RECHECK_SECONDS)
                log.warning("receipt retention failed", receipt_id=str(rid), error=f"{type(exc).__name__}: {exc}")
        return counts

    def _operations_resolved(self, receipt: Receipt) -> bool:
        for op_id in receipt.operation_ids:
            try:
                op = self.runner.app.get_operation(op_id)
            except OperationNotFoundError:
                continue
            if not operation_resolved(op.execution, op.settlement, op.status):
                return False
        return True

    def run(self, stop: threading.Event) -> None:
        """Sweep every ``interval_seconds`` until ``stop`` is set (the loop only)."""
        while not stop.is_set():
            try:
                self.run_once(self.runner.clock.now())
            except Exception:
                log.exception("receipt retention sweep failed")
            stop.wait(self.config.interval_seconds)
