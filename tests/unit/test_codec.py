"""The ledger codec: exact round-trips, failing closed on corrupt records, host events untouched.

Source: DESIGN §6 (strict, lossless msgspec mapper; the host's events keep their codec).
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import pytest
from eventsourcing.cipher import AESCipher
from eventsourcing.compressor import ZlibCompressor
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import DatetimeAsISO, DecimalAsStr, JSONTranscoder, StoredEvent, UUIDAsHex
from eventsourcing.utils import Environment, TopicError, get_topic
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.codec import LedgerEvent, LedgerMapper, event_struct, is_ledger_event_class
from ledger.errors import CorruptRecordError, UnreadableEventError
from ledger.operation import Operation

UTC = UTC
T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
OP_ID = UUID("0b7e3c1e-5a4f-5d2b-9c3e-7f1a2b3c4d5e")
ATTEMPT = UUID("9d4c8a3e-1f2b-4c5d-8e9f-0a1b2c3d4e5f")


# ---------------------------------------------------------------------------- helpers


class Money(LedgerEvent, Aggregate.Event):
    """A test-only ledger event with every type the codec promises to keep exactly."""

    amount: Decimal
    rates: list[Decimal]
    blob: bytes
    ref: UUID
    at: datetime
    maybe_at: datetime | None
    by_day: dict[str, datetime]
    tags: set[str]
    note: str | None


class HostThing(Aggregate.Event):
    """A host event: not a ledger event, so the library's transcoder stores it."""

    ref: UUID
    amount: Decimal


class SpyTranscoder(JSONTranscoder):
    """The library's JSON transcoder, counting calls so tests see which codec ran."""

    def __init__(self) -> None:
        super().__init__()
        self.register(UUIDAsHex())
        self.register(DecimalAsStr())
        self.register(DatetimeAsISO())
        self.encoded = 0
        self.decoded = 0

    def encode(self, obj: Any) -> bytes:
        self.encoded += 1
        return super().encode(obj)

    def decode(self, data: bytes) -> Any:
        self.decoded += 1
        return super().decode(data)


