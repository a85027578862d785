"""``opledger import-json FILE``: import a legacy JSON job store, once, with a durable backup.

Each legacy job becomes an :class:`ImportedJob` entity (its legacy id, queue, times and history,
kept as evidence) and the operation it authorized, built through the ledger's own commands so
every guard applies: ``pending`` is intended and left for workers; ``running`` (attempted,
result unknown) is ambiguous, on the attention queue, since the provider may have applied it;
``succeeded`` and ``failed`` are recorded and settled onto the entity (the legacy store already
acted on them); ``cancelled`` is cancelled. Ids are derived from the legacy ids, so a job is
never imported twice.

SQLite, in order, under the store's single-owner lock:

1. validate the whole file (``migrations.legacy_format``) and build every job in memory;
2. back up the store (SQLite's online backup) and copy the source file beside it, both fsynced
   with their directory;
3. copy the store to ``<store>.import-<digest>.tmp`` and import into the copy, recording
   ``import:<file sha256>`` in its identity table;
4. verify the copy (``quick_check``; every job's operation loads) and fsync it and the directory;
5. switch by ``rename`` (atomic) and fsync the directory.

A kill before step 5 leaves the old store untouched (a rerun starts over); after it, the new
one is complete (a rerun finds ``import:<sha256>`` and does nothing). On PostgreSQL the jobs are
saved job by job (entity and operation in one transaction each), then the marker; a rerun
skips the jobs already there. Failpoints ``import@1`` .. ``import@5`` (``ledger.failpoints``)
fall between the steps.

Source: issue 16 item 5; docs/operations.md ("Importing a legacy JSON job store").
"""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import Aggregate, event
from eventsourcing.utils import get_topic

from ledger import failpoints
from ledger.application import LedgerApplication
from ledger.config import Database
from ledger.errors import LedgerError, StoreDamagedError
from ledger.identity import Source, operation_id
from ledger.persistence import StoreLock
from ledger.settlement import SettlementOutcome
from ledger.store_files import (
    STORE_FILE_MODE,
    check_store_files,
    companion,
    copy_store,
    damaged,
    fsync_path,
    integrity_problems,
)
from ledger.store_identity import check_store_identity
from migrations.drivers import database_driver, memory_env
from migrations.drivers.sqlite import wal_checkpoint
from migrations.legacy_format import LegacyExport, LegacyImportError, LegacyJob, read_export

IMPORT_NAMESPACE = uuid.UUID("5b0d7c8e-2f4a-4e51-9a57-6f1d2c3b4a10")
"""Namespace of the ids derived from legacy job ids."""
IMPORT_PRINCIPAL = "import"
IMPORT_LEASE_SECONDS = 60.0
SETTLEMENT_METHOD = "record_result"


class ImportedJob(Aggregate):
    """The source entity of an imported legacy job. Declare the legacy queues' integrations with
    ``settlement: {entity_type: "migrations.legacy_import:ImportedJob", method: "record_result"}``."""

    @staticmethod
    def create_id(legacy_id: str, **_: Any) -> uuid.UUID:
        return uuid.uuid5(IMPORT_NAMESPACE, legacy_id)

    @event("Imported")
    def __init__(self, legacy_id: str, queue: str, digest: str, created_at: str, updated_at: str,
                 history: list[dict[str, str]]) -> None:
        self.legacy_id = legacy_id
        self.queue = queue
        self.digest = digest
        self.created_at = created_at
        self.updated_at = updated_at
        self.history = history
        self.results: list[str] = []

    def record_result(self, outcome: SettlementOutcome) -> None:
        """The settlement action: record the operation's result."""
        self._result_recorded(outcome.result)

    @event("ResultRecorded")
    def _result_recorded(self, result: str) -> None:
        self.results.append(result)


@dataclass(frozen=True)
class ImportReport:
    """What ``import_json`` did.

    Attributes:
        imported: jobs imported now (0 when the file was imported before).
        skipped: jobs whose operation already existed.
        already: the file (same sha256) was imported before: nothing was done.
        backup: the pre-import copy of the store (SQLite), None otherwise.
        file_sha256: the source file's digest.
    """

    imported: int
    skipped: int
    already: bool
    backup: Path | None
    file_sha256: str


