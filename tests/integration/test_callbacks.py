"""``POST /callbacks/{integration}`` on both backends (issue 12 item 3 and its acceptance).

Every refusal is problem+json and leaves the notification log exactly as long as it was: nothing
is written to any stream. Operations are driven to ``accepted`` through the aggregate's commands
(the egress side is covered by ``tests/process/test_callback_serve.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from uuid import uuid4

import pytest
from fastapi.testclient import TestClient
from structlog.testing import capture_logs
from typer.testing import CliRunner

from adapters.archive_run import run_archive
from adapters.cli.app import app as cli
from adapters.http.app import ServeConfig, attach, build_app
from adapters.partner.callbacks import callback_body, signed_headers
from ledger.operation import Operation
from ledger.status import ExecutionState as E
from migrations.drivers import archives_of
from projections.rows import row_from_operation
from projections.status import StatusProjection
from tests.callback_desk import APP_TOPIC, CALLBACK_SECRET, INTEGRATION, WRONG_SECRET, CallbackDesk, callback_desk
from tests.desk import TOKENS, auth

PROBLEM = "application/problem+json"


@pytest.fixture
def desk(database_url: str) -> Iterator[CallbackDesk]:
    with callback_desk(database_url) as d:
        yield d


def events(d: CallbackDesk, op_id: object) -> list[str]:
    return [type(e).__name__ for e in d.ledger.events.get(op_id)]  # type: ignore[arg-type]


def refused(response: object, status: int, words: str) -> None:
    assert response.status_code == status, response.text  # type: ignore[attr-defined]
    assert response.headers["content-type"] == PROBLEM  # type: ignore[attr-defined]
    assert words in response.json()["detail"]  # type: ignore[attr-defined]


def test_a_signed_callback_records_the_outcome_once_and_a_resigned_duplicate_changes_nothing(
        desk: CallbackDesk) -> None:
    op_id, attempt = desk.accepted()
    first = desk.post(op_id, attempt, callback_id="msg_a")
    assert first.status_code == 200, first.text
    assert first.json() == {"operation_id": str(op_id), "callback_id": "msg_a", "result": "recorded",
                            "fact": "CallbackReceived", "status": "succeeded"}
    op = desk.ledger.get_operation(op_id)
    assert op.execution is E.SUCCEEDED and op.callback_ids == {"msg_a"}
    length = desk.log_length()
    desk.clock.advance(30)  # the provider's retry: same webhook-id, signed again later
    again = desk.post(op_id, attempt, callback_id="msg_a")
    assert again.status_code == 200 and again.json()["result"] == "duplicate" and again.json()["fact"] is None
    assert desk.log_length() == length
    assert events(desk, op_id).count("CallbackReceived") == 1


def test_forged_stale_unsigned_and_replayed_callbacks_are_refused_and_write_nothing(desk: CallbackDesk) -> None:
    op_id, attempt = desk.accepted()
    length = desk.log_length()
    refused(desk.post(op_id, attempt, secret=WRONG_SECRET), 401, "no webhook-signature matches")
    stale_at = desk.clock.now()
    desk.clock.advance(301)
    refused(desk.post(op_id, attempt, at=stale_at), 401, "stale callback")
    refused(desk.post(op_id, attempt, headers={"content-type": "application/json"}), 401, "lacks the Standard")
    body = callback_body(operation_id=str(op_id), attempt_id=str(attempt))
    tampered = signed_headers(CALLBACK_SECRET, callback_id="msg_t", at=desk.clock.now(), body=body)
    refused(desk.send(body.replace(b"succeeded", b"failed\x20\x20\x20"), tampered), 401, "no webhook-signature")
    assert desk.log_length() == length
    assert desk.ledger.get_operation(op_id).execution is E.ACCEPTED
    # The genuine message, then the very same bytes again: a replay.
    headers = signed_headers(CALLBACK_SECRET, callback_id="msg_r", at=desk.clock.now(), body=body)
    assert desk.send(body, headers).status_code == 200
    length = desk.log_length()
    desk.clock.advance(5)
    refused(desk.send(body, headers), 401, "replayed callback")
    assert desk.log_length() == length


def test_unknown_integration_operation_or_attempt_is_404_and_writes_nothing(desk: CallbackDesk) -> None:
    op_id, attempt = desk.accepted()
    other_op, _ = desk.accepted(n=1)
    length = desk.log_length()
    refused(desk.post(uuid4(), attempt), 404, "no operation")
    refused(desk.post(op_id, uuid4()), 404, "is not the latest attempt")
    refused(desk.post(other_op, attempt), 404, "is not the latest attempt")
    refused(desk.post(op_id, attempt, integration="test.no_such"), 404, "no integration named")
    # Declared, but followed by polling or not at all: nothing to configure or retry (not 503).
    refused(desk.post(op_id, attempt, integration="test.idempotent"), 404,
            "'test.idempotent' takes no callbacks: its delivery mode is idempotent")
    idempotent = desk.ledger.make("idempotent", "http://provider.invalid/hook", n=2)
    refused(desk.post(idempotent, attempt), 404, "of integration 'test.callback'")
    assert desk.log_length() == length + 2  # only the idempotent operation's intent and its entity


def test_a_body_that_is_not_a_callback_is_422_once_authenticated(desk: CallbackDesk) -> None:
    length = desk.log_length()
    body = json.dumps({"operation_id": "nope"}).encode()
    headers = signed_headers(CALLBACK_SECRET, callback_id="msg_x", at=desk.clock.now(), body=body)
    refused(desk.send(body, headers), 422, "operation_id")
    assert desk.log_length() == length
    # A repeated member is refused, never "last wins": "failed" then "succeeded" is no success.
    op_id, attempt = desk.accepted()
    length = desk.log_length()
    twice = (f'{{"operation_id": "{op_id}", "attempt_id": "{attempt}", "outcome": "failed", '
             f'"outcome": "succeeded"}}').encode()
    headers = signed_headers(CALLBACK_SECRET, callback_id="msg_twice", at=desk.clock.now(), body=twice)
    refused(desk.send(twice, headers), 422, "repeats the member name 'outcome'")
    assert desk.log_length() == length
    # A NUL, which the store cannot hold as received, is stored escaped, not refused.
    nul = (f'{{"operation_id": "{op_id}", "attempt_id": "{attempt}", "outcome": "succeeded", '
           f'"detail": "ok\\u0000"}}').encode()
    headers = signed_headers(CALLBACK_SECRET, callback_id="msg_nul", at=desk.clock.now(), body=nul)
    assert desk.send(nul, headers).status_code == 200
    assert desk.ledger.get_operation(op_id).execution.value == "succeeded"


def test_a_callback_after_the_deadline_is_a_late_observation_never_the_outcome(desk: CallbackDesk) -> None:
    op_id, attempt = desk.accepted()
    # Recorded without a hard limit (as before follow-up existed), the accepted deadline (60 s)
    # ends the operation ambiguous; so does the hard limit of one followed for a callback.
    desk.clock.advance(61)
    op = desk.ledger.get_operation(op_id)
    op.exceed_deadline(now=desk.clock.now())
    desk.ledger.save(op)
    recorded = desk.ledger.get_operation(op_id).execution
    late = desk.post(op_id, attempt, callback_id="msg_late")
    assert late.status_code == 200 and late.json()["fact"] == "LateObservationRecorded", late.text
    op = desk.ledger.get_operation(op_id)
    assert op.execution is recorded and op.late_observation is not None
    assert op.late_observation["outcome"] == "succeeded"
    length = desk.log_length()
    desk.clock.advance(10)
    assert desk.post(op_id, attempt, callback_id="msg_late").json()["result"] == "duplicate"
    assert desk.log_length() == length


def test_a_callback_after_the_accepted_deadline_but_before_the_hard_limit_is_the_outcome(
        desk: CallbackDesk) -> None:
    # The accepted deadline passing is not an outcome (issue 12 item 5): the operation shows
    # remote_unknown and still waits; the provider's late success is then recorded, once.
    op_id, attempt = desk.accepted(follow_for=600)
    desk.clock.advance(61)
    op = desk.ledger.get_operation(op_id)
    op.mark_remote_unknown(now=desk.clock.now())
    desk.ledger.save(op)
    assert desk.ledger.get_operation(op_id).attention == "remote_unknown"
    answer = desk.post(op_id, attempt, callback_id="msg_slow")
    assert answer.status_code == 200 and answer.json()["fact"] == "CallbackReceived", answer.text
    op = desk.ledger.get_operation(op_id)
    assert op.execution is E.SUCCEEDED and op.attention is None and op.late_observation is None
    length = desk.log_length()
    desk.clock.advance(10)
    assert desk.post(op_id, attempt, callback_id="msg_slow").json()["result"] == "duplicate"
    assert desk.log_length() == length


def test_a_callback_after_a_cancel_goes_to_attention_and_never_settles_twice(desk: CallbackDesk) -> None:
    op_id, attempt = desk.accepted()
    op = desk.ledger.get_operation(op_id)
    op.request_cancel(now=desk.clock.now(), principal="otto", reason="customer asked")
    op.cancel(now=desk.clock.now())
    op.settle(now=desk.clock.now(), entity_version=2)
    desk.ledger.save(op)
    late = desk.post(op_id, attempt, callback_id="msg_after_cancel")
    assert late.status_code == 200 and late.json()["result"] == "recorded", late.text
    assert late.json()["fact"] == "LateObservationRecorded" and late.json()["status"] == "settled"
    op = desk.ledger.get_operation(op_id)
    assert op.execution is E.CANCELLED and op.attention == "late_observation"
    assert events(desk, op_id).count("Settled") == 1
    # The queue's detail says what the provider reported against which recorded outcome.
    detail = row_from_operation(op).as_json()["attention_detail"]
    assert detail["outcome"] == "succeeded" and detail["recorded_outcome"] and detail["callback_id"] == "msg_after_cancel"
    # A failure reported after the cancel agrees with it (no effect either way): nothing recorded.
    length = desk.log_length()
    agrees = desk.post(op_id, attempt, callback_id="msg_fail", outcome="failed")
    assert agrees.json()["result"] == "agrees_with_outcome" and desk.log_length() == length
    op.resolve(now=desk.clock.now(), principal="otto", resolution="acknowledge", evidence="provider refunded it")
    desk.ledger.save(op)
    assert desk.ledger.get_operation(op_id).attention is None


def test_a_progress_callback_keeps_the_operation_waiting(desk: CallbackDesk) -> None:
    op_id, attempt = desk.accepted()
    progress = desk.post(op_id, attempt, callback_id="msg_p", outcome="progress")
    assert progress.status_code == 200 and progress.json()["status"] == "accepted"
    done = desk.post(op_id, attempt, callback_id="msg_d", outcome="failed")
    assert done.json()["status"] == "failed"
    names = events(desk, op_id)
    assert names[-2:] == ["CallbackReceived", "CallbackReceived"]
    failure = desk.ledger.get_operation(op_id).failure
    assert failure is not None and failure["category"] == "remote_failed"


def test_a_progress_report_repeated_is_acknowledged_without_a_new_event(desk: CallbackDesk) -> None:
    op_id, attempt = desk.accepted()
    first = desk.post(op_id, attempt, callback_id="msg_p1", outcome="progress", remote_status="running", detail="40%")
    assert first.status_code == 200 and first.json()["result"] == "recorded"
    length = desk.log_length()
    for n in range(2, 6):  # new messages (the provider's own ids) saying the same thing
        again = desk.post(op_id, attempt, callback_id=f"msg_p{n}", outcome="progress", remote_status="running",
                          detail="40%")
        assert again.status_code == 200 and again.json()["result"] == "unchanged", again.text
    assert desk.log_length() == length
    for n, (status, detail) in enumerate([("running", "60%"), ("copying", "60%")]):
        changed = desk.post(op_id, attempt, callback_id=f"msg_c{n}", outcome="progress", remote_status=status,
                            detail=detail)
        assert changed.json()["result"] == "recorded"
    assert desk.log_length() == length + 2
    assert events(desk, op_id)[-3:] == ["CallbackReceived"] * 3
    done = desk.post(op_id, attempt, callback_id="msg_d", outcome="succeeded")
    assert done.json()["result"] == "recorded" and done.json()["status"] == "succeeded"


def test_a_read_only_server_answers_503_and_writes_nothing(database_url: str) -> None:
    with callback_desk(database_url, writable=False) as d:
        op_id, attempt = d.accepted()
        length = d.log_length()
        response = d.post(op_id, attempt)
        refused(response, 503, "serve --write")
        assert "Retry-After" in response.headers and d.log_length() == length


def test_callbacks_without_a_configured_secret_are_refused(database_url: str, monkeypatch) -> None:
    from adapters.http.app import ServeConfig, attach
    from executors.secrets import EnvironmentSecrets

    monkeypatch.delenv("OPLEDGER_SECRET_CALLBACK_TEST_CALLBACK", raising=False)
    with callback_desk(database_url) as d:
        attach(d.app, store=d.store, clock=d.clock, config=ServeConfig(callback_secrets=EnvironmentSecrets()))
        op_id, attempt = d.accepted()
        length = d.log_length()
        refused(d.post(op_id, attempt), 503, "OPLEDGER_SECRET_CALLBACK_TEST_CALLBACK")
        assert d.log_length() == length


def test_health_live_and_ready(desk: CallbackDesk) -> None:
    assert desk.client.get("/health/live").json() == {"status": "ok"}
    ready = desk.client.get("/health/ready")
    assert ready.status_code == 200 and ready.json()["status"] == "ready" and ready.json()["schema_version"]
    # Load balancers and uptime checks often probe with HEAD: the same answer, without a body.
    for path in ("/health", "/health/live", "/health/ready"):
        head = desk.client.head(path)
        assert head.status_code == 200 and head.content == b"", path


def test_a_late_observation_is_a_timeline_fact(desk: CallbackDesk) -> None:
    op_id, attempt = desk.accepted()
    assert desk.post(op_id, attempt, callback_id="msg_ok").status_code == 200
    late = desk.post(op_id, attempt, callback_id="msg_reversed", outcome="failed")
    assert late.json()["fact"] == "LateObservationRecorded"
    last = list(desk.ledger.events.get(op_id))[-1]
    assert isinstance(last, Operation.LateObservationRecorded)
    assert (last.outcome, last.recorded_outcome, last.attempt_id) == ("failed", "succeeded", attempt)


def test_ready_is_503_when_the_schema_is_not_this_codes(desk: CallbackDesk, database_url: str) -> None:
    from ledger.config import Database
    from tests.integration.test_store import _set_schema_version

    _set_schema_version(Database.parse(database_url), "999")
    response = desk.client.get("/health/ready")
    refused(response, 503, "schema version 999")
    assert desk.client.head("/health/ready").status_code == 503
    assert desk.client.get("/health/live").status_code == 200


def test_a_callback_for_an_attempt_closed_for_a_retry_is_409_and_writes_nothing(desk: CallbackDesk) -> None:
    op_id = desk.ledger.make("callback", "http://provider.invalid/hook", n=7)
    op = desk.ledger.get_operation(op_id)
    now = desk.clock.now()
    epoch = op.claim(now=now, worker_id="w1", lease_seconds=30)
    attempt = uuid4()
    op.start_attempt(epoch=epoch, now=now, attempt_id=attempt, request_fingerprint="r")
    op.schedule_retry(epoch=epoch, now=now, attempt_id=attempt, retry_at=now, category="throttled",
                      reason="503", possibly_applied=False)
    desk.ledger.save(op)
    length = desk.log_length()
    refused(desk.post(op_id, attempt), 409, "expects no callback now")
    assert desk.log_length() == length


def test_a_malformed_callback_secret_is_never_shown(database_url: str) -> None:
    from adapters.http.app import ServeConfig, attach
    from executors.secrets import EnvironmentSecrets

    bad = "whsec_c2hvcnQ="  # base64 of 5 bytes: too short to be a Standard Webhooks secret
    with callback_desk(database_url) as d:
        attach(d.app, store=d.store, clock=d.clock,
               config=ServeConfig(callback_secrets=EnvironmentSecrets({"callback.test.callback": bad})))
        op_id, attempt = d.accepted()
        response = d.post(op_id, attempt)
        refused(response, 503, "is not 'whsec_'")
        assert bad not in response.text and "c2hvcnQ" not in response.text


def test_a_callback_for_an_archived_operation_is_kept_apart_on_the_attention_queue(desk: CallbackDesk,
                                                                                  tmp_path: Path) -> None:
    op_id, attempt = desk.accepted()
    assert desk.post(op_id, attempt, callback_id="msg_a").status_code == 200
    op = desk.ledger.get_operation(op_id)
    op.settle(now=desk.clock.now(), entity_version=desk.ledger.repository.get(op.source.entity_id).version)
    desk.ledger.save(op)
    StatusProjection(app=desk.ledger, view=desk.store.view).catch_up()
    limits = {INTEGRATION: desk.clock.now() + timedelta(seconds=1)}
    report = run_archive(desk.ledger, desk.store.view, archives_of(desk.ledger), tmp_path / "archive",
                         now=desk.clock.now(), limits=limits, provenance={})
    assert report.removed == 1
    before = desk.log_length()
    with capture_logs() as logs:
        late = desk.post(op_id, attempt, callback_id="msg_late", outcome="failed", detail="refunded")
    assert late.status_code == 200, late.text
    assert (late.json()["result"], late.json()["fact"], late.json()["status"]) == ("recorded", "late_after_archive",
                                                                                   "archived")
    assert desk.log_length() == before and not desk.ledger.recorder.select_events(op_id), "never appended to it"
    assert [e["segment"] for e in logs if e["event"] == "callback for an archived operation kept for operators"] \
        == ["seg-000001"]
    assert desk.post(op_id, attempt, callback_id="msg_late", outcome="failed").json()["result"] == "duplicate"

    url, env = desk.store.settings.database_url, {"OPLEDGER_APP": APP_TOPIC}
    queue = json.loads(CliRunner().invoke(cli, ["attention", "--json", "--database-url", url], env=env).stdout)
    [row] = [r for r in queue if r["kind"] == "archived"]
    assert (row["operation_id"], row["attention"], row["integration"]) == (str(op_id), "late_after_archive", INTEGRATION)
    assert row["attention_detail"] == {"segment": "seg-000001", "callback_id": "msg_late", "outcome": "failed",
                                       "remote_status": "done", "detail": "refunded"}
    observer = attach(build_app(), store=desk.store, config=ServeConfig(tokens=TOKENS), clock=desk.clock)
    with TestClient(observer) as client:
        served = client.get("/v1/attention", params={"reason": "late_after_archive"}, headers=auth("viewer"))
        scraped = client.get("/metrics", headers=auth("viewer")).text
    assert served.status_code == 200, served.text
    assert f'opledger_archive_late_records{{integration="{INTEGRATION}"}} 1.0' in scraped, "the alert's gauge"
    [entry] = served.json()
    assert {**entry, "updated_at": row["updated_at"]} == row
    resolve = ["resolve", str(op_id), "--resolution", "acknowledge", "--evidence", "refund seen",
               "--database-url", url]
    done = CliRunner().invoke(cli, resolve, env=env)
    assert done.exit_code == 0, done.output
    assert f"operation {op_id} (archived): acknowledged 1 late record(s)" in done.stdout
    queue = json.loads(CliRunner().invoke(cli, ["attention", "--json", "--database-url", url], env=env).stdout)
    assert not [r for r in queue if r["kind"] == "archived"]
    with TestClient(observer) as client:
        assert "opledger_archive_late_records{" not in client.get("/metrics", headers=auth("viewer")).text
    again = CliRunner().invoke(cli, resolve, env=env)
    assert again.exit_code == 1 and "nothing to acknowledge" in again.output
