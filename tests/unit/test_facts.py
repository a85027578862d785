"""Received facts are stored bounded and escaped, never dropped, never crashing.

Source: issue 10 item 3; ledger/facts.py; ledger/codec.py (what the codec refuses).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any
from uuid import uuid4

import pytest
from eventsourcing.persistence import DatetimeAsISO, DecimalAsStr, JSONTranscoder, UUIDAsHex
from eventsourcing.utils import get_topic
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ledger.codec import LedgerMapper
from ledger.facts import MAX_FACT_CHARS, FactKind, is_storable, original_digest, storable_fact, storable_fact_or_none
from ledger.operation import Operation
from ledger.outcomes import FailureCategory
from ledger.status import ExecutionState as E
from tests.unit.builders import T0, build

SURROGATE_ID = json.loads('{"id": "\\ud800-ch_1"}')["id"]
"""What ``json.loads`` returns for a provider body whose ``id`` holds a lone surrogate escape."""
DIGEST = re.compile(r"original sha256:([0-9a-f]{64})\]$")


def _mapper() -> LedgerMapper[Any]:
    transcoder = JSONTranscoder()
    for transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO()):
        transcoder.register(transcoding)
    return LedgerMapper(transcoder)


MAPPER = _mapper()


def _succeeded(remote_id: str, excerpt: str) -> Operation.Succeeded:
    return Operation.Succeeded(  # type: ignore[call-arg]
        originator_id=uuid4(), originator_version=4, timestamp=T0, epoch=1, attempt_id=uuid4(),
        status_code=200, remote_id=remote_id, excerpt=excerpt)


# Any text at all: lone surrogates, NUL, controls, astral characters, and sizes up to well past
# every bound (a repeated block keeps generation fast while still crossing the limits).
any_text = st.one_of(
    st.text(max_size=300),
    st.builds(lambda part, times: part * times, st.text(min_size=1, max_size=40), st.integers(1, 400)),
)


@settings(max_examples=400, deadline=None)
@given(text=any_text, kind=st.sampled_from(FactKind))
@example(text=SURROGATE_ID, kind=FactKind.REMOTE_ID)
@example(text="\x00" * 10_000, kind=FactKind.EXCERPT)
@example(text="\udfff" * 5000, kind=FactKind.STATUS)
@example(text="x" * MAX_FACT_CHARS[FactKind.DETAIL], kind=FactKind.DETAIL)
def test_any_text_becomes_a_bounded_fact_the_codec_stores_exactly(text: str, kind: FactKind) -> None:
    fact = storable_fact(text, kind)
    assert len(fact) <= MAX_FACT_CHARS[kind]
    assert is_storable(fact)
    event = _succeeded(remote_id=fact, excerpt=fact)
    back = MAPPER.to_domain_event(MAPPER.to_stored_event(event))
    assert (back.remote_id, back.excerpt) == (fact, fact)
    if is_storable(text) and len(text) <= MAX_FACT_CHARS[kind]:
        assert fact == text, "storable, short text is stored as it came"
    else:
        found = DIGEST.search(fact)
        assert found, fact[-120:]
        assert found.group(1) == hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    assert storable_fact(fact, kind) == fact, "applying it again changes nothing"


@pytest.mark.parametrize(
    ("text", "kind", "starts_with"),
    [
        (SURROGATE_ID, FactKind.REMOTE_ID, "\\ud800-ch_1…[stored escaped/cut; original sha256:"),
        ("a\x00b", FactKind.DETAIL, "a\\x00b…["),
        ("\udc80\ud83d", FactKind.STATUS, "\\udc80\\ud83d…["),
        ("é\u2028😀 ok", FactKind.EXCERPT, "é\u2028😀 ok"),  # storable as it is
        ("", FactKind.REASON, ""),
    ],
    ids=["surrogate-id", "nul", "two-surrogates", "storable-unicode", "empty"],
)
def test_escapes_are_visible(text: str, kind: FactKind, starts_with: str) -> None:
    assert storable_fact(text, kind).startswith(starts_with)


def test_oversize_text_is_cut_and_carries_the_digest() -> None:
    text = "y" * 1_000_000
    fact = storable_fact(text, FactKind.EXCERPT)
    assert len(fact) == MAX_FACT_CHARS[FactKind.EXCERPT]
    assert fact.startswith("y" * 3900)
    assert fact.endswith(f"original sha256:{original_digest(text)}]")


def test_non_text_and_none() -> None:
    assert storable_fact(12345, FactKind.REMOTE_ID) == "12345"  # type: ignore[arg-type]
    assert storable_fact_or_none(None, FactKind.STATUS) is None


def test_every_bound_leaves_room_for_the_marker() -> None:
    for kind, limit in MAX_FACT_CHARS.items():
        assert len(storable_fact("\x00" * (limit * 2), kind)) == limit


# ------------------------------------------------------------- the funnel: Operation commands


def _dispatching() -> Any:
    return build(E.DISPATCHING)


def test_succeed_records_a_surrogate_remote_id_escaped() -> None:
    b = _dispatching()
    b.op.succeed(epoch=b.epoch, now=b.tick(), attempt_id=b.attempt_id, status_code=200,
                 remote_id=SURROGATE_ID, excerpt='{"id": "\ud800-ch_1"}' + "z" * 10_000)
    (event,) = b.collect()
    assert event.remote_id.startswith("\\ud800-ch_1…[")
    assert len(event.excerpt) == MAX_FACT_CHARS[FactKind.EXCERPT]
    MAPPER.to_stored_event(event)  # the codec takes it
    assert b.op.remote_id == event.remote_id


@pytest.mark.parametrize("command", ["accept", "fail", "mark_ambiguous", "schedule_retry", "callback"])
def test_every_command_recording_provider_text_makes_it_storable(command: str) -> None:
    bad = "bad\ud800\x00" + "q" * 20_000
    b = _dispatching()
    now, epoch, attempt = b.tick(), b.epoch, b.attempt_id
    if command == "accept":
        b.op.accept(epoch=epoch, now=now, attempt_id=attempt, remote_id=bad, excerpt=bad)
    elif command == "fail":
        b.op.fail(epoch=epoch, now=now, attempt_id=attempt, category=FailureCategory.REJECTED,
                  retryable=False, status_code=400, detail=bad)
    elif command == "mark_ambiguous":
        b.op.mark_ambiguous(epoch=epoch, now=now, attempt_id=attempt, reason=bad, detail=bad)
    elif command == "schedule_retry":
        assert attempt is not None
        b.op.schedule_retry(epoch=epoch, now=now, attempt_id=attempt, retry_at=now,
                            category=FailureCategory.SERVER_ERROR, reason=bad, possibly_applied=False)
    else:
        b.op.accept(epoch=epoch, now=now, attempt_id=attempt, remote_id="r-1")
        b.collect()
        b.op.receive_callback(now=b.tick(), callback_id="cb-1", outcome="failed", remote_status=bad,
                              detail=bad)
    for event in b.collect():
        stored = MAPPER.to_stored_event(event)
        assert len(stored.state) < 12_000
        assert MAPPER.to_domain_event(stored).__dict__ == event.__dict__


def test_a_recorded_operation_still_replays_with_escaped_facts() -> None:
    b = _dispatching()
    b.op.succeed(epoch=b.epoch, now=b.tick(), attempt_id=b.attempt_id, remote_id=SURROGATE_ID)
    b.collect()
    copies = [MAPPER.to_domain_event(MAPPER.to_stored_event(e)) for e in b.events]
    op = copies[0].mutate(None)
    for event in copies[1:]:
        op = event.mutate(op)
    assert op.remote_id == b.op.remote_id
    assert get_topic(type(op)) == get_topic(Operation)