def _build(app: LedgerApplication, job: LegacyJob, now: datetime) -> list[Aggregate]:
    """The entity and operation of one job, built through the ledger's commands (not saved)."""
    entity = ImportedJob(legacy_id=job.id, queue=job.queue, digest=job.digest,
                         created_at=job.created_at.isoformat(), updated_at=job.updated_at.isoformat(),
                         history=[{"at": h.at.isoformat(), "event": h.event, "detail": h.detail} for h in job.history])
    op = app.intend(entity, job.queue, target=job.target, payload=job.payload, principal=IMPORT_PRINCIPAL, now=now)
    if job.state == "cancelled":
        op.request_cancel(now=now, principal=IMPORT_PRINCIPAL, reason="cancelled in the legacy job store")
        op.cancel(now=now)
    elif job.state != "pending":
        epoch = op.claim(now=now, worker_id=IMPORT_PRINCIPAL, lease_seconds=IMPORT_LEASE_SECONDS)
        attempt = uuid.uuid5(IMPORT_NAMESPACE, f"{job.id}/attempt")
        op.start_attempt(epoch=epoch, now=now, attempt_id=attempt, request_fingerprint=op.fingerprint)
        if job.state == "running":
            op.mark_ambiguous(epoch=epoch, now=now, attempt_id=attempt, reason="legacy_in_flight",
                              detail="attempted by the legacy job store; whether it applied is unknown")
        elif job.state == "succeeded":
            op.succeed(epoch=epoch, now=now, attempt_id=attempt, status_code=job.status_code)
        else:
            op.fail(epoch=epoch, now=now, category="rejected", retryable=False, attempt_id=attempt,
                    status_code=job.status_code, detail=job.error or "failed in the legacy job store")
        if job.state in ("succeeded", "failed"):
            entity.record_result(SettlementOutcome.of(op))
            op.settle(now=now, entity_version=entity.version, principal=IMPORT_PRINCIPAL)
    return [entity, op]


def _dry_run(app_class: type[LedgerApplication], export: LegacyExport, now: datetime, source: str) -> None:
    """Build every job in an in-memory application: every problem is found before a write."""
    app = app_class(env=memory_env())
    problems = []
    topic = get_topic(ImportedJob)
    for job in export.jobs:
        try:
            action = app.registry.get(job.queue).settlement
            if action is None or action.entity_type != topic or action.method != SETTLEMENT_METHOD:
                problems.append(f"job {job.id}: integration {job.queue!r} must declare settlement "
                                f"{{entity_type: {topic!r}, method: {SETTLEMENT_METHOD!r}}}")
                continue
            app.save(*_build(app, job, now))
        except LedgerError as exc:
            problems.append(f"job {job.id}: {exc}")
    app.close()
    if problems:
        raise LegacyImportError(source, problems)


def _write(app: LedgerApplication, jobs: Sequence[LegacyJob], now: datetime) -> tuple[int, int]:
    imported = skipped = 0
    for job in jobs:
        try:
            app.repository.get(ImportedJob.create_id(job.id))
        except AggregateNotFoundError:
            app.save(*_build(app, job, now))
            imported += 1
        else:
            skipped += 1
    return imported, skipped


def import_json(database: Database, app_class: type[LedgerApplication], path: Path, *, now: datetime,
                store_id: str | None = None) -> ImportReport:
    """Import the legacy export at ``path`` into the store (see the module docstring).

    Args:
        database: the migrated store.
        app_class: its application; it must declare each job's queue as an integration.
        path: the export file.
        now: UTC-aware instant recorded on the imported events.
        store_id: the pinned store id (``OPLEDGER_STORE_ID``), if any.

    Returns:
        An :class:`ImportReport`.

    Raises:
        LegacyImportError: the file fails validation (nothing written).
        StoreLockedError: another process owns the SQLite store (stop the worker first).
        StoreDamagedError, StoreIdentityError, StorePathError: the store is not fit to import into.

    Source: issue 16 item 5.
    """
    export, digest = read_export(path)
    marker = f"import:{digest}"
    store = database_driver(database).store_file
    if store is None:  # a database server: no file to back up and switch
        identity = check_store_identity(database, app_class.name, store_id=store_id)
        if marker in identity:
            return ImportReport(0, 0, True, None, digest)
        _dry_run(app_class, export, now, str(path))
        return _import_postgres(database, app_class, export, now, marker, digest)
    with StoreLock(store):
        check_store_files(store, thorough=True)
        identity = check_store_identity(database, app_class.name, store_id=store_id)
        if marker in identity:
            return ImportReport(0, 0, True, None, digest)
        _dry_run(app_class, export, now, str(path))
        failpoints.reached("import")
        tag = digest[:12]
        backup = store.with_name(f"{store.name}.pre-import-{tag}")
        copy_store(store, backup)
        shutil.copyfile(path, store.with_name(f"{store.name}.import-{tag}.json"))
        os.chmod(store.with_name(f"{store.name}.import-{tag}.json"), STORE_FILE_MODE)
        fsync_path(store.with_name(f"{store.name}.import-{tag}.json"))
        fsync_path(store.parent)
        failpoints.reached("import")
        scratch = store.with_name(f"{store.name}.import-{tag}.tmp")
        copy_store(store, scratch)
        imported, skipped = _fill(Database.in_file(scratch), app_class, export, now, marker)
        failpoints.reached("import")
        _verify(scratch, app_class, export)
        _release_wal(scratch)  # nothing of the copy may stay in its own WAL
        for leftover in (companion(scratch, "-wal"), companion(scratch, "-shm")):
            leftover.unlink(missing_ok=True)  # the verifying read-only connection's, empty
        fsync_path(scratch)
        fsync_path(store.parent)
        failpoints.reached("import")
        _release_wal(store)
        _switch(scratch, store)
        failpoints.reached("import")
        fsync_path(store.parent)
        companion(scratch, ".lock").unlink(missing_ok=True)
        return ImportReport(imported, skipped, False, backup, digest)