def same(a: Any, b: Any) -> bool:
    """Equal *and* of the same types at every depth (``1 == 1.0 == True`` does not pass)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return repr(a) == repr(b)
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()
    if isinstance(a, datetime):
        return a == b and a.utcoffset() == b.utcoffset()
    return a == b


def mapper(**kwargs: Any) -> LedgerMapper[UUID]:
    return LedgerMapper(SpyTranscoder(), **kwargs)


def roundtrip(event: Any, m: LedgerMapper[UUID] | None = None) -> Any:
    m = m or mapper()
    return m.to_domain_event(m.to_stored_event(event))


def intended(**overrides: Any) -> Operation.Intended:
    fields: dict[str, Any] = dict(
        originator_id=OP_ID,
        originator_version=1,
        timestamp=T0,
        originator_topic=get_topic(Operation),
        tenant="acme",
        principal="user:42",
        traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        integration_name="payments.charge",
        integration_version=3,
        integration_digest="sha256:" + "a" * 64,
        code_digest="sha256:" + "c" * 64,
        delivery_mode="idempotent",
        max_attempts=5,
        deadlines={"pending": 3600.0, "claimed": 300.0, "dispatching": 600.0, "accepted": 86400.0},
        settlement_max_attempts=5,
        requires_approval=True,
        payload={"amount": 1250, "currency": "EUR", "card": "secretref:CARD", "lines": [{"sku": "A1", "qty": 2.5}]},
        target="https://psp.example/charges",
        fingerprint="sha256:" + "f" * 64,
        source_entity_type="shop.orders:Order",
        source_entity_id=UUID("2f1d9a8e-7c6b-4a5d-9e8f-1a2b3c4d5e6f"),
        source_entity_version=7,
        effect_index=0,
        source_action="Placed",
        on_behalf_of=[{"principal": "customer:9", "role": "customer"}],
        opledger_version="0.1.0",
        opledger_commit="b483924bf593d00fc4a323936b184b525b8f5c98",
    )
    fields.update(overrides)
    return Operation.Intended(**fields)


def later(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# Realistic values for every event class of ``Operation``; None wherever a field is Optional.
OPERATION_EVENTS: dict[type, list[dict[str, Any]]] = {
    Operation.Intended: [{}, {"traceparent": None, "target": None, "payload": {}, "requires_approval": False,
                              "source_action": "", "on_behalf_of": [], "opledger_version": "",
                              "opledger_commit": ""}],
    # Generated by the library for every aggregate class; ``intend`` records ``Intended`` instead.
    Operation.Created: [{"originator_topic": get_topic(Operation)}],
    Operation.ApprovalGranted: [{"principal": "approver:7", "fingerprint": "sha256:f00d", "purpose": "refund",
                                 "expires_at": later(3600)},
                                {"principal": "approver:7", "fingerprint": "", "purpose": "", "expires_at": None}],
    Operation.ApprovalVoided: [{"reason": "approval_expired"}],
    Operation.BudgetWaited: [{"scope": "payments.charge", "until": later(60), "epoch": None},
                             {"scope": "(global)", "until": later(60), "epoch": 3}],
    Operation.ApprovalDenied: [{"principal": "approver:7", "reason": "over the limit"}],
    Operation.Claimed: [{"epoch": 1, "worker_id": "worker-a/1234", "lease_expires_at": later(30), "takeover": False}],
    Operation.LeaseRenewed: [{"epoch": 1, "lease_expires_at": later(60)}],
    Operation.AttemptStarted: [{"epoch": 1, "attempt_id": ATTEMPT, "attempt_number": 1,
                                "request_fingerprint": "sha256:" + "d" * 64}],
    Operation.Accepted: [{"epoch": 1, "attempt_id": ATTEMPT, "remote_id": "op_123", "status_code": 202,
                          "excerpt": '{"id":"op_123"}', "follow": "poll", "follow_until": later(600)},
                         {"epoch": 1, "attempt_id": ATTEMPT, "remote_id": "op_123", "status_code": None,
                          "excerpt": "", "follow": "wait", "follow_until": None}],
    Operation.RemoteOverdue: [{"deadline_at": later(60)}],
    Operation.RemoteStatusObserved: [{"epoch": 2, "remote_status": "RUNNING"}],
    Operation.CallbackReceived: [{"callback_id": "cb_1", "outcome": "succeeded", "remote_status": "DONE",
                                  "detail": "ok", "attempt_id": ATTEMPT, "signed_at": later(5)},
                                 {"callback_id": "cb_2", "outcome": "progress", "remote_status": None,
                                  "detail": "", "attempt_id": None, "signed_at": None}],
    Operation.LateObservationRecorded: [{"callback_id": "cb_3", "attempt_id": ATTEMPT, "signed_at": later(6),
                                         "outcome": "succeeded", "remote_status": "DONE", "detail": "late",
                                         "recorded_outcome": "cancelled"},
                                        {"callback_id": "cb_4", "attempt_id": None, "signed_at": None,
                                         "outcome": "failed", "remote_status": None, "detail": "",
                                         "recorded_outcome": "succeeded"}],
    Operation.Succeeded: [{"epoch": 1, "attempt_id": ATTEMPT, "status_code": 200, "remote_id": "ch_9",
                           "excerpt": "{}"},
                          {"epoch": 1, "attempt_id": None, "status_code": None, "remote_id": None, "excerpt": ""}],
    Operation.Failed: [{"epoch": 1, "attempt_id": ATTEMPT, "category": "rejected", "retryable": False,
                        "status_code": 422, "detail": "card declined"},
                       {"epoch": 1, "attempt_id": None, "category": "connect", "retryable": True,
                        "status_code": None, "detail": ""}],
    Operation.Ambiguous: [{"epoch": 1, "attempt_id": ATTEMPT, "reason": "read_timeout", "status_code": None,
                           "detail": "no response after 10 s"},
                          {"epoch": 1, "attempt_id": None, "reason": "http_5xx", "status_code": 502,
                           "detail": "bad gateway"}],
    Operation.RetryScheduled: [{"epoch": 1, "attempt_id": ATTEMPT, "retry_at": later(2.5), "category": "throttled",
                                "reason": "429 Retry-After: 2", "possibly_applied": False, "status_code": 429,
                                "detail": "slow down"},
                               {"epoch": 1, "attempt_id": ATTEMPT, "retry_at": later(2.5), "category": "server_error",
                                "reason": "server_error", "possibly_applied": True, "status_code": None,
                                "detail": ""}],
    Operation.DeclarationMismatched: [{"worker_id": "worker-2", "declared_digest": "sha256:ab12"}],
    Operation.CancelRequested: [{"principal": "user:42", "reason": "customer changed mind"}],
    Operation.Cancelled: [{"epoch": 3, "reason": "cancelled by user"}, {"epoch": None, "reason": ""}],
    Operation.CancelFailed: [{"epoch": 3, "reason": "provider refused"}],
    Operation.DeadlineExceeded: [{"state": "dispatching", "deadline_at": later(600), "ambiguous": True}],
    Operation.BudgetExhausted: [{"epoch": 5, "attempts": 5, "ambiguous": False, "status_code": 500,
                                 "detail": "internal error"}],
    Operation.SettlementFailed: [{"error": "entity locked", "retry_at": later(5), "attempt_id": ATTEMPT, "epoch": 1},
                                 {"error": "entity locked", "retry_at": later(5), "attempt_id": None, "epoch": None}],
    Operation.SettlementBlocked: [{"reason": "entity deleted", "code": "", "attempt_id": ATTEMPT, "epoch": 2},
                                  {"reason": "denied: no", "code": "settlement_denied", "attempt_id": None,
                                   "epoch": None}],
    Operation.WriteRefused: [{"kind": "outcome", "error": "P0001: refused by trigger", "epoch": 2},
                             {"kind": "claim", "error": "CHECK constraint failed: no", "epoch": None}],
    Operation.Settled: [{"entity_version": 8, "principal": "system", "traceparent": None, "attempt_id": ATTEMPT,
                         "epoch": 1},
                        {"entity_version": 8, "principal": "system",
                         "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                         "attempt_id": None, "epoch": None}],
    Operation.Resolved: [{"principal": "operator:1", "resolution": "succeeded", "evidence": "seen in PSP dashboard"}],
}


def build(cls: type, kwargs: dict[str, Any], version: int = 2) -> Any:
    if cls is Operation.Intended:
        return intended(**kwargs)
    return cls(originator_id=OP_ID, originator_version=version, timestamp=later(version), **kwargs)


def stored(topic: str, state: bytes, version: int = 2, originator_id: Any = OP_ID) -> StoredEvent:
    return StoredEvent(originator_id=originator_id, originator_version=version, topic=topic, state=state)


def claimed_state(**changes: Any) -> dict[str, Any]:
    state: dict[str, Any] = {"timestamp": "2026-03-01T12:00:01Z", "epoch": 1, "worker_id": "w1",
                             "lease_expires_at": "2026-03-01T12:00:31Z", "takeover": False}
    state.update(changes)
    return {k: v for k, v in state.items() if v is not ...}


CLAIMED = get_topic(Operation.Claimed)


# ---------------------------------------------------------------------------- round-trips


def test_every_operation_event_class_has_samples() -> None:
    classes = {v for v in vars(Operation).values()
               if isinstance(v, type) and issubclass(v, Operation.Event) and v is not Operation.Event}
    assert classes == set(OPERATION_EVENTS)


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [(cls, kw) for cls, samples in OPERATION_EVENTS.items() for kw in samples],
    ids=lambda v: v.__qualname__ if isinstance(v, type) else "",
)
def test_operation_events_roundtrip_exactly(cls: type, kwargs: dict[str, Any]) -> None:
    m = mapper()
    event = build(cls, kwargs)
    record = m.to_stored_event(event)
    back = m.to_domain_event(record)
    assert type(back) is cls
    assert same(vars(back), vars(event))
    assert record.topic == get_topic(cls)
    # Ledger events never touch the host's transcoder.
    assert m.transcoder.encoded == m.transcoder.decoded == 0  # type: ignore[attr-defined]


def test_stored_state_is_readable_json_without_column_fields() -> None:
    record = mapper().to_stored_event(build(Operation.Claimed, OPERATION_EVENTS[Operation.Claimed][0]))
    assert json.loads(record.state) == {
        "timestamp": "2026-03-01T12:00:02.123456Z", "epoch": 1, "worker_id": "worker-a/1234",
        "lease_expires_at": "2026-03-01T12:00:30.123456Z", "takeover": False,
    }
    assert record.originator_id == OP_ID and record.originator_version == 2


def test_decimal_bytes_uuid_and_aware_datetimes_are_lossless() -> None:
    plus_two = timezone(timedelta(hours=2))
    event = Money(
        originator_id=uuid4(), originator_version=3, timestamp=T0,
        amount=Decimal("0.1000"), rates=[Decimal("1E+3"), Decimal("-0"), Decimal("3.14159265358979323846264338")],
        blob=bytes(range(256)), ref=uuid4(), at=datetime(2026, 3, 1, 14, 0, 0, 1, tzinfo=plus_two),
        maybe_at=None, by_day={"mon": datetime(2026, 3, 2, tzinfo=UTC)}, tags={"a", "b"}, note=None,
    )
    back = roundtrip(event)
    assert same(vars(back), vars(event))
    assert str(back.amount) == "0.1000" and back.amount.as_tuple().exponent == -4
    assert str(back.rates[0]) == "1E+3" and str(back.rates[1]) == "-0"
    assert back.at.utcoffset() == timedelta(hours=2)
    assert back.tags == {"a", "b"} and type(back.tags) is set


def test_compressor_and_cipher_apply_to_ledger_events() -> None:
    env = Environment(env={AESCipher.CIPHER_KEY: AESCipher.create_key(16)})
    m = mapper(compressor=ZlibCompressor(), cipher=AESCipher(env))
    event = intended()
    record = m.to_stored_event(event)
    assert b"payments.charge" not in record.state
    assert same(vars(m.to_domain_event(record)), vars(event))


def test_event_struct_is_strict_and_cached() -> None:
    struct = event_struct(Operation.Claimed)
    assert struct is event_struct(Operation.Claimed)
    assert struct.__struct_fields__ == ("timestamp", "epoch", "worker_id", "lease_expires_at", "takeover")
    assert struct.__struct_config__.forbid_unknown_fields
    assert "originator_topic" in event_struct(Operation.Intended).__struct_fields__


def test_marker_picks_ledger_events() -> None:
    assert is_ledger_event_class(Operation.Intended)
    assert is_ledger_event_class(Money)
    assert not is_ledger_event_class(HostThing)
    assert not is_ledger_event_class(Aggregate.Created)


# ---------------------------------------------------------------------------- host events


def test_host_events_keep_the_library_codec() -> None:
    m = mapper()
    event = HostThing(originator_id=uuid4(), originator_version=2, timestamp=T0, ref=uuid4(),
                      amount=Decimal("1.50"))
    record = m.to_stored_event(event)
    # The library's transcodings, not msgspec: UUIDs as {"_type_": "uuid_hex", ...}.
    assert json.loads(record.state)["ref"] == {"_type_": "uuid_hex", "_data_": event.ref.hex}
    assert m.transcoder.encoded == 1  # type: ignore[attr-defined]
    back = m.to_domain_event(record)
    assert m.transcoder.decoded == 1  # type: ignore[attr-defined]
    assert vars(back) == vars(event)


def test_unknown_host_topic_keeps_the_library_error() -> None:
    with pytest.raises(TopicError):
        mapper().to_domain_event(stored("nowhere.at.all:Gone", b"{}"))


def test_subclass_can_opt_in_other_classes() -> None:
    class Everything(LedgerMapper[UUID]):
        def handles(self, cls: type) -> bool:
            return True

    m = Everything(SpyTranscoder())
    event = HostThing(originator_id=uuid4(), originator_version=2, timestamp=T0, ref=uuid4(),
                      amount=Decimal("1.50"))
    record = m.to_stored_event(event)
    assert json.loads(record.state)["ref"] == str(event.ref)
    assert vars(m.to_domain_event(record)) == vars(event)


# ---------------------------------------------------------------------------- failing closed


def assert_corrupt(record: StoredEvent, reason_part: str, m: LedgerMapper[UUID] | None = None) -> None:
    with pytest.raises(CorruptRecordError) as info:
        (m or mapper()).to_domain_event(record)
    err = info.value
    assert err.originator_id == record.originator_id
    assert err.position == record.originator_version
    assert err.topic == record.topic
    message = str(err)
    assert str(record.originator_id) in message
    assert f"position {record.originator_version}" in message
    # msgspec's wording varies in case between releases ("utf-8" / "UTF-8").
    assert reason_part.lower() in message.lower(), message


def encode(state: dict[str, Any]) -> bytes:
    return json.dumps(state).encode()


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        (b'{"timestamp": "2026-03-01T12:00:01Z", "epoch": ', "truncated"),
        (b'{"timestamp": "2026-03-01T12:00:01Z",, }', "malformed"),
        (b"", "truncated"),
        (b"[1, 2]", "Expected `object`"),
        (b'"just a string"', "Expected `object`"),
        (encode(claimed_state(epoch="1")), "Expected `int`, got `str` - at `$.epoch`"),
        (encode(claimed_state(epoch=1.0)), "Expected `int`, got `float`"),
        (encode(claimed_state(takeover=0)), "Expected `bool`, got `int`"),
        (encode(claimed_state(worker_id=None)), "Expected `str`, got `null`"),
        (encode(claimed_state(extra="x")), "unknown field `extra`"),
        (encode(claimed_state(class_version=2)), "class_version 2 is newer than this code's 1"),
        (encode(claimed_state(worker_id=...)), "missing required field `worker_id`"),
        (encode(claimed_state(lease_expires_at="2026-03-01T12:00:31")), "timezone"),
        (encode(claimed_state(timestamp="2026-03-01 noon")), "Invalid RFC3339"),
        (encode(claimed_state(worker_id="w\u00001")), "NUL character"),
        (b'{"timestamp":"2026-03-01T12:00:01Z","epoch":1,"worker_id":"w\xff1",'
         b'"lease_expires_at":"2026-03-01T12:00:31Z","takeover":false}', "utf-8"),
        (b'{"timestamp":"2026-03-01T12:00:01Z","epoch":1,"worker_id":"w\\ud800",'
         b'"lease_expires_at":"2026-03-01T12:00:31Z","takeover":false}', "surrogate"),
    ],
    ids=["truncated-json", "malformed-json", "empty", "array", "string", "str-for-int", "float-for-int", "int-for-bool",
         "null-for-str", "unknown-field", "class-version-from-the-future", "missing-field", "naive-datetime",
         "bad-datetime", "nul", "invalid-utf8", "lone-surrogate"],
)
def test_corrupt_claimed_records_fail_closed(state: bytes, reason: str) -> None:
    assert_corrupt(stored(CLAIMED, state), reason)


@pytest.mark.parametrize(
    ("topic", "state", "unreadable"),
    [
        ("ledger.operation:Operation.Vanished", None, True),  # a type this code lacks
        (CLAIMED, encode(claimed_state(class_version=2)), True),  # a version newer than the code's
        (CLAIMED, encode(claimed_state(class_version=1, extra="x")), False),
        (CLAIMED, encode(claimed_state(extra="x")), False),
        (CLAIMED, b"{not json", False),
    ],
    ids=["unknown-topic", "newer-class-version", "unknown-field-beside-a-version", "unknown-field", "malformed"],
)
def test_records_this_code_is_too_old_for_are_unreadable_not_corrupt(topic: str, state: bytes | None,
                                                                    unreadable: bool) -> None:
    # Both fail closed as CorruptRecordError; only a record newer code may have written is an
    # UnreadableEventError (attention reason unreadable_event, re-read after an upgrade).
    record = stored(topic, state if state is not None else mapper().to_stored_event(intended()).state, version=2)
    with pytest.raises(CorruptRecordError) as info:
        mapper().to_domain_event(record)
    assert isinstance(info.value, UnreadableEventError) is unreadable
    if unreadable:
        assert "cannot be read by this code" in str(info.value)


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ({"a": "x\u0000y"}, "$.payload.a"),
        ({"a": [1, {"b": ["ok", "\u0000"]}]}, "$.payload.a[1].b[1]"),
        ({"k\u0000": 1}, "$.payload (a key)"),
    ],
)
def test_nul_anywhere_in_payload_fails_closed(payload: dict[str, Any], where: str) -> None:
    good = mapper().to_stored_event(intended())
    state = json.loads(good.state)
    state["payload"] = payload
    assert_corrupt(stored(good.topic, encode(state), version=1), f"text at {where} contains a NUL")


def test_escaped_backslash_u0000_text_is_not_a_nul() -> None:
    # The text "\u0000" (six characters) is fine; only a real NUL character is refused.
    event = intended(payload={"a": "\\u0000"})
    assert same(vars(roundtrip(event)), vars(event))


def test_unknown_ledger_topic_fails_closed() -> None:
    record = mapper().to_stored_event(intended())
    assert_corrupt(stored("ledger.operation:Operation.Vanished", record.state, version=1), "does not resolve")
    assert_corrupt(stored("ledger.gone_module:Operation.Intended", record.state, version=1), "does not resolve")


def test_wrong_uuid_and_naive_timestamp_in_created_event_fail_closed() -> None:
    state = json.loads(mapper().to_stored_event(intended()).state)
    bad_uuid = dict(state, source_entity_id="not-a-uuid")
    assert_corrupt(stored(get_topic(Operation.Intended), encode(bad_uuid), version=1), "Invalid UUID")
    naive = dict(state, timestamp="2026-03-01T12:00:00")
    assert_corrupt(stored(get_topic(Operation.Intended), encode(naive), version=1), "$.timestamp")
    missing_topic = {k: v for k, v in state.items() if k != "originator_topic"}
    assert_corrupt(stored(get_topic(Operation.Intended), encode(missing_topic), version=1), "originator_topic")


def test_undecryptable_record_fails_closed() -> None:
    env = Environment(env={AESCipher.CIPHER_KEY: AESCipher.create_key(16)})
    m = mapper(cipher=AESCipher(env), compressor=ZlibCompressor())
    record = m.to_stored_event(build(Operation.Claimed, OPERATION_EVENTS[Operation.Claimed][0]))
    flipped = bytearray(record.state)
    flipped[-1] ^= 1
    assert_corrupt(stored(record.topic, bytes(flipped)), "", m=m)
    other_key = mapper(cipher=AESCipher(Environment(env={AESCipher.CIPHER_KEY: AESCipher.create_key(16)})))
    assert_corrupt(record, "", m=other_key)


def test_plain_record_read_with_compressor_fails_closed() -> None:
    record = mapper().to_stored_event(build(Operation.Claimed, OPERATION_EVENTS[Operation.Claimed][0]))
    assert_corrupt(record, "", m=mapper(compressor=ZlibCompressor()))


def test_originator_id_stored_as_str_is_converted() -> None:
    record = mapper().to_stored_event(build(Operation.Claimed, OPERATION_EVENTS[Operation.Claimed][0]))
    back = mapper().to_domain_event(stored(record.topic, record.state, originator_id=str(OP_ID)))
    assert back.originator_id == OP_ID and type(back.originator_id) is UUID


# ---------------------------------------------------------------------------- refusing to write


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"lease_expires_at": datetime(2026, 3, 1, 12, 0, 30)}, "timezone"),
        ({"worker_id": "w\u00001"}, "NUL character"),
        ({"worker_id": 7}, "Expected `str`, got `int`"),
        ({"epoch": True}, "Expected `int`, got `bool`"),
        ({"worker_id": "w\ud800"}, "surrogates not allowed"),
    ],
)
def test_writing_what_could_not_be_read_back_is_refused(changes: dict[str, Any], reason: str) -> None:
    kwargs = dict(OPERATION_EVENTS[Operation.Claimed][0], **changes)
    with pytest.raises(ValueError, match="refusing to store") as info:
        mapper().to_stored_event(build(Operation.Claimed, kwargs))
    assert reason in str(info.value)
    assert str(OP_ID) in str(info.value)


@pytest.mark.parametrize(
    "payload",
    [{"x": math.nan}, {"x": math.inf}, {"x": {1, 2}}, {"x": (1, 2)}, {"x": object()}, {"x": Decimal("1.5")}],
    ids=["nan", "inf", "set", "tuple", "object", "decimal-in-any"],
)
def test_payload_that_would_not_survive_storage_is_refused(payload: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="refusing to store"):
        mapper().to_stored_event(intended(payload=payload))


# ---------------------------------------------------------------------------- property


# Text without NUL or lone surrogates (neither is valid text in a stored record).
json_text = st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=20)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | json_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(json_text, children, max_size=4),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(payload=st.dictionaries(json_text, json_values, max_size=6))
def test_any_plain_json_payload_roundtrips_exactly(payload: dict[str, Any]) -> None:
    event = intended(payload=payload)
    back = roundtrip(event)
    assert same(back.payload, payload)
    assert same(vars(back), vars(event))


# ---------------------------------------------------------------------------- through an Application


class Order(Aggregate):
    """A host entity: its events keep the library's codec in the same store."""

    def __init__(self, amount: Decimal) -> None:
        self.amount = amount


