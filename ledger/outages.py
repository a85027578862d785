"""Store outages: which errors mean "the store is unreachable for now" and which mean "this
cannot work", for every loop that talks to the database (the worker, the projection runner).

A transient error (a lost or terminated connection, a server restarting, a pool with no free
connection, SQLite busy) is ridden out: the caller backs off and tries again, logging once per
outage. Anything else is permanent (a missing table, a permission refused, a corrupt file):
retrying cannot fix it, so the process says so and stops.

Source: DESIGN §7 ("workers survive restarts"); issue 17; docs/operations.md "Database outages".
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from enum import StrEnum
from types import SimpleNamespace

import psycopg
import psycopg_pool
from eventsourcing.persistence import IntegrityError, InterfaceError, OperationalError, PersistenceError
from tenacity.wait import wait_exponential

BACKOFF = wait_exponential(multiplier=0.1, min=0.1, max=5.0)
"""Wait before retry N of an outage (tenacity): 0.1 s, 0.2 s, 0.4 s ... at most 5 s."""
_SQLITE_TRANSIENT = ("locked", "busy")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says the store is unreachable for now.

    Transient: psycopg's ``OperationalError`` and ``InterfaceError`` (connection lost or refused,
    ``AdminShutdown``, a serialization failure), ``psycopg_pool.PoolTimeout``, SQLite "database is
    locked/busy", and the ``eventsourcing`` library's ``OperationalError``/``InterfaceError`` that
    wrap them. Not transient: a SQLite ``OperationalError`` about anything else (no such table, a
    malformed file), and every other error.

    Args:
        exc: the error a database call raised.

    Returns:
        True when backing off and retrying may succeed.
    """
    for link in _chain(exc):
        if isinstance(link, sqlite3.OperationalError):
            return any(word in str(link).lower() for word in _SQLITE_TRANSIENT)
        if isinstance(link, (psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout)):
            return True
    return isinstance(exc, (OperationalError, InterfaceError))


class SaveFault(StrEnum):
    """Why a ``save()`` failed (:func:`save_fault`). Source: issue 35 item 1; issue 17."""

    CONFLICT = "conflict"
    """Another writer recorded the same aggregate version first: reload and decide again."""
    OUTAGE = "outage"
    """The store is unreachable for now (:func:`is_transient`): ride it out."""
    REFUSED = "refused"
    """The database refused the write for good: a constraint, a trigger, a row-level security
    policy, a permission, a missing table, a read-only store. Whose problem it is, one
    operation's or the store's, is ``ledger.refusals.refusal_scope``'s to say."""
    UNSTORABLE = "unstorable"
    """Not the database: the code could not turn a value into a record (the codec refused it)."""


def save_fault(exc: BaseException) -> SaveFault:
    """Why a ``save()`` raised ``exc``; the one translation of a failed write (STYLE 9).

    A version conflict is the library's ``IntegrityError`` from a unique violation of the events
    table's key (or one raised without a driver error, as the in-memory recorder does); any
    other integrity error (a ``CHECK``, ``NOT NULL`` or foreign key, a SQLite trigger's
    ``RAISE``) is a refusal, which reloading cannot fix.

    Args:
        exc: what ``Application.save`` raised.

    Returns:
        The :class:`SaveFault`.

    Source: issue 35 item 1; issue 17 (outages).
    """
    if is_transient(exc):
        return SaveFault.OUTAGE
    if not is_store_error(exc):
        return SaveFault.UNSTORABLE
    if isinstance(exc, IntegrityError) and _is_key_violation(exc):
        return SaveFault.CONFLICT
    return SaveFault.REFUSED


def _is_key_violation(exc: BaseException) -> bool:
    for link in _chain(exc):
        if isinstance(link, psycopg.errors.UniqueViolation):
            constraint = getattr(link.diag, "constraint_name", None)
            return constraint is None or constraint.endswith("_pkey")
        if isinstance(link, sqlite3.IntegrityError):
            return "UNIQUE constraint failed" in str(link)
        if isinstance(link, (psycopg.Error, sqlite3.Error)):
            return False
    return True  # raised by a recorder itself (in memory): a version conflict


def is_store_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) came from the database driver or the ``eventsourcing``
    recorder (``psycopg.Error``, ``sqlite3.Error``, ``PersistenceError``) rather than from code:
    a store error is reported in one line, a code error with its traceback."""
    return any(isinstance(link, (psycopg.Error, sqlite3.Error, PersistenceError)) for link in _chain(exc))


def backoff_seconds(retry_number: int) -> float:
    """Seconds to wait before retry ``retry_number`` (1-based) of an outage (:data:`BACKOFF`)."""
    # tenacity's wait strategies read only ``attempt_number`` of their retry state
    return float(BACKOFF(SimpleNamespace(attempt_number=max(1, retry_number))))  # type: ignore[arg-type]


def refresh_connections(*holders: object) -> None:
    """After a transient error, test every idle pooled connection of ``holders`` and replace the
    broken ones at once (``psycopg_pool.ConnectionPool.check``), so that a restart or an admin's
    ``pg_terminate_backend`` costs one retry rather than one per dead connection.

    Args:
        holders: objects holding a pool: a ``LedgerApplication`` (its recorder's datastore pool),
            a status view (its ``pool``), or a pool; anything else is ignored (SQLite).
    """
    for holder in holders:
        recorder = getattr(holder, "recorder", None)
        datastore = getattr(recorder, "datastore", None)
        for pool in (getattr(datastore, "pool", None), getattr(holder, "pool", None), holder):
            if isinstance(pool, psycopg_pool.ConnectionPool):
                try:
                    pool.check()
                except Exception:  # the server is still away: the next retry checks again
                    pass
                break
