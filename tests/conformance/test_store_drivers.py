"""One conformance suite for the store drivers (ADR 0008; STYLE rule 8): every method of
``migrations.drivers``, on SQLite, PostgreSQL and memory, held to one contract, including the
concurrency cases (two reservers; a reader during commits) and the archive methods (the index,
removal up to the version archived, archived receipts, late records).

Each case is a plain function of a :class:`Store` (the ``CASES`` table), so
``test_a_broken_memory_driver_fails_the_suite`` can run the same cases against a memory driver
with one method made wrong and prove the suite notices.

Source: issue 28 item 4; ADR 0008; docs/adr/0010-archives.md.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
from eventsourcing.persistence import StoredEvent

from ledger.clock import FakeClock
from ledger.codec import LEDGER_TOPIC_PREFIX
from ledger.config import Database
from ledger.errors import OperationArchivedError
from ledger.operation import Operation
from ledger.topics import topics_of
from migrations.drivers import LateRecord, RecordedSegment, StoreDriver, driver_of, memory_env
from migrations.drivers.memory import MemoryDriver
from projections.loading import load_aggregates
from projections.memory_view import MemoryStatusStore
from projections.probe import PROBE_TOPIC
from projections.rows import StatusRow, ledger_topics, row_from_operation
from projections.view import StatusView
from projections.views import open_view
from tests.apps import FakeApp
from tests.conftest import drop_schema, new_postgres_url, require_postgres
from tests.stores import migrated_store

INTENDED = topics_of([Operation.Intended])
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Store:
    """A fresh store of ``FakeApp``, its driver and its status view."""

    app: FakeApp
    driver: StoreDriver
    clock: FakeClock
    view: StatusView

    def close(self) -> None:
        """Close the view and the application."""
        self.view.close()
        self.app.close()

    def claim_elsewhere(self, op_id: UUID) -> Operation:
        """Another worker claims ``op_id`` (its intent is then closed)."""
        op = self.app.get_operation(op_id)
        op.claim(now=self.clock.now(), worker_id="another worker", lease_seconds=30.0)
        self.app.save(op)
        return op

    def log(self) -> list[Any]:
        """Every record of the log, by the library's own reader."""
        return list(self.app.recorder.select_notifications(start=1, limit=1_000_000))


def memory_store() -> Store:
    """A fresh store held in memory (``memory_env``), its driver bound to its status view's
    tables, as one database holds both."""
    clock = FakeClock(T0)
    app = FakeApp(env=memory_env(), clock=clock)
    tables = MemoryStatusStore(clock=clock)
    driver = driver_of(app)
    assert isinstance(driver, MemoryDriver)
    driver.status = tables
    return Store(app, driver, clock, tables.open_view())


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres), "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Store]:
    schema = None
    if request.param == "memory":
        made = memory_store()
    else:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path / 'store' / 'opledger.db'}"
        else:
            require_postgres()
            url, schema = new_postgres_url()
        database = Database.parse(url)
        migrated_store(database, FakeApp)
        clock = FakeClock(T0)
        app = FakeApp(env=database.library_env(create_table=False), clock=clock)
        made = Store(app, driver_of(app), clock, open_view(database))
    try:
        yield made
    finally:
        made.close()
        if schema is not None:
            drop_schema(schema)


# --- the cases ------------------------------------------------------------------------------


def events_list_many_matches_the_repository(s: Store) -> None:
    ops = [s.app.make(f"op-{i}") for i in range(3)]
    s.claim_elsewhere(ops[0])
    entities = [s.app.get_operation(op_id).source.entity_id for op_id in ops]
    rows = s.driver.events_list_many([*ops, *entities, ops[0], uuid4()])  # a repeat and an unknown id
    assert [(r[0], r[1]) for r in rows if r[0] == ops[0]] == [(ops[0], 1), (ops[0], 2)], "one aggregate, in order"
    assert all(type(r[0]) is UUID and type(r[1]) is int and type(r[2]) is str and type(r[3]) is bytes for r in rows)
    assert len(rows) == len(ops) + 1 + len(entities), "a repeated id is read once, an unknown one is absent"
    loaded = load_aggregates(s.app, [*ops, *entities, ops[0], uuid4()])
    assert set(loaded) == set(ops) | set(entities)
    for aggregate_id, state in loaded.items():
        assert state == s.app.repository.get(aggregate_id)
    assert s.driver.events_list_many([]) == []