def charge_integration() -> Any:
    from ledger.declarations import Integration

    return Integration.parse({
        "name": "payments.charge", "version": 1, "adapter": "webhook", "delivery_mode": "callback",
        "endpoint": "https://psp.example/charges", "requires_approval": True,
        "settlement": {"entity_type": "test_codec:Order", "method": "mark_paid"},
        "payload": {"amount": "public", "currency": "public", "card": "secret", "lines": "internal"},
    })


def test_operation_roundtrips_through_a_sqlite_application(tmp_path: Any) -> None:
    from eventsourcing.application import Application

    from ledger.identity import Source

    app = Application[UUID](env={
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": str(tmp_path / "ledger.db"),
        "MAPPER_TOPIC": "ledger.codec:LedgerMapper",
    })
    assert type(app.mapper) is LedgerMapper
    order = Order(amount=Decimal("12.50"))
    source = Source(tenant="acme", entity_type=get_topic(Order), entity_id=order.id, entity_version=1)
    op = Operation.intend(now=T0, integration=charge_integration(), source=source,
                          payload={"amount": 1250, "currency": "EUR", "card": "secretref:CARD",
                                   "lines": [{"sku": "A1", "qty": 2.5}]},
                          principal="user:42", traceparent=None)
    app.save(order, op)  # one save(): co-committed (DESIGN §6)

    op.grant_approval(now=later(1), principal="approver:7", roles={"approver"})
    epoch = op.claim(now=later(2), worker_id="w1", lease_seconds=30)
    op.start_attempt(epoch=epoch, now=later(3), attempt_id=ATTEMPT, request_fingerprint="sha256:" + "d" * 64)
    op.accept(epoch=epoch, now=later(4), attempt_id=ATTEMPT, remote_id="op_123", status_code=202)
    op.observe_remote_status(epoch=epoch, now=later(5), remote_status="RUNNING")
    op.receive_callback(now=later(6), callback_id="cb_1", outcome="progress", remote_status="HALFWAY")
    op.receive_callback(now=later(7), callback_id="cb_2", outcome="succeeded", detail="done")
    op.settle(now=later(8), entity_version=2)
    app.save(op)

    loaded = app.repository.get(op.id)
    assert same(vars(loaded), vars(op))
    assert loaded.callback_ids == {"cb_1", "cb_2"}
    assert loaded.status == op.status and loaded.next_due_at == op.next_due_at
    assert app.repository.get(order.id).amount == Decimal("12.50")

    # A corrupt record appended behind the aggregate stops its loading: no half-built operation.
    good = app.mapper.to_stored_event(build(Operation.SettlementBlocked, {"reason": "x", "code": "", "attempt_id": None,
                                                                          "epoch": None}))
    app.recorder.insert_events([StoredEvent(originator_id=op.id, originator_version=op.version + 1,
                                            topic=good.topic, state=good.state.replace(b'"x"', b'7'))])
    with pytest.raises(CorruptRecordError, match=f"operation {op.id} at position {op.version + 1}"):
        app.repository.get(op.id)
    app.close()


