"""Archive segments: closed history moved out of the hot store, in files that prove what happened.

An archive is a directory of segments, each a directory ``seg-NNNNNN`` (numbered from 1) holding:

- ``records.jsonl``: every stored record of the segment's aggregates, as stored, one JSON object
  a line: ``{"id": UUID, "version": int, "topic": str, "state": base64}``, so that a restore
  writes back the very bytes the store held;
- ``decoded.jsonl``: the same records in a readable form (``{"id", "version", "event", "at",
  "details"}``), for an auditor without opledger;
- ``status.jsonl``: one line per archived aggregate: its id, kind (``operation`` or
  ``receipt``) and final status as the status view held it;
- ``manifest.json``: the format name, the segment's number, when it was written (UTC), its
  aggregate and record counts, the SHA-256, size and line count of every file above, the digest
  of the previous segment's manifest (a hash chain), the store's identity, schema and codec
  version, and opledger's version and commit.

A segment's **digest** is the SHA-256 of its ``manifest.json`` bytes; the next segment names it as
``previous``, so an edited, removed or reordered segment breaks the chain after it.

``ledger.archive_check`` verifies an archive. A segment is written into ``seg-NNNNNN.partial``
and renamed into place only when every file is written and flushed (:func:`write_segment`), so a
segment directory without that suffix is complete; a ``.partial`` one is what a killed writer
left and is redone by the next run.

Source: issue 29 items 2 and 3 (archives and their verification).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from ledger import failpoints
from ledger.clock import require_utc
from ledger.errors import LedgerError

FORMAT = "opledger-archive/1"
"""The manifest's ``format``: readers refuse a format they do not know."""
FILES = ("records.jsonl", "decoded.jsonl", "status.jsonl")
"""The data files of a segment, in the order the manifest lists them."""
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 1 << 20
"""A manifest is a few hundred bytes; one past this is not read (it is not one opledger wrote)."""
_CHUNK = 1 << 20
PARTIAL = ".partial"
_SEGMENT_NAME = re.compile(r"^seg-(\d{6})$")


class ArchiveError(LedgerError):
    """An archive cannot be written or read as asked: a segment exists already, a manifest is
    unreadable or of an unknown format. The message names the segment and the fix."""


@dataclass(frozen=True)
class StoredRecord:
    """One record as the store holds it: aggregate id, version (from 1), topic, state bytes."""

    originator_id: UUID
    originator_version: int
    topic: str
    state: bytes

    def as_line(self) -> dict[str, Any]:
        """The ``records.jsonl`` object of this record (state in standard base64)."""
        return {"id": str(self.originator_id), "version": self.originator_version, "topic": self.topic,
                "state": base64.b64encode(self.state).decode("ascii")}

    @classmethod
    def from_line(cls, line: Mapping[str, Any]) -> StoredRecord:
        """The record a ``records.jsonl`` object describes.

        Raises:
            ArchiveError: a member is missing or of the wrong type.
        """
        try:
            return cls(UUID(line["id"]), int(line["version"]), str(line["topic"]),
                       base64.b64decode(line["state"], validate=True))
        except (KeyError, TypeError, ValueError) as exc:
            raise ArchiveError(f"a records.jsonl line is not a stored record: {exc}") from exc


@dataclass(frozen=True)
class Segment:
    """A written segment: its number, directory and manifest digest (``sha256:<hex>``)."""

    number: int
    path: Path
    digest: str


def segment_name(number: int) -> str:
    """``seg-000001`` for 1: names sort in number order."""
    return f"seg-{number:06d}"


def segments(archive: Path) -> list[tuple[int, Path]]:
    """The complete segments under ``archive`` as ``(number, path)``, in number order (``.partial``
    directories and other names are left out; an unreadable directory holds none)."""
    try:
        entries = list(archive.iterdir())
    except OSError:
        return []
    found = [(int(m.group(1)), p) for p in entries if (m := _SEGMENT_NAME.match(p.name)) and p.is_dir()]
    return sorted(found)


def file_facts(path: Path, limit: int | None = None) -> tuple[str, int, int]:
    """SHA-256 (hex), size in bytes and newline count of a regular file, read in 1 MiB chunks.

    Raises:
        ArchiveError: it is missing, unreadable, not a regular file (a directory, a FIFO), or
            larger than ``limit`` bytes.
    """
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise ArchiveError(f"{path.parent.name}: {path.name} is not a regular file")
        digest, size, lines = hashlib.sha256(), 0, 0
        with open(path, "rb") as file:
            while chunk := file.read(_CHUNK):
                digest.update(chunk)
                size, lines = size + len(chunk), lines + chunk.count(b"\n")
                if limit is not None and size > limit:
                    raise ArchiveError(f"{path.parent.name}: {path.name} is larger than {limit} bytes")
    except FileNotFoundError:
        raise ArchiveError(f"{path.parent.name}: {path.name} is missing") from None
    except OSError as exc:
        raise ArchiveError(f"{path.parent.name}: {path.name} cannot be read: {exc.strerror or exc}") from None
    return digest.hexdigest(), size, lines


