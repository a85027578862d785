"""The status view seam's contract, one suite for every backend (STYLE rule 8).

Runs against SQLite, PostgreSQL and the in-memory store, so the fake cannot drift from the
real views. Expectations come from the SQL (``migrations/<backend>/queries``). Where a backend
has one owning process (SQLite), leadership and reservations are trivially granted; the other
two are held to the multi-process contract. Differences that remain are asserted per backend,
each with its reason.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.clock import FakeClock
from ledger.config import Database
from projections.memory_view import MemoryStatusStore
from projections.metrics_store import MetricsStore
from projections.rows import AttentionMark, DueRow, StatusRow
from projections.view import MAIN_TABLE, REBUILD_TABLE, Lease, NotLeaderError, StatusView
from projections.views import open_view
from tests.conftest import drop_schema, new_postgres_url, require_postgres

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
P, U = "status", "orders"  # projection and upstream names


@dataclass
class Backend:
    """One store on one backend, and how to open views of it."""

    name: str
    open: Callable[[], StatusView]
    pass_time: Callable[[float], object]
    """Let ``seconds`` pass on the store's clock (the database's, or the fake's)."""

    @property
    def single_owner(self) -> bool:
        """One process owns the store (SQLite): it always leads, and reserves everything."""
        return self.name == "sqlite"


def _migrated(database: Database) -> Database:
    from adapters.demo.orders import OrdersApp
    from tests.stores import migrated_store

    migrated_store(database, OrdersApp)
    return database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres), "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    opened: list[StatusView] = []

    def opener(make: Callable[[], StatusView]) -> Callable[[], StatusView]:
        def open_one() -> StatusView:
            view = make()
            opened.append(view)
            return view
        return open_one

    schema = None
    if request.param == "memory":
        clock = FakeClock(T0)
        store = MemoryStatusStore(clock=clock)
        yield Backend("memory", opener(lambda: open_view(store)), clock.advance)
    else:
        if request.param == "postgres":
            require_postgres()
            url, schema = new_postgres_url()
        else:
            url = f"sqlite:///{tmp_path / 'store' / 'opledger.db'}"
        database = _migrated(Database.parse(url))
        yield Backend(request.param, opener(lambda: open_view(database)), time.sleep)
    for view in opened:
        view.close()
    if schema is not None:
        drop_schema(schema)


@pytest.fixture
def view(backend: Backend) -> StatusView:
    return backend.open()


def _id(n: int) -> UUID:
    return UUID(int=n)


def row(n: int, version: int = 1, **changes: Any) -> StatusRow:
    """A valid row for operation ``n``; times a minute apart per ``n`` unless changed."""
    at = T0 + timedelta(minutes=n)
    values: dict[str, Any] = dict(
        operation_id=_id(n), version=version, tenant="default", integration="payments.charge",
        integration_version=1, delivery_mode="idempotent", status="pending", execution="pending",
        settlement="unsettled", approval="not_required", attempts=0, max_attempts=3, epoch=0,
        worker_id=None, lease_expires_at=None, next_due_at=at, remote_id=None, attention=None,
        disposition=None, failure_category=None, ambiguity_reason=None, cancel_requested=False,
        source_entity_type="orders.Order", source_entity_id=_id(10_000 + n), source_entity_version=1,
        effect_index=0, created_at=at, updated_at=at)
    values.update(changes)
    return StatusRow(**values)


def write(view: StatusView, *rows: StatusRow, position: int = 1, **kwargs: Any) -> None:
    view.write(rows, projection=P, upstream=U, position=position, **kwargs)


def ids(rows: list[Any]) -> list[UUID]:
    return [r.operation_id for r in rows]


# -- position and tracking

def test_position_is_zero_until_written_and_kept_per_projection_and_upstream(view: StatusView) -> None:
    assert view.position(P, U) == 0
    write(view, position=7)
    view.write([], projection="other", upstream=U, position=3)
    assert (view.position(P, U), view.position("other", U), view.position(P, "elsewhere")) == (7, 3, 0)


def test_position_is_set_as_given_even_backwards(view: StatusView) -> None:
    write(view, position=9)
    write(view, position=4)
    assert view.position(P, U) == 4


