"""Load the named SQL queries of one backend (``migrations/<backend>/queries/<name>.sql``)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from types import MappingProxyType

HERE = Path(__file__).parent.parent
"""The ``migrations`` folder: ``<backend>/queries/*.sql`` and ``<backend>/schema/*.sql``."""
BACKENDS = ("sqlite", "postgres")


@cache
def load_queries(backend: str) -> Mapping[str, str]:
    """Return ``{method name: SQL}`` for ``backend`` (``sqlite`` or ``postgres``), read once.

    Raises:
        ValueError: an unknown backend.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    folder = HERE / backend / "queries"
    return MappingProxyType({p.stem: p.read_text() for p in sorted(folder.glob("*.sql"))})
