"""``opledger doctor``: check a store without changing it, and say what is wrong.

Every check is read-only (SQLite: a read-only connection, no lock taken; the lock is only
probed). In order:

1. SQLite files: the path, directory and file modes (``ledger.store_files``), who owns the
   store, a WAL lost while it held commits, the file header and length, the journal mode, then
   ``PRAGMA quick_check`` (``--quick``) or ``PRAGMA integrity_check``. A damaged file stops the
   report here: nothing above the file can be trusted.
2. The identity (``ledger.store_identity``), including ``OPLEDGER_STORE_ID`` when set.
3. The event log: every stored ledger record decodes (``CorruptRecordError`` otherwise), and the
   notification ids have no gap the log cannot explain (SQLite never reuses or skips an id;
   PostgreSQL's sequence skips the ids of rolled-back inserts, such as version conflicts, so
   gaps there are reported, not failed).
4. The status view: each row's version is an event in the log, and not past the tracking
   position (a row a worker folded from its own just-committed state may be ahead by the events
   since; reported, not failed); then a rebuild of the view from the log, in a scratch table in
   memory, compared with the live rows: a row that differs at the same version is drift.
5. Retention: closed operations older than :data:`UNRETAINED_WARN_SECONDS` (90 days) whose
   integration has no retention policy are counted and warned about (never failed), with how to
   set one (issue 29 item 1).

Source: issue 16 item 4; issue 29 item 1; docs/operations.md ("Doctor").
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from ledger.clock import SystemClock
from ledger.codec import LEDGER_TOPIC_PREFIX
from ledger.config import Settings
from ledger.errors import CorruptRecordError, LedgerError
from ledger.redaction import mask_url
from ledger.retention import cutoff_for, retention_for
from ledger.store_files import (
    Finding,
    companion,
    damaged,
    header_problem,
    integrity_problems,
    is_damage,
    lost_wal,
    path_findings,
    unopenable,
)
from ledger.store_identity import check_store_identity
from migrations.drivers import DatabaseDriver, archives_of, database_driver
from projections.memory_view import MemoryStatusStore
from projections.rows import StatusRow
from projections.status import PROJECTION_NAME, StatusProjection

LOG_PAGE = 1000
"""Notifications read per page while checking the log."""
SHOWN = 3
"""Examples named per failed check."""
UNRETAINED_WARN_SECONDS = 90 * 86_400.0
"""Closed operations older than this (90 days) with no retention policy are warned about.
Source: issue 29 item 1."""


@dataclass
class DoctorReport:
    """What ``doctor`` found.

    Attributes:
        store: the SQLite file or the PostgreSQL database checked.
        findings: every check, in order.
    """

    store: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No check failed (warnings allowed)."""
        return all(f.status != "fail" for f in self.findings)

    def add(self, name: str, status: str, detail: str) -> None:
        self.findings.append(Finding(name, status, detail))

    def as_json(self) -> dict[str, Any]:
        """The report as a JSON-ready dict: ``store``, ``ok`` and ``checks``."""
        return {"store": self.store, "ok": self.ok, "checks": [f.as_json() for f in self.findings]}


def run_doctor(settings: Settings, *, quick: bool = False, now: datetime | None = None) -> DoctorReport:
    """Check the configured store (see the module docstring).

    Args:
        settings: the settings (database URL, ``OPLEDGER_APP``, ``OPLEDGER_STORE_ID``,
            ``OPLEDGER_RETENTION``).
        quick: SQLite: ``PRAGMA quick_check`` instead of the slower ``integrity_check``.
        now: the current time, UTC, for the retention check's 90 days (default: the system clock).

    Returns:
        The report; ``ok`` is False when any check failed. Never raises for a damaged store.

    Raises:
        ConfigurationError: ``OPLEDGER_APP`` does not name a ledger application.

    Source: issue 16 item 4.
    """
    from adapters.runtime import load_app_class

    database = settings.database
    app_class = load_app_class(settings.app)
    report = DoctorReport(store=str(database.path) if database.path else mask_url(database.url()).split("@")[-1])
    driver = database_driver(database)
    if driver.store_file is not None and not _files_sound(report, driver, quick=quick):
        return report
    try:
        identity = check_store_identity(database, app_class.name, store_id=settings.store_id)
    except LedgerError as exc:
        report.add("identity", "fail", str(exc))
        return report
    report.add("identity", "ok", ", ".join(f"{k}={identity[k]}" for k in sorted(identity)))
    _check_autovacuum(report, driver)
    try:
        _check_log_and_view(report, settings, now or SystemClock().now())
    except LedgerError as exc:  # e.g. damage met while reading: one finding, never a traceback
        report.add("read", "fail", str(exc))
    return report