def test_in_process_names_where_the_work_happens(backend: Backend, view: StatusView) -> None:
    assert view.in_process is (backend.name != "postgres")


# -- write

def test_rows_round_trip_exactly_with_times_in_utc(view: StatusView) -> None:
    plus_two = timezone(timedelta(hours=2))
    given = row(1, lease_expires_at=(T0 + timedelta(seconds=30.000001)).astimezone(plus_two),
                worker_id="w-1", remote_id="r-1", failure_category="timeout", cancel_requested=True,
                attempts=3, epoch=2)
    write(view, given, row(2, next_due_at=None))
    got = view.get(_id(1))
    assert got == given
    assert got is not None and all(
        value.tzinfo is UTC for value in got if isinstance(value, datetime))
    assert view.get(_id(2)) == row(2, next_due_at=None)
    assert view.get(_id(3)) is None


def test_get_many_reads_the_rows_that_exist_by_id(view: StatusView) -> None:
    write(view, row(1), row(2, status="succeeded"), row(3))
    assert view.get_many([_id(2), _id(4), _id(1)]) == {_id(1): row(1), _id(2): row(2, status="succeeded")}
    assert view.get_many([]) == {}
    many = [_id(n) for n in range(4, 1_204)]  # more ids than SQLite binds as parameters
    write(view, *(row(n) for n in range(4, 1_204)), position=2)
    assert set(view.get_many(many)) == set(many)


def test_a_row_never_moves_to_an_older_or_the_same_version(view: StatusView) -> None:
    write(view, row(1, version=3, status="claimed", execution="claimed"))
    write(view, row(1, version=2, status="succeeded"), position=2)
    write(view, row(1, version=3, status="failed"), position=3)
    got = view.get(_id(1))
    assert got is not None and (got.version, got.status) == (3, "claimed")
    assert view.position(P, U) == 3  # the position moves even when no row does
    write(view, row(1, version=4, status="succeeded"), position=4)
    assert view.get(_id(1)) == row(1, version=4, status="succeeded")


def test_a_row_breaking_the_tables_checks_fails_the_whole_write(view: StatusView) -> None:
    write(view, row(1), position=5)
    for bad in (row(2, status="sleeping"), row(2, attempts=4, max_attempts=3), row(2, attempts=-1)):
        with pytest.raises(Exception):
            write(view, row(3), bad, position=6)
    assert view.position(P, U) == 5
    assert view.get(_id(3)) is None and ids(view.list()) == [_id(1)]


def test_two_rows_of_one_operation_in_one_write(backend: Backend, view: StatusView) -> None:
    # Contract: at most one row per operation per write (the projection folds a batch into
    # one row each). PostgreSQL refuses more (an upsert cannot change a row twice); the
    # memory store holds to that; SQLite applies them one after the other.
    if backend.name == "sqlite":
        write(view, row(1, version=2), row(1, version=1))
        assert view.get(_id(1)) == row(1, version=2)
        return
    with pytest.raises(Exception):
        write(view, row(1, version=2), row(1, version=1), position=3)
    assert view.get(_id(1)) is None and view.position(P, U) == 0


def marks(*ns: int, reason: str = "corrupt_record") -> dict[UUID, AttentionMark]:
    return {_id(n): AttentionMark(reason, f'{{"n": {n}}}') for n in ns}


def test_attention_marks_take_rows_off_due_and_onto_attention(view: StatusView) -> None:
    write(view, row(1), row(2), row(3), row(4))
    write(view, row(2, version=2), marks=marks(2, 99), position=2)  # 99 has no row
    write(view, row(3, version=2), position=3)
    view.write([row(1, version=5)], projection=P, upstream=U, position=4, marks=marks(1))
    write(view, marks=marks(4, reason="unreadable_event"), position=5)
    marked = view.get(_id(2))
    assert marked == row(2, version=2, attention="corrupt_record", attention_detail='{"n": 2}', next_due_at=None)
    assert view.get(_id(1)) == row(1, version=5, attention="corrupt_record", attention_detail='{"n": 1}',
                                   next_due_at=None)
    assert view.get(_id(99)) is None
    assert ids(view.due(T0 + timedelta(days=1), 10)) == [_id(3)]
    assert ids(view.attention()) == [_id(1), _id(2), _id(4)]
    assert ids(view.attention_of("unreadable_event")) == [_id(4)]
    assert ids(view.attention_of("corrupt_record", limit=1)) == [_id(1)]
    write(view, row(2, version=3), position=6)  # the code learns to read it: a newer row clears it
    assert view.get(_id(2)) == row(2, version=3)