def records_list_after_reads_what_the_library_reads(s: Store) -> None:
    ops = [s.app.make(f"op-{i}") for i in range(3)]
    s.claim_elsewhere(ops[1])
    topics = list(ledger_topics())
    expected = list(s.app.recorder.select_notifications(start=1, limit=100, topics=topics))
    assert len(expected) == 3 + 1  # three intents, the claim of one
    memo: dict[Any, UUID] = {}
    for after in (0, expected[0].id, expected[2].id, expected[-1].id):
        for limit in (1, 3, 100):
            records = s.driver.records_list_after(after, limit, topics, memo)
            want = [n for n in expected if n.id > after][:limit]
            assert all(type(r[1]) is UUID and type(r[4]) is bytes for r in records)
            assert records == [(n.id, n.originator_id, n.originator_version, n.topic, n.state) for n in want]
            for record, notification in zip(records, want, strict=True):
                assert s.app.mapper.decode_record(*record[1:]) == s.app.mapper.to_domain_event(notification)
    # Host events are not ledger topics: asking for none of them reads nothing.
    assert s.driver.records_list_after(0, 100, ["no.such:Topic"], memo) == []
    assert s.driver.records_list_after(0, 100, [], memo) == []


def records_list_after_reads_unknown_ledger_topics_by_prefix(s: Store) -> None:
    op_id = s.app.make("op")
    unknown = f"{LEDGER_TOPIC_PREFIX}gone:Vanished"
    s.app.recorder.insert_events([
        StoredEvent(originator_id=uuid4(), originator_version=1, topic=unknown, state=b"{}"),
        StoredEvent(originator_id=uuid4(), originator_version=1, topic="host.other:Thing", state=b"{}")])
    plain = s.driver.records_list_after(0, 100, INTENDED, {})
    assert [r[1] for r in plain] == [op_id]
    prefixed = s.driver.records_list_after(0, 100, INTENDED, {}, prefix=LEDGER_TOPIC_PREFIX)
    assert [r[3] for r in prefixed] == [INTENDED[0], unknown], "the unknown ledger topic, not the host's"
    assert s.driver.records_list_after(0, 1, INTENDED, {}, prefix=LEDGER_TOPIC_PREFIX) == prefixed[:1]


def intents_list_open_leaves_out_closed_intents_where_it_says_so(s: Store) -> None:
    ids = [s.app.make(f"op-{i}") for i in range(4)]
    for op_id in ids[:2]:
        s.claim_elsewhere(op_id)
    last = s.log()[-1].id
    read = s.driver.intents_list_open(0, 10, INTENDED, {})
    first = s.driver.intents_list_open(0, 1, INTENDED, {})
    assert not read.elsewhere and not first.elsewhere, "a read that reserves nothing"
    if s.driver.intents_only_open:
        assert [r[1] for r in read.records] == ids[2:]
        assert read.closed_through == last, "fewer than asked for: every intent up to the log's end was read"
        assert [r[1] for r in first.records] == ids[2:3]
        assert first.closed_through == first.records[0][0], "a full page says nothing past its last record"
    else:
        assert [r[1] for r in read.records] == ids, "every intent, closed ones included"
        assert read.records == s.driver.records_list_after(0, 10, INTENDED, {})
        assert read.closed_through is None and first.closed_through is None
        assert [r[1] for r in first.records] == ids[:1]


