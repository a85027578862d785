"""Read models over the event log: the operation status view and the metrics, their runners and rebuild.

Depends on ``ledger`` and the named queries in ``migrations``; never on ``executors`` or
``adapters``.
"""

from projections.memory_view import MemoryStatusStore, MemoryStatusView
from projections.metrics import MetricsProjection, MetricsProjectionConfig
from projections.metrics_store import MetricsStore
from projections.rows import StatusRow, row_from_operation
from projections.status import StatusProjection, StatusProjectionConfig
from projections.view import (
    DueWork,
    Leadership,
    Lease,
    NotLeaderError,
    OperationFilter,
    OperatorQueries,
    ProjectionWriter,
    StatusView,
)
from projections.views import open_view

__all__ = [
    # the projections
    "StatusProjection",
    "StatusProjectionConfig",
    "MetricsProjection",
    "MetricsProjectionConfig",
    "MetricsStore",
    # the view seam: its protocols by concern, their union, and how to open one
    "StatusView",
    "ProjectionWriter",
    "Leadership",
    "DueWork",
    "OperatorQueries",
    "OperationFilter",
    "open_view",
    "MemoryStatusStore",
    "MemoryStatusView",
    # rows and leases
    "StatusRow",
    "row_from_operation",
    "Lease",
    "NotLeaderError",
]
