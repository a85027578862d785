"""Declaration drift at start (issue 14 item 5): which registered declarations have another
digest than the one recorded on stored intents of the same name and version.

``opledger migrate`` and ``opledger worker`` call :func:`report_declaration_drift` after the
readable-history check; a worker also refuses each drifted operation it meets
(``executors.claim``, attention ``declaration_mismatch``). This only reports: an operation is
never executed under other rules whatever it says.

Only the operations a worker may still act on are read: those with work due in the status view
and those the status projection has not reached yet (``TopicCounts.intents_list_live``). A
closed operation is never executed again, so its digest changes nothing; and reading every
intent made each start cost the whole history (2.6 s at 200,000 operations on SQLite, before
the worker took any work). An operator who reopens a closed operation meets the check at claim.

Source: issue 14 item 5; docs/operations.md ("declaration_mismatch").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import structlog
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic

from ledger.application import LedgerApplication
from ledger.errors import CorruptRecordError
from ledger.operation import Operation
from migrations.drivers import driver_of
from projections.status import PROJECTION_NAME

log = structlog.get_logger("opledger.drift")


@dataclass(frozen=True, slots=True)
class Drift:
    """One registered declaration whose digest differs from recorded intents.

    Attributes:
        integration: the name.
        version: the version.
        declared: this code's digest.
        recorded: recorded digest to the number of operations recorded under it.
    """

    integration: str
    version: int
    declared: str
    recorded: dict[str, int]


def recorded_digests(app: LedgerApplication) -> dict[tuple[str, int], Counter[str]]:
    """Return, per stored ``(integration, version)``, how many intents of operations a worker may
    still act on (see the module) recorded each digest.

    A record that does not decode is left out (the status projection reports it).
    """
    found: dict[tuple[str, int], Counter[str]] = {}
    live = driver_of(app).intents_list_live([get_topic(Operation.Intended)], PROJECTION_NAME, app.name)
    for originator_id, version, topic, state in live:
        record = StoredEvent(originator_id=originator_id, originator_version=version, topic=topic, state=state)
        try:
            intent: Any = app.mapper.to_domain_event(record)
        except CorruptRecordError:
            continue
        key = (intent.integration_name, intent.integration_version)
        found.setdefault(key, Counter())[intent.integration_digest] += 1
    return found


def declaration_drift(app: LedgerApplication) -> list[Drift]:
    """Registered declarations whose digest differs from some recorded intents' (see module)."""
    recorded = recorded_digests(app)
    drifts = []
    for integration in app.registry:
        digests = recorded.get(integration.key, Counter())
        other = {digest: n for digest, n in digests.items() if digest != integration.digest()}
        if other:
            drifts.append(Drift(integration.name, integration.version, integration.digest(), other))
    return drifts


def report_declaration_drift(app: LedgerApplication) -> list[Drift]:
    """Log a warning for each drifted declaration and return them (never raises for drift)."""
    drifts = declaration_drift(app)
    for drift in drifts:
        log.warning("declaration differs from the one recorded on stored operations of the same version; "
                    "those operations are not executed here (attention: declaration_mismatch)",
                    integration=drift.integration, version=drift.version, declared=drift.declared,
                    recorded=drift.recorded)
    return drifts
