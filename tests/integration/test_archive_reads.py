"""An archived operation read from its segment (issue 29 item 2), on both backends: ``ops show``
and ``ops timeline`` (``--archive-dir`` or ``OPLEDGER_ARCHIVE_DIR``) and the observe API answer
as they did before it was archived; a missing, tampered or foreign segment is one clear error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from adapters.cli.app import app as cli
from adapters.demo.orders import OrdersApp
from adapters.http.app import ServeConfig, attach, build_app
from adapters.operator import timeline_entries
from adapters.runtime import open_store
from ledger.archives import segment_name
from ledger.clock import FakeClock
from ledger.config import Database, Settings
from projections.view import StatusView
from tests.archive_desk import APP_TOPIC, archive_cli, closed_orders
from tests.desk import TOKENS, auth

KEPT = ("operation_id", "status", "execution", "settlement", "integration", "tenant", "attempts", "epoch",
        "version", "payload", "source", "settles", "created_at", "updated_at")
"""What ``ops show`` says of an operation that its archived copy must say the same."""


@pytest.fixture
def archived(orders_app: OrdersApp, clock: FakeClock, view: StatusView, migrated: Database,
             tmp_path: Path) -> tuple[UUID, dict[str, Any], list[dict[str, Any]], Path]:
    """A closed operation as ``ops show`` and ``ops timeline`` gave it, then archived into
    ``tmp_path/archive``: ``(id, shown, timeline, archive directory)``."""
    closed, _, _ = closed_orders(orders_app, clock, view)
    shown, timeline = _ops(migrated, "show", closed[0]), _ops(migrated, "timeline", closed[0])
    out = tmp_path / "archive"
    archive_cli(migrated, out)
    return closed[0], shown, timeline, out


def _invoke(db: Database, command: str, op_id: UUID, *extra: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(cli, ["ops", command, str(op_id), "--json", "--database-url", db.url(), *extra],
                              env={"OPLEDGER_APP": APP_TOPIC, "OPLEDGER_ARCHIVE_DIR": "", **(env or {})})


def _ops(db: Database, command: str, op_id: UUID, *extra: str, env: dict[str, str] | None = None) -> Any:
    result = _invoke(db, command, op_id, *extra, env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_ops_show_and_timeline_read_an_archived_operation_from_its_segment(archived: tuple, migrated: Database,
                                                                          orders_app: OrdersApp) -> None:
    op_id, shown, timeline, out = archived
    assert not orders_app.recorder.select_events(op_id), "gone from the hot store"
    flag = _ops(migrated, "show", op_id, "--archive-dir", str(out))
    by_setting = _ops(migrated, "show", op_id, env={"OPLEDGER_ARCHIVE_DIR": str(out)})
    assert flag == by_setting
    assert {key: flag[key] for key in KEPT} == {key: shown[key] for key in KEPT}
    assert flag["archived"] == {"segment": "seg-000001", "final_status": "settled", "archive_dir": str(out)}
    assert _ops(migrated, "timeline", op_id, "--archive-dir", str(out)) == timeline
    assert timeline and timeline == _ops(migrated, "timeline", op_id, env={"OPLEDGER_ARCHIVE_DIR": str(out)})


def _tamper(out: Path) -> str:
    records = out / segment_name(1) / "records.jsonl"
    records.write_bytes(records.read_bytes().replace(b'"version":1', b'"version":9', 1))
    return "does not verify"


def _remove(out: Path) -> str:
    (out / segment_name(1) / "decoded.jsonl").unlink()
    return "decoded.jsonl is missing"


def _elsewhere(out: Path) -> str:
    out.rename(out.with_name("moved"))
    return "does not hold"


def _foreign(out: Path) -> str:
    manifest = out / segment_name(1) / "manifest.json"  # still a valid manifest, not the recorded one
    manifest.write_bytes(manifest.read_bytes().replace(b'"written_at"', b'"note": "x", "written_at"', 1))
    return "not the segment this store recorded"


@pytest.mark.parametrize("damage", [_tamper, _remove, _elsewhere, _foreign])
@pytest.mark.parametrize("command", ["show", "timeline"])
def test_a_missing_or_tampered_segment_is_one_clear_error(damage: Any, command: str, archived: tuple,
                                                          migrated: Database) -> None:
    op_id, _, _, out = archived
    said = damage(out)
    result = _invoke(migrated, command, op_id, "--archive-dir", str(out))
    assert result.exit_code == 2, result.output
    assert "seg-000001" in result.output and said in result.output, result.output
    assert "Traceback" not in result.output


@pytest.fixture
def served(archived: tuple, migrated: Database, clock: FakeClock) -> Iterator[TestClient]:
    _, _, _, out = archived
    settings = Settings(database_url=migrated.url(), app=APP_TOPIC, archive_dir=out)
    with open_store(settings, write=True, clock=clock) as store:
        app = attach(build_app(), store=store, config=ServeConfig(tokens=TOKENS), clock=clock)
        with TestClient(app) as client:
            yield client


def test_the_observe_api_reads_an_archived_operation_from_its_segment(archived: tuple, served: TestClient) -> None:
    op_id, shown, timeline, _ = archived
    detail = served.get(f"/v1/operations/{op_id}", headers=auth("all"))
    assert detail.status_code == 200, detail.text
    body = detail.json()
    assert {key: body[key] for key in KEPT} == {key: shown[key] for key in KEPT}
    assert body["archived"]["segment"] == "seg-000001" and (body["actions"], body["withheld"]) == ([], [])
    entries = served.get(f"/v1/operations/{op_id}/timeline", headers=auth("viewer"))
    assert entries.status_code == 200 and entries.json() == timeline


def test_the_observe_api_names_the_segment_or_the_damage(archived: tuple, migrated: Database,
                                                         orders_app: OrdersApp, served: TestClient) -> None:
    op_id, _, _, out = archived
    _tamper(out)
    damaged = served.get(f"/v1/operations/{op_id}/timeline", headers=auth("viewer"))
    assert damaged.status_code == 409 and damaged.json()["code"] == "archive_unreadable"
    assert "seg-000001" in damaged.json()["detail"]
    unset = Settings(database_url=migrated.url(), app=APP_TOPIC, archive_dir=None)
    with open_store(unset, write=False) as store, \
            TestClient(attach(build_app(), store=store, config=ServeConfig(tokens=TOKENS))) as client:
        missing = client.get(f"/v1/operations/{op_id}", headers=auth("viewer"))
    assert missing.status_code == 404 and "archived (settled) in segment seg-000001" in missing.json()["detail"]
    assert "OPLEDGER_ARCHIVE_DIR" in missing.json()["detail"]
    assert timeline_entries(orders_app, op_id) == [], "the hot store holds nothing of it"
