"""Read models over the event log: the operation status view, its runner and rebuild.

Depends on ``ledger`` and the named queries in ``migrations``; never on ``executors`` or
``adapters``.
"""

from projections.rows import StatusRow, row_from_operation
from projections.status import StatusProjection, StatusProjectionConfig
from projections.view import Lease, NotLeaderError, StatusView, open_view

__all__ = [
    "StatusProjection",
    "StatusProjectionConfig",
    "StatusView",
    "open_view",
    "StatusRow",
    "row_from_operation",
    "Lease",
    "NotLeaderError",
]