def _check_autovacuum(report: DoctorReport, driver: DatabaseDriver) -> None:
    """Warn when the server does not vacuum by itself: ``opledger archive`` deletes, and every
    status update leaves a dead row version; without autovacuum nothing reclaims them or
    refreshes the planner's statistics. Source: issue 29 (a month of history)."""
    try:
        running = driver.autovacuum()
    except LedgerError as exc:
        report.add("autovacuum", "fail", str(exc))
        return
    if running is None:
        return  # SQLite: no vacuum process; freed pages are reused as it goes
    if running:
        report.add("autovacuum", "ok", "the server reclaims dead rows and gathers planner statistics (autovacuum on)")
        return
    report.add("autovacuum", "warn", "the server runs with autovacuum off: the dead rows that archiving and every "
               "status update leave are never reclaimed and the planner's statistics go stale (the tables and "
               "their indexes grow, reads slow down). Turn it on in postgresql.conf, or run VACUUM (ANALYZE) on "
               "the store's schema from a timer (docs/operations.md, \"Retention and archives\")")


def _files_sound(report: DoctorReport, driver: DatabaseDriver, *, quick: bool) -> bool:
    path: Any = driver.store_file
    report.findings.extend(path_findings(path))
    if not report.ok:
        return False
    if not path.exists():
        report.add("store", "fail", f"no store at {path}; run `opledger migrate` first")
        return False
    report.add("owner", "ok", _owner(path))
    wal = lost_wal(path)
    report.add("wal", "fail" if wal else "ok", wal or _wal_state(path))
    problem = header_problem(path)
    report.add("header", "fail" if problem else "ok", problem or "an SQLite database file of whole pages")
    if not report.ok:
        return False
    try:
        mode = driver.journal_mode()
    except sqlite3.DatabaseError as exc:
        report.add("open", "fail", str(unopenable(path, exc) if not is_damage(exc) else damaged(path, str(exc))))
        return False
    report.add("journal_mode", "ok" if mode == "wal" else "fail",
               "wal" if mode == "wal" else f"{mode}; opledger stores use WAL (run `opledger migrate`)")
    found = integrity_problems(path, quick=quick)
    name = "quick_check" if quick else "integrity_check"
    report.add(name, "fail" if found else "ok", "; ".join(found) if found else "ok")
    return report.ok


def _owner(path: Any) -> str:
    lock = companion(path, ".lock")
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return "no process owns the store (no lock file yet)"
    except OSError as exc:
        return f"the lock file cannot be read ({exc.strerror}); not probed"
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = lock.read_text().strip() or "?"
        return f"owned by process {holder} (a worker or an operator command is running)"
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return "no process owns the store"
    finally:
        os.close(fd)


def _wal_state(path: Any) -> str:
    wal = companion(path, "-wal")
    if not wal.exists():
        return "no WAL file (the store was closed cleanly)"
    return (f"WAL file present ({wal.stat().st_size} bytes): a running owner's, or a crashed one's that the "
            "next open replays; keep it with the store file")


def _check_log_and_view(report: DoctorReport, settings: Settings, now: datetime) -> None:
    from adapters.runtime import open_store

    with open_store(settings, write=False) as store:
        positions = _check_log(report, store.app, gapless=database_driver(settings.database).log_gapless)
        live = {row.operation_id: row for row in store.view.list(limit=2**62)}
        tracked = store.view.position(PROJECTION_NAME, store.app.name)
        _check_rows(report, live, positions, tracked)
        scratch = MemoryStatusStore().open_view()
        StatusProjection(app=store.app, view=scratch).catch_up()
        rebuilt = {row.operation_id: row for row in scratch.list(limit=2**62)}
        _compare(report, live, rebuilt, positions, tracked)
        _check_retention(report, store.app, settings.retention_seconds, now)


def _check_retention(report: DoctorReport, app: Any, store_seconds: float | None, now: datetime) -> None:
    """Warn about closed operations older than :data:`UNRETAINED_WARN_SECONDS` of integrations
    that no retention policy covers (``OPLEDGER_RETENTION`` or the declaration's
    ``retention_seconds``): the store keeps them forever. Source: issue 29 item 1."""
    from adapters.archive_select import select

    archives = archives_of(app)
    forever: dict[str, bool] = {}  # integration -> no policy covers it
    for declaration in app.registry:  # sorted by (name, version): the latest version decides
        forever[declaration.name] = retention_for(store_seconds, declaration.retention_seconds) is None
    cutoff = cutoff_for(now, UNRETAINED_WARN_SECONDS)
    unretained = {name: cutoff for name, kept in forever.items() if kept}
    old = Counter(row.integration for row in select(archives, unretained)) if unretained else Counter()
    if not old:
        report.add("retention", "ok", "no closed operation older than 90 days lacks a retention policy")
        return
    names = ", ".join(f"{name}: {n}" for name, n in sorted(old.items()))
    report.add("retention", "warn", f"{sum(old.values())} closed operation(s) older than 90 days and no retention "
               f"policy for them ({names}): the store keeps them forever. Set OPLEDGER_RETENTION (e.g. 90d) or "
               "retention_seconds in their declarations, then run `opledger archive --out DIR` "
               "(docs/operations.md, \"Retention and archives\")")


