"""The embedded store's files: path and permission hardening, file modes, the WAL pair, damage.

A SQLite store is a file and three companions: ``<store>-wal`` (committed transactions not yet
copied into the file), ``<store>-shm`` (the WAL's index) and ``<store>.lock`` (the single-owner
lock, ``ledger.persistence.StoreLock``). Anyone who can replace one of them, or point one
elsewhere, can change or lose the ledger's history, so opledger refuses:

- a store file, companion or store directory that is a symlink;
- a store directory anyone may write to (``o+w``, sticky or not: another user could create the
  lock or WAL file first), or owned by another user;
- a store file or companion owned by another user.

It creates the store directory ``0700`` and every file ``0600`` (SQLite gives the WAL and index
the store file's mode), and the owner tightens older, looser files to ``0600`` when it opens the
store. Only ``lstat``/``stat`` are used here before the lock is taken: nothing reads the store.

Source: DESIGN §8; issue 16 items 3 and 4.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.errors import StoreDamagedError, StorePathError

STORE_DIR_MODE = 0o700
"""Mode of a store directory opledger creates: the owner only."""
STORE_FILE_MODE = 0o600
"""Mode of every store file: the store, its WAL and index, its lock file."""
COMPANIONS = ("-wal", "-shm", ".lock")
"""Suffixes of the files that belong to a store file."""
SQLITE_CORRUPT = 11
SQLITE_NOTADB = 26
_WAL_INDEX_HEADER = struct.Struct("=IIIBBHI")  # iVersion, unused, iChange, isInit, bigEndCksum, szPage, mxFrame
_SQLITE_HEADER = b"SQLite format 3\x00"


@dataclass(frozen=True)
class Finding:
    """One check's result.

    Attributes:
        name: what was checked (``path``, ``directory``, ``wal``, ``integrity``, ...).
        status: ``ok``, ``warn`` (works, but should be fixed) or ``fail``.
        detail: what was found, and the fix when it is not ``ok``.
    """

    name: str
    status: str
    detail: str

    def as_json(self) -> dict[str, str]:
        """The finding as a JSON-ready dict."""
        return {"name": self.name, "status": self.status, "detail": self.detail}


def companion(path: Path, suffix: str) -> Path:
    """``<store><suffix>``, e.g. ``companion(p, "-wal")``."""
    return Path(str(path) + suffix)


def _owner_problem(what: str, st: os.stat_result) -> str | None:
    if st.st_uid != os.geteuid():
        return (f"{what} is owned by uid {st.st_uid}, not this user (uid {os.geteuid()}); "
                "run opledger as the user who owns the store, or chown it")
    return None


def path_findings(path: Path) -> list[Finding]:
    """Check the store's path, directory and files without opening anything.

    Args:
        path: the store file (absolute, symlinks not resolved).

    Returns:
        One finding for the directory, one for the store file and one per companion present;
        ``fail`` for what opledger refuses, ``warn`` for modes looser than ``0600``/``0700``.

    Source: issue 16 item 3.
    """
    findings = [_directory_finding(path.parent)]
    for name, file in [("store file", path)] + [(f"{s} file", companion(path, s)) for s in COMPANIONS]:
        finding = _file_finding(name, file)
        if finding is not None:
            findings.append(finding)
    return findings


def _directory_finding(directory: Path) -> Finding:
    name = "directory"
    if directory.is_symlink():
        return Finding(name, "fail", f"{directory} is a symlink; give the store's real directory in the URL")
    try:
        st = directory.stat()
    except FileNotFoundError:
        return Finding(name, "ok", f"{directory} does not exist yet (created {STORE_DIR_MODE:04o})")
    except OSError as exc:
        return Finding(name, "fail", f"{directory} cannot be used: {exc.strerror or exc}")
    if not stat.S_ISDIR(st.st_mode):
        return Finding(name, "fail", f"{directory} is not a directory")
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_IWOTH:
        return Finding(name, "fail", f"{directory} is writable by anyone (mode {mode:04o}); keep the store "
                                     f"in a directory of its own (chmod {STORE_DIR_MODE:o} it)")
    problem = _owner_problem(str(directory), st)
    if problem:
        return Finding(name, "fail", problem)
    if mode & 0o077:
        return Finding(name, "warn", f"{directory} has mode {mode:04o}; {STORE_DIR_MODE:04o} keeps other users "
                                     f"out (chmod {STORE_DIR_MODE:o} {directory})")
    return Finding(name, "ok", f"{directory} (mode {mode:04o})")


def _file_finding(name: str, file: Path) -> Finding | None:
    try:
        st = file.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return Finding(name, "ok", f"{file} does not exist yet") if name == "store file" else None
    except OSError as exc:
        return Finding(name, "fail", f"{file} cannot be used: {exc.strerror or exc}")
    if stat.S_ISLNK(st.st_mode):
        return Finding(name, "fail", f"{file} is a symlink; opledger opens only the store's real files")
    if stat.S_ISDIR(st.st_mode):
        return Finding(name, "fail", f"{file} is a directory, not an SQLite store file")
    if not stat.S_ISREG(st.st_mode):
        return Finding(name, "fail", f"{file} is not a regular file")
    problem = _owner_problem(str(file), st)
    if problem:
        return Finding(name, "fail", problem)
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return Finding(name, "warn", f"{file} has mode {mode:04o}; the store's owner sets it to "
                                     f"{STORE_FILE_MODE:04o} when it next opens the store")
    return Finding(name, "ok", f"{file} (mode {mode:04o})")


def check_store_path(path: Path) -> None:
    """Refuse an unsafe store path (see the module docstring); modes are only warnings.

    Raises:
        StorePathError: each problem found, in one message.

    Source: DESIGN §8; issue 16 item 3.
    """
    failed = [f.detail for f in path_findings(path) if f.status == "fail"]
    if failed:
        raise StorePathError(f"refusing the store {path}: " + "; ".join(failed))


def prepare_store_directory(path: Path) -> None:
    """Create the store's directory ``0700`` (parents with the default mode) if it is missing.

    Raises:
        StorePathError: the directory cannot be created.
    """
    try:
        path.parent.mkdir(mode=STORE_DIR_MODE, parents=True, exist_ok=True)
    except OSError as exc:
        raise StorePathError(f"cannot create the store's directory {path.parent}: {exc.strerror or exc}") from None


def create_store_file(path: Path) -> None:
    """Create an empty store file ``0600`` if there is none, so SQLite's WAL and index get the
    same mode (SQLite copies the store file's permissions to them).

    Raises:
        StorePathError: it cannot be created.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, STORE_FILE_MODE)
    except FileExistsError:
        return
    except OSError as exc:
        raise StorePathError(f"cannot create the store file {path}: {exc.strerror or exc}") from None
    os.close(fd)