def test_nested_naive_datetime_fails_closed() -> None:
    m = mapper()
    event = Money(originator_id=uuid4(), originator_version=3, timestamp=T0, amount=Decimal("1"), rates=[],
                  blob=b"", ref=uuid4(), at=T0, maybe_at=T0, by_day={"mon": T0}, tags=set(), note="n")
    record = m.to_stored_event(event)
    for good, bad in [(b'"mon":"2026-03-01T12:00:00.123456Z"', b'"mon":"2026-03-01T12:00:00.123456"'),
                      (b'"maybe_at":"2026-03-01T12:00:00.123456Z"', b'"maybe_at":"2026-03-01T12:00:00.123456"')]:
        assert good in record.state
        broken = stored(record.topic, record.state.replace(good, bad), version=3,
                        originator_id=record.originator_id)
        assert_corrupt(broken, "timezone")
    with pytest.raises(ValueError, match="timezone"):
        m.to_stored_event(Money(**dict(vars(event), by_day={"mon": datetime(2026, 3, 1)})))


def test_an_approval_recorded_before_approvals_were_bound_upcasts_and_is_honoured() -> None:
    # ApprovalGranted v1 held only the principal (no class_version in its state).
    topic = "ledger.operation:Operation.ApprovalGranted"
    v1 = stored(topic, json.dumps({"timestamp": "2026-03-01T12:00:01Z", "principal": "approver:7"}).encode())
    event = mapper().to_domain_event(v1)
    assert (event.principal, event.fingerprint, event.purpose, event.expires_at) == ("approver:7", "", "", None)
    from ledger.approvals import void_reason

    op = intended().mutate(None)
    event.mutate(op)
    assert op.approval == "granted" and void_reason(op, later(10**6)) is None
    stored_v2 = mapper().to_stored_event(event)
    assert json.loads(stored_v2.state)["class_version"] == 2


