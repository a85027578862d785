"""Evidence round trip on both backends: export, verify ok; tamper with one stored record and
verify names it; the export never holds a classified value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from adapters.cli.app import app as cli
from ledger.config import Database
from ledger.store_identity import read_store_identity
from tests.desk import APP_TOPIC, seeded
from tests.observe_seed import CANARY_INTERNAL, CANARY_SECRET, DeskApp


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def _tamper(database: Database, op_id: Any, version: int) -> None:
    """Flip one byte of a stored record's state, as a careless hand on the database would."""
    app = DeskApp(env=database.library_env(create_table=False))
    recorder: Any = app.recorder
    table = recorder.events_table_name
    app.close()
    if database.backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(str(database.path))
        with conn:
            rows = conn.execute(f"SELECT originator_id, state FROM {table} WHERE originator_version = ?",
                                (version,)).fetchall()
            stored_id, state = next((i, s) for i, s in rows if str(i).replace("-", "") == op_id.hex)
            conn.execute(f"UPDATE {table} SET state = ? WHERE originator_id = ? AND originator_version = ?",
                         (bytes([state[0] ^ 1]) + bytes(state[1:]), stored_id, version))
        conn.close()
        return
    import psycopg

    with psycopg.connect(database.conninfo(), options=f"-c search_path={database.schema}") as conn:
        state = conn.execute(f"SELECT state FROM {table} WHERE originator_id = %s AND originator_version = %s",
                             (op_id, version)).fetchone()[0]
        conn.execute(f"UPDATE {table} SET state = %s WHERE originator_id = %s AND originator_version = %s",
                     (bytes([state[0] ^ 1]) + bytes(state[1:]), op_id, version))


def test_export_verify_and_tamper(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids, _ = seeded(database_url)
    monkeypatch.setenv("OPLEDGER_APP", APP_TOPIC)
    monkeypatch.setenv("OPLEDGER_DATABASE_URL", database_url)
    out = tmp_path / "evidence.json"
    exported = run("evidence", str(ids["failure"]), "--out", str(out))
    assert exported.exit_code == 0, exported.output
    document = json.loads(out.read_text())
    assert document["kind"] == "opledger.evidence" and document["opledger"]["code_digest"].startswith("sha256:")
    assert document["declaration"]["name"] == "payments.charge" and document["declaration"]["digest_now"]
    assert [e["event"] for e in document["timeline"]] == ["Intended", "Claimed", "AttemptStarted", "Failed",
                                                          "SettlementFailed", "Settled"]
    assert [e["position"] for e in document["timeline"]] == [1, 2, 3, 4, 5, 6]
    assert document["timeline"][0]["details"]["payload"]["card_token"] == "[secret]"
    assert len(document["settlement_transitions"]) == 1
    # The chain of authority, and the attempt and epoch of the outcome the settlement applied (issue 32).
    attempt = document["timeline"][2]["details"]["attempt_id"]
    assert document["operation"]["settles"] == {"attempt_id": attempt, "epoch": 1, "blocked_by": None}
    assert document["timeline"][5]["details"]["attempt_id"] == attempt and document["timeline"][5]["details"]["epoch"] == 1
    assert document["operation"]["authority"]["principal_chain"] and document["operation"]["authority"]["source_action"]
    assert document["settlement_transitions"][0]["sha256"].startswith("sha256:")

    ok = run("evidence", "verify", str(out), "--json")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout) == {"matches": True, "operation_id": str(ids["failure"]), "checked": 6,
                                     "problems": []}

    # A document checked against another store says so once, rather than calling every record missing.
    store_id = read_store_identity(Database.parse(database_url))["store_id"]
    assert document["store"]["store_id"] == store_id
    elsewhere = json.loads(out.read_text())
    elsewhere["store"]["store_id"] = "00000000-0000-4000-8000-000000000001"
    (tmp_path / "elsewhere.json").write_text(json.dumps(elsewhere))
    other = run("evidence", "verify", str(tmp_path / "elsewhere.json"), "--json")
    assert other.exit_code == 1, other.output
    assert json.loads(other.stdout)["problems"] == [{"problem": (
        f"exported from store 00000000-0000-4000-8000-000000000001; this is store {store_id}: verify it against "
        "the store it was exported from (--database-url)")}]

    # An edited document, over records that are all intact, does not pass for what the store backs.
    edited = json.loads(out.read_text())
    edited["timeline"][0]["details"]["principal"] = "mallory"
    edited["timeline"][3]["at"] = "2020-01-01T00:00:00+00:00"
    edited["operation"]["status"] = "succeeded"
    (tmp_path / "edited.json").write_text(json.dumps(edited))
    lied = run("evidence", "verify", str(tmp_path / "edited.json"), "--json")
    assert lied.exit_code == 1, lied.output
    found = {(p["position"], p["problem"]) for p in json.loads(lied.stdout)["problems"]}
    assert found == {(1, "the document shows other content than the record (details)"),
                     (4, "the document shows other content than the record (at)"),
                     (6, "the summary differs from the records (status)")}
    # Naming a version the records do not hold does not slip the summary past the check.
    edited["operation"]["version"] = 99
    (tmp_path / "edited.json").write_text(json.dumps(edited))
    lied = run("evidence", "verify", str(tmp_path / "edited.json"), "--json")
    assert lied.exit_code == 1 and (99, "the summary names a version the records do not hold") in {
        (p["position"], p["problem"]) for p in json.loads(lied.stdout)["problems"]}

    # Cutting records out of the document, or emptying it, is not a smaller truth (a new user's
    # finding: these passed); nor is a trace the records do not name.
    for cut in (lambda d: d["timeline"].pop(3), lambda d: d.update(timeline=d["timeline"][:-2]),
                lambda d: d.update(timeline=[], settlement_transitions=[]),
                lambda d: d.update(trace_ids=["0" * 32]), lambda d: d.update(settlement_transitions=[{"x": 1}])):
        edited = json.loads(out.read_text())
        cut(edited)
        (tmp_path / "cut.json").write_text(json.dumps(edited))
        lied = run("evidence", "verify", str(tmp_path / "cut.json"), "--json")
        assert lied.exit_code == 1, lied.output
        problems = {p["problem"] for p in json.loads(lied.stdout)["problems"]}
        assert problems & {"left out of the document", "a settlement transition is malformed: {'x': 1}"} or any(
            p.startswith("the document's trace ids") for p in problems), problems

    _tamper(Database.parse(database_url), ids["failure"], 3)
    bad = run("evidence", "verify", str(out), "--json")
    assert bad.exit_code == 1
    report = json.loads(bad.stdout)
    assert report["matches"] is False
    assert report["problems"] == [{"position": 3, "topic": document["timeline"][2]["topic"],
                                   "problem": "differs from the export"}]
    text = run("evidence", "verify", str(out))
    assert "DOES NOT match" in text.stdout and "position=3" in text.stdout


