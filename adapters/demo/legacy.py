"""An example host application for ``opledger import-json``: it declares the queue the sample
legacy export (docs/examples/legacy-jobs.json) uses, settled onto the imported jobs' entities.

A team moving from a JSON-file job store declares each legacy queue the same way, with its own
adapter, delivery mode and payload classification.
"""

from __future__ import annotations

from ledger.application import LedgerApplication
from ledger.declarations import Integration

LEGACY_WEBHOOK = Integration.parse({
    "name": "legacy.webhook",
    "version": 1,
    "adapter": "webhook",
    "delivery_mode": "idempotent",
    "request_timeout_seconds": 2.0,
    "retry": {"max_attempts": 5, "base_backoff_seconds": 0.2, "max_backoff_seconds": 2.0, "jitter": 0.2},
    "deadlines": {"pending": 600, "claimed": 60, "dispatching": 120, "accepted": 600},
    "settlement": {"entity_type": "migrations.legacy_import:ImportedJob", "method": "record_result",
                   "max_attempts": 5, "backoff_seconds": 0.2},
    "payload": {"customer": "public", "event": "public", "note": "internal"},
})


class JobsApp(LedgerApplication):
    """The host application of imported legacy jobs (``OPLEDGER_APP=adapters.demo.legacy:JobsApp``)."""

    name = "jobs"
    integrations = [LEGACY_WEBHOOK]