def test_a_callback_recorded_before_it_named_its_attempt_upcasts() -> None:
    # CallbackReceived v1 had no attempt_id and no signed_at (no class_version in its state).
    topic = "ledger.operation:Operation.CallbackReceived"
    v1 = stored(topic, json.dumps({"timestamp": "2026-03-01T12:00:01Z", "callback_id": "cb_1", "outcome": "progress",
                                   "remote_status": None, "detail": ""}).encode())
    event = mapper().to_domain_event(v1)
    assert (event.callback_id, event.attempt_id, event.signed_at) == ("cb_1", None, None)


def test_a_budget_wait_recorded_before_leased_waits_upcasts_as_unleased() -> None:
    # BudgetWaited v1 (a pending operation's wait only) had no epoch and no class_version.
    topic = "ledger.operation:Operation.BudgetWaited"
    v1 = stored(topic, json.dumps({"timestamp": "2026-03-01T12:00:01Z", "scope": "payments.charge",
                                   "until": "2026-03-01T12:00:10Z"}).encode())
    event = mapper().to_domain_event(v1)
    until = datetime(2026, 3, 1, 12, 0, 10, tzinfo=UTC)
    assert (event.scope, event.until, event.epoch) == ("payments.charge", until, None)
    op = intended().mutate(None)
    event.mutate(op)
    assert (op.due_at, op.budget_wait_until, op.budget_wait) == (until, until, "payments.charge")
    assert json.loads(mapper().to_stored_event(event).state)["class_version"] == 2