# -- leadership

def test_leadership_lease(backend: Backend) -> None:
    first, second = backend.open(), backend.open()
    a, b = Lease("projection.status.orders", "a"), Lease("projection.status.orders", "b")
    assert first.lead(a, 30.0)
    if backend.single_owner:
        assert second.lead(b, 30.0)  # one owning process: it always leads
        return
    assert not second.lead(b, 30.0)
    assert first.lead(a, 0.2)  # the holder extends (here: shortens) its own lease
    assert not second.lead(b, 30.0)
    backend.pass_time(0.3)
    assert second.lead(b, 30.0)  # expired: taken over
    assert not first.lead(a, 30.0)
    assert first.lead(Lease("another", "a"), 30.0)  # leases are by name


def test_a_write_under_a_lost_lease_raises_and_writes_nothing(backend: Backend) -> None:
    first, second = backend.open(), backend.open()
    a, b = Lease("projection.status.orders", "a"), Lease("projection.status.orders", "b")
    assert first.lead(a, 0.2)
    write(first, row(1), position=1, lease=a)
    assert first.get(_id(1)) == row(1)
    backend.pass_time(0.3)
    assert second.lead(b, 30.0)
    if backend.single_owner:
        write(first, row(2), position=2, lease=a)  # no lease to lose
        assert first.position(P, U) == 2
        return
    with pytest.raises(NotLeaderError):
        write(first, row(1, version=2), row(2), position=2, lease=a, marks=marks(1))
    assert first.get(_id(1)) == row(1) and first.get(_id(2)) is None and first.position(P, U) == 1
    write(second, row(2), position=2, lease=b)
    assert second.position(P, U) == 2


def test_a_lease_never_taken_cannot_be_written_under(backend: Backend, view: StatusView) -> None:
    if backend.single_owner:
        return
    with pytest.raises(NotLeaderError):
        write(view, row(1), lease=Lease("never", "a"))
    assert view.get(_id(1)) is None and view.position(P, U) == 0


# -- due work

def test_due_is_at_or_before_now_earliest_first(view: StatusView) -> None:
    now = T0 + timedelta(minutes=10)
    write(view,
          row(1, next_due_at=now + timedelta(microseconds=1)),  # later: not due
          row(2, next_due_at=now),  # equal: due
          row(3, next_due_at=None),  # nothing to do: never due
          row(4, next_due_at=now - timedelta(hours=1)),
          row(5, next_due_at=now - timedelta(seconds=1), cancel_requested=True, execution="claimed",
              settlement="pending", version=4))
    assert view.due(now, 10) == [
        DueRow(_id(4), 1, "pending", "unsettled", False),
        DueRow(_id(5), 4, "claimed", "pending", True),
        DueRow(_id(2), 1, "pending", "unsettled", False),
    ]
    assert ids(view.due(now, 2)) == [_id(4), _id(5)]
    assert view.due(now, 0) == []
    assert ids(view.due(now.astimezone(timezone(timedelta(hours=-5))), 10)) == [_id(4), _id(5), _id(2)]
    assert view.due(T0 - timedelta(days=1), 10) == []


def test_negative_limits(backend: Backend, view: StatusView) -> None:
    write(view, row(1))
    if backend.name == "sqlite":
        assert ids(view.due(T0 + timedelta(days=1), -1)) == [_id(1)]  # SQLite: LIMIT -1 is none
        assert ids(view.list(limit=-1)) == [_id(1)]
        return
    for call in (lambda: view.due(T0, -1), lambda: view.list(limit=-1), lambda: view.attention(-1)):
        with pytest.raises(Exception):
            call()


