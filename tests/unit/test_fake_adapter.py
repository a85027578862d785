"""The in-memory fake adapter: scripted outcomes, thread-safe recording, remembered lookups.

Source: ``ledger.egress.Adapter``; STYLE rule 13 (test helpers shipped for users).
"""

from __future__ import annotations

import threading
from uuid import UUID, uuid4

from adapters.fake import FakeAdapter
from ledger.declarations import DeliveryMode
from ledger.egress import Adapter, EgressRequest
from ledger.outcomes import Accepted, Ambiguous, Failed, FailureCategory, Succeeded


def egress(operation_id: UUID | None = None) -> EgressRequest:
    return EgressRequest(operation_id=operation_id or uuid4(), attempt_id=uuid4(), attempt_number=1,
                         integration="pay.charge", delivery_mode=DeliveryMode.RECOVERABLE_REMOTE_ID,
                         target=None, payload={})


def test_defaults_to_success_and_records_requests() -> None:
    fake = FakeAdapter()
    _: Adapter = fake  # conforms to the seam (checked by type checkers)
    first, second = egress(), egress()
    assert fake.send(first) == Succeeded()
    fake.send(second)
    fake.send(first)
    assert fake.count == 3
    assert fake.received(first.operation_id) == [first, first]
    assert fake.requests == [first, second, first]


def test_script_decides_each_outcome() -> None:
    throttled = Failed(FailureCategory.THROTTLED, retryable=True, retry_after=1.0)
    fake = FakeAdapter(script=lambda r: throttled if r.attempt_number == 1 else Succeeded())
    assert fake.send(egress()) == throttled


def test_default_lookup_remembers_what_was_sent() -> None:
    outcomes = iter([Failed(FailureCategory.CONNECT, retryable=True, egress=False),
                     Ambiguous(reason="timeout"), Accepted(remote_id="rop_1")])
    fake = FakeAdapter(script=lambda r: next(outcomes))
    request = egress()
    assert fake.lookup(request) is None
    fake.send(request)
    assert fake.lookup(request) is None  # only a Failed send: never received
    fake.send(request)
    assert fake.lookup(request) == Succeeded()  # a lost response counts as applied
    fake.send(request)
    assert fake.lookup(request) == Accepted(remote_id="rop_1")
    assert fake.lookups == [request] * 4 and fake.count == 3


def test_lookup_script_overrides_the_default() -> None:
    fake = FakeAdapter(lookup_script=lambda r: Ambiguous(reason="lookup_failed"))
    assert fake.lookup(egress()) == Ambiguous(reason="lookup_failed")


def test_recording_is_thread_safe() -> None:
    fake = FakeAdapter()
    operation_id = uuid4()
    threads = [threading.Thread(target=lambda: [fake.send(egress(operation_id)) for _ in range(200)])
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert fake.count == 1600 and len(fake.received(operation_id)) == 1600
