"""The operator CLI in pipes: full ids, ``--json`` on reads and writes, errors in the user's
words with documented exit codes, the approvals queue, and settled failures found by status."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from adapters.cli.app import app as cli
from ledger.clock import FakeClock
from ledger.config import Database
from projections.status import StatusProjection
from projections.views import open_view
from tests.observe_seed import DeskApp, seed


@pytest.fixture
def desk(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A migrated store with the scripted run, a refund awaiting approval, and the view caught up."""
    from tests.stores import migrated_store

    database = Database.parse(database_url)
    migrated_store(database, DeskApp)
    clock = FakeClock()
    app = DeskApp(env=database.library_env(create_table=False), clock=clock)
    ids: dict[str, Any] = dict(seed(app, clock))
    ids["refund"] = app.request_refund(500)
    view = open_view(database)
    StatusProjection(app=app, view=view).catch_up()
    view.close()
    app.close()
    monkeypatch.setenv("OPLEDGER_APP", "tests.observe_seed:DeskApp")
    monkeypatch.setenv("OPLEDGER_DATABASE_URL", database_url)
    yield ids


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def test_status_failed_finds_a_settled_failure_and_outcome_filters(desk: dict[str, Any]) -> None:
    result = run("ops", "list", "--status", "failed", "--json")
    assert result.exit_code == 0, result.output
    found = {row["operation_id"]: row for row in json.loads(result.stdout)}
    assert str(desk["failure"]) in found and found[str(desk["failure"])]["status"] == "settled"
    assert str(desk["budget"]) in found
    outcome = json.loads(run("ops", "list", "--outcome", "ambiguous", "--json").stdout)
    assert [row["operation_id"] for row in outcome] == [str(desk["ambiguous"])]


def test_tables_keep_full_ids_when_not_a_terminal(desk: dict[str, Any]) -> None:
    result = run("ops", "list")
    assert result.exit_code == 0
    for op_id in desk.values():
        assert str(op_id) in result.stdout
    assert "…" not in result.stdout
    attention = run("attention")
    assert str(desk["ambiguous"]) in attention.stdout


def test_approvals_are_visible_and_errors_speak_the_users_words(desk: dict[str, Any]) -> None:
    queue = json.loads(run("approvals", "--json").stdout)
    assert [row["operation_id"] for row in queue] == [str(desk["refund"])]
    shown = json.loads(run("ops", "show", str(desk["refund"]), "--json").stdout)
    assert shown["approval"] == "required" and shown["payload"]["note"] == "[internal]"
    assert shown["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert shown["source"]["action"] == "tests.observe_seed:Refund.on_result"

    refused = run("approve", str(desk["success"]))
    assert refused.exit_code == 1
    assert "cannot approve: the operation is already" in refused.stderr
    assert "grant_approval" not in refused.stderr
    missing = run("approve", "00000000-0000-0000-0000-000000000000")
    assert missing.exit_code == 2

    approved = run("approve", str(desk["refund"]), "--principal", "alice", "--role", "approver", "--json")
    assert approved.exit_code == 0, approved.output
    recorded = json.loads(approved.stdout)
    assert [entry["event"] for entry in recorded["recorded"]] == ["ApprovalGranted"]
    assert recorded["recorded"][0]["details"]["principal"] == "alice"
    assert json.loads(run("approvals", "--json").stdout) == []


def test_resolve_prints_what_was_recorded(desk: dict[str, Any]) -> None:
    result = run("resolve", str(desk["ambiguous"]), "--resolution", "succeeded", "--evidence",
                 "partner log shows it", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["status"] == "succeeded"
    assert data["recorded"][0]["event"] == "Resolved"
    again = run("resolve", str(desk["ambiguous"]), "--resolution", "succeeded", "--evidence", "x")
    assert again.exit_code == 1 and "cannot resolve" in again.stderr


def test_rebuild_reports_both_projections_in_json(desk: dict[str, Any]) -> None:
    result = run("projections", "rebuild", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["status_events"] > 0 and data["metrics_events"] == data["status_events"]


def test_list_says_how_far_behind_the_view_is(desk: dict[str, Any], database_url: str) -> None:
    app = DeskApp(env=Database.parse(database_url).library_env(create_table=False))
    app.request_refund(700, tenant="globex")  # intended after the view last caught up
    app.close()
    result = run("ops", "list", "--tenant", "globex")
    assert result.exit_code == 0
    assert "the status view is 1 ledger event(s) behind the log" in result.stderr


def test_migrate_speaks_json(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPLEDGER_APP", "tests.observe_seed:DeskApp")
    url = f"sqlite:///{tmp_path / 'fresh' / 'opledger.db'}"
    first = json.loads(run("migrate", "--database-url", url, "--json").stdout)
    assert first["application"] == "desk" and "0005.metrics" in first["applied"]
    again = json.loads(run("migrate", "--database-url", url, "--json").stdout)
    assert again["applied"] == [] and again["store_id"] == first["store_id"]


@pytest.mark.parametrize("tokens, message", [
    ('{"tok-never-shown": {"principal": "x", "roles": ["boss"]}}', "a token's roles.0"),
    ("not json", "OPLEDGER_API_TOKENS is not valid JSON"),
])
def test_serve_refuses_bad_tokens_without_showing_them(tokens: str, message: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPLEDGER_API_TOKENS", tokens)
    result = run("serve", "--port", "0")
    assert result.exit_code == 2 and message in result.stderr
    assert "tok-never-shown" not in result.output and "Traceback" not in result.output


def test_cancel_prints_what_it_recorded_and_what_comes_next(desk: dict[str, Any]) -> None:
    result = run("cancel", str(desk["pending"]), "--reason", "customer left")
    assert result.exit_code == 0, result.output
    printed = " ".join(result.stdout.split())  # the console wraps at the runner's width
    assert f"operation {desk['pending']}: recorded CancelRequested; status pending" in printed
    assert "next: a worker records Cancelled; nothing is sent" in printed
    again = run("cancel", str(desk["pending"]))
    assert again.exit_code == 0 and "nothing new (already recorded)" in " ".join(again.stdout.split())
    shown = json.loads(run("ops", "show", str(desk["pending"]), "--json").stdout)
    assert shown["cancel"] == "requested"


def test_a_listing_cut_at_its_limit_says_so_on_stderr(desk: dict[str, Any]) -> None:
    every = json.loads(run("ops", "list", "--json").stdout)
    assert len(every) >= 3
    cut = run("ops", "list", "--json", "--limit", str(len(every) - 1))
    assert cut.exit_code == 0 and len(json.loads(cut.stdout)) == len(every) - 1
    assert f"showing the first {len(every) - 1}; more match" in cut.stderr
    whole = run("ops", "list", "--json", "--limit", str(len(every)))
    assert "more match" not in whole.stderr
    queue = json.loads(run("attention", "--json").stdout)
    assert "more match" in run("attention", "--limit", str(len(queue) - 1)).stderr
