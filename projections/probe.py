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
from typing import Any

from eventsourcing.application import Application
from eventsourcing.popo import POPOAggregateRecorder
from psycopg.sql import SQL

from ledger.outages import SaveFault, save_fault
from ledger.refusals import PROBE_TRIES
from migrations.queries import load_queries

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
        (``POPOAggregateRecorder``) refuses nothing unless its recorder has a ``probe_insert``
        method (the simulator's) that raises.

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
    recorder: Any = app.recorder
    if isinstance(recorder, POPOAggregateRecorder):
        probe = getattr(recorder, "probe_insert", None)
        if probe is not None:
            probe()
        return
    probe_id, state = uuid.uuid4(), b"{}"
    if type(recorder).__module__.startswith("eventsourcing.sqlite"):
        sql = load_queries("sqlite")["probe_insert"].format(table=recorder.events_table_name)
        # The writer's connection (the library's reader-writer interlock), rolled back at the end.
        with recorder.datastore.get_connection(commit=True) as conn, conn.transaction(commit=False) as cursor:
            cursor.execute(sql, [probe_id.hex, PROBE_TOPIC, state])
        return
    call = SQL(load_queries("postgres")["probe_insert"]).format(function=recorder.insert_function)
    with recorder.datastore.transaction(commit=False) as cursor:
        cursor.execute(call, [probe_id, PROBE_TOPIC, state])
