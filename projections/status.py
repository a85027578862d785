"""The operation status projection: follows the log and keeps one row per operation.

Reads the host application's notification log (only ledger topics), folds each event into the
operation's aggregate state (kept in a bounded cache, loaded from the event store on a miss),
and writes the batch's rows with the tracking position in one transaction. Commits once per
batch, not per event (DESIGN §11: the library's runner commits per event and cannot keep up).

Ledger topics are the ``Operation`` event classes' current topics, the old topics registered for
them (``eventsourcing.utils.register_topic``), and any other ``ledger.`` topic: a record this
code cannot decode puts its operation on the attention queue (``unreadable_event`` or
``corrupt_record``) instead of vanishing, and an ``unreadable_event`` operation is re-read at
start and every ``recheck_seconds``, so it comes back by itself once the code reads it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import structlog
from eventsourcing.utils import TopicError, resolve_topic

from ledger.application import LedgerApplication
from ledger.codec import LEDGER_TOPIC_PREFIX
from ledger.errors import CorruptRecordError, UnreadableEventError
from ledger.facts import describe
from ledger.operation import Operation
from ledger.outages import backoff_seconds, is_store_error, is_transient, refresh_connections
from migrations.drivers import LogReads, driver_of
from projections.loading import load_aggregates, record_decoder
from projections.rows import UNREADABLE_EVENT, AttentionMark, read_topics, row_from_operation
from projections.view import MAIN_TABLE, REBUILD_TABLE, Lease, NotLeaderError, StatusView

log = structlog.get_logger("opledger.projection")

PROJECTION_NAME = "status"
DEFAULT_BATCH_SIZE = 10_000
READ_CHUNK = 1000  # notifications per query (a batch takes several)
DEFAULT_CACHE_SIZE = 10_000
ID_MEMO_SIZE = 100_000  # operation ids kept parsed between batches (SQLite stores them as text)
DEFAULT_IDLE_SECONDS = 0.1
WAKE_CHECK_SECONDS = 0.1
"""While idle, how often ``run`` checks its stop event, seconds (a wake-up ends the wait at once)."""
GATHER_SECONDS = 0.005
"""After a batch smaller than a full one, how long ``run`` lets more events arrive before it
reads again, seconds. Without it a leader under a steady stream wrote the view on every read
that found anything (about six statements a write); new intents do not wait for the view
(workers read the log's tail), and the two-worker end to end ran faster in 4 of 5 interleaved
pairs with it, with PostgreSQL's CPU per operation lower in all 5 (docs/performance.md)."""
RENEW_LEADERSHIP_AFTER = 1 / 3
"""The leader renews its lease once this share of it has passed (DESIGN §7's heartbeat rule);
a follower tries to take it over as often."""
DEFAULT_LEADER_LEASE_SECONDS = 3.0
DEFAULT_RECHECK_SECONDS = 60.0
RECHECK_LIMIT = 1000  # unreadable_event rows re-read per recheck


@dataclass(frozen=True, slots=True)
class _Batch:
    """A folded batch, ready to write: its rows, the log position it reaches, how many records
    it holds, and the operations quarantined while folding it (their rows are then marked)."""

    rows: list[Any]
    position: int
    records: int
    marks: dict[UUID, AttentionMark]


@dataclass(frozen=True)
class StatusProjectionConfig:
    """Tuning for :class:`StatusProjection`.

    Attributes:
        batch_size: notifications read and committed per transaction.
        cache_size: operations whose folded state is kept in memory between batches.
        idle_seconds: how long ``run`` waits when the log has nothing new, seconds.
        lease_seconds: leadership lease length where several processes could write, seconds.
        recheck_seconds: how often operations on the attention queue as ``unreadable_event``
            are read again (also at start), seconds; a code upgrade brings them back.
    """

    batch_size: int = DEFAULT_BATCH_SIZE
    cache_size: int = DEFAULT_CACHE_SIZE
    idle_seconds: float = DEFAULT_IDLE_SECONDS
    lease_seconds: float = DEFAULT_LEADER_LEASE_SECONDS
    recheck_seconds: float = DEFAULT_RECHECK_SECONDS


class _Inline:
    """An executor that runs each call at once in the caller's thread (the pipeline's steps one
    after the other); its futures are already done, carrying the result or the error."""

    def submit(self, fn: Any, /, *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args))
        except Exception as exc:  # handed to ``result()``, where the pipeline expects it
            future.set_exception(exc)
        return future

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        return None


