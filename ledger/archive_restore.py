"""Restore an archive segment's records into a store, byte for byte, for an audit replay.

A segment (``ledger.archives``) holds every stored record of its aggregates as the store held
them: id, version, topic and state bytes. Restoring writes back exactly those records, through
the application's own recorder (so the store's notification log, and with it every projection,
sees them as it saw the originals), after checking the segment's files against its manifest.

A restore never overwrites: a record the store already holds is left alone when its topic and
bytes are the archived ones (a rerun after an interrupted restore, or a late record that was never
archived), and refused when they differ (the store holds another history for that aggregate).
So a restore can be rerun until it completes, and never changes what a store says happened.

Source: issue 29 item 3 (``opledger archive restore SEGMENT``); docs/adr/0010-archives.md.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from ledger.archive_check import verify_segment
from ledger.archives import ArchiveError, StoredRecord, read_records

BATCH_RECORDS = 500
"""Records written per insert (one transaction each): bounded, so a large segment neither holds
one long transaction nor loses more than a batch of progress to an interruption."""


class RecordStore(Protocol):
    """What a restore needs of a store: the library's aggregate recorder interface."""

    def select_events(self, originator_id: UUID, *, gt: int | None = None, lte: int | None = None,
                      desc: bool = False, limit: int | None = None) -> Sequence[StoredEvent]: ...

    def insert_events(self, stored_events: list[StoredEvent]) -> object: ...


class RestoreConflictError(ArchiveError):
    """The store already holds a record of an archived aggregate at the same version with other
    contents: it has another history for that aggregate, and a restore never overwrites one.
    Restore into another store (``--database-url``) to compare the two."""


@dataclass(frozen=True)
class Restored:
    """What a restore did: aggregates in the segment, records it wrote, and records the store
    already held with the archived bytes (left alone)."""

    segment: str
    aggregates: int
    written: int
    present: int


def restore_segment(segment: Path, recorder: RecordStore, *,
                    progress: Callable[[int], None] | None = None) -> Restored:
    """Write ``segment``'s records back into the store behind ``recorder``.

    Args:
        segment: a segment directory (``seg-NNNNNN``).
        recorder: the target store's recorder (``app.recorder`` of an opened store).
        progress: called with the number of records handled so far, after each batch.

    Returns:
        What was written and what was already there.

    Raises:
        ArchiveError: the segment does not verify against its manifest (one line per problem),
            or it cannot be read; nothing is written.
        RestoreConflictError: the store holds a different record at an archived id and version;
            nothing of that aggregate is written (records of aggregates before it in the segment
            may have been).
    """
    if problems := verify_segment(segment):
        raise ArchiveError(f"{segment.name} does not verify, nothing restored: " + "; ".join(problems))
    by_aggregate: dict[UUID, list[StoredRecord]] = defaultdict(list)
    for record in read_records(segment):
        by_aggregate[record.originator_id].append(record)
    last = next(reversed(by_aggregate), None)
    pending: list[StoredEvent] = []
    written = present = 0
    for originator_id, records in by_aggregate.items():
        held = {stored.originator_version: stored
                for stored in recorder.select_events(originator_id, lte=max(r.originator_version for r in records))}
        for record in records:
            stored = held.get(record.originator_version)
            if stored is None:
                pending.append(StoredEvent(originator_id=record.originator_id,
                                           originator_version=record.originator_version,
                                           topic=record.topic, state=record.state))
            elif stored.topic == record.topic and bytes(stored.state) == record.state:
                present += 1
            else:
                raise RestoreConflictError(
                    f"{segment.name}: the store holds another record for {originator_id} version "
                    f"{record.originator_version} ({stored.topic}); a restore never overwrites a record")
        # An aggregate's missing records go in one insert (one transaction): an interrupted
        # restore leaves each aggregate as it was or complete, and a rerun writes the rest.
        if len(pending) >= BATCH_RECORDS or originator_id == last:
            if pending:
                recorder.insert_events(pending)
                written += len(pending)
                pending = []
            if progress is not None:
                progress(written + present)
    return Restored(segment=segment.name, aggregates=len(by_aggregate), written=written, present=present)

