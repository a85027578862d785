"""The webhook adapter against the reference partner running as a real process.

Every DESIGN §5 row the partner can produce is driven through real sockets, and the partner's
durable log is the witness of what the remote side actually applied.

Source: DESIGN §5 (delivery modes, HTTP outcome classification); Standard Webhooks specification.
"""

from __future__ import annotations

import base64
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from uuid import UUID, uuid4

import httpx
import pytest

from adapters.partner import FAULT_HEADER, PartnerLog, PartnerProcess, start_partner_process
from adapters.webhook import WebhookAdapter, WebhookConfig
from ledger.clock import SystemClock
from ledger.declarations import DeliveryMode
from ledger.egress import EgressRequest
from ledger.outcomes import Accepted, Ambiguous, Failed, FailureCategory, Succeeded

pytestmark = pytest.mark.process

SECRET = "whsec_" + base64.b64encode(b"partner-test-secret-0123456789ab").decode()
OTHER_SECRET = "whsec_" + base64.b64encode(b"someone-else-entirely-0123456789").decode()
EXCERPT_CHARS = 300
SHORT_TIMEOUT_SECONDS = 0.3


@pytest.fixture(scope="module")
def partner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PartnerProcess]:
    with start_partner_process(log_path=tmp_path_factory.mktemp("partner") / "log.db", secret=SECRET) as running:
        yield running


@pytest.fixture(scope="module")
def adapter() -> Iterator[WebhookAdapter]:
    with WebhookAdapter(secret=SECRET, clock=SystemClock(), config=WebhookConfig(excerpt_chars=EXCERPT_CHARS)) as a:
        yield a


@pytest.fixture
def send(partner: PartnerProcess, adapter: WebhookAdapter) -> Callable[..., tuple[UUID, object]]:
    """Send one delivery to a fresh operation (or ``operation_id``); return (id, outcome)."""
    def deliver(fault: str | None = None, *, operation_id: UUID | None = None, path: str = "/pay",
                mode: DeliveryMode = DeliveryMode.NON_IDEMPOTENT,
                timeout: float = 5.0) -> tuple[UUID, object]:
        request = egress(partner, operation_id=operation_id, path=path, mode=mode, timeout=timeout, fault=fault)
        return request.operation_id, adapter.send(request)
    return deliver


def egress(partner: PartnerProcess, *, operation_id: UUID | None = None, path: str = "/pay",
           mode: DeliveryMode = DeliveryMode.NON_IDEMPOTENT, timeout: float = 5.0,
           fault: str | None = None) -> EgressRequest:
    return EgressRequest(operation_id=operation_id or uuid4(), attempt_id=uuid4(), attempt_number=1,
                         integration="pay.charge", delivery_mode=mode, target=partner.url + path,
                         payload={"amount": 500, "currency": "EUR"}, timeout_seconds=timeout,
                         headers={FAULT_HEADER: fault} if fault else {})