class StatusProjection:
    """Keeps ``opledger_operation_status`` caught up with the log.

    Args:
        app: the host application whose log holds the ledger events.
        view: where rows and the position are written.
        config: batch and cache sizes.
        holder: when several processes may run this projection (PostgreSQL), this process's
            name: it writes only while it holds the store's leadership lease, and every write
            re-checks the lease in its own transaction (a stalled former leader writes nothing).
    """

    def __init__(self, *, app: LedgerApplication, view: StatusView,
                 config: StatusProjectionConfig | None = None, holder: str | None = None) -> None:
        self.app = app
        self.view = view
        self.config = config or StatusProjectionConfig()
        self.lease = Lease(f"projection.{PROJECTION_NAME}.{app.name}", holder) if holder else None
        self._topics = read_topics()
        self._topic_set = frozenset(self._topics)  # per record in ``_fold``: a set, not the tuple
        self._wanted: dict[str, bool] = {}  # other ``ledger.`` topics met: an operation event's?
        self._rechecked_at: float | None = None  # monotonic; None: not yet in this process
        self._decode = record_decoder(app)
        self._ids: dict[Any, UUID] = {}  # see ``LogReads.records_list_after``
        self._log: LogReads = driver_of(app)
        self._cache: OrderedDict[UUID, Operation] = OrderedDict()
        self.quarantined: dict[UUID, int] = {}
        """Operations with a stored event that does not decode, and its position; their rows
        keep the last state that decoded and go on the attention queue."""
        self._to_mark: dict[UUID, AttentionMark] = {}
        # Committed states handed over by a worker of this process (``offer``); a deque, so a
        # worker thread may append while the projection thread takes (both atomic).
        self._offered: deque[Operation] = deque(maxlen=self.config.cache_size)
        self._following = True  # whether the last run_once found this process leading
        self._led_at: float | None = None  # monotonic time the lease was last confirmed held
        self._wake = threading.Event()  # set by ``wake`` (a NOTIFY listener)
        self._progress: Callable[[int], object] | None = None  # rebuild's progress report

    def offer(self, ops: Iterable[Operation]) -> None:
        """Hand over operation states just committed by this process (a worker's commits), so
        the next batch folds onto them instead of reloading them from the store.

        Thread-safe; keeps detached copies, so the caller may go on changing its instances. A
        state ahead of the log position the projection has reached is fine: folding skips
        events an operation already has, and a row never moves to an older version.

        Args:
            ops: operations whose pending events were committed (none pending now).
        """
        if self._following:  # a process that does not lead would only discard them
            self._offered.extend(op.detached_copy() for op in ops)

    @property
    def upstream(self) -> str:
        """The name of the followed application (its tracking key)."""
        return self.app.name

    def run_once(self) -> int:
        """Apply one batch of new notifications.

        Returns:
            How many notifications were applied (0 when caught up).

        Raises:
            CorruptRecordError: a stored ledger event cannot be decoded; nothing is written.
        """
        if not self._lead():
            return 0
        self._recheck_when_due()
        position = self.view.position(PROJECTION_NAME, self.upstream)
        records = self._read(position, self.config.batch_size)
        if records:
            batches: list[_Batch] = []
            try:
                batches.append(self._fold(records))
                self._write(batches[0], PROJECTION_NAME, MAIN_TABLE)
            except BaseException as exc:
                if not self._abandon(batches, exc):
                    raise
                return 0
        return len(records)

    def is_leader(self) -> bool:
        """True when this process may write (always, without a lease).

        The lease is renewed (a write to the store) only once a third of it has passed since it
        was last confirmed, not on every call: renewing per batch cost a round trip per batch.
        That is safe because every write re-checks the lease by the store's clock in its own
        transaction (``NotLeaderError``), so a lease lost meanwhile writes nothing.
        """
        if self.lease is None:
            return True
        now = time.monotonic()  # scheduling only, never the domain clock
        if self._led_at is not None and now - self._led_at < self.config.lease_seconds * RENEW_LEADERSHIP_AFTER:
            return True
        self._led_at = now if self.view.lead(self.lease, self.config.lease_seconds) else None
        return self._led_at is not None

    def catch_up(self, stop: threading.Event | None = None) -> int:
        """Apply batches until the log is exhausted, pipelined (see :meth:`_pipeline`).

        Args:
            stop: when set, return once the batch being written has committed.

        Returns:
            The notifications applied and committed; when leadership is lost part-way, those
            committed before (0 when another process led from the start).

        Raises:
            The errors of :meth:`run_once`. Batches written before the error stay written.
        """
        if not self._lead():
            return 0
        self._recheck_when_due()
        applied, _ = self._pipeline(self.view.position(PROJECTION_NAME, self.upstream),
                                    PROJECTION_NAME, MAIN_TABLE, stop)
        return applied

    def rebuild(self, progress: Callable[[int], object] | None = None) -> int:
        """Rebuild from zero into a new table and swap it in (DESIGN §8).

        Args:
            progress: called with the notifications committed so far after each batch.

        Returns:
            The notifications applied. The main table keeps serving until the swap.
        """
        self._progress = progress
        self._cache.clear()
        self.quarantined.clear()
        self.view.begin_rebuild()
        try:
            applied, position = self._pipeline(0, f"{PROJECTION_NAME}.rebuild", REBUILD_TABLE)
        finally:
            self._progress = None
        self.view.finish_rebuild(projection=PROJECTION_NAME, upstream=self.upstream, position=position)
        return applied

    def recheck_unreadable(self) -> int:
        """Read again the operations on the attention queue as ``unreadable_event``; rewrite the
        row of each that now decodes from its real state (off the queue, due again if it is).

        Run at the first ``run_once``/``catch_up`` of this projection and every
        ``config.recheck_seconds`` after: a code upgrade (the new event class, the registered
        rename, the upcaster) brings such operations back without a rebuild. Those still
        unreadable stay as they are, logged once.

        Returns:
            How many operations were restored.

        Source: issue 10 item 5; docs/operations.md ("Events this code cannot read").
        """
        restored: list[Operation] = []
        for row in self.view.attention_of(UNREADABLE_EVENT, RECHECK_LIMIT):
            op_id = row.operation_id
            try:
                op = load_aggregates(self.app, [op_id]).get(op_id)
            except CorruptRecordError as exc:
                # Folding stops before it (so its detail, with the log position, stays).
                self.quarantined.setdefault(op_id, exc.position)
                continue
            if isinstance(op, Operation):
                restored.append(op)
        if not restored:
            return 0
        for op in restored:
            self.quarantined.pop(op.id, None)
        self._remember(restored)
        position = self.view.position(PROJECTION_NAME, self.upstream)
        self.view.write([row_from_operation(op) for op in restored], projection=PROJECTION_NAME,
                        upstream=self.upstream, position=position, lease=self.lease)
        log.warning("operations readable again: back from the attention queue",
                    operations=[str(op.id) for op in restored])
        return len(restored)

    def _recheck_when_due(self) -> None:
        # Scheduling only: a monotonic clock, never the domain clock.
        now = time.monotonic()
        if self._rechecked_at is not None and now - self._rechecked_at < self.config.recheck_seconds:
            return
        self._rechecked_at = now
        self.recheck_unreadable()

    def run(self, stop: threading.Event) -> None:
        """Follow the log until ``stop`` is set (the loop only; the work is ``run_once``, and
        ``catch_up`` once a full batch shows a backlog: its pipeline pays for its threads only
        then)."""
        outage = 0  # retries of the outage being ridden out
        refused = ""  # the permanent store error last reported: reported once, not every retry
        while not stop.is_set():
            try:
                applied = self.run_once()
                if applied >= self.config.batch_size and not stop.is_set():
                    self.catch_up(stop)
                elif applied:
                    stop.wait(GATHER_SECONDS)
                elif self.is_leader():
                    self._pause(stop, self.config.idle_seconds)
                else:
                    # A follower only waits for the lease to lapse: a NOTIFY for each event
                    # appended would cost it two round trips per event, for nothing.
                    stop.wait(self.config.lease_seconds * RENEW_LEADERSHIP_AFTER)
            except Exception as exc:
                self._cache.clear()
                if not is_transient(exc):
                    # A store that refuses (a dropped table, a permission) is one line, as the
                    # worker says it; a code error keeps its traceback.
                    if not is_store_error(exc):
                        log.exception("status projection failed; retrying")
                    elif describe(exc) != refused:
                        refused = describe(exc)
                        log.error("status projection: the store refused it; retrying", error=refused)
                    stop.wait(1.0)
                    continue
                # The store is unreachable: say so once per outage, replace dead connections,
                # back off (issue 17).
                refresh_connections(self.app, self.view)
                outage += 1
                if outage == 1:
                    log.warning("status projection: store unreachable; retrying with backoff", error=str(exc))
                stop.wait(backoff_seconds(outage))
                continue
            if outage:
                log.warning("status projection: store reachable again", retries=outage)
                outage = 0
            refused = ""

    def wake(self) -> None:
        """Make an idle runner read the log now (a NOTIFY said events were appended); thread-safe."""
        self._wake.set()

    def _pause(self, stop: threading.Event, seconds: float) -> None:
        # Wait ``seconds``, or until woken or stopped (stop is noticed within WAKE_CHECK_SECONDS).
        deadline = time.monotonic() + seconds
        while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
            if self._wake.wait(min(left, WAKE_CHECK_SECONDS)):
                self._wake.clear()
                return

    def _lead(self) -> bool:
        # Whether this process may write now; a process that stops leading drops what it holds.
        self._following = self.is_leader()
        if not self._following:
            self._stop_following()
        return self._following

    def _stop_following(self) -> None:
        self._following = False
        self._led_at = None
        self._cache.clear()  # another process leads; our cache would go stale
        self._offered.clear()

    def _pipeline(self, position: int, projection: str, table: str,
                  stop: threading.Event | None = None) -> tuple[int, int]:
        """Apply batches after ``position`` until the log is exhausted (or ``stop`` is set);
        return how many records were committed and the position committed.

        While one batch is folded, the next is read and the previous one written, each on a
        helper thread: database calls release the GIL, so a long catch-up overlaps them with
        folding. Not where the store works inside this process (SQLite, ``view.in_process``):
        there the helpers only contend for the GIL, and the same steps run one after the other
        (measured: docs/performance.md). Writes stay one at a time and in log order, each with
        its position, so the committed state is always a prefix of the log; a batch is folded onto the state of the
        one being written, and an error discards the cache (folded ahead of what committed) and
        keeps the corrupt-record marks of every batch not known to be written. Leadership
        (PostgreSQL) is renewed before every write; once it is lost, nothing more is written.
        Measured: docs/performance.md ("This round" and "Round 2").

        Raises:
            CorruptRecordError: as :meth:`run_once`; any error of a read or a write.
        """
        committed, size = 0, self.config.batch_size
        unwritten: list[_Batch] = []  # folded, and not yet known to be committed
        pool: ThreadPoolExecutor | _Inline = (
            _Inline() if self.view.in_process
            else ThreadPoolExecutor(max_workers=2, thread_name_prefix="opledger-projection"))
        with pool:
            reading = pool.submit(self._read, position, size)
            writing: Future[None] | None = None
            try:
                while records := reading.result():
                    reading = pool.submit(self._read, records[-1][0], size)
                    unwritten.append(self._fold(records))
                    if writing is not None:
                        writing.result()  # the previous batch committed (or its error is raised)
                        committed, position = self._written(unwritten.pop(0), committed)
                        if table == MAIN_TABLE and not self.is_leader():  # renews the lease
                            raise NotLeaderError(f"projection {projection}: leadership lost")
                    writing = pool.submit(self._write, unwritten[0], projection, table)
                    if stop is not None and stop.is_set():
                        break
                if writing is not None:
                    writing.result()
                    committed, position = self._written(unwritten.pop(0), committed)
            except BaseException as exc:
                if not self._abandon(unwritten, exc):
                    raise
        return committed, position

    def _written(self, batch: _Batch, committed: int) -> tuple[int, int]:
        if self._progress is not None:
            self._progress(committed + batch.records)
        return committed + batch.records, batch.position

    def _abandon(self, batches: list[_Batch], exc: BaseException) -> bool:
        """After ``exc`` stopped a write: keep the corrupt-record marks of ``batches`` (which may
        not have committed), and drop what ran ahead of the store. Returns True when ``exc`` is
        a lost leadership (handled: this process stops following), False when it must be raised."""
        for batch in batches:
            self._to_mark = {**self._to_mark, **batch.marks}
        if isinstance(exc, NotLeaderError):
            self._stop_following()
            return True
        self._cache.clear()  # the cache ran ahead of what was committed
        return False

    def _fold(self, records: list[tuple[int, UUID, int, str, bytes]]) -> _Batch:
        """Decode and fold ``records`` (one batch), then derive one row per operation touched:
        an operation with several events in the batch is written once, at its last version."""
        decode, topics = self._decode, self._topic_set
        events: list[Any] = []
        for position, originator_id, version, topic, state in records:
            if topic not in topics and not self._operation_topic(topic):
                continue  # another ledger aggregate's event
            try:
                events.append(decode(originator_id, version, topic, state))
            except CorruptRecordError as exc:
                self._quarantine(exc, position)
        self._load_missing(events)
        touched: dict[UUID, Operation] = {}
        cache, quarantined = self._cache, self.quarantined
        for event in events:
            op_id: UUID = event.originator_id
            if quarantined and event.originator_version >= quarantined.get(op_id, event.originator_version + 1):
                continue  # cannot fold past a record that does not decode
            try:
                op = self._fold_event(event, touched.get(op_id) or cache.get(op_id))
            except CorruptRecordError as exc:
                self._quarantine(exc)
                touched.pop(op_id, None)
                continue
            touched[op_id] = op
        self._remember(touched.values())
        rows = {op_id: row_from_operation(op) for op_id, op in touched.items()}
        marks, self._to_mark = self._to_mark, {}
        for op_id in marks.keys() & rows.keys():
            mark = marks[op_id]
            rows[op_id] = rows[op_id]._replace(attention=mark.reason, attention_detail=mark.detail, next_due_at=None)
        return _Batch(list(rows.values()), records[-1][0], len(records), marks)

    def _write(self, batch: _Batch, projection: str, table: str) -> None:
        # The rows, the marks of newly quarantined operations and the position in one
        # transaction, which re-checks the lease.
        self.view.write(batch.rows, projection=projection, upstream=self.upstream, position=batch.position,
                        table=table, lease=self.lease if table == MAIN_TABLE else None, marks=batch.marks)

    def _read(self, position: int, limit: int) -> list[tuple[int, UUID, int, str, bytes]]:
        """Up to ``limit`` ledger records after ``position``, as ``LogReads.records_list_after`` records."""
        # In queries of at most READ_CHUNK: on PostgreSQL a larger LIMIT reads fewer events a
        # second (measured: 10,000 per query 20-30 % slower than 1,000), though folding and
        # writing gain from the larger batch.
        if len(self._ids) > ID_MEMO_SIZE:
            self._ids.clear()
        topics = read_topics()  # with a rename registered since (cached until one is)
        if topics != self._topics:
            self._topics, self._topic_set = topics, frozenset(topics)
        records: list[tuple[int, UUID, int, str, bytes]] = []
        while len(records) < limit:
            wanted = min(READ_CHUNK, limit - len(records))
            chunk = self._log.records_list_after(position, wanted, self._topics, self._ids, prefix=LEDGER_TOPIC_PREFIX)
            records.extend(chunk)
            if len(chunk) < wanted:
                break
            position = chunk[-1][0]
        return records

    def _load_missing(self, events: list[Any]) -> None:
        # One query for every operation of the batch whose earlier state is not cached. Its
        # current state may be ahead of this batch; ``_fold`` then skips what it already has.
        while self._offered:
            op = self._offered.popleft()
            cached = self._cache.get(op.id)
            if (cached is None or cached.version < op.version) and op.id not in self.quarantined:
                self._remember([op])
        # An operation whose first event here is its ``Intended`` (version 1) needs nothing.
        first: dict[UUID, int] = {}
        for event in events:
            first.setdefault(event.originator_id, event.originator_version)
        missing = [op_id for op_id, version in first.items() if version > 1
                   and ((cached := self._cache.get(op_id)) is None or cached.version < version - 1)]
        while missing:
            try:
                self._remember(load_aggregates(self.app, missing).values())
                return
            except CorruptRecordError as exc:
                self._quarantine(exc)
                missing = [op_id for op_id in missing if op_id not in self.quarantined]
                if not missing:
                    return

    def _operation_topic(self, topic: str) -> bool:
        """Whether a ``ledger.`` record whose topic is not among ``_topics`` is an operation's:
        True when its topic does not resolve (decoding then reports it) or resolves to an
        ``Operation`` event class; False for another ledger aggregate's event."""
        known = self._wanted.get(topic)
        if known is None:
            try:
                cls = resolve_topic(topic)
            except (TopicError, ImportError, AttributeError, ValueError):
                known = True
            else:
                known = isinstance(cls, type) and issubclass(cls, Operation.Event)
            self._wanted[topic] = known
        return known

    def _quarantine(self, exc: CorruptRecordError, position: int | None = None) -> None:
        """Fail closed for the operation of ``exc`` only: the rest of the log keeps flowing. Its
        row is marked once (``_to_mark``), with the record's log ``position`` where known; a
        later error about the same or a later record of it changes nothing."""
        op_id = exc.originator_id if isinstance(exc.originator_id, UUID) else UUID(str(exc.originator_id))
        known = self.quarantined.get(op_id)
        if known is not None and known <= exc.position:
            return
        mark = AttentionMark.of(exc, position)
        if isinstance(exc, UnreadableEventError):
            log.error("operation waits on the attention queue: a stored event is of a type or version this "
                      "code cannot read", operation_id=str(op_id), topic=exc.topic, version=exc.position,
                      position=position, error=exc.reason)
        else:
            log.error("operation quarantined: a stored event does not decode", operation_id=str(op_id),
                      error=str(exc))
        self.quarantined[op_id] = exc.position
        self._cache.pop(op_id, None)
        self._to_mark[op_id] = mark

    def _fold_event(self, event: Any, op: Operation | None) -> Operation:
        """``event`` folded into ``op`` (its operation's latest known state, or None)."""
        if isinstance(event, Operation.Intended):
            return event.mutate(None)
        if op is None or op.version < event.originator_version - 1:  # evicted mid-batch
            return self.app.repository.get(event.originator_id, version=event.originator_version)
        if op.version == event.originator_version - 1:
            event.mutate(op)
        return op  # already at or past this event (loaded ahead of the batch)

    def _remember(self, ops: Any) -> None:
        for op in ops:
            self._cache[op.id] = op
            self._cache.move_to_end(op.id)
        while len(self._cache) > self.config.cache_size:
            self._cache.popitem(last=False)
