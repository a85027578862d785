"""The reference partner's durable state: its request log and its applied effects (SQLite).

Every request the partner receives becomes one row of ``requests``; the first valid delivery for
an idempotency key also inserts into ``effects``, in the same transaction, so the log and the
effects never disagree. WAL with ``synchronous=FULL``: a row the partner committed survives the
partner being killed, which is what crash tests compare the ledger against.

Source: DESIGN §5 (the partner is the "remote system" of every delivery mode), §8 (durability).
"""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from adapters.partner import callbacks

BUSY_TIMEOUT_MS = 5000
T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    received_at TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('delivery', 'lookup', 'poll', 'cancel', 'control', 'other')),
    method TEXT NOT NULL,
    path TEXT NOT NULL,
    idempotency_key TEXT,
    webhook_id TEXT,
    attempt_id TEXT,
    signature_valid INTEGER CHECK (signature_valid IN (0, 1)),
    applied INTEGER NOT NULL CHECK (applied IN (0, 1)),
    fault TEXT,
    status INTEGER
);
CREATE INDEX IF NOT EXISTS requests_by_key ON requests (idempotency_key);
CREATE TABLE IF NOT EXISTS effects (
    idempotency_key TEXT PRIMARY KEY,
    applied_at TEXT NOT NULL,
    status INTEGER NOT NULL,
    body BLOB NOT NULL,
    payload BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS lro_operations (
    name TEXT PRIMARY KEY,
    idempotency_key TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    script TEXT NOT NULL,
    polls INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'cancelled', 'lost')),
    done_at TEXT,
    cancel_requests INTEGER NOT NULL DEFAULT 0
);
"""
_COLUMNS = ("seq", "received_at", "kind", "method", "path", "idempotency_key", "webhook_id",
            "attempt_id", "signature_valid", "applied", "fault", "status")
_SELECT_EFFECT = "SELECT status, body FROM effects WHERE idempotency_key = ?"
_INSERTED = _COLUMNS[1:]  # seq is assigned by SQLite
_INSERT_REQUEST = (f"INSERT INTO requests ({', '.join(_INSERTED)}) "
                   f"VALUES ({', '.join('?' * len(_INSERTED))})")


@dataclass(frozen=True, slots=True)
class PartnerRequest:
    """One row of the partner's request log.

    Attributes:
        seq: position in the log (1-based, assigned on insert).
        received_at: when the request arrived, UTC ISO 8601.
        kind: ``delivery`` (a POST), ``lookup`` (``GET /idempotency/{key}``), ``control`` or
            ``other``.
        method: the HTTP method.
        path: the request path, without the query.
        idempotency_key: the ``Idempotency-Key`` header (the key in the path for lookups).
        webhook_id: the ``webhook-id`` header.
        attempt_id: the ``X-Attempt-Id`` header.
        signature_valid: whether the Standard Webhooks signature verified; None when not checked
            (control requests).
        applied: True only for the request that applied the key's effect.
        fault: the injected fault in header form, or None.
        status: the status sent; None when the connection was dropped without a response.
    """

    received_at: str
    kind: str
    method: str
    path: str
    idempotency_key: str | None = None
    webhook_id: str | None = None
    attempt_id: str | None = None
    signature_valid: bool | None = None
    applied: bool = False
    fault: str | None = None
    status: int | None = None
    seq: int = 0


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """The response recorded with an effect; replays and lookups return it.

    Attributes:
        status: HTTP status of the first response.
        body: its body (JSON bytes).
    """

    status: int
    body: bytes


class PartnerStore:
    """The partner server's writer. One connection, serialised by a lock; thread-safe.

    Args:
        path: the SQLite file (created if missing).
    """

    def __init__(self, path: str | Path) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None,
                                   timeout=BUSY_TIMEOUT_MS / 1000)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._db.executescript(callbacks.SCHEMA)

    def stored(self, key: str) -> StoredResponse | None:
        """Return the response stored with ``key``'s effect, or None when never applied."""
        with self._lock:
            row = self._db.execute(_SELECT_EFFECT, (key,)).fetchone()
        return StoredResponse(row[0], bytes(row[1])) if row else None

    def transact(self, work: Callable[[sqlite3.Connection], tuple[PartnerRequest, T]]) -> T:
        """Run ``work`` in one transaction and append the log row it returns, so a change to
        the partner's state and its log row commit together (the long-running operations of
        :mod:`.lro`).

        Args:
            work: reads and writes through the connection; returns ``(log row, result)``.

        Returns:
            ``work``'s result.
        """
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                entry, result = work(self._db)
                self._db.execute(_INSERT_REQUEST, tuple(getattr(entry, c) for c in _INSERTED))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return result

    def record(self, entry: PartnerRequest, *, apply: StoredResponse | None = None,
               payload: bytes = b"", on_apply: Callable[[sqlite3.Connection], None] | None = None,
               ) -> tuple[bool, StoredResponse | None]:
        """Append ``entry`` to the log; with ``apply``, first apply the key's effect if it is new.

        Both happen in one transaction: the log's ``applied`` column is exactly the set of
        requests that inserted an effect.

        Args:
            entry: the log row (its ``applied`` and ``seq`` are ignored).
            apply: the response to store when this request applies the effect.
            payload: the request body, kept with the effect for inspection.
            on_apply: called with the connection, in the same transaction, when this request
                applies the effect (queues the provider's callback: ``.callbacks``; creates a
                long-running operation: ``.lro``).

        Returns:
            Whether this request applied the effect, and the key's stored response (if any).
        """
        key = entry.idempotency_key
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                applied = False
                if apply is not None and key is not None:
                    applied = self._db.execute(
                        "INSERT OR IGNORE INTO effects VALUES (?, ?, ?, ?, ?)",
                        (key, entry.received_at, apply.status, apply.body, payload),
                    ).rowcount == 1
                if applied and on_apply is not None:
                    on_apply(self._db)
                row_entry = dataclasses.replace(entry, applied=applied)
                self._db.execute(_INSERT_REQUEST, tuple(getattr(row_entry, c) for c in _INSERTED))
                row = self._db.execute(_SELECT_EFFECT, (key,)).fetchone() if key is not None else None
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return applied, (StoredResponse(row[0], bytes(row[1])) if row else None)

    def callback_sender(self, *, secret: str, clock: callbacks.Clock) -> callbacks.CallbackSender:
        """A sender of this store's queued callbacks (``.callbacks``), sharing its connection."""
        return callbacks.CallbackSender(db=self._db, lock=self._lock, secret=secret, clock=clock)

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()


