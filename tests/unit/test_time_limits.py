"""Times that cannot be represented are refused when declared or intended, never overflowing later.

Source: issue 10 item 3; ledger/time_limits.py; ledger/declarations.py.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ledger.declarations import Integration
from ledger.errors import DeclarationError, InvalidArgumentError, UnrepresentableTimeError
from ledger.operation import Operation
from ledger.outcomes import FailureCategory
from ledger.status import ExecutionState as E
from ledger.time_limits import MAX_DEADLINE_SECONDS, MAX_SETTLEMENT_DELAY_SECONDS, require_later, settlement_worst_delay
from tests.unit.builders import PAYLOAD, build, declaration, integration, source

UTC = UTC
NEAR_END = datetime(9999, 12, 31, 23, 0, tzinfo=UTC)
SETTLE = {"entity_type": "app.orders:Order", "method": "record_charge"}


# ------------------------------------------------------------------ declarations


@pytest.mark.parametrize(
    ("overrides", "path"),
    [
        ({"deadlines": {"pending": 10**12}}, "deadlines.pending"),
        ({"deadlines": {"claimed": math.inf}}, "deadlines.claimed"),
        ({"deadlines": {"dispatching": math.nan}}, "deadlines.dispatching"),
        ({"deadlines": {"accepted": -1.0}}, "deadlines.accepted"),
        ({"deadlines": {"accepted": MAX_DEADLINE_SECONDS + 1}}, "deadlines.accepted"),
        ({"deadlines": {"pending": 10**400}}, "deadlines.pending"),
        ({"retry": {"base_backoff_seconds": math.inf}}, "retry.base_backoff_seconds"),
        ({"retry": {"base_backoff_seconds": 1.0, "max_backoff_seconds": 1e300}}, "retry.max_backoff_seconds"),
        ({"retry": {"jitter": math.nan}}, "retry.jitter"),
        ({"request_timeout_seconds": math.inf}, "request_timeout_seconds"),
        ({"request_timeout_seconds": -5}, "request_timeout_seconds"),
        ({"settlement": {**SETTLE, "backoff_seconds": math.nan}}, "settlement.backoff_seconds"),
        ({"settlement": {**SETTLE, "max_attempts": 100, "backoff_seconds": 1.0}}, "settlement.backoff_seconds"),
        ({"settlement": {**SETTLE, "max_attempts": 12, "backoff_seconds": 3600}}, "settlement.backoff_seconds"),
        ({"budgets": {"window_seconds": math.inf}}, "budgets.window_seconds"),
        ({"budgets": {"window_seconds": 1e12}}, "budgets.window_seconds"),
    ],
    ids=["pending-1e12", "claimed-inf", "dispatching-nan", "accepted-negative", "accepted-over-max",
         "pending-not-a-float", "base-backoff-inf", "max-backoff-1e300", "jitter-nan", "timeout-inf",
         "timeout-negative", "settlement-backoff-nan", "settlement-doubling-overflows",
         "settlement-doubling-past-a-week", "budget-window-inf", "budget-window-1e12"],
)
def test_unrepresentable_durations_are_refused_when_declared(overrides: dict[str, Any], path: str) -> None:
    with pytest.raises(DeclarationError) as info:
        Integration.parse(declaration(**overrides))
    assert [p for p, _ in info.value.problems] == [path]
    assert f"  - {path}: " in str(info.value)


def test_limit_errors_say_how_to_fix() -> None:
    with pytest.raises(DeclarationError, match=r"deadlines\.pending: .*31622400.*docs/guide\.md"):
        Integration.parse(declaration(deadlines={"pending": 10**12}))
    with pytest.raises(DeclarationError, match=r"lower max_attempts or backoff_seconds"):
        Integration.parse(declaration(settlement={**SETTLE, "max_attempts": 100}))


@pytest.mark.parametrize(
    "overrides",
    [
        {"deadlines": {"pending": MAX_DEADLINE_SECONDS, "accepted": MAX_DEADLINE_SECONDS}},
        {"settlement": {**SETTLE, "max_attempts": 21, "backoff_seconds": 0.5}},
        {"settlement": {**SETTLE, "max_attempts": 100, "backoff_seconds": 1e-30}},
        {"retry": {"base_backoff_seconds": 86_400, "max_backoff_seconds": 7 * 86_400}},
    ],
    ids=["deadline-at-max", "settlement-just-fits", "settlement-tiny-backoff", "backoffs-at-max"],
)
def test_durations_at_the_limits_are_accepted(overrides: dict[str, Any]) -> None:
    Integration.parse(declaration(**overrides))


def test_settlement_worst_delay() -> None:
    assert settlement_worst_delay(1.0, 5) == 8.0  # waits 1, 2, 4, 8 s, then blocks at the 5th try
    assert settlement_worst_delay(1.0, 1) == 1.0
    assert settlement_worst_delay(3600.0, 100) > MAX_SETTLEMENT_DELAY_SECONDS


# ------------------------------------------------------------------ require_later()


@pytest.mark.parametrize(
    ("now", "seconds", "message"),
    [
        (datetime(2026, 1, 1, tzinfo=UTC), math.inf, "finite"),
        (datetime(2026, 1, 1, tzinfo=UTC), math.nan, "finite"),
        (datetime(2026, 1, 1, tzinfo=UTC), -1.0, ">= 0"),
        (datetime(2026, 1, 1, tzinfo=UTC), 1e20, "past 9999-12-31"),
        (datetime(2026, 1, 1, tzinfo=UTC), 10**12, "past 9999-12-31"),
        (NEAR_END, 86_400, "past 9999-12-31"),
        (datetime(2026, 1, 1, tzinfo=UTC), "30", "a number of seconds"),
        (datetime(2026, 1, 1, tzinfo=UTC), True, "a number of seconds"),
    ],
    ids=["inf", "nan", "negative", "1e20", "1e12", "year-9999", "text", "bool"],
)
def test_require_later_refuses_what_cannot_be_represented(now: datetime, seconds: Any, message: str) -> None:
    with pytest.raises(UnrepresentableTimeError, match=message) as info:
        require_later(now, seconds, "lease_seconds")
    assert isinstance(info.value, InvalidArgumentError) and "lease_seconds" in str(info.value)


def test_require_later_adds() -> None:
    assert require_later(NEAR_END, 1800, "x") == NEAR_END + timedelta(minutes=30)


# ------------------------------------------------------------------ commands


def test_an_intent_near_the_end_of_time_is_refused_with_every_problem() -> None:
    with pytest.raises(UnrepresentableTimeError) as info:
        Operation.intend(now=NEAR_END, integration=integration(), source=source(), payload=PAYLOAD)
    message = str(info.value)
    assert message.startswith("intent for integration 'payments.charge' at 9999-12-31T23:00:00+00:00 is refused")
    for what in ("deadlines.pending", "deadlines.accepted"):
        assert what in message
    assert "deadlines.claimed" not in message  # 300 s still fits before the end of 9999


def test_an_intent_a_day_earlier_is_recorded() -> None:
    now = datetime(9999, 12, 29, tzinfo=UTC)
    op = Operation.intend(now=now, integration=integration(), source=source(), payload=PAYLOAD)
    assert op.deadline_at == now + timedelta(hours=1)


@pytest.mark.parametrize(
    ("lease_seconds", "at", "message"),
    [
        (math.inf, None, "lease_seconds must be a finite"),
        (math.nan, None, "lease_seconds must be a finite"),
        (1e20, None, "lease_seconds"),
        (30.0, datetime(9999, 12, 31, 23, 59, 50, tzinfo=UTC), "deadlines.claimed"),
        (10.0, datetime(9999, 12, 31, 23, 59, tzinfo=UTC), "deadlines.claimed"),
    ],
    ids=["inf", "nan", "1e20", "lease-past-the-end", "deadline-past-the-end"],
)
def test_claim_refuses_unrepresentable_leases(lease_seconds: float, at: datetime | None, message: str) -> None:
    b = build(E.PENDING)
    now = at or b.tick()
    with pytest.raises(UnrepresentableTimeError, match=message):
        b.op.claim(now=now, worker_id="w", lease_seconds=lease_seconds)
    assert b.op.execution is E.PENDING and not b.collect(), "nothing was recorded"


@pytest.mark.parametrize("lease_seconds", [math.inf, math.nan, 1e20])
def test_renew_lease_refuses_unrepresentable_leases(lease_seconds: float) -> None:
    b = build(E.CLAIMED)
    with pytest.raises(UnrepresentableTimeError, match="lease_seconds"):
        b.op.renew_lease(epoch=b.epoch, now=b.tick(), lease_seconds=lease_seconds)
    assert not b.collect()


def test_schedule_retry_refuses_a_pending_deadline_past_the_end() -> None:
    b = build(E.DISPATCHING)
    late = datetime(9999, 12, 31, 23, 59, tzinfo=UTC)
    assert b.attempt_id is not None
    with pytest.raises(UnrepresentableTimeError, match="deadlines.pending"):
        b.op.schedule_retry(epoch=b.epoch, now=late, attempt_id=b.attempt_id, retry_at=late,
                            category=FailureCategory.SERVER_ERROR, reason="503", possibly_applied=False)
    assert b.op.execution is E.DISPATCHING and not b.collect()


def test_commands_in_range_still_work() -> None:
    b = build(E.DISPATCHING)
    assert b.attempt_id is not None
    b.op.schedule_retry(epoch=b.epoch, now=b.tick(), attempt_id=b.attempt_id, retry_at=b.now + timedelta(days=7),
                        category=FailureCategory.SERVER_ERROR, reason="503", possibly_applied=False)
    epoch = b.op.claim(now=b.now + timedelta(days=7), worker_id="w2", lease_seconds=3600)
    b.op.renew_lease(epoch=epoch, now=b.now + timedelta(days=7, seconds=1), lease_seconds=3600)
    assert b.op.lease_expires_at == b.now + timedelta(days=7, seconds=3601)
