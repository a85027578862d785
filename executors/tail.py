"""New intents read from the log itself while the status projection stands still (issue 17).

On PostgreSQL the status view is kept by one elected process. When that process dies, its
leadership lease holds the projection still for up to its TTL, and the view shows no new work
meanwhile. The due-work pass then also reads intents appended after the projection's position,
so new work does not wait for the handover. A worker also reads the tail in the first cycle
after the NOTIFY of appended events (``fresh``), and an idle one starts that cycle at once: a
new intent is then claimed without waiting for the projection to write its row, which cut the
pickup latency's median from 8.8 to under 5 ms (docs/performance.md). With no events appended,
the view is the only source.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from ledger.application import LedgerApplication
from ledger.operation import Operation
from ledger.status import ExecutionState as E
from ledger.status import SettlementState
from ledger.topics import topics_of
from migrations.drivers import LogReads, OpenIntents, Record, ReservationHold
from projections.loading import record_decoder
from projections.rows import DueRow
from projections.status import PROJECTION_NAME
from projections.view import TrackingReads

TAIL_AFTER_STALL_SECONDS = 0.25
"""How long the status projection's position may stand still before the due-work pass also
reads new intents from the log itself (a projection leader that died holds its lease 3 s)."""
CHECK_SECONDS = 0.1
"""How often the projection's position is read while it moves, seconds: a read per cycle was one
more round trip in every cycle of a busy worker, and a stall is only acted on after
``TAIL_AFTER_STALL_SECONDS`` anyway."""
MAX_PAGES = 8
"""Pages of intents read past handled ones in one call, at most (each page is one query)."""
TAIL_SOON_SECONDS = 1.0
"""A pending intent due within this many seconds stays on offer from the log's tail."""
MAX_PASSED = 100_000
"""Operations remembered as held by another worker; past this many the memory starts over."""


