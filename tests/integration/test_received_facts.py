"""A provider's text the codec would refuse is stored escaped and bounded, on both backends.

Source: issue 10 item 3 ("a received fact that cannot be stored as it came ... is stored in a
bounded, escaped form with the original's sha256"); ledger/facts.py.
"""

from __future__ import annotations

import json
from uuid import uuid4

from ledger.clock import FakeClock
from ledger.config import Database
from ledger.facts import MAX_FACT_CHARS, FactKind, original_digest
from ledger.status import ExecutionState as E
from projections.status import StatusProjection
from projections.views import open_view
from tests.apps import ModesApp

BODY = '{"id": "\\ud800-ch_1", "note": "nul \\u0000 here"}'
"""A 200 body whose ``id`` holds a lone surrogate escape (valid JSON; ``json.loads`` keeps it)."""


def test_succeed_with_a_lone_surrogate_id_saves_and_reloads(modes_db: Database) -> None:
    clock = FakeClock()
    app = ModesApp(env=modes_db.library_env(create_table=False), clock=clock)
    try:
        op_id = app.make("idempotent", "https://partner.example/charges")
        op = app.get_operation(op_id)
        epoch = op.claim(now=clock.now(), worker_id="w", lease_seconds=30)
        attempt = uuid4()
        op.start_attempt(epoch=epoch, now=clock.now(), attempt_id=attempt, request_fingerprint="r")
        remote_id = json.loads(BODY)["id"]
        excerpt = BODY.replace("\\ud800", "\ud800").replace("\\u0000", "\x00") + "x" * 50_000
        op.succeed(epoch=epoch, now=clock.now(), attempt_id=attempt, status_code=200, remote_id=remote_id,
                   excerpt=excerpt)
        app.save(op)

        loaded = app.get_operation(op_id)
        assert loaded.execution is E.SUCCEEDED
        assert loaded.remote_id == f"\\ud800-ch_1…[stored escaped/cut; original sha256:{original_digest(remote_id)}]"
        assert loaded.excerpt.startswith('{"id": "\\ud800-ch_1", "note": "nul \\x00 here"}xxx')
        assert loaded.excerpt.endswith(f"original sha256:{original_digest(excerpt)}]")
        assert len(loaded.excerpt) == MAX_FACT_CHARS[FactKind.EXCERPT]

        # The read model takes the stored form too (SQLite TEXT and PostgreSQL text refuse both).
        view = open_view(modes_db)
        try:
            StatusProjection(app=app, view=view).catch_up()
            row = view.get(op_id)
            assert row is not None and row.execution == "succeeded"
        finally:
            view.close()
    finally:
        app.close()