def tighten_modes(path: Path) -> None:
    """Set the store file and its companions to ``0600`` where they are looser (files written by
    older versions). Called by the owner, under the lock; files of other users are left alone
    (``check_store_path`` refuses them)."""
    for file in [path] + [companion(path, s) for s in COMPANIONS]:
        try:
            st = file.lstat()
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) & 0o077:
                os.chmod(file, STORE_FILE_MODE, follow_symlinks=False)
        except (FileNotFoundError, NotImplementedError):
            continue


def lost_wal(path: Path) -> str | None:
    """Say whether the store's WAL file went missing while it held committed transactions.

    SQLite deletes the WAL and its index when the last connection closes cleanly. After a
    crash both stay, and the next open replays the WAL. If the WAL alone is deleted (or not
    copied with the store), the index still counts its frames: opening would silently lose
    those commits.

    Returns:
        A description of the problem, or None.

    Source: SQLite's WAL format (sqlite.org/walformat.html, the wal-index header); issue 16 item 4.
    """
    shm, wal = companion(path, "-shm"), companion(path, "-wal")
    if wal.exists() or not shm.exists():
        return None
    try:
        with open(shm, "rb") as f:
            header = f.read(_WAL_INDEX_HEADER.size)
    except OSError:
        return None
    if len(header) < _WAL_INDEX_HEADER.size:
        return None
    _version, _, _change, is_init, _, _, frames = _WAL_INDEX_HEADER.unpack(header)
    if is_init and frames > 0:
        return (f"its WAL file {wal} is missing, but the WAL index {shm} counts {frames} frame(s) of "
                "committed transactions not yet in the store file")
    return None


def header_problem(path: Path) -> str | None:
    """Check the store file's 100-byte header and length (cheap: two reads, no SQL).

    Returns:
        A description of the problem (not an SQLite file, truncated), or None. An empty file is
        not a problem (a store being created).
    """
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            header = f.read(100)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    if size == 0:
        return None
    if len(header) < 100 or not header.startswith(_SQLITE_HEADER):
        return "is not an SQLite database file (its header is missing or damaged)"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    # The in-header page count is valid only when the two change counters agree (SQLite file format §1.3.7).
    pages = int.from_bytes(header[28:32], "big") if header[24:28] == header[92:96] else 0
    if page_size and size % page_size:
        return f"is truncated or padded: {size} bytes is not a whole number of {page_size}-byte pages"
    if pages and size < pages * page_size and not companion(path, "-wal").exists():
        return f"is truncated: its header counts {pages} pages ({pages * page_size} bytes), the file has {size}"
    return None