def _fill(database: Database, app_class: type[LedgerApplication], export: LegacyExport, now: datetime,
          marker: str) -> tuple[int, int]:
    app = app_class(env=database.library_env(create_table=False))
    try:
        counts = _write(app, export.jobs, now)
    finally:
        app.close()
    _record_import(database, marker, export)
    return counts


def _record_import(database: Database, marker: str, export: LegacyExport) -> None:
    """Record the import's marker (the file's digest: a second run of it does nothing) and the
    number of jobs it held in the store's identity rows."""
    database_driver(database).identity_record(defaults={marker: str(len(export.jobs))}, current={},
                                              check=lambda rows: None)


def _verify(scratch: Path, app_class: type[LedgerApplication], export: LegacyExport) -> None:
    problems = integrity_problems(scratch, quick=True, limit=3)
    if problems:
        raise damaged(scratch, "; ".join(problems))
    app = app_class(env=Database.in_file(scratch).library_env(create_table=False, read_only=True))
    try:
        for job in export.jobs:
            entity_id = ImportedJob.create_id(job.id)
            entity: Any = app.repository.get(entity_id)
            source = Source(tenant=app_class.tenant, entity_type=get_topic(ImportedJob), entity_id=entity_id,
                            entity_version=1, effect_index=0)
            op = app.get_operation(operation_id(source, job.queue))  # decodes every record
            if not isinstance(entity, ImportedJob) or entity.digest != job.digest or op.principal != IMPORT_PRINCIPAL:
                raise StoreDamagedError(f"the import copy {scratch} does not hold job {job.id} as written; "
                                        "nothing was switched")
    finally:
        app.close()


def _release_wal(store: Path) -> None:
    """Make sure no other process has the store open, then checkpoint its WAL into the file and
    empty it (``TRUNCATE``), so the file that replaces it never meets frames that are not its own.

    Raises:
        LegacyImportError: another process has the store open (nothing was switched).
    """
    if _open_elsewhere(store):
        raise LegacyImportError(str(store), ["another process has the store open (a reader such as `opledger "
                                             "ops list`, or a host application); stop it and run the import "
                                             "again (nothing was switched)"])
    busy, frames = wal_checkpoint(store)
    if busy or frames > 0:
        raise LegacyImportError(str(store), ["the store's WAL could not be emptied (another process is reading "
                                             "it); stop it and run the import again (nothing was switched)"])


_SHM_DMS_BYTE = 128
"""SQLite's unix VFS: every connection holds a shared lock on this byte of ``<store>-shm``
(its "dead man switch") for as long as it has the database open."""


def _open_elsewhere(store: Path) -> bool:
    """Whether a connection in another process has ``store`` open (SQLite's WAL-index lock).
    Connections of this process are not seen (POSIX locks do not conflict within a process)."""
    try:
        fd = os.open(companion(store, "-shm"), os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _SHM_DMS_BYTE)
    except OSError:
        return True
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, _SHM_DMS_BYTE)
        return False
    finally:
        os.close(fd)


def _switch(scratch: Path, store: Path) -> None:
    """Rename the verified copy over the store, then drop the old file's WAL index: a new
    connection must rebuild it from the new file, not trust the old one's page count."""
    os.rename(scratch, store)
    for stale in (companion(store, "-wal"), companion(store, "-shm")):
        stale.unlink(missing_ok=True)


def _import_postgres(database: Database, app_class: type[LedgerApplication], export: LegacyExport, now: datetime,
                     marker: str, digest: str) -> ImportReport:
    app = app_class(env=database.library_env(create_table=False))
    try:
        imported, skipped = _write(app, export.jobs, now)
    finally:
        app.close()
    _record_import(database, marker, export)
    return ImportReport(imported, skipped, False, None, digest)
