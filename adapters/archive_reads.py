"""An archived operation read from its segment: ``ops show``, ``ops timeline`` and the observe API.

``opledger archive`` moves a closed operation's records out of the hot store into a segment and
keeps an index row naming it (docs/adr/0010-archives.md). Given the archive directory
(``OPLEDGER_ARCHIVE_DIR`` or ``--archive-dir``), a read of an archived id answers from the
segment, as it would have from the store: the segment is checked first as ``opledger archive
verify`` checks one (``ledger.archive_check.verify_segment``: the manifest, every file's SHA-256,
size and line count, the counts) and against the manifest digest the store recorded for it, then
its stored records of that operation are decoded by the application's own mapper, so the
description and the timeline are the ones the live operation gave. Without the directory, the
answer names the segment (``OperationInArchiveError``). A segment that is missing, tampered with
or not the one the store recorded is an :class:`ArchivedReadError` naming it and what is wrong.

Source: issue 29 item 2 ("``ops show`` and ``ops timeline`` (and the observe API) answer for an
archived operation from its segment"); docs/adr/0010-archives.md, Consequences.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from adapters.operator import describe, entries_of, get_or_archived, show, timeline_entries
from ledger.archive_check import verify_segment
from ledger.archives import ArchiveError, StoredRecord, manifest_digest, read_records, segment_name
from ledger.errors import CorruptRecordError, OperationInArchiveError
from ledger.operation import Operation
from ledger.replay import project_events
from migrations.drivers import archives_of

if TYPE_CHECKING:
    from adapters.runtime import Store

__all__ = ["ArchivedReadError", "archived_events", "decoded_events", "show_any", "timeline_any"]


class ArchivedReadError(ArchiveError):
    """An archived operation cannot be read from its segment: the archive directory lacks the
    segment, the segment does not verify (a file edited or removed), its manifest is not the one
    the store recorded, or it holds no record of the operation. Fix: point
    ``OPLEDGER_ARCHIVE_DIR`` (or ``--archive-dir``) at the store's archive directory, and run
    ``opledger archive verify DIR`` to see what is wrong with it; restore the directory from its
    backup."""


def archived_events(store: Store, archive_dir: Path, archived: OperationInArchiveError) -> list[Any]:
    """The decoded events of an archived operation, from its segment under ``archive_dir``.

    Args:
        store: the open store (its index and recorded digests, its application's mapper).
        archive_dir: the archive directory.
        archived: the index's answer for the operation (its id, segment and final status).

    Returns:
        Its events, oldest first.

    Raises:
        ArchivedReadError: the segment is missing, does not verify, is not the one the store
            recorded, holds no record of the operation, or holds one this code cannot decode.
    """
    name = segment_name(archived.segment)
    path = archive_dir / name
    what = f"operation {archived.operation_id} is archived in {name}"
    if not path.is_dir():
        raise ArchivedReadError(f"{what}, which {archive_dir} does not hold: point OPLEDGER_ARCHIVE_DIR "
                                "(or --archive-dir) at the store's archive directory")
    if problems := verify_segment(path):
        raise ArchivedReadError(f"{what}, which does not verify, so it is not read: " + "; ".join(problems))
    recorded = {s.segment: s.digest for s in archives_of(store.app).archive_segments()}.get(archived.segment)
    if recorded is None or manifest_digest(path) != recorded:
        raise ArchivedReadError(f"{what}, but {path} is not the segment this store recorded (its manifest digest "
                                f"differs from {recorded}): is {archive_dir} this store's archive directory?")
    records = [r for r in read_records(path) if r.originator_id == archived.operation_id]
    if not records:
        raise ArchivedReadError(f"{what}, which holds no record of it")
    try:
        return decoded_events(store.app, records)
    except CorruptRecordError as exc:
        raise ArchivedReadError(f"{what}, whose records this code cannot decode: {exc}") from None


def decoded_events(app: Any, records: Iterable[StoredRecord]) -> list[Any]:
    """The domain events of stored ``records`` (an archive segment's), decoded by ``app``'s mapper.

    Raises:
        CorruptRecordError: a record this code cannot decode exactly.
    """
    return [app.mapper.to_domain_event(StoredEvent(originator_id=r.originator_id,
                                                   originator_version=r.originator_version, topic=r.topic,
                                                   state=r.state)) for r in records]


def _where(archived: OperationInArchiveError, archive_dir: Path) -> dict[str, Any]:
    return {"segment": segment_name(archived.segment), "final_status": archived.status,
            "archive_dir": str(archive_dir)}


def show_any(store: Store, op_id: UUID, archive_dir: Path | None) -> dict[str, Any]:
    """``adapters.operator.show`` of an operation in the hot store or, given ``archive_dir``, in
    its archive segment; the latter with ``archived`` (``{"segment", "final_status",
    "archive_dir"}``) added.

    Raises:
        OperationNotFoundError: no such operation.
        OperationInArchiveError: it was archived and ``archive_dir`` is None (names the segment).
        ArchivedReadError: as :func:`archived_events`.
        CorruptRecordError: as ``show``.
    """
    try:
        return show(store, op_id)
    except OperationInArchiveError as archived:
        if archive_dir is None:
            raise
        op: Any = project_events(None, archived_events(store, archive_dir, archived))
        if not isinstance(op, Operation):
            raise ArchivedReadError(f"{op_id} in {segment_name(archived.segment)} is not an operation") from None
        return {**describe(store.app, op, None), "projection_lag": False, "archived": _where(archived, archive_dir)}


def timeline_any(store: Store, op_id: UUID, archive_dir: Path | None) -> list[dict[str, Any]]:
    """``adapters.operator.timeline_entries`` of an operation in the hot store or, given
    ``archive_dir``, in its archive segment (the same entries).

    Raises:
        OperationNotFoundError: no such operation.
        OperationInArchiveError: it was archived and ``archive_dir`` is None (names the segment).
        ArchivedReadError: as :func:`archived_events`.
    """
    try:
        get_or_archived(store.app, op_id)  # a clear error when it does not exist
    except CorruptRecordError:
        pass  # it exists: the timeline shows its events up to the damaged one
    except OperationInArchiveError as archived:
        if archive_dir is None:
            raise
        return entries_of(store.app, archived_events(store, archive_dir, archived))
    return timeline_entries(store.app, op_id)
