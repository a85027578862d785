"""One conformance suite for the ``Adapter`` seam (STYLE rule 8): the webhook and LRO adapters,
the fake, and the simulator's two providers, each driven to every response class it can meet,
must answer with the outcome the contract gives that class (DESIGN §5, "HTTP outcome
classification"; STYLE rule 5: outcomes cross the seam as values). The lookup contract
(``recoverable_remote_id``) is held the same way.

The HTTP adapters meet each class through an in-process transport; the simulator's providers
through a fault plan that injects the fault of that class; the fake answers from its script, so
only its defaults (success, lookup by memory) are the seam's to check.

Source: issue 28 item 4; DESIGN §5; ``adapters.webhook.classify``.
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import httpx
import pytest

from adapters.fake import FakeAdapter, FakeRemoteOperations
from adapters.lro.adapter import LroAdapter
from adapters.simulation.faults import Fault, FaultPlan
from adapters.simulation.lro import SimLroProvider
from adapters.simulation.provider import SimProvider
from adapters.webhook import WebhookAdapter
from adapters.webhook.classify import TransportFailure
from ledger.clock import FakeClock
from ledger.declarations import DeliveryMode
from ledger.egress import Adapter, EgressRequest
from ledger.outcomes import Accepted, Ambiguous, Failed, FailureCategory, Outcome, Succeeded
from tests.loopback import Partner, closed_port, raw_server, reset

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
TARGET = "http://partner.test/hooks/pay"
TIMEOUT_SECONDS = 0.5


def _failed(category: FailureCategory, *, retryable: bool, status: int | None = None) -> Callable[[Outcome], bool]:
    return lambda o: (isinstance(o, Failed) and o.category is category and o.retryable is retryable
                      and (status is None or o.status_code == status))


def _ambiguous(reason: str) -> Callable[[Outcome], bool]:
    return lambda o: isinstance(o, Ambiguous) and o.reason == reason


CONTRACT: dict[str, Callable[[Outcome], bool]] = {
    # nothing left this process: safe to retry
    "connect": lambda o: _failed(FailureCategory.CONNECT, retryable=True)(o) and not o.egress,  # type: ignore[union-attr]
    "invalid_request": _failed(FailureCategory.INVALID_REQUEST, retryable=False),
    # bytes may have left: only ambiguity is honest
    "timeout": _ambiguous("timeout"),
    "reset": _ambiguous("reset"),
    "server_error": lambda o: _ambiguous("server_error")(o) and o.status_code == 500,
    # the provider answered
    "throttled_429": lambda o: _failed(FailureCategory.THROTTLED, retryable=True, status=429)(o)
    and o.retry_after == 2.0,  # type: ignore[union-attr]
    "throttled_503": _failed(FailureCategory.THROTTLED, retryable=True, status=503),
    "rejected": _failed(FailureCategory.REJECTED, retryable=False, status=422),
    "redirect": _failed(FailureCategory.REJECTED, retryable=False, status=302),
    "ok": lambda o: isinstance(o, Succeeded),
    "accepted": lambda o: isinstance(o, Accepted) and bool(o.remote_id),
}
"""Response class -> what every adapter must answer for it."""


def request(mode: DeliveryMode = DeliveryMode.NON_IDEMPOTENT, target: str = TARGET) -> EgressRequest:
    return EgressRequest(operation_id=uuid4(), attempt_id=uuid4(), attempt_number=1, integration="pay.charge",
                         delivery_mode=mode, target=target, payload={"amount": 5}, timeout_seconds=TIMEOUT_SECONDS)


# --- the HTTP adapters: each class over a real loopback socket -------------------------------


def _answer(status: int, body: dict[str, Any] | None = None, **headers: str) -> Callable[[], str]:
    """A class the provider answers: the partner's handler gives this response."""
    def target() -> str:
        PARTNER[0].handler = lambda sent: httpx.Response(status, json=body if body is not None else {}, headers=headers)
        return PARTNER[0].base + "/hooks/pay"

    return target


def _silent(conn: socket.socket) -> None:
    time.sleep(TIMEOUT_SECONDS * 3)  # reads the request and never answers


HTTP_CLASSES: dict[str, Callable[[], str]] = {
    "connect": closed_port,
    "invalid_request": lambda: "ftp://partner.test/hooks/pay",
    "timeout": lambda: raw_server(_silent),
    "reset": lambda: raw_server(reset),
    "server_error": _answer(500),
    "throttled_429": _answer(429, **{"Retry-After": "2"}),
    "throttled_503": _answer(503),
    "rejected": _answer(422),
    "redirect": _answer(302, location="http://elsewhere.test/"),
    "ok": _answer(200),
}
ACCEPTING = {"webhook": _answer(202, {"id": "rem_123"}), "lro": _answer(202, {"name": "operations/123", "done": False})}
PARTNER: list[Partner] = []