def reservations_exclude_each_other_and_end_with_their_block(s: Store) -> None:
    ids = [s.app.make(f"op-{i}") for i in range(3)]
    if not s.driver.reservations_shared:
        with pytest.raises(ValueError, match="share the store"), s.driver.reservations_hold():
            pass
        return
    with s.driver.reservations_hold() as taken:
        first = taken.intents_reserve_open(0, 10, INTENDED)
        assert [r[1] for r in first.records] == ids and not first.elsewhere
        assert sorted(taken.held) == sorted(ids)
        with s.driver.reservations_hold() as other:  # a second reserver
            second = other.intents_reserve_open(0, 10, INTENDED)
            assert second.elsewhere == set(ids), "another reserver's read took intents this one holds"
            assert other.operations_reserve_current([(op_id, 1) for op_id in ids]) == set()
            assert other.held == []
    with s.driver.reservations_hold() as taken:  # released when the blocks ended
        assert not taken.intents_reserve_open(0, 10, INTENDED).elsewhere


def reservations_take_only_operations_that_have_not_moved_on(s: Store) -> None:
    ids = [s.app.make(f"op-{i}") for i in range(3)]
    theirs = s.claim_elsewhere(ids[1])
    if not s.driver.reservations_shared:
        return  # refused: reservations_exclude_each_other_and_end_with_their_block
    with s.driver.reservations_hold() as taken:
        assert taken.operations_reserve_current([]) == set()
        assert taken.operations_reserve_current([(op_id, 1) for op_id in ids]) == {ids[0], ids[2]}
        assert taken.operations_reserve_current([(ids[1], theirs.version)]) == {ids[1]}, "judged by its newest"
        with s.driver.reservations_hold() as other:
            assert other.operations_reserve_current([(op_id, theirs.version) for op_id in ids]) == set()


def reservations_of_a_failed_block_are_released(s: Store) -> None:
    ids = [s.app.make(f"op-{i}") for i in range(2)]
    if not s.driver.reservations_shared:
        return  # refused: reservations_exclude_each_other_and_end_with_their_block
    with pytest.raises(RuntimeError), s.driver.reservations_hold() as taken:
        assert [r[1] for r in taken.intents_reserve_open(0, 10, INTENDED).records] == ids
        raise RuntimeError("the pass failed")
    for _ in range(100):  # a closed connection's backend drops its locks a moment later
        with s.driver.reservations_hold() as taken:
            if taken.operations_reserve_current([(op_id, 1) for op_id in ids]) == set(ids):
                return
        threading.Event().wait(0.05)
    raise AssertionError("a failed block's reservations were never released")


def store_probe_is_accepted_and_stores_nothing(s: Store) -> None:
    s.app.make("op")
    before = s.log()
    for _ in range(3):
        s.driver.store_probe(uuid4(), PROBE_TOPIC, b"{}")
    assert s.log() == before
    assert s.driver.records_list_after(0, 100, [PROBE_TOPIC], {}) == []


def topics_count_stored_counts_by_prefix_and_by_name(s: Store) -> None:
    for i in range(3):
        s.app.make(f"op-{i}")
    counts = s.driver.topics_count_stored(LEDGER_TOPIC_PREFIX)
    assert counts == {INTENDED[0]: 3}
    entity_topic = s.log()[0].topic
    assert s.driver.topics_count_stored(LEDGER_TOPIC_PREFIX, [entity_topic, entity_topic]) == {
        INTENDED[0]: 3, entity_topic: 3}
    assert s.driver.topics_count_stored("no.such.prefix.") == {}


def intents_list_live_reads_the_intents_of_work_due_and_not_projected(s: Store) -> None:
    ids = [s.app.make(f"op-{i}") for i in range(4)]
    s.claim_elsewhere(ids[0])

    def live() -> set[UUID]:
        rows = s.driver.intents_list_live(INTENDED, "status", s.app.name)
        assert all(type(r[0]) is UUID and r[1] == 1 and r[2] == INTENDED[0] and type(r[3]) is bytes for r in rows)
        assert len(rows) == len({r[0] for r in rows}), "each intent once"
        return {r[0] for r in rows}

    assert live() == set(ids), "nothing projected yet: every intent is after the position"
    due = [row_from_operation(s.app.get_operation(op_id)) for op_id in ids[:2]]  # claimed, pending
    assert all(row.next_due_at is not None for row in due)
    s.view.write([*due, closed(s, ids[2], minutes(1)), closed(s, ids[3], minutes(1))], projection="status",
                 upstream=s.app.name, position=s.log()[-1].id)
    assert live() == set(ids[:2]), "closed operations are left out"
    later = s.app.make("op-later")
    s.view.write([], projection="other", upstream=s.app.name, position=s.log()[-1].id)
    assert live() == {*ids[:2], later}, "after the status projection's own position"
    assert s.driver.intents_list_live(["no.such:Topic"], "status", s.app.name) == []