def test_reservations_are_exclusive_and_end_with_their_context(backend: Backend) -> None:
    first, second = backend.open(), backend.open()
    wanted = [uuid4() for _ in range(10)]  # advisory locks are the database's: ids of their own
    with first.reserve(wanted[:6]) as mine:
        assert mine == set(wanted[:6])
        with second.reserve(wanted) as theirs, first.reserve(wanted) as again:
            if backend.single_owner:
                assert theirs == again == set(wanted)
            else:
                assert theirs == set(wanted[6:]), "a reserved operation went to a second holder"
                assert again == set(), "one view's two holders shared an operation"
    # On PostgreSQL the locks are the session's: the connection that held them is closed, so
    # neither another worker nor a later checkout of this pool finds them still held.
    with pytest.raises(RuntimeError), first.reserve(wanted) as mine:
        assert mine == set(wanted)
        raise RuntimeError("the commit failed")
    with second.reserve(wanted) as after:
        assert after == set(wanted), "reservations outlived their context"
    for _ in range(3):  # whichever pooled connection it gets
        with first.reserve(wanted) as again:
            assert again == set(wanted), "a pooled connection still held a failed block's reservations"
    with second.reserve([]) as nothing:
        assert nothing == set()


# -- operator queries

def test_list_is_newest_first_by_created_at_then_operation_id(view: StatusView) -> None:
    same = T0 + timedelta(hours=5)
    write(view, row(1), row(2, status="claimed", execution="claimed"), row(3),
          row(4, created_at=same), row(5, created_at=same, status="claimed", execution="claimed"))
    assert ids(view.list()) == [_id(4), _id(5), _id(3), _id(2), _id(1)]
    assert ids(view.list(limit=2)) == [_id(4), _id(5)]
    assert ids(view.list(status="claimed")) == [_id(5), _id(2)]
    assert view.list(status="settled") == [] and view.list(limit=0) == []


def test_attention_is_oldest_first_by_updated_at_then_operation_id(view: StatusView) -> None:
    same = T0 + timedelta(hours=5)
    write(view, row(1, attention="ambiguous", updated_at=same), row(2),
          row(3, attention="settlement_blocked"), row(4, attention="dead_letter", updated_at=same))
    assert ids(view.attention()) == [_id(3), _id(1), _id(4)]
    assert ids(view.attention(limit=1)) == [_id(3)]


def test_counts_per_status(view: StatusView) -> None:
    assert view.counts() == {}
    write(view, row(1), row(2), row(3, status="settled", settlement="settled", execution="succeeded"))
    assert view.counts() == {"pending": 2, "settled": 1}


_STATUSES = ("pending", "claimed", "settled", "failed")
_step = st.tuples(st.sampled_from(("write", "write", "write", "rebuild")), st.integers(1, 6),
                  st.integers(1, 4), st.sampled_from(_STATUSES), st.sampled_from(("a", "b")),
                  st.sampled_from(("default", "t2")))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_step, max_size=25))
def test_counts_always_equal_a_recount_of_the_rows(view: StatusView, steps: list[Any]) -> None:
    """The counters the SQL stores keep by trigger (schema 0009) always agree with the rows:
    through new rows, status and label changes, stale writes that change nothing, and rebuild
    swaps (which move the triggers to the table swapped in). Examples share one store: the
    invariant holds from whatever an earlier example left."""
    for kind, n, version, status, integration, tenant in steps:
        changed = row(n, version=version, status=status, integration=integration, tenant=tenant)
        if kind == "write":
            write(view, changed, position=1)
        else:
            kept = [r._replace(version=r.version + 1) for r in view.list(limit=100) if r.operation_id != changed.operation_id]
            view.begin_rebuild()
            view.write([*kept, changed], projection=P, upstream=U, position=1, table=REBUILD_TABLE)
            view.finish_rebuild(projection=P, upstream=U, position=1)
        rows = view.list(limit=100)
        assert view.counts() == dict(Counter(r.status for r in rows))
        if (metrics := MetricsStore.of(view)) is not None:
            assert metrics.gauges().by_status == dict(Counter(
                (r.status, r.integration, r.tenant, r.delivery_mode) for r in rows))