def test_evidence_never_holds_a_classified_value(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ids, _ = seeded(database_url)
    monkeypatch.setenv("OPLEDGER_APP", APP_TOPIC)
    monkeypatch.setenv("OPLEDGER_DATABASE_URL", database_url)
    result = run("evidence", str(ids["refund"]))
    assert result.exit_code == 0, result.output
    assert CANARY_INTERNAL not in result.stdout and CANARY_SECRET not in result.stdout
    document = json.loads(result.stdout)
    assert document["trace_ids"] == ["4bf92f3577b34da6a3ce929d0e0e4736"]


def test_verify_refuses_what_is_not_evidence(tmp_path: Path, database_url: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    seeded(database_url)
    monkeypatch.setenv("OPLEDGER_APP", APP_TOPIC)
    monkeypatch.setenv("OPLEDGER_DATABASE_URL", database_url)
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    result = run("evidence", "verify", str(other))
    assert result.exit_code == 2 and "not an opledger evidence document" in result.stderr
    assert run("evidence", "verify").exit_code == 2
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)  # too deep for the decoder: one line, not a RecursionError
    result = run("evidence", "verify", str(deep))
    assert result.exit_code == 2 and "cannot read" in result.stderr


def test_the_evidence_of_a_demo_operation_names_its_provenance_and_trace(
        database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 31 item 2: the opledger version and commit, the host module's digest (by default, the
    # module declaring the application), and the trace the order was placed in.
    from adapters.demo.orders import OrdersApp
    from ledger.provenance import build_info, module_digest
    from tests.stores import migrated_store

    database = Database.parse(database_url)
    migrated_store(database, OrdersApp)
    trace = "0af7651916cd43dd8448eb211c80319c"
    app = OrdersApp(env=database.library_env(create_table=False))
    try:
        _, (payment, _note) = app.place_order(customer_email="a@example.com", amount_cents=1200,
                                              payments_url="http://127.0.0.1:9/pay", notify_url="http://127.0.0.1:9/n",
                                              traceparent=f"00-{trace}-b7ad6b7169203331-01")
    finally:
        app.close()
    monkeypatch.setenv("OPLEDGER_APP", "adapters.demo.orders:OrdersApp")
    monkeypatch.setenv("OPLEDGER_DATABASE_URL", database_url)
    out = tmp_path / "demo-evidence.json"
    exported = run("evidence", str(payment), "--out", str(out))
    assert exported.exit_code == 0, exported.output
    document = json.loads(out.read_text())

    build = build_info()
    host_digest = module_digest("adapters.demo.orders")
    assert host_digest.startswith("sha256:") and len(host_digest) == len("sha256:") + 64
    # A test run from a checkout (CI: `pip install -e .` in a fresh clone) knows its commit.
    assert build.commit_source == "git" and len(build.commit.removesuffix("-dirty")) == 40
    exporter = document["opledger"]
    assert (exporter["version"], exporter["commit"], exporter["commit_source"]) == (build.version, build.commit, "git")
    authority = document["operation"]["authority"]
    assert (authority["opledger_version"], authority["opledger_commit"]) == (build.version, build.commit)
    assert document["operation"]["code_digest"] == authority["code_digest"] == host_digest
    intended = document["timeline"][0]
    assert intended["event"] == "Intended"
    assert (intended["details"]["opledger_commit"], intended["details"]["code_digest"]) == (build.commit, host_digest)
    assert document["trace_ids"] == [trace]

    ok = run("evidence", "verify", str(out), "--json")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["matches"] is True
    # The recorded provenance is what the records say: an edited commit is found.
    edited = json.loads(out.read_text())
    edited["operation"]["authority"]["opledger_commit"] = "0" * 40
    edited["timeline"][0]["details"]["opledger_commit"] = "0" * 40
    (tmp_path / "edited.json").write_text(json.dumps(edited))
    lied = run("evidence", "verify", str(tmp_path / "edited.json"), "--json")
    assert lied.exit_code == 1, lied.output
    assert {p["problem"] for p in json.loads(lied.stdout)["problems"]} == {
        "the document shows other content than the record (details)",
        "the summary differs from the records (authority)"}