def a_reader_during_commits_sees_only_a_prefix_of_the_log(s: Store) -> None:
    # Positions are in commit order: a reader never sees a record before an earlier one appears.
    stop = threading.Event()
    reads: list[list[tuple[int, UUID]]] = []
    failures: list[BaseException] = []

    def read() -> None:
        try:
            while not stop.is_set():
                reads.append([(r[0], r[1]) for r in s.driver.records_list_after(0, 10_000, INTENDED, {})])
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            failures.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    rng = random.Random(3)
    try:
        for i in range(40):
            s.app.make(f"op-{i}")
            if rng.random() < 0.3:
                stop.wait(0.001)
    finally:
        stop.set()
        reader.join(timeout=30)
    assert not failures, failures
    final = [(r[0], r[1]) for r in s.driver.records_list_after(0, 10_000, INTENDED, {})]
    assert len(final) == 40 and reads
    for seen in reads:
        assert seen == final[:len(seen)], "a read saw a later record without an earlier one"


# --- the archive cases (docs/adr/0010-archives.md §3, §4, §6) ---------------------------------


def minutes(n: float) -> datetime:
    """``n`` minutes after the stores' clock started (UTC)."""
    return T0 + timedelta(minutes=n)


def closed(s: Store, op_id: UUID, at: datetime, **changes: Any) -> StatusRow:
    """``op_id``'s status row as the projection writes it, settled at ``at`` unless ``changes``
    say otherwise."""
    row = row_from_operation(s.app.get_operation(op_id))
    return row._replace(**{"status": "settled", "execution": "succeeded", "settlement": "settled",
                           "next_due_at": None, "updated_at": at, **changes})


def write_rows(s: Store, *rows: StatusRow) -> None:
    """Write ``rows`` into the store's status view, as its projection would."""
    s.view.write(rows, projection="conformance", upstream=s.app.name, position=1)


def record_segment(s: Store, number: int, operations: list[tuple[UUID, int, str]] | None = None, *,
                   receipts: list[tuple[UUID, int]] | None = None, digest: str | None = None) -> RecordedSegment:
    """Record segment ``number`` holding ``operations`` (``(id, version archived, final status)``)
    and ``receipts`` (``(id, version archived)``).

    Returns:
        The segment as ``archive_segments`` reads it back once recorded (its records counted).
    """
    operations, receipts = operations or [], receipts or []
    records = sum(version for _, version, *_ in [*operations, *receipts])
    segment = RecordedSegment(number, digest or f"sha256:{number:064x}", f'{{"segment": {number}}}')
    s.driver.archive_record(segment, aggregates=len(operations) + len(receipts), records=records,
                            archived_at=minutes(60), operations=operations, receipts=receipts)
    return segment._replace(records=records)