def manifest_digest(path: Path) -> str:
    """``sha256:<hex>`` of a segment's ``manifest.json`` bytes.

    Raises:
        ArchiveError: the manifest is missing, unreadable, not a regular file or too large.
    """
    return "sha256:" + file_facts(path / MANIFEST, MAX_MANIFEST_BYTES)[0]


def read_manifest(path: Path) -> dict[str, Any]:
    """A segment's manifest.

    Raises:
        ArchiveError: it is missing, unreadable, too large, not JSON, or of another format.
    """
    file_facts(path / MANIFEST, MAX_MANIFEST_BYTES)
    try:
        manifest = json.loads((path / MANIFEST).read_bytes())
    except (OSError, ValueError, RecursionError) as exc:
        raise ArchiveError(f"{path.name}: manifest.json cannot be read: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArchiveError(f"{path.name}: manifest.json is not an {FORMAT} manifest")
    return manifest


def _jsonl(lines: Iterable[Mapping[str, Any]]) -> bytes:
    return b"".join(json.dumps(line, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"
                    for line in lines)


def _write(path: Path, data: bytes) -> dict[str, Any]:
    with open(path, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "lines": data.count(b"\n")}


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_segment(archive: Path, *, records: Sequence[StoredRecord], decoded: Sequence[Mapping[str, Any]],
                  statuses: Sequence[Mapping[str, Any]], written_at: datetime,
                  provenance: Mapping[str, Any]) -> Segment:
    """Write the next segment of ``archive`` and return it.

    Args:
        archive: the archive directory (created, mode 0700, when missing).
        records: every stored record of the segment's aggregates, as stored.
        decoded: one readable object per record, in the same order.
        statuses: one object per archived aggregate (``id``, ``kind``, ``status`` and whatever
            else its final status row holds).
        written_at: when (UTC, from the injected clock).
        provenance: the store's ``identity``, ``schema`` and ``codec`` version and opledger's
            ``version`` and ``commit``, recorded as the manifest's ``store`` and ``opledger``.

    Returns:
        The segment, numbered one past the last complete one, chained to it.

    Raises:
        ArchiveError: ``decoded`` does not match ``records`` one for one.
        NaiveDatetimeError: ``written_at`` is not timezone-aware UTC.
    """
    require_utc(written_at, "written_at")
    if len(decoded) != len(records):
        raise ArchiveError(f"{len(decoded)} decoded lines for {len(records)} records: they must match one for one")
    archive.mkdir(mode=0o700, parents=True, exist_ok=True)
    done = segments(archive)
    number = done[-1][0] + 1 if done else 1
    previous = manifest_digest(done[-1][1]) if done else None
    final = archive / segment_name(number)
    partial = archive / (segment_name(number) + PARTIAL)
    if partial.exists():  # what a killed writer left: never complete, so never trusted
        for leftover in partial.iterdir():
            leftover.unlink()
    partial.mkdir(mode=0o700, exist_ok=True)
    files = {
        "records.jsonl": _write(partial / "records.jsonl", _jsonl(record.as_line() for record in records)),
        "decoded.jsonl": _write(partial / "decoded.jsonl", _jsonl(decoded)),
        "status.jsonl": _write(partial / "status.jsonl", _jsonl(statuses)),
    }
    manifest = {
        "format": FORMAT, "segment": number, "written_at": written_at.isoformat(),
        "aggregates": len(statuses), "records": len(records), "files": files, "previous": previous,
        "store": {key: provenance.get(key) for key in ("identity", "schema", "codec")},
        "opledger": {key: provenance.get(key) for key in ("version", "commit")},
    }
    _write(partial / MANIFEST, json.dumps(manifest, sort_keys=True, indent=2).encode() + b"\n")
    _fsync_dir(partial)
    failpoints.reached("archive_segment:before")
    os.rename(partial, final)  # atomic: a segment directory without the suffix is complete
    _fsync_dir(archive)
    failpoints.reached("archive_segment:after")
    return Segment(number, final, manifest_digest(final))


def read_records(path: Path) -> list[StoredRecord]:
    """The stored records of a segment, in the order written.

    Raises:
        ArchiveError: a line is not a stored record.
    """
    with open(path / "records.jsonl", "rb") as file:
        return [StoredRecord.from_line(json.loads(line)) for line in file if line.strip()]


def read_statuses(path: Path) -> list[dict[str, Any]]:
    """The final status objects of a segment's aggregates."""
    with open(path / "status.jsonl", "rb") as file:
        return [json.loads(line) for line in file if line.strip()]
