"""Test helpers that make the store refuse writes (issue 35): a trigger on the events table that
refuses one operation's events of one type, one that refuses a random share of every insert,
and a revoked ``INSERT`` (PostgreSQL) or a read-only file (SQLite) for a store-wide refusal.

The trigger's message is ``refused by test trigger``; on PostgreSQL it is ``RAISE EXCEPTION``
(SQLSTATE P0001), on SQLite ``RAISE(ABORT, ...)`` (a constraint error).
"""

from __future__ import annotations

import sqlite3
from uuid import UUID

from eventsourcing.utils import get_topic

from ledger.config import Database

MESSAGE = "refused by test trigger"


def events_table(database: Database, app_name: str) -> str:
    """The events table of ``app_name``'s store, qualified on PostgreSQL."""
    if database.backend == "sqlite":
        return "stored_events"
    return f'"{database.schema}"."{app_name.lower()}_events"'


def _run(database: Database, statements: list[str]) -> None:
    if database.backend == "sqlite":
        conn = sqlite3.connect(database.path)
        try:
            with conn:
                for statement in statements:
                    conn.execute(statement)
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(database.conninfo(), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def refuse_event(database: Database, app_name: str, op_id: UUID, event_class: type | None, *,
                 name: str = "refuse_one") -> None:
    """Install a trigger that refuses every insert of ``event_class`` (None: of any type) for
    ``op_id``, and nothing else."""
    table = events_table(database, app_name)
    topic = "" if event_class is None else f" AND NEW.topic = '{get_topic(event_class)}'"
    if database.backend == "sqlite":
        _run(database, [
            f"CREATE TRIGGER {name} BEFORE INSERT ON {table} "
            f"WHEN NEW.originator_id = '{op_id.hex}'{topic} "
            f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"])
        return
    function = f'"{database.schema}".{name}'
    _run(database, [
        f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"IF NEW.originator_id = '{op_id}'::uuid{topic} THEN "
        f"RAISE EXCEPTION '{MESSAGE}'; END IF; RETURN NEW; END $$",
        f"CREATE TRIGGER {name} BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION {function}()"])


def refuse_at_random(database: Database, app_name: str, percent: float, *, name: str = "refuse_some") -> None:
    """Install a trigger that refuses a random ``percent`` of ledger inserts (``ledger.`` topics)."""
    table = events_table(database, app_name)
    if database.backend == "sqlite":
        bound = int(percent / 100 * 2**63)
        _run(database, [
            f"CREATE TRIGGER {name} BEFORE INSERT ON {table} "
            f"WHEN NEW.topic LIKE 'ledger.%' AND abs(random()) < {bound} "
            f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"])
        return
    function, counter = f'"{database.schema}".{name}', f'"{database.schema}".{name}_count'
    _run(database, [
        f"CREATE SEQUENCE {counter}",  # counts refusals: a sequence is not rolled back with them
        f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"IF NEW.topic LIKE 'ledger.%' AND random() < {percent / 100} THEN "
        f"PERFORM nextval('{counter}'); RAISE EXCEPTION '{MESSAGE}'; END IF; RETURN NEW; END $$",
        f"CREATE TRIGGER {name} BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION {function}()"])


def refusals_made(database: Database, name: str = "refuse_some") -> int:
    """How many inserts :func:`refuse_at_random` refused so far (PostgreSQL)."""
    import psycopg

    with psycopg.connect(database.conninfo(), autocommit=True) as conn:
        row = conn.execute(f'SELECT last_value, is_called FROM "{database.schema}".{name}_count').fetchone()
    assert row is not None
    return int(row[0]) if row[1] else 0


def drop_trigger(database: Database, app_name: str, name: str = "refuse_one") -> None:
    """Remove a trigger installed above (the operator fixed the store)."""
    if database.backend == "sqlite":
        _run(database, [f"DROP TRIGGER {name}"])
        return
    _run(database, [f"DROP TRIGGER {name} ON {events_table(database, app_name)}"])