def archive_candidates_are_closed_rows_oldest_first_by_keyset(s: Store) -> None:
    ids = [s.app.make(f"op-{i}") for i in range(9)]
    write_rows(s,
               closed(s, ids[0], minutes(3)),
               closed(s, ids[1], minutes(1), status="failed", execution="failed", settlement="not_required"),
               closed(s, ids[2], minutes(2), status="settlement_blocked", execution="failed", settlement="blocked",
                      disposition="abandoned"),
               closed(s, ids[3], minutes(2)),  # the same time as ids[2]: ordered by id
               closed(s, ids[4], minutes(1), status="succeeded", settlement="pending"),
               closed(s, ids[5], minutes(1), attention="ambiguous"),
               closed(s, ids[6], minutes(10)),  # not before the cutoff
               closed(s, ids[7], minutes(1), status="pending", execution="pending", settlement="none"),
               closed(s, ids[8], minutes(1), status="succeeded", settlement="pending", disposition="abandoned"))
    expected = [ids[1], *sorted(ids[2:4]), ids[0]]
    found = s.driver.archive_candidates(minutes(10), None, 100)
    assert [c.operation_id for c in found] == expected, "closed only, oldest first, then by id"
    assert found[0] == (ids[1], 1, "test.fake", "failed", "failed", "not_required", None, None, minutes(1))
    assert all(type(c.operation_id) is UUID and type(c.version) is int for c in found)
    assert [c.operation_id for c in s.driver.archive_candidates(minutes(2), None, 100)] == [ids[1]], "strictly before"
    for limit in (1, 2):
        paged: list[UUID] = []
        after = None
        while page := s.driver.archive_candidates(minutes(10), after, limit):
            assert len(page) <= limit
            paged.extend(c.operation_id for c in page)
            after = (page[-1].updated_at, page[-1].operation_id)
        assert paged == expected, "keyset paging by (updated_at, operation_id) misses and repeats nothing"
    record_segment(s, 1, [(ids[1], 1, "failed")])
    assert [c.operation_id for c in s.driver.archive_candidates(minutes(10), None, 100)] == expected[1:], \
        "an archived id is never selected again"


def archive_record_keeps_a_segment_once_with_its_index(s: Store) -> None:
    ids = [s.app.make(f"op-{i}") for i in range(3)]
    write_rows(s, *(closed(s, op_id, minutes(1)) for op_id in ids))
    assert s.view.counts() == {"settled": 3}
    first = record_segment(s, 1, [(ids[0], 1, "settled"), (ids[1], 1, "failed")])
    record_segment(s, 1, [(ids[2], 1, "settled")], digest="sha256:rerun")  # a rerun
    assert s.driver.archive_segments() == [first], "a segment recorded already is left as it is"
    assert s.driver.archive_lookup(ids) == {ids[0]: (1, "settled"), ids[1]: (1, "failed")}, "the rerun indexed nothing"
    assert s.view.counts() == {"settled": 3}, "recorded, not removed: each operation counted once, by its row"
    third = record_segment(s, 3, [(ids[2], 1, "settled"), (ids[0], 1, "failed")])
    second = record_segment(s, 2)
    assert s.driver.archive_segments() == [first, second, third], "in number order"
    assert all(type(n) is int and type(r) is int for n, _, _, r in s.driver.archive_segments())
    assert s.driver.archive_lookup(ids) == {ids[0]: (1, "settled"), ids[1]: (1, "failed"), ids[2]: (3, "settled")}, \
        "an id is archived once: its first segment"
    assert s.view.counts() == {"settled": 3}


def archive_lookup_finds_archived_ids_and_intend_refuses_them(s: Store) -> None:
    op_id = s.app.make("op")
    entity_id = s.app.get_operation(op_id).source.entity_id
    entity = s.app.repository.get(entity_id)
    entity._settled("done")  # the entity's next transition, and the id its intent derives
    derived = s.app.intend(entity, "test.fake", target="https://partner.test/call", payload={"n": 0}).id
    record_segment(s, 4, [(derived, 1, "settled")])  # archived (by an earlier run, as it were)
    assert s.driver.archive_lookup([derived, op_id, derived, uuid4()]) == {derived: (4, "settled")}
    assert s.driver.archive_lookup([]) == {}
    replay = s.app.repository.get(entity_id)  # a host replaying that transition
    replay._settled("done")
    with pytest.raises(OperationArchivedError, match="seg-000004"):
        s.app.intend(replay, "test.fake", target="https://partner.test/call", payload={"n": 0})


