"""Properties of keyed commands over any sequence of requests (hypothesis, in-memory store):
a key's first request decides its answer for good, a retry replays it byte for byte, another body
is refused, and the handler's effects commit once per key (issue 15 items 2-3)."""

from __future__ import annotations

import json

import pytest
from eventsourcing.utils import get_topic
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.client import format_key
from adapters.http.commands import parse_key
from ledger.clock import FakeClock
from ledger.errors import ReceiptMismatchError
from ledger.receipt_runner import ReceiptRunner
from tests.apps import CommandsApp, Ticket

REQUESTS = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["x", "y", "taken"])),
                    min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(requests=REQUESTS)
def test_a_keys_first_request_decides_its_answer_for_good(requests: list[tuple[str, str]]) -> None:
    app = CommandsApp(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    runner = ReceiptRunner(app=app, clock=FakeClock(), owner_prefix="prop")
    spec = runner.spec("make_ticket")
    first: dict[str, tuple[str, bytes, int]] = {}
    try:
        for key, label in requests:
            body = json.dumps({"label": label}).encode()
            if key in first and first[key][0] != label:
                with pytest.raises(ReceiptMismatchError):
                    runner.submit(spec, "p", key, body)
                continue
            answer = runner.submit(spec, "p", key, body)
            if key in first:
                assert answer.replayed and (answer.envelope.body, answer.envelope.status) == first[key][1:]
            else:
                assert not answer.replayed
                first[key] = (label, answer.envelope.body, answer.envelope.status)
        made = len(app.recorder.select_notifications(start=None, limit=1000, topics=[get_topic(Ticket.Opened)]))
        assert made == sum(1 for label, _, _ in first.values() if label != "taken")
    finally:
        app.close()


@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=255))
def test_every_printable_key_round_trips_through_the_sf_string(key: str) -> None:
    assert parse_key([format_key(key)]) == key
