"""``opledger serve``'s writes that the database refuses for one operation alone (issue 35 item
3): a callback, an operator action, a command. Each is answered with a problem (422
``write_refused``, the database's text in ``detail``), the operation says so on the attention
queue where there is one, and the server goes on answering. Both backends, a trigger on the
events table."""

from __future__ import annotations

import json

import pytest
from eventsourcing.utils import get_topic
from fastapi.testclient import TestClient

from ledger.operation import Operation
from tests.callback_desk import callback_desk
from tests.desk import auth, desk
from tests.receipt_desk import receipt_desk
from tests.refusals import MESSAGE, _run, drop_trigger, events_table, refuse_event

PROBLEM = "application/problem+json"


def _refused(response: object) -> dict:
    assert response.status_code == 422, response.text  # type: ignore[attr-defined]
    assert response.headers["content-type"] == PROBLEM  # type: ignore[attr-defined]
    body = response.json()  # type: ignore[attr-defined]
    assert body["code"] == "write_refused" and MESSAGE in body["detail"] and body["retryable"] is False
    return body


def test_a_refused_callback_is_a_problem_and_the_operation_waits_for_an_operator(database_url: str) -> None:
    with callback_desk(database_url) as d:
        bad, bad_attempt = d.accepted(0)
        good, good_attempt = d.accepted(1)
        database = d.store.settings.database
        refuse_event(database, "modes", bad, Operation.CallbackReceived)
        _refused(d.post(bad, bad_attempt, callback_id="msg_bad"))
        op = d.ledger.get_operation(bad)
        assert (op.execution.value, op.write_refused, op.attention) == ("accepted", "callback", "write_refused")
        # The server goes on: another operation's callback is recorded.
        assert d.post(good, good_attempt, callback_id="msg_good").status_code == 200
        assert d.ledger.get_operation(good).execution.value == "succeeded"
        # Fixed, resolved, and the provider's retry lands.
        drop_trigger(database, "modes")
        op.resolve(now=d.clock.now(), principal="otto", resolution="retry_write", evidence="dropped the trigger")
        d.ledger.save(op)
        assert d.post(bad, bad_attempt, callback_id="msg_bad").json()["result"] == "recorded"


def test_a_refused_operator_action_is_a_problem(database_url: str) -> None:
    with desk(database_url) as d, TestClient(d.app) as client:
        op_id = d.ids["ambiguous"]
        refuse_event(d.store.settings.database, "desk", op_id, Operation.Resolved)
        body = {"resolution": "succeeded", "evidence": "partner log"}
        _refused(client.post(f"/v1/operations/{op_id}/resolve", json=body, headers=auth("operator")))
        op = d.store.app.get_operation(op_id)
        assert (op.execution.value, op.write_refused, op.attention) == ("ambiguous", "operator", "write_refused")
        # The server goes on: another operation's action is recorded.
        pending = d.ids["pending"]
        assert client.post(f"/v1/operations/{pending}/cancel", json={"reason": "not needed"},
                           headers=auth("operator")).status_code == 200


def test_a_refused_command_is_a_problem_and_its_key_can_be_retried(database_url: str) -> None:
    with receipt_desk(database_url) as d:
        database = d.store.settings.database
        table, topic = events_table(database, "commands"), get_topic(Operation.Intended)
        if database.backend == "sqlite":
            _run(database, [f"CREATE TRIGGER refuse_one BEFORE INSERT ON {table} WHEN NEW.topic = '{topic}' "
                            f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"])
        else:
            function = f'"{database.schema}".refuse_one'
            _run(database, [
                f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.topic = '{topic}' "
                f"THEN RAISE EXCEPTION '{MESSAGE}'; END IF; RETURN NEW; END $$",
                f"CREATE TRIGGER refuse_one BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION {function}()"])
        headers = {**auth("viewer"), "Content-Type": "application/json", "Idempotency-Key": '"k-refused"'}
        body = json.dumps({"label": "a"}).encode()
        assert _refused(d.client.post("/v1/commands/make_ticket", content=body, headers=headers))
        assert d.tickets() == 0
        unkeyed = d.client.post("/v1/commands/make_ticket", content=body,
                                headers={**auth("viewer"), "Content-Type": "application/json"})
        _refused(unkeyed)
        drop_trigger(database, "commands")
        assert d.client.post("/v1/commands/make_ticket", content=body, headers=headers).status_code == 201
        assert d.tickets() == 1


def test_a_refused_operator_action_on_the_cli_is_one_line_and_exit_2(database_url: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from adapters.cli.app import app as cli
    from ledger.config import Database
    from tests.desk import seeded

    ids, _ = seeded(database_url)
    monkeypatch.setenv("OPLEDGER_APP", "tests.observe_seed:DeskApp")
    monkeypatch.setenv("OPLEDGER_DATABASE_URL", database_url)
    refuse_event(Database.parse(database_url), "desk", ids["ambiguous"], Operation.Resolved)
    result = CliRunner().invoke(cli, ["resolve", str(ids["ambiguous"]), "--resolution", "failed",
                                      "--evidence", "partner has no record"])
    assert result.exit_code == 2, result.output
    assert f"the store refused the operator write of operation {ids['ambiguous']}" in result.output
    assert MESSAGE in result.output and "Traceback" not in result.output
