"""Table tests for the long-running-operation classifier (``adapters.lro.classify``) and the
poll schedule (``ledger.decisions.poll_delay_seconds``, ``first_poll_at``).

Source: AIP-151; issue 12 items 1 and 2; ADR 0004.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

import pytest

from adapters.lro import classify_cancel, classify_create, classify_poll, operation_name_of
from adapters.webhook.classify import HttpExchange, TransportFailure
from ledger import outcomes
from ledger.declarations import Polling
from ledger.outcomes import Ambiguous, CancelConfirmed, CancelRefused, Failed, StillRunning, Succeeded
from ledger.polling import first_poll_at, poll_delay_seconds

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def answer(status: int, document: object = None, **headers: str) -> HttpExchange:
    body = json.dumps(document).encode() if document is not None else b""
    return HttpExchange(status_code=status, body=body, excerpt=body.decode(),
                        headers={k.replace("_", "-"): v for k, v in headers.items()})


@pytest.mark.parametrize(("headers", "document", "expected"), [
    ({}, {"name": "operations/a", "done": False}, "operations/a"),
    ({"operation_location": "/v1/operations/b"}, {"done": False}, "/v1/operations/b"),
    ({"location": "https://p/operations/c"}, {}, "https://p/operations/c"),
    ({"operation_location": "/x"}, {"name": "operations/d"}, "operations/d"),  # the body's name first
    ({}, {"id": "op-e"}, "op-e"),
    ({}, {"other": 1}, None),
])
def test_operation_name_of(headers: dict, document: dict, expected: str | None) -> None:
    exchange = answer(202, document, **headers)
    assert operation_name_of(exchange.headers, exchange.body) == expected


CREATE = [
    (answer(202, {"name": "operations/a", "done": False}), outcomes.Accepted),
    (answer(200, {"name": "operations/a", "done": True, "response": {}}), Succeeded),
    (answer(200, {"name": "operations/a", "done": True, "error": {"code": 13, "message": "no"}}), Failed),
    (answer(200, {"ok": True}), Succeeded),
    (answer(429, {}, retry_after="3"), Failed),
    (answer(500, {}), Ambiguous),
    (HttpExchange(failure=TransportFailure.TIMEOUT, sent=True), Ambiguous),
]


@pytest.mark.parametrize(("exchange", "kind"), CREATE)
def test_classify_create(exchange: HttpExchange, kind: type) -> None:
    assert isinstance(classify_create(exchange, now=NOW), kind)


POLL = [
    (answer(200, {"done": False, "metadata": {"state": "CREATING"}}, retry_after="5"),
     StillRunning(next_check_after=5.0, remote_status="CREATING")),
    (answer(200, {"done": False}), StillRunning(remote_status="running")),
    (answer(404, {"error": "gone"}), Ambiguous),
    (answer(410, {}), Ambiguous),
    (answer(503, {}, retry_after="7"), StillRunning(next_check_after=7.0, detail="{}")),
    (answer(500, {}), StillRunning(detail="{}")),
    (answer(403, {}), StillRunning(detail="{}")),
    (answer(200, ["not", "an", "operation"]), StillRunning(detail='["not", "an", "operation"]')),
    (HttpExchange(failure=TransportFailure.RESET, sent=True, excerpt="reset"), StillRunning(detail="reset")),
    (answer(200, {"done": True, "response": {"id": 1}}), Succeeded),
    (answer(200, {"done": True, "error": {"code": 13, "message": "boom"}}), Failed),
    (answer(200, {"done": True, "error": {"code": 1, "message": "cancelled"}}), CancelConfirmed),
]


@pytest.mark.parametrize(("exchange", "expected"), POLL)
def test_classify_poll(exchange: HttpExchange, expected: object) -> None:
    result = classify_poll(exchange, now=NOW)
    if isinstance(expected, type):
        assert isinstance(result, expected)
        if isinstance(result, Ambiguous):
            assert result.reason == "remote_lost"
        if isinstance(result, Failed):
            assert result.category is outcomes.FailureCategory.REMOTE_FAILED and not result.retryable
    else:
        assert result == expected


@pytest.mark.parametrize(("exchange", "then", "expected"), [
    (answer(200, {}), CancelConfirmed(detail="cancelled"), CancelConfirmed),
    (answer(200, {}), Succeeded(), CancelRefused(reason="the operation completed before the cancel took effect",
                                                 status_code=200)),
    (answer(200, {}), StillRunning(remote_status="running"), CancelRefused),  # retryable: not stopped yet
    (answer(409, {"error": "done"}), None, CancelRefused),
    (answer(503, {}), None, CancelRefused),
    (HttpExchange(failure=TransportFailure.CONNECT, sent=False), None, CancelRefused),
])
def test_classify_cancel(exchange: HttpExchange, then: object, expected: object) -> None:
    result = classify_cancel(exchange, then)  # type: ignore[arg-type]
    if isinstance(expected, type):
        assert isinstance(result, expected)
    else:
        assert result == expected
    retryable = isinstance(result, CancelRefused) and result.retryable
    assert retryable == (isinstance(then, StillRunning) or exchange.status_code in (None, 503))


POLICY = Polling(initial_delay_seconds=1, max_interval_seconds=8, overdue_interval_seconds=100, limit_seconds=1000)


class NoJitter(random.Random):
    def random(self) -> float:
        return 0.0


@pytest.mark.parametrize(("polls", "overdue", "hint", "expected"), [
    (0, False, None, 1.0), (1, False, None, 2.0), (2, False, None, 4.0), (3, False, None, 8.0),
    (10, False, None, 8.0),  # capped
    (0, False, 30.0, 30.0),  # Retry-After wins over a shorter delay
    (3, False, 2.0, 8.0),    # ...never makes it shorter
    (0, True, None, 100.0),  # past the accepted deadline: the slow rate
])
def test_poll_delay(polls: int, overdue: bool, hint: float | None, expected: float) -> None:
    assert poll_delay_seconds(polling=POLICY, polls=polls, overdue=overdue, hint=hint, rng=NoJitter()) == expected


def test_poll_jitter_is_at_most_a_tenth_and_never_below_the_hint() -> None:
    rng = random.Random(7)
    delays = [poll_delay_seconds(polling=POLICY, polls=3, overdue=False, hint=None, rng=rng) for _ in range(200)]
    assert all(7.2 <= d <= 8.0 for d in delays) and len(set(delays)) > 100
    assert poll_delay_seconds(polling=POLICY, polls=3, overdue=False, hint=8.0, rng=rng) == 8.0


def test_first_poll_is_derived_from_the_last_recorded_fact() -> None:
    assert first_poll_at(polling=POLICY, last_fact_at=NOW, now=NOW) == NOW + timedelta(seconds=1)
    later = NOW + timedelta(hours=1)  # a worker resuming long after: at once
    assert first_poll_at(polling=POLICY, last_fact_at=NOW, now=later) == later
