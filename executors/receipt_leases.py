"""Owner-lease renewal for pending receipts: the supervisor that keeps this process's ownership
live while its handlers run, independently of recovery (issue 15 item 5).

It renews only receipts that are still pending under the epoch this process holds (a completed,
expired or adopted one leaves the renewal set at once), in bounded batches, at an interval
clamped to a third of the lease. A transient store error is retried on the next pass while the
last confirmed lease is still valid; after that the ownership is dropped (a successor may adopt,
and the epoch fence decides whose completion lands).

Source: issue 15 item 5; DESIGN §7 ("heartbeat before the lease is a third gone").
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime

import structlog
from eventsourcing.persistence import IntegrityError

from ledger.receipt_decisions import needs_renewal, renewal_interval
from ledger.receipt_runner import DEFAULT_RECEIPT_LEASE_SECONDS, ReceiptRunner
from ledger.receipts import PENDING

log = structlog.get_logger("opledger.receipts")

DEFAULT_RENEW_INTERVAL_SECONDS = 10.0
"""How often owned receipts are looked at, seconds (clamped to a third of the lease)."""
DEFAULT_RENEW_BATCH = 100
"""At most this many receipts are renewed per pass."""


@dataclass(frozen=True)
class ReceiptLeaseConfig:
    """Renewal settings.

    Attributes:
        lease_seconds: the lease given at each renewal, seconds.
        interval_seconds: time between passes, seconds (at most ``lease_seconds / 3``).
        batch_size: receipts renewed per pass at most.
    """

    lease_seconds: float = DEFAULT_RECEIPT_LEASE_SECONDS
    interval_seconds: float = DEFAULT_RENEW_INTERVAL_SECONDS
    batch_size: int = DEFAULT_RENEW_BATCH


@dataclass
class RenewalCounts:
    """What one pass did: ``renewed``, ``dropped`` (no longer ours or pending), ``failed``
    (a store error; retried next pass while the lease holds)."""

    renewed: int = 0
    dropped: int = 0
    failed: int = 0


class ReceiptLeaseService:
    """Renews the leases of the receipts ``runner`` owns (``runner.owned``).

    Args:
        runner: the process's receipt runner (its store, clock and renewal set).
        config: :class:`ReceiptLeaseConfig`.
    """

    def __init__(self, *, runner: ReceiptRunner, config: ReceiptLeaseConfig | None = None) -> None:
        self.runner = runner
        self.config = config or ReceiptLeaseConfig(lease_seconds=runner.lease_seconds)
        self.interval_seconds = renewal_interval(self.config.interval_seconds, self.config.lease_seconds)

    def run_once(self, now: datetime) -> RenewalCounts:
        """Renew every owned receipt with less than two thirds of its lease left (oldest first,
        at most ``batch_size``).

        Returns:
            :class:`RenewalCounts`.
        """
        counts = RenewalCounts()
        due = [o for o in self.runner.owned.snapshot()
               if needs_renewal(o.lease_expires_at, now, self.config.lease_seconds)][: self.config.batch_size]
        for ownership in due:
            with ownership.lock:  # never while this receipt's completion commits
                try:
                    receipt = self.runner.load(ownership.receipt_id)
                    if receipt is None or receipt.state != PENDING or receipt.epoch != ownership.epoch:
                        self.runner.owned.drop(ownership.receipt_id)
                        counts.dropped += 1
                        continue
                    receipt.renew(epoch=ownership.epoch, now=now, lease_seconds=self.config.lease_seconds)
                    self.runner.app.save(receipt)
                    assert receipt.lease_expires_at is not None
                    ownership.lease_expires_at = receipt.lease_expires_at
                    counts.renewed += 1
                except IntegrityError:
                    counts.failed += 1  # it moved under us (adopted, completed): looked at again next pass
                except Exception as exc:
                    counts.failed += 1
                    if ownership.lease_expires_at <= now:
                        log.warning("receipt lease lost: renewal failed past its expiry",
                                    receipt_id=str(ownership.receipt_id), error=f"{type(exc).__name__}: {exc}")
                        self.runner.owned.drop(ownership.receipt_id)
                    else:
                        log.warning("receipt lease renewal failed; retrying while the lease holds",
                                    receipt_id=str(ownership.receipt_id), error=f"{type(exc).__name__}: {exc}")
        return counts

    def run(self, stop: threading.Event) -> None:
        """Renew every ``interval_seconds`` until ``stop`` is set (the loop only)."""
        while not stop.is_set():
            try:
                self.run_once(self.runner.clock.now())
            except Exception:  # never stop renewing for one bad pass
                log.exception("receipt renewal pass failed")
            stop.wait(self.interval_seconds)