def archive_remove_takes_records_and_status_rows_up_to_the_version_archived(s: Store) -> None:
    ids = [s.app.make(f"op-{i}") for i in range(4)]
    write_rows(s, *(closed(s, op_id, minutes(1)) for op_id in ids))
    removed, untouched, late = ids[:2], ids[2], ids[3]
    record_segment(s, 1, [(op_id, 1, "settled") for op_id in (*removed, late)])
    s.claim_elsewhere(late)  # a record past the version archived
    assert s.driver.archive_unremoved(100) == sorted((op_id, 1) for op_id in removed), "the late one is left out"
    assert s.driver.archive_unremoved(1) == sorted((op_id, 1) for op_id in removed)[:1]
    before = s.log()
    counts = s.view.counts()
    assert s.driver.archive_remove([(op_id, 1) for op_id in (*removed, late)]) == len(removed)
    assert s.view.counts() == counts, "the removed rows move to the carried-forward totals, in the same transaction"
    assert s.driver.events_list_many(removed) == [] and [s.view.get(op_id) for op_id in removed] == [None, None]
    assert [r[1] for r in s.driver.events_list_many([late])] == [1, 2] and s.view.get(late) is not None, \
        "an operation with a late record stays whole"
    assert s.driver.events_list_many([untouched]) and s.view.get(untouched) is not None
    assert s.driver.archive_unremoved(100) == []
    assert s.log() == [n for n in before if n.originator_id not in removed], "the others keep their positions"
    assert [r[1] for r in s.driver.records_list_after(0, 100, INTENDED, {}, prefix=LEDGER_TOPIC_PREFIX)
            if r[3] in INTENDED] == [untouched, late]
    assert s.driver.topics_count_stored(LEDGER_TOPIC_PREFIX)[INTENDED[0]] == 2
    assert s.driver.archive_remove([(removed[0], 1)]) == 0  # a rerun: nothing left to remove
    assert s.view.counts() == counts, "a rerun adds nothing twice"
    assert set(s.driver.archive_lookup(ids)) == {*removed, late}, "the index keeps what was removed"


def archive_receipts_are_held_until_removed_or_kept_whole(s: Store) -> None:
    r1, r2, r3 = sorted(uuid4() for _ in range(3))

    def store_receipt(receipt_id: UUID, *versions: int) -> None:
        s.app.recorder.insert_events([StoredEvent(originator_id=receipt_id, originator_version=v,
                                                  topic="tests.receipts:Recorded", state=b"{}") for v in versions])

    def versions(receipt_id: UUID) -> list[int]:
        return [r[1] for r in s.driver.events_list_many([receipt_id])]

    store_receipt(r1, 1, 2)
    store_receipt(r2, 1)
    store_receipt(r3, 1)
    record_segment(s, 1, receipts=[(r1, 2), (r2, 1), (r3, 1)])
    assert s.driver.archive_receipts_held([r1, r2, r3, uuid4()]) == {r1, r2, r3}
    assert s.driver.archive_receipts_unremoved(100) == [(r1, 1, 2), (r2, 1, 1), (r3, 1, 1)]
    assert s.driver.archive_receipts_unremoved(2) == [(r1, 1, 2), (r2, 1, 1)]
    store_receipt(r2, 2)  # reopened since it was archived
    s.driver.archive_receipts_remove([(r1, 1, 2), (r2, 1, 1)])
    assert (versions(r1), versions(r2), versions(r3)) == ([], [1, 2], [1]), "removed; kept whole; not asked"
    assert s.driver.archive_receipts_unremoved(100) == [(r3, 1, 1)]
    assert s.driver.archive_receipts_held([r1, r2, r3]) == {r2, r3}, "a removed generation no longer holds its id"
    store_receipt(r1, 1)  # its key used again after removal: a new receipt from version 1
    record_segment(s, 2, receipts=[(r1, 1)])
    assert s.driver.archive_receipts_unremoved(100) == [(r1, 2, 1), (r3, 1, 1)]
    assert s.driver.archive_receipts_held([r1]) == {r1}


