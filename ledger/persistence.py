"""Owning the store: the single-writer lock and the event log's notification payloads.
Source: DESIGN §8.

The ``eventsourcing`` library's recorders do all event storage; the factories and recorder that
adapt them (durability verified on SQLite, the insert function on PostgreSQL) are the store
drivers' (``migrations.drivers.recorders``, named by ``ledger.config``). This module keeps an
exclusive lock file (``0600``, taken before anything reads the store) so one process owns a
store in a file of its own. The store identity check lives in ``ledger.store_identity``, the
path, permission and damage checks in ``ledger.store_files``.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from ledger.errors import ConfigurationError, StoreLockedError
from ledger.store_files import STORE_FILE_MODE, check_store_path, prepare_store_directory, tighten_modes
from ledger.store_identity import (  # re-exported: their home before issue 16
    SCHEMA_VERSION,
    STORE_TABLE,
    check_newer_schema,
    check_store_identity,
    read_store_identity,
)

__all__ = [
    "SCHEMA_VERSION", "STORE_TABLE", "StoreLock", "INTENT_PAYLOAD", "APPENDED_PAYLOAD",
    "check_newer_schema", "check_store_identity", "read_store_identity",
]

INTENT_PAYLOAD = "intent"
"""The event log's NOTIFY payload when the insert appended a new intent (``Operation.Intended``):
only then is there anything for a worker's read of the log's tail (``executors.tail``)."""
APPENDED_PAYLOAD = "appended"
"""The payload for any other insert (claims, outcomes, settlements, entities' own events). An
empty payload comes from an insert function created before the payload existed (migrate
re-creates it): it may have appended an intent."""


class StoreLock:
    """An exclusive, non-blocking lock file beside a SQLite store (``<file>.lock``).

    One process owns an embedded store for writing (DESIGN §8). Within that process any number
    of holders share the lock (it is counted); another process cannot take it. The OS drops the
    lock when the process dies, SIGKILL included, so a crashed owner never leaves a stale lock.

    Raises:
        StoreLockedError: on ``acquire`` when another process holds the lock.
    """

    _held: dict[str, list[int]] = {}  # lock path -> [fd, holders] for this process
    # Re-entrant: taking the lock allocates, so the garbage collector may run inside ``acquire``
    # and an unreachable application's ``__del__`` (``Application.close``) call ``release`` on
    # this thread; with a plain Lock that deadlocked the process (seen in the test suite).
    _guard = threading.RLock()

    def __init__(self, db_path: Path) -> None:
        self.store = Path(db_path)
        self.path = Path(str(db_path) + ".lock")
        self._holding = False

    def acquire(self) -> StoreLock:
        """Take the lock (or share this process's), writing the owner's pid into the file."""
        key = str(self.path.resolve())
        with self._guard:
            if self._holding:
                return self
            held = self._held.get(key)
            if held is None:
                held = self._held[key] = [self._lock_file(), 0]
            held[1] += 1
            self._holding = True
        return self

    def _lock_file(self) -> int:
        # Only lstat/stat before the lock: nothing reads the store until this process owns it.
        if self.store.is_dir() and not self.store.is_symlink():  # refuse before leaving a lock file beside it
            raise ConfigurationError(f"{self.store} is a directory, not an SQLite store file")
        check_store_path(self.store)
        prepare_store_directory(self.store)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, STORE_FILE_MODE)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot create the store's lock file {self.path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            try:
                holder = self.path.read_text().strip() or "?"
            except OSError:
                holder = "?"
            raise StoreLockedError(
                f"the store {self.store} is owned by another process (pid {holder}); "
                "stop it first (reading commands such as `opledger ops list` work meanwhile)"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        tighten_modes(self.store)  # the lock file and store files of older versions were 0644
        return fd

    def release(self) -> None:
        """Release this holder's share (idempotent); the file lock goes with the last one."""
        key = str(self.path.resolve())
        with self._guard:
            if not self._holding:
                return
            self._holding = False
            held = self._held[key]
            held[1] -= 1
            if held[1] == 0:
                del self._held[key]
                fcntl.flock(held[0], fcntl.LOCK_UN)
                os.close(held[0])

    def __enter__(self) -> StoreLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
