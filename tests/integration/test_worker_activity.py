"""A worker's summary line (issue 34 item 4), on both backends; its per-outcome lines are
tested with the real partner in ``test_worker_outcomes.py``."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from executors.activity import ActivitySummary, activity_of, store_gauges
from executors.commit import Counts
from ledger.clock import SystemClock
from ledger.config import Database
from ledger.declarations import DeliveryMode
from projections.views import open_view
from tests.apps import ModesApp


def lines(logs: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [line for line in logs if line["event"] == event]


def test_the_summary_line_counts_the_cycles_and_reads_the_store(modes_db: Database) -> None:
    app = ModesApp(env=modes_db.library_env(create_table=False))
    view = open_view(modes_db)
    try:
        app.make(DeliveryMode.IDEMPOTENT, "https://partner.example/p", n=1)
        from projections.status import StatusProjection

        StatusProjection(app=app, view=view).catch_up()
        ticks = iter([0.0, 10.0, 61.0, 62.0])
        summary = ActivitySummary(interval_seconds=60, gauges=lambda: store_gauges(view, SystemClock().now()),
                                  monotonic=lambda: next(ticks))
        with capture_logs() as logs:
            assert not summary.add(Counts(claimed=2, attempts=2))
            assert summary.add(Counts(outcomes=1, settled=1))
            assert not summary.add(Counts(claimed=1))
        [line] = lines(logs, "worker summary")
        assert (line["claimed"], line["attempts"], line["outcomes"], line["settled"]) == (2, 2, 1, 1)
        assert line["seconds"] == 61.0 and line["by_status"] == {"pending": 1}
        assert line["oldest_pending_age_seconds"] >= 0
    finally:
        view.close()
        app.close()


def test_only_outcomes_and_settlements_are_activity() -> None:
    from uuid import uuid4

    from ledger.operation import Operation

    event = Operation.CancelRequested(originator_id=uuid4(), originator_version=2, timestamp=SystemClock().now(),
                                      principal="p", reason="r")
    assert activity_of(event, None) is None
