"""The store driver's concerns, one small protocol each, and the rows they return (ADR 0008).

A driver is one object per store (``migrations.drivers.driver_of``); a consumer types its
parameter with the narrowest protocol it uses. Method names put the noun first (River's
``JobGetByID`` style), so the methods of one concern sort together.

Source: ADR 0008; STYLE rules 6 and 19.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple, Protocol
from uuid import UUID

Record = tuple[int, UUID, int, str, bytes]
"""One record of the notification log: ``(position, originator_id, originator_version, topic,
state)``. A plain tuple, as the database client returns it: a ``NamedTuple`` per record cost
measurably on the tail's and the projection's reads (docs/performance.md)."""

EventRow = tuple[UUID, int, str, bytes]
"""One stored event of an aggregate: ``(originator_id, originator_version, topic, state)``."""


class OpenIntents(NamedTuple):
    """What :meth:`LogReads.intents_list_open` (or a reserving read) read.

    Attributes:
        records: the intents, in log order.
        closed_through: a log position (or None where not known: drivers whose reads include
            closed intents): every intent after the read's start and up to it that is not in
            ``records`` had a later event of its operation when read, and so is closed for good
            (positions are in commit order: ``select_open_intents.sql``).
        elsewhere: the operations of ``records`` another worker had reserved; empty for a read
            that reserves nothing.
    """

    records: list[Record]
    closed_through: int | None
    elsewhere: frozenset[UUID] = frozenset()


class EventLoads(Protocol):
    """Every stored event of many aggregates in one read (DESIGN §11: one query per record
    cannot keep up)."""

    def events_list_many(self, ids: Collection[UUID]) -> list[EventRow]:
        """Return the stored events of the aggregates ``ids``, grouped by aggregate in version
        order; unknown ids have none. Duplicate ids are read once."""
        ...


class LogReads(Protocol):
    """Stretches of the notification log, as plain records (no ``Notification`` per row)."""

    intents_only_open: bool
    """Whether :meth:`intents_list_open` leaves out intents whose operation recorded anything
    after them: each record it returns is then the operation's whole history when read."""

    def records_list_after(self, after: int, limit: int, topics: Sequence[str], ids: dict[Any, UUID], *,
                           prefix: str | None = None) -> list[Record]:
        """Return up to ``limit`` records after log position ``after``, of ``topics`` (and of
        every topic starting with ``prefix``, when given), in log order.

        Args:
            after: the last position already read (0 for the start of the log).
            limit: how many records at most.
            topics: the event topics wanted.
            ids: a memo of originator ids by their stored form, shared across calls by the
                caller (an operation's records then share one ``UUID`` object).
            prefix: also every topic starting with it (``ledger.``: records of event types this
                code does not know, so the reader can report them); None for none.
        """
        ...

    def intents_list_open(self, after: int, limit: int, topics: Sequence[str], ids: dict[Any, UUID]) -> OpenIntents:
        """:meth:`records_list_after` for intents (``topics``: the ``Intended`` topics), leaving
        out those whose operation recorded anything after them where :attr:`intents_only_open`."""
        ...


class ReservationHold(Protocol):
    """The reserving reads of one held connection; what they reserve is released when the
    :meth:`Reservations.reservations_hold` block that made it ends."""

    held: list[UUID]
    """The operations reserved so far (released at the block's end)."""

    def intents_reserve_open(self, after: int, limit: int, topics: Sequence[str]) -> OpenIntents:
        """:meth:`LogReads.intents_list_open` that also reserves each intent it returns; the
        intents another worker holds come back in ``OpenIntents.elsewhere``."""
        ...

    def operations_reserve_current(self, versions: Sequence[tuple[UUID, int]]) -> set[UUID]:
        """Reserve each operation of ``versions`` (``(operation id, version judged by)`` pairs)
        that recorded nothing after that version and that no other worker holds; return their
        ids. The others moved on or are another worker's."""
        ...


class Reservations(Protocol):
    """Reservations among workers of many processes, taken by the statements that read."""

    reservations_shared: bool
    """Whether workers of other processes share this store, so reservations can race: where
    False, one process owns the store and :meth:`reservations_hold` is refused."""

    def reservations_hold(self) -> AbstractContextManager[ReservationHold]:
        """Hold one connection for reserving reads; release what they reserved when the block
        ends (a connection whose release did not finish is closed, so no lock outlives it).

        Raises:
            ValueError: :attr:`reservations_shared` is False.
        """
        ...


class StoreProbes(Protocol):
    """Whether the store accepts an append at all (``projections.probe``)."""

    def store_probe(self, probe_id: UUID, topic: str, state: bytes) -> None:
        """Append one record through the path every append takes, in a transaction that is
        rolled back (nothing is stored, no follower is woken).

        Raises:
            Exception: the store's refusal, as its client raised it.
        """
        ...