class PartnerLog:
    """Reads the partner's durable log from any process, while the partner runs or after it died.

    Each call opens a short-lived connection, so results are always current.

    Args:
        path: the partner's SQLite file.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def requests(self, idempotency_key: str | None = None) -> list[PartnerRequest]:
        """Return every logged request in arrival order, or only those carrying a key."""
        query = f"SELECT {', '.join(_COLUMNS)} FROM requests"
        args: tuple[str, ...] = ()
        if idempotency_key is not None:
            query, args = query + " WHERE idempotency_key = ?", (str(idempotency_key),)
        return [_row(r) for r in self._query(query + " ORDER BY seq", args)]

    def applied_count(self, key: object) -> int:
        """Return how many requests applied ``key``'s effect (0 or 1 unless the partner is broken)."""
        return self._count("applied = 1", key)

    def received_count(self, key: object) -> int:
        """Return how many deliveries (POSTs, any signature, any fault) carried ``key``."""
        return self._count("kind = 'delivery'", key)

    def stored(self, key: object) -> StoredResponse | None:
        """Return the response stored with ``key``'s effect, or None when never applied."""
        rows = self._query(_SELECT_EFFECT, (str(key),))
        return StoredResponse(rows[0][0], bytes(rows[0][1])) if rows else None

    def callbacks(self) -> list[callbacks.CallbackRow]:
        """Every queued callback (``.callbacks``), by key."""
        rows = self._query("SELECT idempotency_key, callback_id, url, body, state, sends FROM callbacks "
                           "ORDER BY idempotency_key", ())
        return [callbacks.CallbackRow(r[0], r[1], r[2], bytes(r[3]), r[4], r[5]) for r in rows]

    def callback_sends(self, kind: str | None = None) -> list[tuple[str, str, int | None]]:
        """Every callback send in order as ``(idempotency_key, kind, receiver's status)``;
        ``kind``: ``send``, ``forged`` or ``replayed`` only."""
        query = "SELECT idempotency_key, kind, status FROM callback_sends"
        args: tuple[str, ...] = ()
        if kind is not None:
            query, args = query + " WHERE kind = ?", (kind,)
        return [(r[0], r[1], r[2]) for r in self._query(query + " ORDER BY seq", args)]

    def lro_operations(self) -> list[dict[str, object]]:
        """Every long-running operation the partner created (:mod:`.lro`), oldest first: name,
        idempotency key, state, polls answered, cancel requests received."""
        rows = self._query("SELECT name, idempotency_key, state, polls, cancel_requests FROM lro_operations "
                           "ORDER BY created_at, name", ())
        return [dict(zip(("name", "idempotency_key", "state", "polls", "cancel_requests"), r)) for r in rows]

    def _count(self, condition: str, key: object) -> int:
        rows = self._query(f"SELECT count(*) FROM requests WHERE idempotency_key = ? AND {condition}",
                           (str(key),))
        return int(rows[0][0])

    def _query(self, query: str, args: tuple[str, ...]) -> list[tuple]:
        if not self.path.exists():
            return []
        # mode=rw: never create a file; a WAL left by a killed partner is recovered on open.
        db = sqlite3.connect(self.path.resolve().as_uri() + "?mode=rw", uri=True,
                             timeout=BUSY_TIMEOUT_MS / 1000)
        try:
            return db.execute(query, args).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise
        finally:
            db.close()


def _row(values: tuple) -> PartnerRequest:
    data = dict(zip(_COLUMNS, values))
    data["applied"] = bool(data["applied"])
    if data["signature_valid"] is not None:
        data["signature_valid"] = bool(data["signature_valid"])
    return PartnerRequest(**data)