def archive_late_records_are_kept_once_listed_and_acknowledged(s: Store) -> None:
    op_a, op_b = uuid4(), uuid4()
    first = LateRecord(op_a, "cb-1", 1, "test.fake", "succeeded", "done", "a late answer", minutes(2))
    earlier = LateRecord(op_a, "cb-2", 1, "test.fake", "failed", None, "", minutes(1))
    other = LateRecord(op_b, "cb-1", 2, "test.fake", "succeeded", "done", "another", minutes(3))
    assert [s.driver.archive_late_record(r) for r in (first, earlier, other)] == [True, True, True]
    assert s.driver.archive_late_record(first._replace(detail="a retry", received_at=minutes(0))) is False, \
        "a provider's retry of one kept already"
    assert s.driver.archive_late_list(100) == [earlier, first, other], "oldest first; the retry wrote nothing"
    assert s.driver.archive_late_list(1) == [earlier]
    assert all(type(r.operation_id) is UUID and type(r.segment) is int for r in s.driver.archive_late_list(100))
    assert s.driver.archive_late_acknowledge(op_a, principal="ops", evidence="seen", at=minutes(4)) == 2
    assert s.driver.archive_late_acknowledge(op_a, principal="ops", evidence="again", at=minutes(5)) == 0
    assert s.driver.archive_late_acknowledge(uuid4(), principal="ops", evidence="none", at=minutes(5)) == 0
    assert s.driver.archive_late_list(100) == [other]
    assert s.driver.archive_late_record(first) is False, "an acknowledged record is still kept"
    assert s.driver.archive_late_list(100) == [other]


CASES: list[Callable[[Store], None]] = [
    events_list_many_matches_the_repository,
    records_list_after_reads_what_the_library_reads,
    records_list_after_reads_unknown_ledger_topics_by_prefix,
    intents_list_open_leaves_out_closed_intents_where_it_says_so,
    reservations_exclude_each_other_and_end_with_their_block,
    reservations_take_only_operations_that_have_not_moved_on,
    reservations_of_a_failed_block_are_released,
    store_probe_is_accepted_and_stores_nothing,
    topics_count_stored_counts_by_prefix_and_by_name,
    intents_list_live_reads_the_intents_of_work_due_and_not_projected,
    a_reader_during_commits_sees_only_a_prefix_of_the_log,
    archive_candidates_are_closed_rows_oldest_first_by_keyset,
    archive_record_keeps_a_segment_once_with_its_index,
    archive_lookup_finds_archived_ids_and_intend_refuses_them,
    archive_remove_takes_records_and_status_rows_up_to_the_version_archived,
    archive_receipts_are_held_until_removed_or_kept_whole,
    archive_late_records_are_kept_once_listed_and_acknowledged,
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__)
def test_store_driver(store: Store, case: Callable[[Store], None]) -> None:
    case(store)


def test_every_driver_method_has_a_case() -> None:
    # A method added to a driver must be added to the suite too.
    import inspect

    from migrations.drivers.postgres import PostgresDatabase

    methods = {name for name, _ in inspect.getmembers(MemoryDriver, inspect.isfunction) if not name.startswith("_")}
    covered = " ".join(inspect.getsource(case) for case in CASES)
    assert {m for m in methods if m not in covered} == set()
    assert {m for m in methods if m.startswith("archive_")} <= set(BROKEN), "each archive method can be broken"
    database_methods = {name for name, _ in inspect.getmembers(PostgresDatabase, inspect.isfunction)
                        if not name.startswith("_")}
    module = inspect.getsource(inspect.getmodule(test_every_driver_method_has_a_case))  # type: ignore[arg-type]
    tests = module[module.index("# --- the database-level driver"):]
    assert {m for m in database_methods if f"driver.{m}(" not in tests} == set()


BROKEN: dict[str, Callable[..., Any]] = {
    "records_list_after": lambda real: lambda self, *a, **k: real(self, *a, **k)[1:],
    "events_list_many": lambda real: lambda self, ids: list(reversed(real(self, ids))),
    "topics_count_stored": lambda real: lambda self, prefix, topics=(): {
        t: n + 1 for t, n in real(self, prefix, topics).items()},
    "intents_list_live": lambda real: lambda self, *a: real(self, *a)[:-1],
    "archive_candidates": lambda real: lambda self, *a: real(self, *a)[::-1],
    "archive_record": lambda real: lambda self, segment, **k: real(self, segment, **{**k, "operations": []}),
    "archive_segments": lambda real: lambda self: real(self)[::-1],
    "archive_lookup": lambda real: lambda self, ids: {i: (n, "settled") for i, (n, _) in real(self, ids).items()},
    "archive_unremoved": lambda real: lambda self, limit: real(self, limit + 1),
    "archive_remove": lambda real: lambda self, operations: None,
    "archive_late_record": lambda real: lambda self, record: real(self, record) or True,
    "archive_late_list": lambda real: lambda self, limit: real(self, limit)[::-1],
    "archive_late_acknowledge": lambda real: lambda self, operation_id, **k: 0,
    "archive_receipts_held": lambda real: lambda self, ids: set(),
    "archive_receipts_unremoved": lambda real: lambda self, limit: real(self, limit)[1:],
    "archive_receipts_remove": lambda real: lambda self, receipts: None,
}
"""Per memory method, a wrong version of it, made from the real one."""