class TopicCounts(Protocol):
    """Reads for checks at start, never per cycle."""

    def topics_count_stored(self, prefix: str, topics: Sequence[str] = ()) -> dict[str, int]:
        """Return the distinct stored topics starting with ``prefix`` or among ``topics``, with
        how many records each has."""
        ...

    def intents_list_live(self, topics: Sequence[str], projection: str, upstream: str) -> list[EventRow]:
        """Return the stored records of ``topics`` (the ``Intended`` topics) of the operations a
        worker may still act on, each once, in no order: those whose status row has work due
        (``next_due_at`` set) and those recorded after the status projection's position
        (``projection``, ``upstream``: not projected yet, whatever they are). Bounded by the
        live work and the projection's lag, not by the store's history (a read of every intent
        took 2.6 s at 200,000 operations on SQLite)."""
        ...


class ArchiveCandidate(NamedTuple):
    """A status row :meth:`Archives.archive_candidates` selected: what
    ``ledger.retention.is_archivable`` is asked about, and where the keyset goes on."""

    operation_id: UUID
    version: int
    integration: str
    status: str
    execution: str
    settlement: str
    disposition: str | None
    attention: str | None
    updated_at: datetime


ArchiveLabels = tuple[str, str, str, str]
"""``(final status, integration, tenant, delivery mode)``: a label set of the carried-forward totals."""


class RecordedSegment(NamedTuple):
    """A segment the store recorded: its number, manifest digest (``sha256:<hex>``), the
    carried-forward summary (JSON text, ``adapters.archive_run.summary_of``) and, as read back,
    how many records it moved out (0 before it is recorded: ``Archives.archive_record`` takes
    the count on its own)."""

    segment: int
    digest: str
    summary: str
    records: int = 0


class LateRecord(NamedTuple):
    """What arrived for an archived operation after its records left the store (a provider's
    late callback), kept for operators (docs/adr/0010-archives.md §4): the operation, the
    message's id, the segment holding the operation, the integration it came in for, the
    reported outcome, status word and text, and when it arrived (UTC)."""

    operation_id: UUID
    callback_id: str
    segment: int
    integration: str
    outcome: str
    remote_status: str | None
    detail: str
    received_at: datetime


class Archives(Protocol):
    """Moving closed operations out of the hot store (docs/adr/0010-archives.md §3): select,
    record a written segment and its index, remove what it holds, in bounded batches."""

    def archive_candidates(self, before: datetime, after: tuple[datetime, UUID] | None,
                           limit: int) -> list[ArchiveCandidate]:
        """Return up to ``limit`` status rows that look closed (settled or needing no
        settlement, or abandoned; not pending settlement; not on the attention queue), last
        changed before ``before``, not archived yet, after the keyset ``after`` (the last
        row's ``(updated_at, operation_id)``), oldest first."""
        ...

    def archive_record(self, segment: RecordedSegment, *, aggregates: int, records: int, archived_at: datetime,
                       operations: Sequence[tuple[UUID, int, str]],
                       receipts: Sequence[tuple[UUID, int]] = ()) -> None:
        """In one transaction: record ``segment``, an index row per ``(operation id, version
        archived, final status)`` and per ``(receipt id, version archived)`` of an expired
        receipt. A segment recorded already is left as it is, and nothing else is written (a
        rerun adds nothing twice). The carried-forward totals move when the rows do
        (:meth:`archive_remove`)."""
        ...

    def archive_late_record(self, record: LateRecord) -> bool:
        """Keep ``record``; return False when one with its operation and callback id is kept
        already (a provider's retry: nothing is written)."""
        ...

    def archive_late_list(self, limit: int) -> list[LateRecord]:
        """Return up to ``limit`` kept records no operator acknowledged yet, oldest first."""
        ...

    def archive_late_acknowledge(self, operation_id: UUID, *, principal: str, evidence: str, at: datetime) -> int:
        """Mark every unacknowledged record of ``operation_id`` acknowledged by ``principal``
        with ``evidence`` at ``at`` (UTC); return how many."""
        ...

    def archive_receipts_held(self, ids: Collection[UUID]) -> set[UUID]:
        """Return those of ``ids`` with an archived receipt generation whose records are still in
        the store (not removed yet, or kept whole): they are never selected again."""
        ...

    def archive_receipts_unremoved(self, limit: int) -> list[tuple[UUID, int, int]]:
        """Return up to ``limit`` ``(receipt id, segment, version archived)`` of archived receipt
        generations whose records are still to be removed."""
        ...

    def archive_receipts_remove(self, receipts: Sequence[tuple[UUID, int, int]]) -> None:
        """In one transaction: delete each archived receipt generation's records up to the
        version archived and mark it removed; one with a record past that version (reopened
        since) is kept whole and marked so (docs/adr/0010-archives.md §4, §6)."""
        ...

    def archive_segments(self) -> list[RecordedSegment]:
        """Return every recorded segment, in number order."""
        ...

    def archive_lookup(self, ids: Collection[UUID]) -> dict[UUID, tuple[int, str]]:
        """Return ``{id: (segment, final status)}`` for those of ``ids`` that are archived."""
        ...

    def archive_unremoved(self, limit: int) -> list[tuple[UUID, int]]:
        """Return up to ``limit`` ``(operation id, version archived)`` pairs of archived
        operations whose records and status row are still in the hot store, leaving out any
        with a record past the version archived (a late record: it stays whole,
        docs/adr/0010-archives.md §4)."""
        ...

    def archive_remove(self, operations: Sequence[tuple[UUID, int]]) -> int:
        """In one transaction: delete each operation's records up to the version archived and
        its status row when it is that version; an operation with a record past the version
        archived (a late record) is left whole, never cut into a history that starts past
        version 1 (docs/adr/0010-archives.md §4). Each deleted status row is added, by its
        ``(status, integration, tenant, delivery mode)``, to the carried-forward totals the
        status counts add in, in the same transaction: an operation is counted once whatever
        moment a reader looks, and one kept whole is never counted twice. Returns how many status
        rows it deleted: the operations removed by this call (0 for a rerun of one removed already)."""
        ...