# -- rebuild

def test_rebuild_writes_aside_then_swaps_in_with_the_position(view: StatusView) -> None:
    write(view, row(1), row(2), position=10)
    view.begin_rebuild()
    view.write([row(2, version=2), row(3)], projection=f"{P}.rebuild", upstream=U, position=4,
               table=REBUILD_TABLE, marks=marks(3))
    # The main table keeps serving until the swap.
    assert ids(view.list()) == [_id(2), _id(1)] and view.position(P, U) == 10
    assert ids(view.due(T0 + timedelta(days=1), 10)) == [_id(1), _id(2)]
    view.finish_rebuild(projection=P, upstream=U, position=12)
    assert view.list() == [row(3, attention="corrupt_record", attention_detail='{"n": 3}', next_due_at=None), row(2, version=2)]
    assert view.position(P, U) == 12 and view.position(f"{P}.rebuild", U) == 4
    view.begin_rebuild()  # a second rebuild starts empty, whatever the first left
    view.begin_rebuild()
    view.finish_rebuild(projection=P, upstream=U, position=13)
    assert view.list() == [] and view.position(P, U) == 13


def test_rebuild_steps_out_of_order_fail_and_change_nothing(view: StatusView) -> None:
    write(view, row(1), position=10)
    with pytest.raises(Exception):
        view.finish_rebuild(projection=P, upstream=U, position=99)
    with pytest.raises(Exception):
        write(view, row(2), position=98, table=REBUILD_TABLE)
    assert ids(view.list()) == [_id(1)] and view.position(P, U) == 10
    write(view, row(3), position=11, table=MAIN_TABLE)
    assert ids(view.list()) == [_id(3), _id(1)]


# -- close

def test_a_closed_view_refuses_work(view: StatusView) -> None:
    view.close()
    with pytest.raises(Exception):
        view.position(P, U)


# -- search (the observe API's and the CLI's filters)

def test_search_filters_match_on_every_backend_and_a_settled_failure_is_failed(view: StatusView) -> None:
    from projections.view import OperationFilter

    write(view,
          row(1),
          row(2, status="settled", execution="failed", settlement="settled", tenant="acme"),
          row(3, status="ambiguous", execution="ambiguous", attention="ambiguous", integration="notify.send"),
          row(4, approval="required", source_entity_id=_id(77)),
          row(5, status="failed", execution="failed", attention="dead_letter"))
    assert ids(view.search(OperationFilter())) == [_id(5), _id(4), _id(3), _id(2), _id(1)]
    assert ids(view.search(OperationFilter(status="failed"))) == [_id(5), _id(2)]
    assert ids(view.search(OperationFilter(outcome="failed", status="settled"))) == [_id(2)]
    assert ids(view.search(OperationFilter(attention="*"))) == [_id(5), _id(3)]
    assert ids(view.search(OperationFilter(attention="ambiguous", integration="notify.send"))) == [_id(3)]
    assert ids(view.search(OperationFilter(tenant="acme"))) == [_id(2)]
    assert ids(view.search(OperationFilter(approval="required", status="pending"))) == [_id(4)]
    assert ids(view.search(OperationFilter(entity_type="orders.Order", entity_id=_id(77)))) == [_id(4)]
    assert ids(view.search(OperationFilter(since=T0 + timedelta(minutes=4)))) == [_id(5), _id(4)]
    first = view.search(OperationFilter(limit=2))
    assert ids(first) == [_id(5), _id(4)]
    after = (first[-1].created_at, first[-1].operation_id)
    assert ids(view.search(OperationFilter(limit=2, after=after))) == [_id(3), _id(2)]


def test_search_cursor_breaks_ties_by_operation_id(view: StatusView) -> None:
    from projections.view import OperationFilter

    write(view, *(row(n, created_at=T0) for n in (3, 1, 2)))
    first = view.search(OperationFilter(limit=1))
    assert ids(first) == [_id(1)]
    rest = view.search(OperationFilter(after=(T0, _id(1))))
    assert ids(rest) == [_id(2), _id(3)]
