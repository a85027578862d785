"""The one receipt decision, table-tested; the renewal clamp; the retention rule (issue 15)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest
from eventsourcing.application import AggregateNotFoundError

from ledger import failpoints
from ledger.errors import (
    IntentConflictError,
    InvalidArgumentError,
    OperationNotFoundError,
    PayloadError,
    StoreError,
    UnknownIntegrationError,
    UnrepresentableTimeError,
)
from ledger.receipt_decisions import (
    Adopt,
    InFlight,
    Mismatch,
    Open,
    Reopen,
    Replay,
    decide_request,
    expirable,
    refusal_of,
    renewal_interval,
)
from ledger.receipts import Envelope, Receipt, receipt_id, request_fingerprint

T0 = datetime(2026, 1, 1, tzinfo=UTC)
REQUEST = {"route": "r", "command": "c", "principal": "p", "body": {"a": 1}, "body_error": None}
FP = request_fingerprint(REQUEST)


def opened(lease: float = 10) -> Receipt:
    return Receipt.open(principal="p", scope="c", key="k", request=REQUEST, owner="o", now=T0, lease_seconds=lease)


def completed() -> Receipt:
    r = opened()
    r.complete(epoch=1, envelope=Envelope(201, (("location", "/x"),), b"{}"), operation_ids=[], now=T0)
    return r


def expired() -> Receipt:
    r = completed()
    r.expire(now=T0 + timedelta(days=2))
    return r


def released() -> Receipt:
    r = opened()
    r.release(epoch=1, reason="boom", now=T0)
    return r


@pytest.mark.parametrize("receipt, fingerprint, now, expected", [
    (None, FP, T0, Open()),
    (expired(), FP, T0, Reopen()),
    (expired(), "sha256:other", T0, Reopen()),
    (completed(), "sha256:other", T0, Mismatch(FP)),
    (opened(), "sha256:other", T0, Mismatch(FP)),
    (opened(), FP, T0 + timedelta(seconds=2.5), InFlight(1)),
    (opened(lease=100), FP, T0, InFlight(1)),  # a long lease is not a long wait (tryout R12)
    (opened(), FP, T0 + timedelta(seconds=9.9), InFlight(1)),
    (opened(), FP, T0 + timedelta(seconds=10), Adopt()),
    (released(), FP, T0, Adopt()),
    (opened(), None, T0 + timedelta(seconds=11), Adopt()),  # recovery compares no fingerprint
])
def test_decide_request(receipt: Receipt | None, fingerprint: str | None, now: datetime, expected: object) -> None:
    assert decide_request(receipt, fingerprint, now) == expected


def test_a_completed_receipt_replays_its_envelope_with_its_transaction_id() -> None:
    r = completed()
    decision = decide_request(r, FP, T0)
    assert isinstance(decision, Replay)
    assert decision.envelope.status == 201 and decision.envelope.transaction_id == r.id == receipt_id("p", "c", "k")


def test_renewal_interval_is_clamped_to_a_third_of_the_lease() -> None:
    assert renewal_interval(10, 30) == 10
    assert renewal_interval(10, 6) == 2
    with pytest.raises(ValueError):
        renewal_interval(1, 0)


def test_only_completed_receipts_past_retention_expire() -> None:
    assert not expirable(opened(), T0 + timedelta(days=9), 60)
    assert not expirable(completed(), T0 + timedelta(seconds=59), 60)
    assert expirable(completed(), T0 + timedelta(seconds=60), 60)


def test_receipt_ids_are_scoped_by_principal_command_and_key() -> None:
    ids = {receipt_id(*parts) for parts in (("p", "c", "k"), ("q", "c", "k"), ("p", "d", "k"), ("p", "c", "l"))}
    assert len(ids) == 4 and receipt_id("p", "c", "k") == receipt_id("p", "c", "k")


def test_receipt_commits_are_failpoint_boundaries() -> None:
    assert failpoints.commit_boundaries(["ReceiptOpened"]) == ["receipt_open"]
    assert failpoints.commit_boundaries(["Opened", "Intended", "ReceiptCompleted"]) == ["receipt_complete"]
    # An outcome settled in its own commit is both boundaries (executors.settlement.CoSettlement).
    assert failpoints.commit_boundaries(["AttemptSucceeded", "Succeeded", "Noted", "Settled"]) == [
        "outcome", "settlement"]
    assert failpoints.commit_boundaries(["Made", "Settled"]) == ["settlement"]
    with failpoints.raise_at("receipt_open:before", RuntimeError("x")):
        with pytest.raises(RuntimeError):
            failpoints.reached("receipt_open:before")
        failpoints.reached("receipt_open:before")  # once only
    assert failpoints.ACTIVE is (failpoints.ARMED is not None)


@pytest.mark.parametrize("exc, expected", [
    (PayloadError("x", ["target: 'ftp://x' is not an http:// or https:// URL"]), (422, "invalid_payload")),
    (IntentConflictError(uuid4(), "sha256:a", "sha256:b"), (409, "intent_conflict")),
    (UnrepresentableTimeError("too far"), (422, "unrepresentable_time")),
    (OperationNotFoundError("no operation"), (404, "unknown_operation")),
    (AggregateNotFoundError("t-1"), (404, "unknown_entity")),
    # Pending: a deploy, an operator or a retry may change the answer.
    (InvalidArgumentError("intend needs the entity's authorizing transition"), None),
    (UnknownIntegrationError("payments"), None),
    (StoreError("permission denied"), None),
    (RuntimeError("a bug"), None),
])
def test_refusal_of_tells_deterministic_refusals_from_thrown_errors(exc: Exception, expected: object) -> None:
    """Tryout R4: the one rule for which errors raised in a handler are terminal."""
    refusal = refusal_of(exc)
    assert (None if refusal is None else (refusal.status, refusal.code)) == expected


def _adopted(times: int, *, release: bool) -> Receipt:
    receipt = opened(lease=10)
    for n in range(times):
        receipt.adopt(owner=f"r{n}", now=T0 + timedelta(seconds=20 * (n + 1)), lease_seconds=10)
    if release:
        receipt.release(epoch=receipt.epoch, reason="RuntimeError", now=T0 + timedelta(seconds=20 * times + 1))
    return receipt


@pytest.mark.parametrize(("adoptions", "release", "at", "gives_up"), [
    (2, True, 20 * 2 + 2, True),  # adopted the limit, released: stop
    (2, False, 20 * 2 + 11, True),  # adopted the limit, its lease expired: stop
    (2, False, 20 * 2 + 5, False),  # its last adopter still holds a live lease
    (1, True, 20 + 2, False),  # under the limit: recovery adopts it again
    (3, True, 20 * 3 + 2, True),  # a client's retry adopted it past the limit
])
def test_recovery_gives_up_on_a_receipt_adopted_its_limit_that_nobody_owns(
        adoptions: int, release: bool, at: float, gives_up: bool) -> None:
    from ledger.receipt_decisions import recovery_gives_up

    receipt = _adopted(adoptions, release=release)
    assert recovery_gives_up(receipt, T0 + timedelta(seconds=at), 2) is gives_up


def test_a_stopped_receipt_is_not_stopped_twice_and_only_a_stopped_one_is_resolved() -> None:
    from ledger.errors import IllegalTransitionError
    from ledger.receipt_decisions import recovery_gives_up

    receipt = _adopted(2, release=True)
    now = T0 + timedelta(seconds=60)
    with pytest.raises(IllegalTransitionError):
        receipt.resolve(principal="otto", resolution="retry", evidence="checked", now=now)
    receipt.stop_recovery(adoptions=2, now=now)
    assert (receipt.recovery_stopped_at, receipt.stop_reason) == (now, "RuntimeError")
    assert recovery_gives_up(receipt, now, 2) is False
    with pytest.raises(IllegalTransitionError):
        receipt.stop_recovery(adoptions=2, now=now)
    for resolution, evidence, message in [("succeeded", "x", "retry, abandon"), ("retry", " ", "evidence"),
                                          ("abandon", "x" * 5000, "limit")]:
        with pytest.raises(InvalidArgumentError, match=message):
            receipt.resolve(principal="otto", resolution=resolution, evidence=evidence, now=now)
    receipt.resolve(principal="otto", resolution="retry", evidence="fixed", now=now)
    assert (receipt.adoptions, receipt.released, receipt.recovery_stopped_at) == (0, True, None)
    assert recovery_gives_up(receipt, now, 2) is False
