"""Owner leases, recovery and retention of receipts, on both backends (issue 15 items 5, 6).

The heartbeat test runs on the system clock with short leases; the others drive ``run_once``
with the injected clock.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from eventsourcing.persistence import OperationalError

from executors.receipt_leases import ReceiptLeaseConfig, ReceiptLeaseService
from executors.receipt_recovery import ReceiptRecoveryConfig, ReceiptRecoveryService
from executors.receipt_retention import ReceiptRetentionConfig, ReceiptRetentionService
from ledger.clock import SystemClock
from ledger.inbound import canonical_request
from ledger.receipt_runner import ReceiptRunner
from ledger.receipts import COMPLETED, EXPIRED, PENDING, Receipt, receipt_id
from tests.desk import auth
from tests.receipt_desk import ReceiptDesk, receipt_desk


@pytest.fixture
def desk(database_url: str) -> Iterator[ReceiptDesk]:
    with receipt_desk(database_url) as d:
        yield d


def opened_by_a_dead_owner(desk: ReceiptDesk, key: str, body: dict[str, Any], *, lease: float = 5) -> Receipt:
    """A receipt whose owner committed ReceiptOpened and then died (nothing else)."""
    request = canonical_request("make_ticket", "vera", json.dumps(body).encode())
    receipt = Receipt.open(principal="vera", scope="make_ticket", key=key, request=request, owner="dead:1",
                           now=desk.clock.now(), lease_seconds=lease)
    desk.store.app.save(receipt)
    return receipt


def test_a_successor_completes_a_dead_owners_receipt_after_lease_expiry(desk: ReceiptDesk) -> None:
    opened_by_a_dead_owner(desk, "k-r1", {"label": "a"})
    recovery = ReceiptRecoveryService(runner=desk.runner)
    assert recovery.run_once(desk.clock.now()).waiting == 1  # the dead owner's lease still holds
    assert desk.tickets() == 0
    desk.clock.advance(6)  # type: ignore[attr-defined]
    assert recovery.run_once(desk.clock.now()).recovered == 1
    receipt = desk.runner.load(receipt_id("vera", "make_ticket", "k-r1"))
    assert receipt is not None and receipt.state == COMPLETED and receipt.epoch == 2
    assert desk.tickets() == 1
    # The client's retry gets the successor's answer, exactly.
    response = desk.client.post("/v1/commands/make_ticket", content=b'{"label": "a"}',
                                headers={**auth("viewer"), "Content-Type": "application/json", "Idempotency-Key": '"k-r1"'})
    assert response.status_code == 201 and response.headers["idempotent-replayed"] == "true"
    assert recovery.run_once(desk.clock.now()).recovered == 0  # nothing left to recover


def test_a_stale_owner_cannot_complete_after_a_successor_adopted(desk: ReceiptDesk) -> None:
    stale = opened_by_a_dead_owner(desk, "k-r2", {"label": "a"})
    desk.clock.advance(6)  # type: ignore[attr-defined]
    ReceiptRecoveryService(runner=desk.runner).run_once(desk.clock.now())
    from ledger.errors import ReceiptFencedError
    from ledger.receipts import Envelope

    current = desk.runner.load(stale.id)
    assert current is not None
    with pytest.raises(ReceiptFencedError):
        current.complete(epoch=1, envelope=Envelope(200, (), b""), operation_ids=[], now=desk.clock.now())


def test_recovery_gives_up_after_max_adoptions_and_waits_for_the_client(desk: ReceiptDesk) -> None:
    opened_by_a_dead_owner(desk, "k-r3", {"label": "boom"})  # the handler throws every time
    recovery = ReceiptRecoveryService(runner=desk.runner, config=ReceiptRecoveryConfig(max_adoptions=2))
    for _ in range(4):
        desk.clock.advance(6)  # type: ignore[attr-defined]
        recovery.run_once(desk.clock.now())
    receipt = desk.runner.load(receipt_id("vera", "make_ticket", "k-r3"))
    assert receipt is not None and receipt.state == PENDING and receipt.adoptions == 2


def test_renewal_drops_receipts_that_are_no_longer_pending(desk: ReceiptDesk) -> None:
    from ledger.receipt_runner import Ownership

    response = desk.client.post("/v1/commands/make_ticket", content=b'{"label": "a"}',
                                headers={**auth("viewer"), "Content-Type": "application/json", "Idempotency-Key": '"k-r4"'})
    assert response.status_code == 201
    done = desk.runner.load(receipt_id("vera", "make_ticket", "k-r4"))
    assert done is not None
    # As if a completion had not been dropped from the renewal set: renewal drops it, never renews it.
    desk.runner.owned.add(Ownership(done.id, done.epoch, "x", desk.clock.now()))
    counts = ReceiptLeaseService(runner=desk.runner).run_once(desk.clock.now())
    assert (counts.renewed, counts.dropped) == (0, 1)
    assert len(desk.runner.owned) == 0
    assert desk.runner.load(done.id).version == done.version  # type: ignore[union-attr]


def test_heartbeat_keeps_a_long_execution_owned_through_a_transient_failure(database_url: str) -> None:
    # One failed renewal leaves a third of the lease; 1.5 s keeps that third (0.5 s) above the
    # thread-scheduling stalls of a loaded two-core CI machine (0.9 s lost it there once).
    lease = 1.5
    with receipt_desk(database_url, clock=SystemClock(), lease_seconds=lease) as desk:
        leases = ReceiptLeaseService(runner=desk.runner, config=ReceiptLeaseConfig(lease_seconds=lease,
                                                                                   interval_seconds=1.0))
        assert leases.interval_seconds == pytest.approx(lease / 3)  # clamped to a third of the TTL
        # A second "process" recovering the same store: it would adopt the moment the lease lapsed.
        successor = ReceiptRunner(app=desk.store.app, clock=SystemClock(), owner_prefix="successor",
                                  lease_seconds=lease)
        recovery = ReceiptRecoveryService(runner=successor, config=ReceiptRecoveryConfig(interval_seconds=0.05))
        failures = {"left": 1}
        load = desk.runner.load

        def flaky_load(rid: Any) -> Any:  # one transient store failure, seen by the renewal
            if threading.current_thread().name == "leases" and failures["left"]:
                failures["left"] -= 1
                raise OperationalError("server closed the connection unexpectedly")
            return load(rid)

        desk.runner.load = flaky_load  # type: ignore[method-assign]

        def renew(stop: threading.Event) -> None:
            while not stop.is_set():
                leases.run_once(desk.runner.clock.now())
                stop.wait(leases.interval_seconds)

        stop = threading.Event()
        threads = [threading.Thread(target=renew, args=(stop,), name="leases"),
                   threading.Thread(target=recovery.run, args=(stop,), name="recovery")]
        for thread in threads:
            thread.start()
        try:
            started = time.monotonic()
            response = desk.client.post("/v1/commands/make_ticket",
                                        content=json.dumps({"label": "slow", "sleep_seconds": 2.5 * lease}).encode(),
                                        headers={**auth("viewer"), "Content-Type": "application/json", "Idempotency-Key": '"k-hb"'})
            assert time.monotonic() - started > 2 * lease
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        assert response.status_code == 201, response.text
        assert failures["left"] == 0, "the transient failure was not injected"
        receipt = load(receipt_id("vera", "make_ticket", "k-hb"))
        assert receipt is not None and receipt.state == COMPLETED
        assert receipt.epoch == 1 and receipt.adoptions == 0  # ownership stayed live: never adopted
        topics = [e.topic for e in desk.store.app.recorder.select_events(receipt.id)]
        assert sum("ReceiptLeaseRenewed" in t for t in topics) >= 2
        # The renewal set held no terminal receipt: nothing was renewed after the completion.
        # (Read from the log, not from snapshots of the set: a snapshot may be taken between the
        # completion's commit and the receipt leaving the set, which renews nothing.)
        assert "ReceiptCompleted" in topics[-1], topics
        assert len(desk.runner.owned) == 0 and desk.tickets() == 1


def test_retention_expires_completed_receipts_only_when_their_operations_are_resolved(desk: ReceiptDesk) -> None:
    headers = {**auth("viewer"), "Content-Type": "application/json", "Idempotency-Key": '"k-t1"'}
    first = desk.client.post("/v1/commands/make_ticket", content=b'{"label": "a"}', headers=headers)
    refused = desk.client.post("/v1/commands/make_ticket", content=b'{"label": "taken"}',
                               headers={**auth("viewer"), "Content-Type": "application/json", "Idempotency-Key": '"k-t2"'})
    opened_by_a_dead_owner(desk, "k-t3", {"label": "p"}, lease=10**6)  # pending: never expires
    sweep = ReceiptRetentionService(runner=desk.runner, config=ReceiptRetentionConfig(retention_seconds=60))
    assert sweep.run_once(desk.clock.now()).expired == 0  # within retention
    desk.clock.advance(61)  # type: ignore[attr-defined]
    counts = sweep.run_once(desk.clock.now())
    # k-t2 authorized nothing: expired. k-t1's operation is unresolved (pending): kept.
    assert (counts.expired, counts.kept) == (1, 1)
    assert desk.runner.load(receipt_id("vera", "make_ticket", "k-t2")).state == EXPIRED  # type: ignore[union-attr]
    assert desk.runner.load(receipt_id("vera", "make_ticket", "k-t3")).state == PENDING  # type: ignore[union-attr]
    # An expired key starts a new generation: a new execution, a new answer.
    again = desk.client.post("/v1/commands/make_ticket", content=b'{"label": "taken"}',
                             headers={**auth("viewer"), "Content-Type": "application/json", "Idempotency-Key": '"k-t2"'})
    assert again.status_code == 409 and "idempotent-replayed" not in again.headers
    assert desk.runner.load(receipt_id("vera", "make_ticket", "k-t2")).generation == 2  # type: ignore[union-attr]
    # k-t1 is still replayed exactly while its operation is unresolved.
    assert desk.client.post("/v1/commands/make_ticket", content=b'{"label": "a"}',
                            headers=headers).content == first.content
    assert refused.status_code == 409