class StoreDriver(EventLoads, LogReads, Reservations, StoreProbes, TopicCounts, Archives, Protocol):
    """Every concern of one store's driver (ADR 0008). Consumers take a narrower protocol."""

    name: str
    """The driver's name, for logs and reports only: never branched on."""


class DatabaseDriver(Protocol):
    """What differs between the backends for a configured database, before or beside any
    application over it: whether processes share it, its wake-ups, its description.

    Chosen once per ``ledger.config.Database`` by ``migrations.drivers.database_driver``.
    """

    name: str
    """The driver's name, for logs and reports only: never branched on."""

    shared: bool
    """Whether workers and servers of many processes share the store (a leadership lease picks
    the projection's writer, wake-ups are sent, every process may write); where False, one
    process owns the store and the others open it read-only."""

    store_file: Path | None
    """The file the store lives in when it is a file of its own (its path, header, WAL and
    integrity are checked by ``ledger.store_files``, and one process owns it by its lock);
    None for a database server."""

    log_gapless: bool
    """Whether the log's positions have no gaps unless records were deleted (a PostgreSQL
    sequence skips the numbers of rolled-back inserts; SQLite's row ids do not)."""

    schema_files: Path
    """The folder of this backend's numbered schema migrations (applied by ``opledger migrate``)."""

    queries: Mapping[str, str]
    """This backend's named statements (``migrations/<backend>/queries``), for the status view
    of this store, which runs them."""
    """The folder of this backend's numbered schema migrations (applied by ``opledger migrate``)."""

    def describe(self) -> str:
        """Where the store lives, in words for a person (no password)."""
        ...

    def store_prepare(self) -> None:
        """Make the store's container ready for ``opledger migrate``: the file (created with
        mode 0600, checked whole, in WAL mode), or the schema (its name checked, created).

        Raises:
            ConfigurationError: the file cannot be used, the schema name is a reserved keyword,
                or the database cannot be reached.
            StoreDamagedError: the file is damaged.
        """
        ...

    def identity_record(self, *, defaults: Mapping[str, str], current: Mapping[str, str],
                        check: Callable[[dict[str, str]], None]) -> str:
        """In one transaction: read the store's identity rows, call ``check`` with them (it
        raises to refuse the store), insert each of ``defaults`` whose key is not there yet,
        set each of ``current``; return the stored ``store_id``.

        Raises:
            The errors of ``check``.
        """
        ...

    def journal_mode(self) -> str | None:
        """The store file's journal mode (lower case), read without writing; None where the
        store is no file of its own.

        Raises:
            sqlite3.DatabaseError: the file cannot be opened or read as a database.
        """
        ...

    def autovacuum(self) -> bool | None:
        """Whether the server reclaims dead rows and gathers planner statistics by itself
        (PostgreSQL's ``autovacuum`` setting); None where there is no such process (SQLite
        reuses freed pages as it goes).

        Raises:
            ConfigurationError: the server cannot be reached.
        """
        ...

    def schema_drop(self) -> None:
        """Drop the store's own schema and everything in it (the demo's fresh start). Where the
        store is a file of its own (no schema), nothing: its owner deletes the file.

        Raises:
            ConfigurationError: the database cannot be reached.
        """
        ...

    def wakeups_start(self, wakeups: Mapping[str, Sequence[Callable[[str], None]]], stop: threading.Event) -> bool:
        """Start calling ``wakeups`` (channel -> callables of a notification's payload) when the
        store notifies, until ``stop`` is set; return whether it does. Where the store sends no
        notifications, False: polling alone finds new work.

        Args:
            wakeups: by channel (:meth:`status_channel`, or the event log's channel of the
                library's recorder): quick, thread-safe callables.
            stop: ends the listening.
        """
        ...

    def status_channel(self) -> str:
        """The channel the status view notifies when a write leaves work due now."""
        ...
