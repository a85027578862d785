"""Fresh migrated stores for tests, fast: each PostgreSQL test still gets a schema of its own, made
from a template migrated once per test process instead of by a migration of its own.

``opledger migrate`` on PostgreSQL costs about 0.3 s (eleven connections and about 120
statements: the library's tables, yoyo's bookkeeping, six migrations, the store identity); a
suite with some 470 such tests paid that on 2 cores (issue 28 item 5). Here the first test of
a process that asks for a store of an application migrates a template schema for real, dumps it
once with ``pg_dump`` (``--inserts``: plain SQL, no ``COPY``) and drops it; every later request
replays that script into the test's own new schema in one round trip, with the template's name
replaced and a new store id, so no two test stores share an identity.

Tests of ``migrate`` itself call :func:`migrations.migrate` directly. Without ``pg_dump`` (a
machine with the server's client tools missing) every store is migrated as before.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import uuid

from ledger.config import Database
from ledger.store_identity import read_store_identity
from migrations import migrate

_SCRIPTS: dict[type, tuple[str, str, str]] = {}
"""Per application class: (the dump as replayable SQL, the template's schema name, its store id)."""


def migrated_store(database: Database, app_class: type) -> Database:
    """Migrate ``database`` for ``app_class``; returns ``database``.

    On PostgreSQL with a schema and ``pg_dump`` on the PATH, a schema that does not exist yet is
    made from this process's template of ``app_class`` (see the module docstring); an existing
    one, and every other store, is migrated by ``migrate`` (which leaves a current one as it is).

    Raises:
        subprocess.CalledProcessError: ``pg_dump`` failed on the template.
        psycopg.Error: the script did not replay.
    """
    if database.backend != "postgres" or not database.schema or shutil.which("pg_dump") is None:
        migrate(database, app_class)
        return database
    import psycopg

    script, template, store_id = _SCRIPTS.get(app_class) or _template(database, app_class)
    try:
        _replay(database, script.replace(template, database.schema).replace(store_id, str(uuid.uuid4())))
    except psycopg.errors.DuplicateSchema:  # not fresh: a store opened again; the script ran as one transaction
        migrate(database, app_class)
    return database


def _template(database: Database, app_class: type) -> tuple[str, str, str]:
    import psycopg

    name = f"tmpl_{uuid.uuid4().hex[:16]}"
    template = dataclasses.replace(database, schema=name)
    migrate(template, app_class)
    try:
        store_id = read_store_identity(template)["store_id"]
        dump = subprocess.run(
            ["pg_dump", "--schema", name, "--inserts", "--no-owner", "--no-privileges", "--dbname",
             database.conninfo()],
            capture_output=True, text=True, check=True, timeout=60).stdout
    finally:
        with psycopg.connect(template.conninfo(), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    # psql's own commands (\restrict, \unrestrict in current pg_dump releases) are not SQL.
    script = "\n".join(line for line in dump.splitlines() if not line.startswith("\\"))
    _SCRIPTS[app_class] = (script, name, store_id)
    return _SCRIPTS[app_class]


def _replay(database: Database, script: str) -> None:
    import psycopg

    with psycopg.connect(database.conninfo(), autocommit=True) as conn:
        conn.execute(script.encode())  # bytes, no parameters: one simple query, many statements