class LogTail:
    """The intents past the status projection's position, for a pass that found too little.

    A cursor of its own moves past intents already handled (committed by this worker, or found
    held by another), so a long stall does not show the same first page of the tail forever:
    each call reads on from where the handled run ends. On PostgreSQL it also moves past the
    intents a read left out as closed (``OpenIntents.closed_through``): with two workers, each
    read otherwise scanned every event since the projection's position again.

    Args:
        app: the host application (its log holds the intents).
        log: the store's driver, for its log reads (``migrations.drivers.driver_of(app)``).
        view: the status view's tracking (the projection's position is read once per call).
        handled: whether this worker has committed a change to the operation after its record at
            the given version (``Committer.known``).
    """

    def __init__(self, app: LedgerApplication, log: LogReads, view: TrackingReads,
                 handled: Callable[[UUID, int], bool]) -> None:
        self.app = app
        self.log = log
        self.view = view
        self.handled = handled
        self._position = -1  # the projection's position when last read, and since when
        self._since: datetime | None = None
        self._checked: datetime | None = None  # when the position was last read
        self.stalled = False
        """Whether the projection stood still when last looked at: then new events in the log
        are worth waking the worker for (``Worker.wake_for_log``)."""
        self.fresh = False
        """Set when events were appended since the last read (``Worker.wake_for_log``): the
        next read looks at the tail whether or not the projection moves, so a new intent is
        claimed without waiting for the projection to write its row (issue 17, pickup latency)."""
        self._cursor = 0  # every intent up to here is handled
        self._passed: set[UUID] = set()
        self._ids: dict[Any, UUID] = {}  # ``LogReads.intents_list_open``' memo of stored ids
        self._topics = topics_of([Operation.Intended])
        self._open = log.intents_only_open
        self._read: dict[UUID, tuple[int, str, bytes]] = {}  # the last read's open intents
        self._lock = threading.Lock()  # reads may come from more than one thread

    def operation(self, op_id: UUID, version: int) -> Operation | None:
        """The operation as the last :meth:`read` found it, when that read saw its intent as
        the operation's whole history (``LogReads.intents_only_open``) at ``version``:
        one query less per pickup. None otherwise, or when the record does not decode (the
        caller loads it, and a bad record is reported there). Another worker may have claimed
        it since: the claim's commit then conflicts and is decided again on fresh state."""
        with self._lock:
            record = self._read.pop(op_id, None)
        if record is None or record[0] != version:
            return None
        try:
            return record_decoder(self.app)(op_id, *record).mutate(None)
        except Exception:  # noqa: BLE001 - loaded the usual way instead, which reports it
            return None

    def _stalled(self, now: datetime) -> bool:
        self.stalled = self._since is not None and (now - self._since).total_seconds() >= TAIL_AFTER_STALL_SECONDS
        return self.stalled

    def pass_over(self, op: Operation, until: datetime | None, now: datetime) -> None:
        """Remember that another worker holds ``op``, whose due work at ``now`` (UTC) is to wait
        until ``until``, so the tail moves past it; unless it is a pending intent due within
        ``TAIL_SOON_SECONDS``: an intent read from the tail is often newer than the pass's
        ``now`` (appended after the clock was read), and passing over it left it to the
        projection: 3 s, a leadership handover, after a projection leader was SIGKILLed."""
        if op.execution is E.PENDING and until is not None and until <= now + timedelta(seconds=TAIL_SOON_SECONDS):
            return
        if len(self._passed) >= MAX_PASSED:
            self._passed.clear()
        self._passed.add(op.id)

    def read(self, limit: int, known: set[UUID], now: datetime) -> list[DueRow]:
        """Up to ``limit`` pending rows for intents past the projection's position, none of them
        in ``known``, once the position has not moved for ``TAIL_AFTER_STALL_SECONDS`` of
        ``now`` (UTC) or when :attr:`fresh` is set; else none. Claiming them is fenced like any
        claim. The position is read at most every ``CHECK_SECONDS``: a fresh read may start
        from one that old, and intents the projection has meanwhile shown are skipped by the
        claim as usual (held, or not pending any more). Thread-safe (one read at a time)."""
        with self._lock:
            return self._read_tail(limit, known, now, self._select)

    def reserve(self, taken: ReservationHold, limit: int, now: datetime) -> list[DueRow]:
        """:meth:`read` (nothing ``known``) that also reserves the rows it returns, through
        ``taken`` (``Reservations.reservations_hold``), in the same round trip: the pickup's read.
        Rows another worker holds are left out. Only where reservations are shared."""
        with self._lock:
            return self._read_tail(limit, set(), now,
                                   lambda after, n: taken.intents_reserve_open(after, n, self._topics))

    def _select(self, after: int, limit: int) -> OpenIntents:
        return self.log.intents_list_open(after, limit, self._topics, self._ids)

    def _read_tail(self, limit: int, known: set[UUID], now: datetime,
                   select: Callable[[int, int], OpenIntents]) -> list[DueRow]:
        fresh, self.fresh = self.fresh, False
        if self._checked is None or (now - self._checked).total_seconds() >= CHECK_SECONDS:
            self._checked = now
            position = self.view.position(PROJECTION_NAME, self.app.name)
            if position != self._position:
                self._position, self._since = position, now
        if not (self._stalled(now) or fresh):
            return []
        rows: list[DueRow] = []
        self._read.clear()
        for _ in range(MAX_PAGES):
            records, closed_through, elsewhere = select(max(self._position, self._cursor), limit)
            leading = self._take(records, closed_through is not None, known | elsewhere, rows)
            if leading and closed_through is not None:
                self._cursor = max(self._cursor, closed_through)
            if rows or len(records) < limit or not leading:
                return rows[:limit]
        return rows

    def _take(self, records: list[Record], only_open: bool, known: set[UUID],
              rows: list[DueRow]) -> bool:
        """Append to ``rows`` the intents of ``records`` (one page of the tail) not handled,
        passed over or ``known``, moving the cursor past the run of handled ones at its start;
        when ``only_open`` (the read left out closed intents), up to just before the first
        intent taken, so the next read does not scan the closed ones again. Returns whether
        every record was handled."""
        leading = True  # still in the run of handled intents right after the cursor
        for notification_id, op_id, version, topic, state in records:
            if self.handled(op_id, version) or op_id in self._passed:
                if leading:
                    self._cursor = notification_id
                continue
            if leading and only_open:
                self._cursor = max(self._cursor, notification_id - 1)
            leading = False
            if op_id not in known:
                rows.append(DueRow(op_id, version, E.PENDING.value, SettlementState.NONE.value, False))
                if self._open:
                    self._read[op_id] = (version, topic, state)
        return leading
