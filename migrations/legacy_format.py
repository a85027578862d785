"""The legacy JSON export format that ``opledger import-json`` reads, and its validation.

One file, for teams moving from a JSON-file job store (format ``jobstore-export/1``; the
documentation is docs/operations.md, "Importing a legacy JSON job store", and a sample ships as
docs/examples/legacy-jobs.json)::

    {"format": "jobstore-export/1", "exported_at": "2026-11-30T09:00:00Z", "count": 2,
     "jobs": [{"id": "job-1", "queue": "legacy.webhook", "target": "https://...",
               "payload": {...}, "state": "succeeded", "attempts": 1,
               "created_at": "...", "updated_at": "...", "status_code": 200, "error": null,
               "history": [{"at": "...", "event": "created", "detail": ""}, ...],
               "digest": "sha256:<hex>"}]}

``digest`` is the SHA-256 of the job without its ``digest`` key, as canonical JSON (keys
sorted, no spaces, UTF-8). Everything is validated before anything is written: the format
name, ``count`` against the jobs listed, unique ids, each digest, and each job's fields.

Source: issue 16 item 5.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import msgspec

from ledger.errors import LedgerError

FORMAT = "jobstore-export/1"
STATES = ("pending", "running", "succeeded", "failed", "cancelled")
"""A job's last legacy state. ``running``: attempted, result unknown (imported ambiguous)."""


class LegacyImportError(LedgerError):
    """A legacy JSON export is malformed or fails validation; nothing was written.

    ``problems`` lists every problem found (at most 20), each naming the job. Fix: correct the
    export (or re-export it) and run ``opledger import-json`` again.

    Source: issue 16 item 5.
    """

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = problems
        shown = "; ".join(problems[:20]) + (f"; and {len(problems) - 20} more" if len(problems) > 20 else "")
        super().__init__(f"{source} cannot be imported (nothing was written): {shown}")


class HistoryEntry(msgspec.Struct, forbid_unknown_fields=True):
    """One line of a job's legacy history, kept as evidence on the imported job's entity."""

    at: datetime
    event: str
    detail: str = ""


class LegacyJob(msgspec.Struct, forbid_unknown_fields=True):
    """One job of the export (see the module docstring)."""

    id: str
    queue: str
    target: str
    payload: dict[str, Any]
    state: Literal["pending", "running", "succeeded", "failed", "cancelled"]
    attempts: int
    created_at: datetime
    updated_at: datetime
    digest: str
    history: list[HistoryEntry] = []
    status_code: int | None = None
    error: str | None = None


class LegacyExport(msgspec.Struct, forbid_unknown_fields=True):
    """The whole export."""

    format: str
    exported_at: datetime
    count: int
    jobs: list[LegacyJob]


def job_digest(job: dict[str, Any]) -> str:
    """``sha256:<hex>`` of ``job`` without its ``digest`` key, as canonical JSON."""
    body = {k: v for k, v in job.items() if k != "digest"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def file_digest(data: bytes) -> str:
    """SHA-256 of the export file's bytes (the import's identity: the same file imports once)."""
    return hashlib.sha256(data).hexdigest()


def _count_and_digest_problems(count: object, jobs: list[Any]) -> list[str]:
    problems = [] if count == len(jobs) else [f"count says {count!r} jobs, the file lists {len(jobs)}"]
    seen: set[str] = set()
    for index, job in enumerate(jobs):
        name = f"job {job.get('id', index) if isinstance(job, dict) else index}"
        if not isinstance(job, dict):
            problems.append(f"{name}: not an object")
            continue
        if job.get("digest") != job_digest(job):
            problems.append(f"{name}: digest {job.get('digest')!r} does not match its content ({job_digest(job)})")
        if job.get("id") in seen:
            problems.append(f"{name}: duplicate id")
        seen.add(str(job.get("id")))
    return problems


def read_export(path: Path) -> tuple[LegacyExport, str]:
    """Read and validate an export.

    Returns:
        The export and the file's digest.

    Raises:
        LegacyImportError: unreadable, not this format, a count or digest mismatch, duplicate
            ids, or a job that breaks the format; every problem is listed.

    Source: issue 16 item 5; docs/operations.md ("Importing a legacy JSON job store").
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LegacyImportError(str(path), [f"cannot be read: {exc.strerror or exc}"]) from None
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError; nesting too deep
        raise LegacyImportError(str(path), [f"is not JSON: {exc}"]) from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise LegacyImportError(str(path), [f"format is {found!r}, expected {FORMAT!r}"])
    jobs = raw.get("jobs")
    if not isinstance(jobs, list):
        raise LegacyImportError(str(path), ["'jobs' must be a list"])
    problems = _count_and_digest_problems(raw.get("count"), jobs)
    try:
        export = msgspec.convert(raw, LegacyExport, strict=False)
    except msgspec.ValidationError as exc:
        problems.append(f"does not match the format: {exc}")
        raise LegacyImportError(str(path), problems) from None
    for job in export.jobs:
        if job.created_at.tzinfo is None or job.updated_at.tzinfo is None:
            problems.append(f"job {job.id}: times must carry a timezone (UTC 'Z')")
        if job.attempts < 0 or (job.state in ("running", "succeeded", "failed") and job.attempts < 1):
            problems.append(f"job {job.id}: {job.attempts} attempts is impossible in state {job.state}")
    if problems:
        raise LegacyImportError(str(path), problems)
    return export, file_digest(data)
