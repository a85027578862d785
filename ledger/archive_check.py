"""Verify an archive (``ledger.archives``): every manifest, file hash, count, number and chain link.

Whatever the directory holds, the answer is a list of problems, one line each, never an
exception: an archive is checked exactly when something may be wrong with it. Files are hashed
as they stream (an archive's files can be gigabytes), only regular files are read (a FIFO would
block), and a manifest larger than ``MAX_MANIFEST_BYTES`` is refused unread.

Source: issue 29 item 3 (``opledger archive verify``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ledger.archives import (
    FILES,
    PARTIAL,
    ArchiveError,
    file_facts,
    manifest_digest,
    read_manifest,
    segment_name,
    segments,
)

_SEGMENT_LIKE = re.compile(r"^seg-")
_SEGMENT_NUMBER = re.compile(r"^seg-(\d{6})$")


def verify_archive(archive: Path, recorded: Mapping[int, str] | None = None) -> list[str]:
    """Check every segment of ``archive``: its manifest, each file's hash, size and line count,
    the counts the manifest states, the numbering and every chain link.

    The chain proves every segment but the last: nothing after the last manifest names its
    digest. The store's archive index records each segment's digest when it is written; given
    as ``recorded``, it anchors the head too (and finds a segment removed from the end).

    Args:
        archive: the archive directory.
        recorded: ``{segment number: "sha256:<hex>"}`` as the store recorded them, or None to
            check the archive on its own.

    Returns:
        One line per problem found, each naming the segment and what is wrong; empty when the
        archive verifies. A directory with no segment at all is a problem (a mistyped path must
        not pass), as are entries named like segments that are not one, and a leftover
        ``.partial`` directory (an unfinished segment).
    """
    if not archive.exists():
        return [f"{archive}: no such archive directory"]
    if not archive.is_dir():
        return [f"{archive}: not a directory (give the archive directory, which holds seg-000001, ...)"]
    try:
        entries = sorted(archive.iterdir())
    except OSError as exc:
        return [f"{archive}: cannot be read: {exc.strerror or exc}"]
    found = segments(archive)
    names = {path.name for _, path in found}
    problems = [_stray(path) for path in entries if _SEGMENT_LIKE.match(path.name) and path.name not in names]
    if not found and not recorded:
        return problems + [f"{archive}: holds no segments (is this the archive directory?)"]
    previous: str | None = None
    expected = 1
    for number, path in found:
        problems += [f"{segment_name(gap)}: missing (the archive jumps to {path.name})"
                     for gap in range(expected, number)]
        problems += _verify_segment(path, number, previous, chained=number == expected)
        expected = number + 1
        try:
            previous = manifest_digest(path)
        except ArchiveError:
            previous = None  # already reported; the next link cannot be checked against it
        if recorded is not None and number in recorded and previous != recorded[number]:
            problems.append(f"{path.name}: its manifest is not the one the store recorded ({recorded[number]})")
    present = {number for number, _ in found}
    problems += [f"{segment_name(number)}: missing (the store recorded it as archived)"
                 for number in sorted(set(recorded or ()) - present)]
    return problems


def verify_segment(path: Path) -> list[str]:
    """Check one segment on its own: its manifest, each file's hash, size and line count, and the
    counts it states (not its chain link, which needs the segment before it: ``verify_archive``).

    Args:
        path: the segment directory (``seg-NNNNNN``).

    Returns:
        One line per problem, empty when the segment verifies; a path that is not a segment's name
        is a problem. Never raises.
    """
    match = _SEGMENT_NUMBER.match(path.name)
    if match is None or not path.is_dir():
        return [f"{path}: not a segment directory (segments are seg-000001, seg-000002, ...)"]
    return _verify_segment(path, int(match.group(1)), None, chained=False)


def _stray(path: Path) -> str:
    if path.name.endswith(PARTIAL):
        return f"{path.name}: an unfinished segment (a writer was stopped); the next archive run redoes it"
    if _SEGMENT_NUMBER.match(path.name):
        return f"{path.name}: not a directory, where a segment should be"
    return f"{path.name}: not a segment name (segments are seg-000001, seg-000002, ...)"


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _verify_segment(path: Path, number: int, previous: str | None, *, chained: bool) -> list[str]:
    try:
        manifest = read_manifest(path)
    except ArchiveError as exc:
        return [str(exc)]
    problems: list[str] = []
    if manifest.get("segment") != number:
        problems.append(f"{path.name}: the manifest says segment {manifest.get('segment')!r}")
    if chained and manifest.get("previous") != previous:
        problems.append(f"{path.name}: the chain is broken: previous is {manifest.get('previous')}, "
                        f"the segment before it has {previous}")
    files = manifest.get("files")
    stated: dict[str, Any] = files if isinstance(files, dict) else {}
    for name in FILES:
        expected = stated.get(name)
        if not isinstance(expected, dict):
            problems.append(f"{path.name}: the manifest does not list {name}")
            continue
        try:
            digest, size, lines = file_facts(path / name)
        except ArchiveError as exc:
            problems.append(str(exc))
            continue
        if digest != expected.get("sha256") or size != expected.get("bytes"):
            problems.append(f"{path.name}: {name} was changed (its SHA-256 or size differs from the manifest)")
        elif lines != expected.get("lines"):
            problems.append(f"{path.name}: {name} has {lines} lines, the manifest says {expected.get('lines')!r}")
    records, aggregates = _count(manifest.get("records")), _count(manifest.get("aggregates"))
    if records is None or aggregates is None:
        problems.append(f"{path.name}: the manifest's records and aggregates must be counts, not "
                        f"{manifest.get('records')!r} and {manifest.get('aggregates')!r}")
        return problems
    for name, count in {"records.jsonl": records, "decoded.jsonl": records, "status.jsonl": aggregates}.items():
        entry = stated.get(name)
        listed = entry.get("lines") if isinstance(entry, dict) else None
        if listed is not None and listed != count:
            problems.append(f"{path.name}: {name} lists {listed!r} lines for {count} stated")
    return problems