@pytest.mark.parametrize(("name", "state"), [
    ("RetryScheduled", {"epoch": 1, "attempt_id": str(ATTEMPT), "retry_at": "2026-03-01T12:00:05Z",
                        "category": "server_error", "reason": "server_error", "possibly_applied": True}),
    ("BudgetExhausted", {"epoch": 5, "attempts": 5, "ambiguous": False}),
])
def test_a_retry_or_exhaustion_recorded_before_it_kept_the_status_upcasts(name: str, state: dict[str, Any]) -> None:
    # Version 1 of both kept neither the attempt's HTTP status nor its excerpt (issue 34 item 5).
    v1 = stored(f"ledger.operation:Operation.{name}", json.dumps({"timestamp": "2026-03-01T12:00:01Z",
                                                                 **state}).encode())
    event = mapper().to_domain_event(v1)
    assert (event.status_code, event.detail) == (None, "")
    assert json.loads(mapper().to_stored_event(event).state)["class_version"] == 2


@pytest.mark.parametrize(("name", "state"), [
    ("Settled", {"entity_version": 8, "principal": "system", "traceparent": None}),
    ("SettlementFailed", {"error": "entity locked", "retry_at": "2026-03-01T12:00:05Z"}),
    ("SettlementBlocked", {"reason": "entity deleted"}),
])
def test_a_settlement_recorded_before_it_named_its_outcome_upcasts(name: str, state: dict[str, Any]) -> None:
    # Version 1 of the settlement events named neither the attempt nor the epoch (issue 32 item 3).
    v1 = stored(f"ledger.operation:Operation.{name}", json.dumps({"timestamp": "2026-03-01T12:00:01Z",
                                                                 **state}).encode())
    event = mapper().to_domain_event(v1)
    assert (event.attempt_id, event.epoch) == (None, None)
    if name == "SettlementBlocked":
        assert event.code == ""
    assert json.loads(mapper().to_stored_event(event).state)["class_version"] == 2


