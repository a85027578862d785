"""Read models a long-running process keeps beside its main work (a worker, ``opledger serve``).

The status projection is kept by the worker itself (it folds the worker's own commits); the
metrics projection follows the log on a thread of its own with its own connection, so a slow
scrape or fold never holds up the worker. On PostgreSQL a leadership lease picks one process.
"""

from __future__ import annotations

import threading

from ledger.application import LedgerApplication
from ledger.config import Database
from projections.metrics import MetricsProjection
from projections.metrics_store import MetricsStore
from projections.views import open_view


def follow_metrics(database: Database, app: LedgerApplication, stop: threading.Event, *,
                   holder: str | None) -> threading.Thread:
    """Start a daemon thread keeping the metrics read model caught up until ``stop`` is set.

    Args:
        database: the store (SQLite or PostgreSQL).
        app: the host application whose log is followed.
        stop: set to stop the thread; it closes its connection on the way out.
        holder: this process's name where several processes may follow (PostgreSQL).

    Returns:
        The started thread (join it after setting ``stop``).

    Source: issue 13 item 1; DESIGN §8.
    """
    view = open_view(database)
    projection = MetricsProjection(app=app, store=MetricsStore(view), holder=holder)

    def run() -> None:
        try:
            projection.run(stop)
        finally:
            view.close()

    thread = threading.Thread(target=run, name="metrics-projection", daemon=True)
    thread.start()
    return thread