def wait_for(condition: Callable[[], bool], timeout_seconds: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_signed_delivery_is_verified_applied_and_logged(send, partner: PartnerProcess) -> None:
    op, outcome = send()
    assert isinstance(outcome, Succeeded) and outcome.status_code == 200
    [row] = partner.log.requests(str(op))
    assert (row.kind, row.method, row.path, row.signature_valid, row.applied, row.status) == \
        ("delivery", "POST", "/pay", True, True, 200)
    assert row.webhook_id == row.idempotency_key == str(op) and row.attempt_id
    assert row.received_at.endswith("+00:00")


def test_bad_signature_is_rejected_and_nothing_applied(partner: PartnerProcess) -> None:
    with WebhookAdapter(secret=OTHER_SECRET, clock=SystemClock()) as impostor:
        request = egress(partner)
        outcome = impostor.send(request)
    assert isinstance(outcome, Failed)
    assert (outcome.category, outcome.retryable, outcome.status_code) == (FailureCategory.REJECTED, False, 401)
    [row] = partner.log.requests(str(request.operation_id))
    assert (row.signature_valid, row.applied, row.status) == (False, False, 401)


def test_missing_signature_is_rejected(partner: PartnerProcess) -> None:
    key = str(uuid4())
    response = httpx.post(partner.url + "/pay", json={"amount": 1}, headers={"Idempotency-Key": key})
    assert response.status_code == 401
    assert partner.log.received_count(key) == 1 and partner.log.applied_count(key) == 0


def test_same_key_applies_once(send, partner: PartnerProcess) -> None:
    op, first = send()
    _, second = send(operation_id=op)
    assert isinstance(first, Succeeded) and first == second
    assert partner.log.received_count(op) == 2 and partner.log.applied_count(op) == 1


FAULTS = [
    ("status=503;retry_after=2", Failed(FailureCategory.THROTTLED, retryable=True, retry_after=2.0,
                                        status_code=503), 0),
    ("retry_after=Wed, 21 Oct 2015 07:28:00 GMT", Failed(FailureCategory.THROTTLED, retryable=True,
                                                        retry_after=0.0, status_code=503), 0),
    ("status=429", Failed(FailureCategory.THROTTLED, retryable=True, status_code=429), 0),
    ("status=422", Failed(FailureCategory.REJECTED, retryable=False, status_code=422), 0),
    ("status=500", Ambiguous(reason="server_error", category=FailureCategory.SERVER_ERROR, status_code=500), 0),
    ("status=502;apply=before", Ambiguous(reason="server_error", category=FailureCategory.SERVER_ERROR,
                                          status_code=502), 1),
    ("drop", Ambiguous(reason="reset"), 0),
    ("drop;apply=before", Ambiguous(reason="reset"), 1),
]


@pytest.mark.parametrize(("fault", "expected", "applied"), FAULTS, ids=[f[0] for f in FAULTS])
def test_fault_modes_yield_the_honest_outcome(send, partner: PartnerProcess, fault: str, expected: object,
                                              applied: int) -> None:
    op, outcome = send(fault)
    if isinstance(expected, Failed):
        assert isinstance(outcome, Failed)
        outcome = Failed(outcome.category, outcome.retryable, outcome.retry_after, outcome.egress,
                         outcome.status_code)
    elif isinstance(outcome, Ambiguous):
        outcome = Ambiguous(outcome.reason, outcome.category, outcome.status_code)
    assert outcome == expected
    assert partner.log.applied_count(op) == applied
    assert partner.log.requests(str(op))[0].fault == fault


def test_accept_names_the_remote_operation(send, partner: PartnerProcess) -> None:
    op, outcome = send("accept")
    assert outcome == Accepted(remote_id=f"rop_{op}", status_code=202, excerpt=outcome.excerpt)
    assert partner.log.applied_count(op) == 1


def test_times_faults_only_the_first_requests(send, partner: PartnerProcess) -> None:
    op, first = send("status=503;times=2")
    _, second = send("status=503;times=2", operation_id=op)
    _, third = send("status=503;times=2", operation_id=op)
    assert [type(o) for o in (first, second, third)] == [Failed, Failed, Succeeded]
    assert partner.log.applied_count(op) == 1 and partner.log.received_count(op) == 3


def test_path_faults_are_set_and_cleared_through_the_control_endpoint(send, partner: PartnerProcess) -> None:
    path = f"/pay-{uuid4().hex}"
    control = partner.url + "/_control/faults"
    set_fault = httpx.post(control, json={"path": path, "fault": {"status": 503, "retry_after": "1", "times": 1}})
    assert set_fault.status_code == 200
    _, throttled = send(path=path)
    _, normal = send(path=path)
    assert isinstance(throttled, Failed) and throttled.retry_after == 1.0 and isinstance(normal, Succeeded)

    httpx.post(control, json={"path": path, "fault": {"status": 500}})
    assert httpx.delete(control, params={"path": path}).status_code == 200
    assert isinstance(send(path=path)[1], Succeeded)
    assert httpx.post(control, json={"path": path, "fault": {"bogus": 1}}).status_code == 400


def test_timeout_after_the_effect_is_ambiguous_and_the_log_shows_it_applied(send, partner: PartnerProcess) -> None:
    op, outcome = send("delay=1;apply=before", timeout=SHORT_TIMEOUT_SECONDS)
    assert isinstance(outcome, Ambiguous) and outcome.reason == "timeout"
    assert wait_for(lambda: partner.log.applied_count(op) == 1)  # committed before the delay began
    _, retried = send(operation_id=op)
    assert isinstance(retried, Succeeded) and partner.log.applied_count(op) == 1


def test_an_effect_can_land_after_the_client_gave_up(send, partner: PartnerProcess) -> None:
    op, outcome = send("delay=1;apply=after", timeout=SHORT_TIMEOUT_SECONDS)
    assert isinstance(outcome, Ambiguous) and outcome.reason == "timeout"
    assert partner.log.applied_count(op) == 0
    assert wait_for(lambda: partner.log.applied_count(op) == 1)


@pytest.mark.parametrize("body", ["huge", "nul", "invalid_utf8"])
def test_hostile_bodies_are_bounded(send, body: str) -> None:
    _, outcome = send(f"body={body}")
    assert isinstance(outcome, Succeeded) and outcome.status_code == 200
    assert 0 < len(outcome.excerpt) <= EXCERPT_CHARS
    assert outcome.excerpt.encode("utf-8").decode("utf-8") == outcome.excerpt
    assert "\x00" not in outcome.excerpt


def test_lookup_before_and_after_the_effect(partner: PartnerProcess, adapter: WebhookAdapter) -> None:
    request = egress(partner, mode=DeliveryMode.RECOVERABLE_REMOTE_ID)
    assert adapter.lookup(request) is None
    assert isinstance(adapter.send(request), Succeeded)
    found = adapter.lookup(request)
    assert isinstance(found, Succeeded) and found.status_code == 200
    lookups = [r for r in partner.log.requests(str(request.operation_id)) if r.kind == "lookup"]
    assert [(r.status, r.signature_valid, r.applied) for r in lookups] == [(404, True, False), (200, True, False)]


def test_lookup_of_an_accepted_operation_names_it(partner: PartnerProcess, adapter: WebhookAdapter) -> None:
    request = egress(partner, fault="accept", mode=DeliveryMode.RECOVERABLE_REMOTE_ID)
    adapter.send(request)
    found = adapter.lookup(request)
    assert isinstance(found, Accepted)
    assert (found.remote_id, found.status_code) == (f"rop_{request.operation_id}", 200)


def test_a_failing_lookup_is_ambiguous(partner: PartnerProcess, adapter: WebhookAdapter) -> None:
    outcome = adapter.lookup(egress(partner, fault="status=500"))
    assert isinstance(outcome, Ambiguous) and outcome.reason == "lookup_failed"


def test_redirect_is_not_followed_for_non_idempotent(send, partner: PartnerProcess) -> None:
    op, outcome = send("redirect=/elsewhere", mode=DeliveryMode.NON_IDEMPOTENT)
    assert isinstance(outcome, Failed) and outcome.status_code == 307 and not outcome.retryable
    assert [r.path for r in partner.log.requests(str(op))] == ["/pay"]
    assert partner.log.applied_count(op) == 0


def test_redirect_is_followed_for_idempotent(send, partner: PartnerProcess) -> None:
    op, outcome = send("redirect=/elsewhere;times=1", mode=DeliveryMode.IDEMPOTENT)
    assert isinstance(outcome, Succeeded)
    assert [(r.path, r.applied) for r in partner.log.requests(str(op))] == [("/pay", False), ("/elsewhere", True)]


def test_nothing_listening_fails_before_egress(adapter: WebhookAdapter) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again before use: connection refused
    request = EgressRequest(operation_id=uuid4(), attempt_id=uuid4(), attempt_number=1, integration="pay.charge",
                            delivery_mode=DeliveryMode.NON_IDEMPOTENT, target=f"http://127.0.0.1:{port}/pay",
                            payload={}, timeout_seconds=1.0)
    outcome = adapter.send(request)
    assert isinstance(outcome, Failed)
    assert (outcome.category, outcome.retryable, outcome.egress) == (FailureCategory.CONNECT, True, False)


def test_log_and_effects_survive_a_killed_partner(tmp_path: Path, adapter: WebhookAdapter) -> None:
    log_path = tmp_path / "partner.db"
    first = start_partner_process(log_path=log_path, secret=SECRET)
    request = egress(first)
    assert isinstance(adapter.send(request), Succeeded)
    first.kill()
    assert PartnerLog(log_path).applied_count(request.operation_id) == 1

    with start_partner_process(log_path=log_path, secret=SECRET) as second:
        retry = egress(second, operation_id=request.operation_id)
        assert isinstance(adapter.send(retry), Succeeded)
        assert second.log.applied_count(request.operation_id) == 1
        assert second.log.received_count(request.operation_id) == 2