def _notifications(app: Any) -> Iterator[Any]:
    start = 1
    while True:
        page = app.recorder.select_notifications(start=start, limit=LOG_PAGE)
        if not page:
            return
        yield from page
        start = page[-1].id + 1


def _check_log(report: DoctorReport, app: Any, *, gapless: bool) -> dict[tuple[UUID, int], int]:
    positions: dict[tuple[UUID, int], int] = {}
    ids: list[int] = []
    corrupt: list[str] = []
    ledger_records = 0
    for notification in _notifications(app):
        ids.append(notification.id)
        if not notification.topic.startswith(LEDGER_TOPIC_PREFIX):
            continue
        ledger_records += 1
        try:
            app.mapper.to_domain_event(notification)
        except CorruptRecordError as exc:
            corrupt.append(f"position {notification.id}: {exc}")
        positions[(UUID(str(notification.originator_id)), notification.originator_version)] = notification.id
    report.add("records", "fail" if corrupt else "ok",
               f"{len(corrupt)} of {ledger_records} ledger records do not decode: " + "; ".join(corrupt[:SHOWN])
               if corrupt else f"all {ledger_records} ledger records decode")
    gaps = (ids[-1] - ids[0] + 1 - len(ids)) if ids else 0
    missing_start = ids[0] - 1 if ids else 0
    archived = _archived_records(app)
    if gapless and (gaps or missing_start) and gaps + missing_start > archived:
        report.add("log", "fail", f"{gaps + missing_start - archived} notification id(s) missing from the log "
                                  f"(ids {ids[0]}..{ids[-1]}, {len(ids)} records"
                                  + (f", {archived} archived" if archived else "") + "): records were deleted or lost")
    elif gapless and (gaps or missing_start):
        report.add("log", "ok", f"{len(ids)} notifications, ids {ids[0]}..{ids[-1]}; {gaps + missing_start} id(s) "
                                f"missing, within the {archived} records `opledger archive` moved out")
    else:
        note = (f"; {gaps} id(s) skipped, by rolled-back inserts (PostgreSQL sequences skip them)"
                if gaps else "")
        report.add("log", "ok", f"{len(ids)} notifications, ids {ids[0] if ids else 0}..{ids[-1] if ids else 0}{note}")
    return positions


def _archived_records(app: Any) -> int:
    """How many records archive runs moved out of the store (each leaves a gap in a gapless log)."""
    return sum(segment.records for segment in archives_of(app).archive_segments())


def _check_rows(report: DoctorReport, live: dict[UUID, StatusRow], positions: dict[tuple[UUID, int], int],
                tracked: int) -> None:
    unexplained = [str(row.operation_id) for row in live.values() if (row.operation_id, row.version) not in positions]
    ahead = [row for row in live.values() if positions.get((row.operation_id, row.version), 0) > tracked]
    if unexplained:
        report.add("tracking", "fail", f"{len(unexplained)} status row(s) at a version the log does not hold: "
                                       + ", ".join(unexplained[:SHOWN]) + "; run `opledger projections rebuild`")
    elif ahead:
        report.add("tracking", "warn", f"{len(ahead)} status row(s) ahead of the tracking position {tracked} "
                                       "(folded from a worker's own commits; caught up by the next projection run)")
    else:
        report.add("tracking", "ok", f"every status row is at or behind the tracking position {tracked}")


def _compare(report: DoctorReport, live: dict[UUID, StatusRow], rebuilt: dict[UUID, StatusRow],
             positions: dict[tuple[UUID, int], int], tracked: int) -> None:
    drift: list[str] = []
    lag = 0
    for op_id, row in rebuilt.items():
        current = live.get(op_id)
        if current is None or current.version < row.version:
            # Behind: drift only if the events it misses are at or before the tracking position.
            version = current.version if current is not None else 0
            if positions.get((op_id, version + 1), tracked + 1) <= tracked:
                drift.append(f"{op_id} (view at version {version}, log at {row.version})")
            else:
                lag += 1
        elif current != row:
            fields = [name for name in StatusRow._fields if getattr(current, name) != getattr(row, name)]
            drift.append(f"{op_id} ({', '.join(fields)})")
    drift += [f"{op_id} (not in the log)" for op_id in live.keys() - rebuilt.keys()]
    if drift:
        report.add("drift", "fail", f"{len(drift)} status row(s) differ from a rebuild: " + "; ".join(drift[:SHOWN])
                   + "; run `opledger projections rebuild`")
    else:
        lagging = f"; {lag} behind the log, caught up by the next projection run" if lag else ""
        report.add("drift", "ok", f"the view matches a rebuild from the log ({len(rebuilt)} operations){lagging}")