@pytest.fixture(scope="module", autouse=True)
def _partner() -> Iterator[None]:
    PARTNER.append(Partner())
    yield
    PARTNER.pop().server.shutdown()


def _http(kind: str) -> Adapter:
    clock = FakeClock(datetime.now(UTC))  # signatures are checked against the real time
    return (WebhookAdapter if kind == "webhook" else LroAdapter)(secret=SECRET, clock=clock)


# --- the simulator's providers: each class through the fault that makes it -------------------

SIM_CLASSES: dict[str, Fault | None] = {
    "connect": Fault.REFUSED, "timeout": Fault.RESPONSE_LOST, "server_error": Fault.APPLIED_5XX,
    "throttled_429": Fault.THROTTLED, "rejected": Fault.REJECTED,
}


def _sim(kind: str, fault: Fault | None, lookup_fault: Fault | None = None) -> Adapter:
    faults = FaultPlan(rng=random.Random(5))
    table_faults = {fault, lookup_fault}
    faults.pick = lambda table: next((f for f in table if f in table_faults), None)  # type: ignore[method-assign]
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    truth = SimProvider(faults=faults, clock=clock)
    return truth if kind == "sim" else SimLroProvider(truth=truth, faults=faults, clock=clock)


CASES: list[tuple[str, str]] = (
    [(kind, name) for kind in ("webhook", "lro") for name in [*HTTP_CLASSES, "accepted"]]
    + [(kind, name) for kind in ("sim", "sim_lro") for name in SIM_CLASSES]
    + [("sim", "ok"), ("sim_lro", "accepted"), ("fake", "ok"), ("fake_lro", "accepted")]
)


def _adapter_for(kind: str, name: str) -> tuple[Adapter, str]:
    """The adapter and the target that meets it with the class ``name``."""
    if kind in ("webhook", "lro"):
        return _http(kind), (ACCEPTING[kind] if name == "accepted" else HTTP_CLASSES[name])()
    if kind in ("sim", "sim_lro"):
        return _sim(kind, SIM_CLASSES.get(name)), TARGET
    return (FakeAdapter() if kind == "fake" else FakeRemoteOperations()), TARGET


@pytest.mark.parametrize(("kind", "name"), CASES, ids=[f"{k}-{n}" for k, n in CASES])
def test_an_adapter_answers_each_response_class_by_the_contract(kind: str, name: str) -> None:
    adapter, target = _adapter_for(kind, name)
    outcome = adapter.send(request(target=target))
    assert CONTRACT[name](outcome), f"{kind} answered {outcome!r} to {name}"


def test_the_contract_covers_every_class_the_classifier_knows() -> None:
    # Every way an exchange can fail without a response, and every status family.
    assert {failure.value for failure in TransportFailure} <= set(CONTRACT)
    assert {name for kind, name in CASES if kind == "webhook"} == set(CONTRACT), "a class the webhook is not driven to"
    assert {name for _, name in CASES} == set(CONTRACT)


# --- lookups (recoverable_remote_id): never received, received, cannot tell ------------------


def _lookup_webhook(status: int) -> tuple[Adapter, EgressRequest]:
    target = _answer(status, {"id": "rem_1"} if status == 200 else {})()
    return _http("webhook"), request(target=target)


LOOKUPS: dict[str, Callable[[], tuple[Adapter, EgressRequest]]] = {
    "webhook-never": lambda: _lookup_webhook(404),
    "webhook-received": lambda: _lookup_webhook(200),
    "webhook-cannot_tell": lambda: _lookup_webhook(503),
}


def _sent_first(adapter: Adapter) -> tuple[Adapter, EgressRequest]:
    sent = request(DeliveryMode.RECOVERABLE_REMOTE_ID)
    adapter.send(sent)
    return adapter, sent


LOOKUPS.update({
    "sim-never": lambda: (_sim("sim", None), request()),
    "sim-received": lambda: _sent_first(_sim("sim", None)),
    "sim-cannot_tell": lambda: (_sim("sim", None, Fault.LOOKUP_UNKNOWN), request()),
    "fake-never": lambda: (FakeAdapter(), request()),
    "fake-received": lambda: _sent_first(FakeAdapter()),
})
LOOKUP_CONTRACT: dict[str, Callable[[Outcome | None], bool]] = {
    "never": lambda o: o is None,
    "received": lambda o: isinstance(o, Succeeded | Accepted),
    "cannot_tell": lambda o: isinstance(o, Ambiguous) and o.reason == "lookup_failed",
}


@pytest.mark.parametrize("case", sorted(LOOKUPS))
def test_a_lookup_answers_by_the_contract(case: str) -> None:
    adapter, asked = LOOKUPS[case]()
    answer = adapter.lookup(asked)
    assert LOOKUP_CONTRACT[case.split("-")[1]](answer), f"{case}: {answer!r}"
