"""The worker with the real webhook adapter against the real partner, on both backends:
timeouts after send per delivery mode, hostile responses, a stale recovery pass, and the log
line each outcome and settlement makes (issue 34 item 4).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import httpx
import pytest
from structlog.testing import capture_logs

from adapters.partner import PartnerProcess
from executors.commit import commit_changes
from executors.runtime import Worker
from ledger.config import Database
from ledger.declarations import DeliveryMode
from ledger.status import ExecutionState as E
from tests.apps import MAX_ATTEMPTS, ModesApp
from tests.workers import webhook_worker

TIMEOUT_PAST_CLIENT = 1.2  # seconds; the test integrations time out after 0.5 s


@pytest.fixture
def modes_app(modes_db: Database) -> Iterator[ModesApp]:
    app = ModesApp(env=modes_db.library_env(create_table=False))
    yield app
    app.close()


@pytest.fixture
def worker(modes_app: ModesApp, modes_db: Database) -> Iterator[Worker]:
    with webhook_worker(modes_app, modes_db, worker_id="test-worker", token="tok_secret_value_123",
                        egress_slots=4) as running:
        yield running


def _fault(partner: PartnerProcess, path: str, **fault: object) -> None:
    httpx.post(f"{partner.url}/_control/faults", json={"path": path, "fault": fault}).raise_for_status()


def _settle(worker: Worker, app: ModesApp, op_ids: list[UUID], timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        worker.run_once()
        ops = {i: app.get_operation(i) for i in op_ids}
        if not worker.in_flight and all(o.status.value in ("settled", "ambiguous", "settlement_blocked")
                                        for o in ops.values()):
            return ops
        time.sleep(0.02)
    pytest.fail(f"operations did not settle: {[(str(i), o.status.value) for i, o in ops.items()]}")


def _deliveries(partner: PartnerProcess, op_id: UUID) -> list:
    return [r for r in partner.log.requests(str(op_id)) if r.kind == "delivery" and r.signature_valid]


EXPECTED_AFTER_TIMEOUT = {
    # mode: (execution, deliveries received, partner applied) -- DESIGN §5, row "after a lost response"
    "idempotent": (E.SUCCEEDED, 2, 1),       # retried with the same key; applied once
    "read_only": (E.SUCCEEDED, 2, 1),        # retried freely
    "recoverable_remote_id": (E.SUCCEEDED, 1, 1),  # looked up: it was received, so no resend
    "non_idempotent": (E.AMBIGUOUS, 1, 1),   # stops for an operator; never sent twice
    "callback": (E.ACCEPTED, 1, 1),          # waits for the callback until the deadline
}


@pytest.mark.parametrize("mode", sorted(EXPECTED_AFTER_TIMEOUT))
def test_timeout_after_send_is_recorded_per_delivery_mode(mode: str, modes_app: ModesApp, worker: Worker,
                                                          partner: PartnerProcess) -> None:
    _fault(partner, "/late", delay=TIMEOUT_PAST_CLIENT, times=1, apply="before")
    op_id = modes_app.make(mode, f"{partner.url}/late")
    execution, received, applied = EXPECTED_AFTER_TIMEOUT[mode]
    if execution is E.ACCEPTED:
        deadline = time.monotonic() + 10
        while modes_app.get_operation(op_id).execution is not E.ACCEPTED and time.monotonic() < deadline:
            worker.run_once()
            time.sleep(0.02)
        op = modes_app.get_operation(op_id)
    else:
        op = _settle(worker, modes_app, [op_id])[op_id]
    assert op.execution is execution, (op.failure, op.ambiguity_reason)
    assert len(_deliveries(partner, op_id)) == received
    assert partner.log.applied_count(str(op_id)) == applied
    assert {d.idempotency_key for d in _deliveries(partner, op_id)} == {str(op_id)}


def test_recoverable_remote_id_retries_only_when_the_lookup_says_not_received(
        modes_app: ModesApp, worker: Worker, partner: PartnerProcess) -> None:
    _fault(partner, "/lost", delay=TIMEOUT_PAST_CLIENT, times=1, apply="never")
    op_id = modes_app.make("recoverable_remote_id", f"{partner.url}/lost")
    op = _settle(worker, modes_app, [op_id])[op_id]
    assert op.execution is E.SUCCEEDED and op.attempts == 2
    assert partner.log.applied_count(str(op_id)) == 1
    assert any(r.kind == "lookup" for r in partner.log.requests(str(op_id)))


@pytest.mark.parametrize("body", ["huge", "nul", "invalid_utf8"])
def test_hostile_responses_are_stored_bounded_and_never_loop(body: str, modes_app: ModesApp, worker: Worker,
                                                             partner: PartnerProcess) -> None:
    _fault(partner, "/ok-hostile", body=body)
    _fault(partner, "/error-hostile", body=body, status=500)
    ok = modes_app.make("non_idempotent", f"{partner.url}/ok-hostile", n=1)
    failing = modes_app.make("idempotent", f"{partner.url}/error-hostile", n=2)
    ops = _settle(worker, modes_app, [ok, failing], timeout=30)
    assert ops[ok].execution is E.SUCCEEDED
    assert ops[failing].execution is E.AMBIGUOUS and ops[failing].attempts == MAX_ATTEMPTS
    for op in ops.values():
        stored = op.excerpt
        assert len(stored) <= 2000 and "\x00" not in stored
        stored.encode("utf-8")  # valid UTF-8
        assert "tok_secret_value_123" not in stored


def test_a_stale_recovery_pass_that_loses_the_race_changes_nothing(modes_app: ModesApp, modes_db: Database) -> None:
    op_id = modes_app.make("idempotent", "http://127.0.0.1:9/never-called")
    now = modes_app.clock.now()
    op = modes_app.get_operation(op_id)
    epoch = op.claim(now=now, worker_id="original", lease_seconds=0.001)
    op.start_attempt(epoch=epoch, now=now, attempt_id=__import__("uuid").uuid4(), request_fingerprint="f")
    modes_app.save(op)
    later = now + timedelta(seconds=1)
    # The recovery pass reads the operation while its lease looks expired...
    stale_read = modes_app.get_operation(op_id)
    assert stale_read.lease_expired(later)
    # ...then the original worker's success commits first.
    original = modes_app.get_operation(op_id)
    original.succeed(epoch=epoch, now=later, attempt_id=original.last_attempt_id)
    modes_app.save(original)
    version = modes_app.get_operation(op_id).version
    result = commit_changes(modes_app, [(stale_read, lambda o: (
        o.claim(now=later, worker_id="recovery", lease_seconds=5), [])[1])])
    assert op_id in result.rejected and not result.committed
    after = modes_app.get_operation(op_id)
    assert after.version == version and after.execution is E.SUCCEEDED and after.epoch == epoch


def lines(logs: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [line for line in logs if line["event"] == event]


def test_each_outcome_and_settlement_is_one_line(worker: Worker, modes_app: ModesApp, partner: PartnerProcess) -> None:
    httpx.post(f"{partner.url}/_control/faults",
               json={"path": "/flaky", "fault": {"status": 500, "times": 1}}).raise_for_status()
    httpx.post(f"{partner.url}/_control/faults", json={"path": "/refuse", "fault": {"status": 422}}).raise_for_status()
    retried = modes_app.make(DeliveryMode.IDEMPOTENT, partner.url + "/flaky", n=1)
    refused = modes_app.make(DeliveryMode.NON_IDEMPOTENT, partner.url + "/refuse", n=2)
    with capture_logs() as logs:
        _settle(worker, modes_app, [retried, refused])
    outcomes = lines(logs, "operation outcome")
    by_op = {(line["operation_id"], line["outcome"]): line for line in outcomes}
    assert set(by_op) == {(str(retried), "retry_scheduled"), (str(retried), "succeeded"), (str(refused), "failed")}
    retry = by_op[(str(retried), "retry_scheduled")]
    assert retry["status_code"] == 500 and retry["reason"] == "server_error" and retry["integration"] == "test.idempotent"
    done = by_op[(str(retried), "succeeded")]
    assert done["status_code"] == 200 and done["attempt_id"] and done["epoch"] == 2 and done["seconds_since_intent"] > 0
    assert by_op[(str(refused), "failed")]["status_code"] == 422
    settled = lines(logs, "operation settlement")
    assert sorted((line["operation_id"], line["outcome"]) for line in settled) == sorted(
        [(str(retried), "settled"), (str(refused), "settled")])
    assert all(line["log_level"] == "info" for line in outcomes + settled)
    text = repr(outcomes + settled)
    assert "internal note" not in text and "tok_secret_value_123" not in text  # no payload, no secret