@pytest.mark.parametrize("method", sorted(BROKEN))
def test_a_broken_memory_driver_fails_the_suite(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The suite can fail: one memory method made wrong, and some case must catch it.
    monkeypatch.setattr(MemoryDriver, method, BROKEN[method](getattr(MemoryDriver, method)))
    caught = []
    for case in CASES:
        s = memory_store()
        try:
            case(s)
        except (AssertionError, pytest.fail.Exception):  # pytest.raises fails with the latter
            caught.append(case.__name__)
        finally:
            s.close()
    assert caught, f"no case noticed a wrong {method}"



# --- the database-level driver (sqlite and postgres: the memory store has no database) --------
# ``database``: tests/conftest.py's fresh store on each backend.


def test_database_driver_prepares_records_and_describes_a_store(database: Database) -> None:
    from migrations.drivers import database_driver

    driver = database_driver(database)
    assert driver.shared is (driver.store_file is None), "a file of its own is owned by one process"
    assert driver.log_gapless is not driver.shared
    assert driver.schema_files.is_dir() and sorted(driver.schema_files.glob("0001.*.sql"))
    assert "@" not in driver.describe() and driver.describe()
    migrated_store(database, FakeApp)
    driver.store_prepare()  # again, on a migrated store: nothing changes
    assert driver.journal_mode() == (None if driver.store_file is None else "wal")
    assert driver.autovacuum() in ((None,) if driver.store_file is not None else (True, False))
    seen: list[dict[str, str]] = []
    store_id = driver.identity_record(defaults={"store_id": "other", "extra": "1"}, current={"schema_version": "99"},
                                      check=seen.append)
    assert seen and seen[0]["app_name"] == FakeApp.name and seen[0]["store_id"] == store_id, "a default never replaces"
    again: list[dict[str, str]] = []
    driver.identity_record(defaults={}, current={}, check=again.append)
    assert again[0]["extra"] == "1" and again[0]["schema_version"] == "99"

    def refuse(rows: dict[str, str]) -> None:
        raise ValueError("not this store")

    with pytest.raises(ValueError, match="not this store"):
        driver.identity_record(defaults={"refused": "1"}, current={}, check=refuse)
    driver.identity_record(defaults={}, current={}, check=again.append)
    assert "refused" not in again[-1], "a refused record writes nothing"


def test_database_driver_wakes_on_its_status_channel_where_it_says_so(database: Database) -> None:
    from migrations.drivers import database_driver

    driver = database_driver(database)
    migrated_store(database, FakeApp)
    stop = threading.Event()
    woken = threading.Event()
    try:
        started = driver.wakeups_start({driver.status_channel(): [lambda payload: woken.set()]}, stop)
        assert started is driver.shared, "only a shared store sends wake-ups"
        if started:  # a listener wakes everyone once when it connects (it may have missed some)
            assert woken.wait(10), "the listener never called its wake-ups"
    finally:
        stop.set()


def test_database_driver_drops_its_schema_only_where_it_has_one(database: Database) -> None:
    from migrations.drivers import database_driver

    driver = database_driver(database)
    migrated_store(database, FakeApp)
    driver.schema_drop()
    if driver.store_file is not None:
        assert driver.store_file.exists(), "a file of its own is its owner's to delete"
        return
    import psycopg

    with psycopg.connect(database.conninfo()) as conn:
        found = conn.execute("SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s",
                             (database.schema,)).fetchone()
    assert found is not None and found[0] == 0
