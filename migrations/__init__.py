"""Schema and queries for opledger's read models, per backend.

``schema/`` holds numbered migrations applied only by ``opledger migrate`` (with
yoyo-migrations); ``queries/`` holds one named ``.sql`` file per view method, loaded once
(STYLE rule 7). The library's own event and tracking tables are created by its recorders during
``migrate`` too, and never by workers (DESIGN §8, §11).
"""

from migrations.drivers.queries import load_queries
from migrations.runner import migrate

__all__ = ["load_queries", "migrate"]
