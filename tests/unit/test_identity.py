"""Derived operation ids, intent fingerprints and payload classification.

Source: DESIGN §3 ('operation id', 'fingerprint'), §6, §9 (secrets are references);
ledger/identity.py; ``Operation.intend``.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4, uuid5

import pytest
from builders import PAYLOAD, T0, integration, source

from ledger.errors import PayloadError
from ledger.identity import OPERATION_NAMESPACE, Source, fingerprint, operation_id, stable_payload
from ledger.operation import Operation

ENTITY = UUID("0b6f5a36-8e0c-4d1f-9d2a-4b5c6d7e8f90")
SOURCE = Source(tenant="tenant-a", entity_type="app.orders:Order", entity_id=ENTITY, entity_version=2,
                effect_index=0)


# ---------------------------------------------------------------------------------- operation id


def test_operation_id_is_stable_for_the_same_source() -> None:
    again = Source(tenant="tenant-a", entity_type="app.orders:Order", entity_id=UUID(str(ENTITY)),
                   entity_version=2, effect_index=0)
    assert operation_id(SOURCE, "payments.charge") == operation_id(again, "payments.charge")
    assert operation_id(SOURCE, "payments.charge").version == 5


def test_operation_id_is_pinned() -> None:
    # The namespace and key layout must never change: every stored id depends on them.
    assert OPERATION_NAMESPACE == UUID("6f1c7a2e-3b0d-5e8a-9c41-0d2b7e5f9a13")
    expected = uuid5(OPERATION_NAMESPACE, f'["tenant-a","{ENTITY}",2,"payments.charge",0]')
    assert operation_id(SOURCE, "payments.charge") == expected


@pytest.mark.parametrize(
    ("field", "value"),
    [("tenant", "tenant-b"), ("entity_id", uuid4()), ("entity_version", 3), ("effect_index", 1)],
)
def test_operation_id_differs_when_a_source_part_changes(field: str, value: Any) -> None:
    changed = dataclasses.replace(SOURCE, **{field: value})
    assert operation_id(changed, "payments.charge") != operation_id(SOURCE, "payments.charge")


def test_operation_id_differs_by_integration_name() -> None:
    assert operation_id(SOURCE, "payments.refund") != operation_id(SOURCE, "payments.charge")


def test_operation_id_ignores_entity_type_and_integration_version() -> None:
    # Documented: the key is (tenant, entity id, version, integration name, effect index). A new
    # declaration version maps to the same id, so a redeploy is caught as a fingerprint conflict.
    changed = dataclasses.replace(SOURCE, entity_type="app.other:Thing")
    assert operation_id(changed, "payments.charge") == operation_id(SOURCE, "payments.charge")
    v1 = Operation.intend(now=T0, integration=integration(version=1), source=SOURCE, payload=PAYLOAD)
    v2 = Operation.intend(now=T0, integration=integration(version=2), source=SOURCE, payload=PAYLOAD)
    assert v1.id == v2.id
    assert v1.fingerprint != v2.fingerprint


def test_operation_id_no_delimiter_collisions() -> None:
    a = Source(tenant="a,b", entity_type="m:C", entity_id=ENTITY, entity_version=1)
    b = Source(tenant="a", entity_type="m:C", entity_id=ENTITY, entity_version=1)
    assert operation_id(a, "x") != operation_id(b, "x")
    assert operation_id(b, "b.x") != operation_id(b, "x")


def test_intend_uses_the_derived_id() -> None:
    op = Operation.intend(now=T0, integration=integration(), source=SOURCE, payload=PAYLOAD)
    assert op.id == operation_id(SOURCE, "payments.charge")
    assert op.source == SOURCE


# ---------------------------------------------------------------------------------- fingerprint


def test_fingerprint_excludes_secret_fields() -> None:
    integ = integration()
    other_secret = {**PAYLOAD, "card": "secretref:another-card"}
    assert fingerprint(integ, PAYLOAD, None) == fingerprint(integ, other_secret, None)
    assert "card" not in stable_payload(integ, PAYLOAD)
    assert stable_payload(integ, PAYLOAD) == {"amount": 1250, "currency": "EUR", "note": "order 17"}


def test_fingerprint_is_stable_across_payload_key_order() -> None:
    integ = integration()
    reordered = dict(reversed(list(PAYLOAD.items())))
    assert list(reordered) != list(PAYLOAD)
    assert fingerprint(integ, PAYLOAD, "https://a") == fingerprint(integ, reordered, "https://a")
    nested = {"amount": {"value": 1, "unit": "cents"}}
    nested_reordered = {"amount": {"unit": "cents", "value": 1}}
    assert fingerprint(integ, nested, None) == fingerprint(integ, nested_reordered, None)


def test_fingerprint_format() -> None:
    value = fingerprint(integration(), PAYLOAD, None)
    assert value.startswith("sha256:") and len(value) == len("sha256:") + 64


@pytest.mark.parametrize(
    "change",
    [
        {"payload": {**PAYLOAD, "amount": 1251}},
        {"payload": {**PAYLOAD, "note": "order 18"}},  # internal fields are part of the intent
        {"payload": {k: v for k, v in PAYLOAD.items() if k != "currency"}},
        {"target": "https://partner.example/other"},
        {"integration": {"version": 2}},
        {"integration": {"name": "payments.refund"}},
    ],
    ids=["public-value", "internal-value", "field-removed", "target", "integration-version", "integration-name"],
)
def test_fingerprint_changes_with_the_caller_intent(change: dict[str, Any]) -> None:
    base = fingerprint(integration(), PAYLOAD, "https://partner.example/charges")
    integ = integration(**change.get("integration", {}))
    changed = fingerprint(integ, change.get("payload", PAYLOAD), change.get("target", "https://partner.example/charges"))
    assert changed != base


def test_intend_fingerprint_uses_the_declared_endpoint_as_target() -> None:
    integ = integration()
    op = Operation.intend(now=T0, integration=integ, source=SOURCE, payload=PAYLOAD)
    assert op.target == integ.endpoint
    assert op.fingerprint == fingerprint(integ, PAYLOAD, integ.endpoint)
    later = Operation.intend(now=datetime(2027, 5, 5, tzinfo=T0.tzinfo), integration=integ, source=SOURCE,
                             payload=dict(reversed(list(PAYLOAD.items()))), principal="someone-else")
    assert later.fingerprint == op.fingerprint  # time and principal are not part of the intent


# ---------------------------------------------------------------------------------- payload checks


def _intend(payload: Any) -> Operation:
    return Operation.intend(now=T0, integration=integration(), source=source(), payload=payload)


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"amount": 1, "colour": "red"}, ["payload.colour: field is not classified"]),
        ({"card": "4111111111111111"}, ["payload.card: secret fields take a 'secretref:NAME' reference"]),
        ({"card": "secretref:"}, ["payload.card: secret fields take"]),
        ({"card": 4111}, ["payload.card: secret fields take"]),
        ({"amount": math.nan}, ["payload.amount: numbers must be finite"]),
        ({"amount": math.inf}, ["payload.amount: numbers must be finite"]),
        ({"amount": {"value": -math.inf}}, ["payload.amount.value: numbers must be finite"]),
        ({"amount": [1, 2, math.nan]}, ["payload.amount[2]: numbers must be finite"]),
        ({"amount": Decimal("1.5")}, ["payload.amount: values must be plain JSON data, got Decimal"]),
        ({"note": {1, 2}}, ["payload.note: values must be plain JSON data, got set"]),
        ({"note": b"bytes"}, ["payload.note: values must be plain JSON data, got bytes"]),
        ({"note": T0}, ["payload.note: values must be plain JSON data, got datetime"]),
        ({"note": {1: "x"}}, ["payload.note: keys must be text"]),
    ],
    ids=["unclassified", "secret-value", "empty-secretref", "secret-not-string", "nan", "inf",
         "nested-inf", "nan-in-list", "decimal", "set", "bytes", "datetime", "non-string-key"],
)
def test_intend_rejects_bad_payloads(payload: dict[str, Any], expected: list[str]) -> None:
    with pytest.raises(PayloadError) as info:
        _intend(payload)
    problems = info.value.problems
    assert len(problems) == len(expected)
    for problem, prefix in zip(problems, expected):
        assert problem.startswith(prefix), problem
    assert info.value.integration == "payments.charge"


def test_intend_lists_every_payload_problem() -> None:
    payload = {
        "amount": math.nan,
        "currency": object(),
        "note": "fine",
        "card": "4111111111111111",
        "colour": "red",
        "size": 3,
    }
    with pytest.raises(PayloadError) as info:
        _intend(payload)
    problems = info.value.problems
    assert len(problems) == 5
    for field in ("amount", "currency", "card", "colour", "size"):
        assert any(p.startswith(f"payload.{field}: ") for p in problems), field
        assert f"payload.{field}: " in str(info.value)
    assert not any("note" in p for p in problems)


def test_intend_rejects_a_non_mapping_payload() -> None:
    with pytest.raises(PayloadError, match="mapping"):
        _intend([("amount", 1)])


def test_intend_accepts_plain_json_and_secret_references() -> None:
    op = _intend({"amount": 1.5, "currency": None, "note": {"lines": [1, "two", True, {"x": 0.0}]},
                  "card": "secretref:vault/card-17"})
    assert op.payload["card"] == "secretref:vault/card-17"
    assert op.execution.value == "pending"
