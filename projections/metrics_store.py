"""Where the metrics read model lives: its rows, its tracking position, and the status view's
gauges read at scrape time (SQLite and PostgreSQL; SQL in ``migrations/<backend>/queries``).

Rows are increments keyed by metric name and labels. A batch's increments and the position it
reaches commit in one transaction, and the position moves only from where the batch started
(compare and set): a replay, a second writer or a rebuild racing a live batch never counts an
event twice (DESIGN §8).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ledger.errors import ConfigurationError, LedgerError
from projections.sql_view import SqlStatusView
from projections.view import StatusView

LabelKey = tuple[str, str, str, str, str]
"""``(name, integration, tenant, delivery_mode, detail)``: one metric row's key."""


class PositionMovedError(LedgerError):
    """A metrics batch was discarded because the projection's position moved while it was read.

    Another writer (a rebuild, or another process) committed first; nothing was written and the
    next run starts from the new position. Fix: none.
    """


@dataclass(frozen=True, slots=True)
class Gauges:
    """What the status view says now, by ``(integration, tenant, delivery_mode)``.

    Attributes:
        by_status: operations by ``(status, integration, tenant, delivery_mode)``.
        attention: operations on the attention queue by ``(reason, integration, tenant, delivery_mode)``.
        oldest_pending: when the oldest pending operation was intended (UTC), by labels.
        late_after_archive: late records of archived operations not acknowledged yet, by
            integration (they have no status row, so no tenant or delivery mode).
    """

    by_status: dict[tuple[str, str, str, str], int]
    attention: dict[tuple[str, str, str, str], int]
    oldest_pending: dict[tuple[str, str, str], datetime]
    late_after_archive: dict[str, int] = field(default_factory=dict)


class MetricsStore:
    """The metrics rows of one store, on the status view's connection(s).

    Args:
        view: an open SQLite or PostgreSQL status view (``projections.views.open_view``).

    Raises:
        ConfigurationError: the view is the in-memory one (it has no metrics table).
    """

    @classmethod
    def of(cls, view: StatusView) -> MetricsStore | None:
        """The metrics rows beside ``view``, or None where its store keeps none (the in-memory
        one): for a reader that only reports them when they exist."""
        return cls(view) if isinstance(view, SqlStatusView) else None

    def __init__(self, view: StatusView) -> None:
        if not isinstance(view, SqlStatusView):
            raise ConfigurationError("the metrics read model needs an SQLite or PostgreSQL store")
        self.view = view
        self.queries = view.queries

    def position(self, projection: str, upstream: str) -> int:
        """The last notification id folded into the metrics by ``projection`` (0 if none)."""
        return self.view.position(projection, upstream)

    def write(self, increments: Mapping[LabelKey, float], *, projection: str, upstream: str,
              start: int, position: int) -> None:
        """Add ``increments`` and move the position from ``start`` to ``position``, in one
        transaction.

        Raises:
            PositionMovedError: the stored position is no longer ``start``; nothing was written.
        """
        with self.view._transaction() as cur:
            self._advance(cur, projection, upstream, start, position)
            if increments:
                cur.executemany(self.queries["add_metrics"], [(*key, value) for key, value in increments.items()])

    def replace(self, totals: Mapping[LabelKey, float], *, projection: str, upstream: str, position: int) -> None:
        """Replace every metric row by ``totals`` and set the position, in one transaction (a rebuild)."""
        with self.view._transaction() as cur:
            cur.execute(self.queries["delete_metrics"])
            if totals:
                cur.executemany(self.queries["add_metrics"], [(*key, value) for key, value in totals.items()])
            cur.execute(self.queries["upsert_tracking"],
                        {"projection": projection, "upstream": upstream, "notification_id": position})

    def totals(self) -> dict[LabelKey, float]:
        """Every stored metric row, by key."""
        with self.view._transaction() as cur:
            cur.execute(self.queries["select_metrics"])
            return {(str(n), str(i), str(t), str(m), str(d)): float(v) for n, i, t, m, d, v in cur.fetchall()}

    def gauges(self) -> Gauges:
        """Queue depth by status, the attention queue by reason, and the oldest pending intent,
        read from the status view now (never stored: they depend on "now")."""
        with self.view._transaction() as cur:
            cur.execute(self.queries["count_by_labels"])
            by_status: Counter[tuple[str, str, str, str]] = Counter(
                {(str(s), str(i), str(t), str(m)): int(n) for s, i, t, m, n in cur.fetchall()})
            # Archived operations count as they did before they left (docs/adr/0010-archives.md).
            cur.execute(self.queries["select_archive_totals"])
            by_status.update({(str(s), str(i), str(t), str(m)): int(n) for s, i, t, m, n in cur.fetchall()})
            cur.execute(self.queries["count_attention_by_labels"])
            attention = {(str(r), str(i), str(t), str(m)): int(n) for r, i, t, m, n in cur.fetchall()}
            cur.execute(self.queries["select_oldest_pending"])
            oldest = {(str(i), str(t), str(m)): _as_time(at) for i, t, m, at in cur.fetchall()}
            cur.execute(self.queries["count_archive_late"])
            late = {str(i): int(n) for i, n in cur.fetchall()}
        return Gauges(by_status=dict(by_status), attention=attention, oldest_pending=oldest, late_after_archive=late)

    def _advance(self, cur: Any, projection: str, upstream: str, start: int, position: int) -> None:
        cur.execute(self.queries["advance_tracking"], {"projection": projection, "upstream": upstream,
                                                       "notification_id": position, "expected": start})
        if cur.rowcount == 0:
            raise PositionMovedError(f"the {projection} projection's position moved from {start} meanwhile")


def _as_time(value: Any) -> datetime:
    # SQLite stores times as fixed-width ISO text; PostgreSQL returns datetimes.
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