def read_only_rows(path: Path, statement: str) -> list[Any]:
    """Run one reading ``statement`` on a read-only connection of its own to the SQLite file at
    ``path``; return its rows.

    Raises:
        sqlite3.DatabaseError: the file cannot be opened or read (the caller tells damage apart).
    """
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(statement).fetchall()
    finally:
        conn.close()


def integrity_problems(path: Path, *, quick: bool = True, limit: int = 20) -> list[str]:
    """Run ``PRAGMA quick_check`` (or the slower, thorough ``integrity_check``) on a read-only
    connection.

    Args:
        path: the store file.
        quick: ``quick_check`` (O(pages), skips index-content cross checks) instead of
            ``integrity_check``.
        limit: at most this many problems are returned.

    Returns:
        SQLite's problem lines; empty when the check says ``ok``.

    Raises:
        StorePathError: the file cannot be opened at all (not damage: see ``unopenable``).
    """
    pragma = "quick_check" if quick else "integrity_check"
    try:
        rows = read_only_rows(path, f"PRAGMA {pragma}({int(limit)})")
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            return [str(exc)]
        raise unopenable(path, exc) from None
    # One problem per line, without the per-database banner (the message is read on one line).
    found = [line for r in rows for line in str(r[0]).splitlines() if not line.startswith("*** in database")]
    return [] if found == ["ok"] else found


def is_damage(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is SQLite reporting a damaged file
    (``SQLITE_CORRUPT`` or ``SQLITE_NOTADB``), as opposed to a lock, a full disk or a bug."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, sqlite3.Error):
            code = getattr(current, "sqlite_errorcode", None)
            if code is not None and code & 0xFF in (SQLITE_CORRUPT, SQLITE_NOTADB):
                return True
            if "malformed" in str(current) or "not a database" in str(current):
                return True
        current = current.__cause__ or current.__context__
    return False


def unopenable(path: Path, exc: BaseException) -> StorePathError:
    """The error for a store SQLite cannot open (not damage), with the likely cause: a reader in a
    directory it may not write to cannot create the WAL index SQLite needs to read a WAL store."""
    hint = ""
    if not os.access(path.parent, os.W_OK) and not companion(path, "-shm").exists():
        hint = (f"; its directory is read-only for this user, and SQLite must create {companion(path, '-shm')} "
                "to read a store in WAL mode: make the directory writable for this user, or read a copy "
                "(`opledger backup`, run where it is writable)")
    return StorePathError(f"cannot open the store {path}: {exc}{hint}")


def damaged(path: Path, problem: str) -> StoreDamagedError:
    """The one error every damaged-store path raises (open, a read command, a worker)."""
    return StoreDamagedError(
        f"the store {path} is damaged: {problem}. Run `opledger doctor` for details, stop every process "
        "using it and restore it from the backup (docs/operations.md, 'Restore')")


def check_store_files(path: Path, *, thorough: bool) -> None:
    """Refuse a damaged store at open: a lost WAL, a bad header or length, and when ``thorough``
    (the owner's open) ``PRAGMA quick_check``.

    Raises:
        StoreDamagedError: naming the file and the problem.

    Source: issue 16 item 4.
    """
    problem = lost_wal(path) or header_problem(path)
    if problem is None and thorough and path.exists() and path.stat().st_size:
        found = integrity_problems(path, quick=True, limit=3)
        problem = "; ".join(found) if found else None
    if problem is not None:
        raise damaged(path, problem)


def fsync_path(path: Path) -> None:
    """fsync a file or a directory (a new or renamed file's directory entry is durable only once
    its directory is fsynced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_store(source: Path, dest: Path, *, replace: bool = True) -> None:
    """Copy a store with SQLite's online backup (consistent while a worker writes) into a new
    file ``dest`` (``0600``), then fsync it and its directory.

    Args:
        source: the store file.
        dest: the copy; with ``replace``, an earlier file there (and its WAL and index) is removed
            first, else an existing ``dest`` is refused.

    Raises:
        FileExistsError: ``dest`` exists and not ``replace``.
        sqlite3.Error: the source cannot be read.

    Source: SQLite's online backup API (sqlite.org/backup.html); issue 16 items 4 and 5.
    """
    if replace:
        for stale in (dest, companion(dest, "-wal"), companion(dest, "-shm")):
            stale.unlink(missing_ok=True)
    os.close(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, STORE_FILE_MODE))
    src, out = sqlite3.connect(f"file:{source}?mode=ro", uri=True), sqlite3.connect(dest)
    try:
        src.backup(out)
    finally:
        out.close()
        src.close()
    fsync_path(dest)
    fsync_path(dest.parent)
