"""What every database-level driver holds (``DatabaseDriver``; ADR 0008)."""

from __future__ import annotations

from pathlib import Path

from ledger.config import Database
from migrations.drivers.queries import HERE, load_queries


class ConfiguredStore:
    """The parsed database of a database-level driver, where its store file is (if any), and
    its backend's schema migrations (``migrations/<name>/schema``).

    Args:
        database: the parsed database URL.
    """

    name: str

    def __init__(self, database: Database) -> None:
        self._database = database
        self.store_file: Path | None = database.path  # parsed SQLite URLs only have a path
        self.schema_files = HERE / self.name / "schema"
        self.queries = load_queries(self.name)
