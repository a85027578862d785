"""Which closed operations an archive run takes: each integration's cutoff, and the store
driver's candidates confirmed one by one against it, oldest first (step 2 of
``adapters.archive_run``).

Source: issue 29 items 1 and 2; docs/adr/0010-archives.md §1 and "As built".
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from ledger.retention import cutoff_for, is_archivable, retention_for
from migrations.drivers import ArchiveCandidate, Archives

PAGE = 1_000
"""Candidates read per selection."""


class NoRetentionError(ValueError):
    """Neither ``--before`` nor a retention policy (``OPLEDGER_RETENTION``, a declaration's
    ``retention_seconds``) says what may be archived."""


def cutoffs(registry: Any, *, now: datetime, before: datetime | None,
            store_seconds: float | None) -> dict[str, datetime]:
    """The cutoff of each declared integration: ``before`` for all when given, else its policy's.

    Args:
        registry: the application's declarations (``ledger.declarations.Registry``).
        now: the current time, UTC (injected).
        before: an explicit cutoff (``--before``), or None.
        store_seconds: ``OPLEDGER_RETENTION`` in seconds, or None.

    Returns:
        ``{integration name: cutoff}``; integrations kept forever are left out.

    Raises:
        NoRetentionError: no integration has a cutoff.
    """
    found: dict[str, datetime] = {}
    for declaration in registry:  # the latest version of a name wins: sorted by (name, version)
        seconds = retention_for(store_seconds, declaration.retention_seconds)
        if before is not None:
            found[declaration.name] = before
        elif seconds is not None:
            found[declaration.name] = cutoff_for(now, seconds)
        else:
            found.pop(declaration.name, None)
    if not found:
        raise NoRetentionError("nothing may be archived: pass --before TIME|DURATION, or set OPLEDGER_RETENTION "
                               "(or retention_seconds in a declaration)")
    return found


def select(archives: Archives, limits: Mapping[str, datetime], *, limit: int | None = None,
           after: tuple[datetime, UUID] | None = None) -> list[ArchiveCandidate]:
    """Every operation that may be archived now, oldest first: the driver's candidates, each
    confirmed by ``ledger.retention.is_archivable`` against its integration's cutoff.

    Args:
        archives: the store's driver.
        limits: ``{integration: cutoff}`` (:func:`cutoffs`).
        limit: stop after this many; None for all.
        after: start past this ``(updated_at, operation_id)`` key (:func:`key_of` the last
            operation a run took), None from the oldest.
    """
    latest = max(limits.values())
    chosen: list[ArchiveCandidate] = []
    while limit is None or len(chosen) < limit:
        page = archives.archive_candidates(latest, after, PAGE)
        for row in page:
            cutoff = limits.get(row.integration)
            if cutoff is not None and is_archivable(execution=row.execution, settlement=row.settlement,
                                                    disposition=row.disposition, attention=row.attention,
                                                    closed_at=row.updated_at, cutoff=cutoff):
                chosen.append(row)
        if len(page) < PAGE:
            break
        after = key_of(page[-1])
    return chosen if limit is None else chosen[:limit]


def key_of(candidate: ArchiveCandidate) -> tuple[datetime, UUID]:
    """``candidate``'s place in the candidates' order: ``(updated_at, operation_id)``."""
    return candidate.updated_at, candidate.operation_id
