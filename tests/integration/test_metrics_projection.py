"""The metrics projection on both backends: exact counts for a scripted run, batches that
commit with their position (a replay or a second writer never double-counts), rebuild == live."""

from __future__ import annotations

from collections import defaultdict

from adapters.demo.orders import OrdersApp
from ledger.config import Database
from projections.metrics import PROJECTION_NAME, MetricsProjection, MetricsProjectionConfig
from projections.metrics_store import MetricsStore
from projections.views import open_view
from tests.observe_seed import EXPECTED_COUNTERS, seed


def _counters(store: MetricsStore) -> dict[tuple[str, str, str], float]:
    found: dict[tuple[str, str, str], float] = defaultdict(float)
    for (name, integration, _tenant, _mode, detail), value in store.totals().items():
        if not name.endswith(("_bucket", "_sum", "_count")):
            found[(name, integration, detail)] += value
    return dict(found)


def test_scripted_run_counts_exactly_and_rebuild_equals_live(orders_app: OrdersApp, migrated: Database,
                                                            clock) -> None:
    seed(orders_app, clock)
    view = open_view(migrated)
    store = MetricsStore(view)
    live = MetricsProjection(app=orders_app, store=store, config=MetricsProjectionConfig(batch_size=7))
    live.catch_up()
    assert _counters(store) == EXPECTED_COUNTERS
    totals = store.totals()
    # intent -> first claim: "success" waited 2 s, every other claimed operation 2 + its wait
    claim_count = sum(v for (n, *_), v in totals.items() if n == "opledger_claim_latency_seconds_count")
    assert claim_count == 8
    dispatch = {k: v for k, v in totals.items() if k[0] == "opledger_dispatch_latency_seconds_bucket"}
    assert sum(dispatch.values()) == 11  # every attempt reached an outcome (cancel_failed: accepted)
    settle = {k[4]: v for k, v in totals.items() if k[0] == "opledger_settlement_latency_seconds_bucket"}
    assert settle == {"0.01": 1, "1.0": 1}  # failure settled at once, success after 1 s
    position = view.position(PROJECTION_NAME, orders_app.name)
    rebuilt = MetricsProjection(app=orders_app, store=store, config=MetricsProjectionConfig(batch_size=3,
                                                                                           cache_size=1))
    rebuilt.rebuild()
    assert store.totals() == totals
    assert view.position(PROJECTION_NAME, orders_app.name) == position
    assert live.catch_up() == 0 and store.totals() == totals
    view.close()


def test_a_replay_or_racing_writer_never_double_counts(orders_app: OrdersApp, migrated: Database, clock) -> None:
    seed(orders_app, clock)
    view = open_view(migrated)
    store = MetricsStore(view)
    one = MetricsProjection(app=orders_app, store=store, config=MetricsProjectionConfig(batch_size=5))
    two = MetricsProjection(app=orders_app, store=store, config=MetricsProjectionConfig(batch_size=5))
    assert one.run_once() == 5
    # ``two`` reads from the same start as a batch of ``one`` that commits first: its own is refused.
    start = store.position(PROJECTION_NAME, orders_app.name)
    records = two._read(start, 5)
    increments = two.fold.fold(records)
    assert one.run_once() == 5
    import pytest

    from projections.metrics_store import PositionMovedError

    with pytest.raises(PositionMovedError):
        store.write(increments, projection=PROJECTION_NAME, upstream=orders_app.name, start=start,
                    position=records[-1][0])
    one.catch_up()
    two.catch_up()
    assert _counters(store) == EXPECTED_COUNTERS
    view.close()
