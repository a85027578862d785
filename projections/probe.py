"""Probe writes: whether the store accepts an append at all, asked when a write for one
operation was refused and nothing else was written meanwhile (``ledger.refusals.refusal_scope``).

A probe appends one record of a topic no reader knows, for a fresh id, through the same path
as every append (on PostgreSQL the insert function: its lock, its NOTIFY, the table's triggers
and row-level security policies; on SQLite the events table's triggers and constraints), in a
transaction that is rolled back: nothing is ever stored and no follower is woken. A dropped
table, a revoked ``INSERT``, a read-only store refuses it; a trigger or a constraint that
refuses one operation's rows does not.

Source: issue 35 item 1; docs/adr/0002-executor-services.md ("Refused writes").
"""

from __future__ import annotations

import uuid

from eventsourcing.application import Application

from ledger.outages import SaveFault, save_fault
from ledger.refusals import PROBE_TRIES
from migrations.drivers import driver_of

PROBE_TOPIC = "opledger.probe:StoreProbe"
"""The probe record's topic: outside ``ledger.``, never stored (the insert is rolled back)."""


def probe_refused(app: Application, tries: int = PROBE_TRIES) -> bool:
    """Whether the store refuses every one of ``tries`` probe writes.

    Args:
        app: the application whose events table is probed.
        tries: probe writes to make before calling the store broken; the first accepted one
            ends the probing.

    Returns:
        True when every probe was refused; False when one was accepted. An in-memory store
        refuses nothing unless its recorder has a ``probe_insert`` method (the simulator's)
        that raises (``migrations.drivers.memory``).

    Raises:
        Exception: what a probe raised when it says the store is unreachable for now
            (``ledger.outages.is_transient``): the caller rides the outage out.

    Source: issue 35 item 1 ("a probe write the store must accept").
    """
    for _ in range(max(1, tries)):
        try:
            _probe(app)
        except Exception as exc:
            if save_fault(exc) is SaveFault.OUTAGE:
                raise
            continue
        return False
    return True


def _probe(app: Application) -> None:
    driver_of(app).store_probe(uuid.uuid4(), PROBE_TOPIC, b"{}")
