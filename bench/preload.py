"""Preload a store with N closed operations: a month of history for the big-store scenario.

Each operation's events are the real ones, built in memory by the aggregate commands a worker
runs (``intend``, ``claim``, ``start_attempt``, ``succeed``, ``settle``) with a fixed clock, and
committed with their items in one ``save()`` (one transaction, one batched insert) per
``BATCH`` operations. The status and metrics projections then fold them as they would any log
(``catch_up``), so the view's rows and tracking positions are the projections' own.

Source: issue 29 item 6. Benchmark setup only: real hosts commit one transition at a time.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from eventsourcing.domain import Aggregate

from bench.app import NOOP, BenchApp, Item
from bench.harness import writer
from ledger.config import Database
from projections.metrics import MetricsProjection
from projections.metrics_store import MetricsStore
from projections.status import StatusProjection
from projections.views import open_view

BATCH = 1000
"""Operations (with their items) committed per ``save()``."""
EPOCH = datetime(2026, 11, 1, tzinfo=UTC)
"""The fixed clock's start: the preloaded history is a month old at most."""


def closed_batch(app: BenchApp, start: int, count: int) -> list[Aggregate]:
    """Items ``start .. start+count-1`` and their settled operations, in memory, unsaved.

    Each operation goes through the commands a worker runs on the instant ``bench.noop``
    integration: intended, claimed, attempt started, succeeded, settled (with the item's
    ``Settled`` event as the settlement action's). The clock steps one second per operation.

    Returns:
        The aggregates to ``save()``: item, operation, item, operation, ...
    """
    aggregates: list[Aggregate] = []
    for n in range(start, start + count):
        now = EPOCH + timedelta(seconds=n)
        item = Item(n=n)
        op = app.new_operation(item, n, integration=NOOP, now=now)
        epoch = op.claim(now=now, worker_id="preload", lease_seconds=30)
        attempt = uuid.uuid4()
        op.start_attempt(epoch=epoch, now=now, attempt_id=attempt, request_fingerprint="preload")
        op.succeed(epoch=op.epoch, now=now, attempt_id=attempt)
        item._settled("succeeded")  # the settlement action's event, as a worker saves it
        op.settle(now=now, entity_version=item.version)
        aggregates += [item, op]
    return aggregates


def preload(database: Database, n: int, *, log: Callable[[str], Any] = print) -> dict[str, float]:
    """Write ``n`` closed operations into the migrated store ``database`` and fold them.

    Args:
        database: a migrated, empty store of :class:`bench.app.BenchApp`.
        n: operations to write (each with its item: 7 events per operation).
        log: progress lines (one per tenth).

    Returns:
        ``{"write_seconds", "project_seconds", "write_ops_per_s", "project_ops_per_s"}``.

    Raises:
        ValueError: ``n`` is negative.
    """
    if n < 0:
        raise ValueError(f"preload needs a non-negative count, not {n}")
    step = max(BATCH, (n // 10) // BATCH * BATCH)
    with writer(database) as app:
        began = time.perf_counter()
        for start in range(0, n, BATCH):
            app.save(*closed_batch(app, start, min(BATCH, n - start)))
            if (start + BATCH) % step == 0:
                log(f"  preload: {start + BATCH} written, {time.perf_counter() - began:.0f} s")
        written = time.perf_counter() - began
        view = open_view(database)
        try:
            began = time.perf_counter()
            StatusProjection(app=app, view=view).catch_up()
            MetricsProjection(app=app, store=MetricsStore(view)).catch_up()
            projected = time.perf_counter() - began
        finally:
            view.close()
    return {"write_seconds": round(written, 2), "project_seconds": round(projected, 2),
            "write_ops_per_s": round(n / written, 1) if written else 0.0,
            "project_ops_per_s": round(n / projected, 1) if projected else 0.0}