def test_an_intent_recorded_before_the_chain_of_authority_upcasts() -> None:
    # Intended v1 kept neither the source action nor a delegation chain (issue 32 item 4).
    v2 = mapper().to_stored_event(intended())
    state = json.loads(v2.state)
    for key in ("source_action", "on_behalf_of", "class_version", "opledger_version", "opledger_commit"):
        state.pop(key)
    event = mapper().to_domain_event(stored(v2.topic, json.dumps(state).encode(), version=1))
    assert (event.source_action, event.on_behalf_of) == ("", [])
    op = event.mutate(None)
    assert (op.source_action, op.on_behalf_of) == ("", [])
    assert (op.opledger_version, op.opledger_commit) == ("", "")


def test_an_intent_recorded_before_provenance_upcasts_with_none_recorded() -> None:
    # Intended v2 named neither the opledger version nor its commit (issue 31 item 2).
    v3 = mapper().to_stored_event(intended())
    state = json.loads(v3.state)
    assert state["class_version"] == 3 and state["opledger_commit"].startswith("b483924")
    for key in ("opledger_version", "opledger_commit"):
        state.pop(key)
    state["class_version"] = 2
    event = mapper().to_domain_event(stored(v3.topic, json.dumps(state).encode(), version=1))
    assert (event.opledger_version, event.opledger_commit, event.source_action) == ("", "", "Placed")
    assert json.loads(mapper().to_stored_event(event).state)["class_version"] == 3
