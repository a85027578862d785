"""Integration declarations: validation with field paths, stable digests, the registry.

Source: DESIGN §3 ('integration'), §5; ledger/declarations.py.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from ledger.declarations import Integration, Registry
from ledger.errors import DeclarationError, UnknownIntegrationError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "malformed_declarations.json"

BASE: dict[str, Any] = {
    "name": "payments.charge",
    "version": 1,
    "adapter": "webhook",
    "delivery_mode": "idempotent",
    "endpoint": "https://partner.example/charges",
    "request_timeout_seconds": 10.0,
    "retry": {"max_attempts": 3, "base_backoff_seconds": 1.0, "max_backoff_seconds": 60.0, "jitter": 0.2},
    "deadlines": {"pending": 3600.0, "claimed": 300.0, "dispatching": 600.0, "accepted": 86400.0},
    "settlement": {"entity_type": "app.orders:Order", "method": "record_charge", "max_attempts": 5,
                   "backoff_seconds": 1.0},
    "requires_approval": False,
    "budgets": {"calls_per_window": 100, "window_seconds": 60.0, "scope": "tenant"},
    "payload": {"amount": "public", "note": "internal", "card": "secret"},
}


def _cases() -> list[dict[str, Any]]:
    return json.loads(FIXTURE.read_text())["cases"]


def _declaration(case: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data.update(copy.deepcopy(case.get("set", {})))
    for key in case.get("remove", []):
        del data[key]
    return data


def test_base_declaration_is_valid() -> None:
    integration = Integration.parse(BASE)
    assert integration.key == ("payments.charge", 1)


def test_fixture_has_thirteen_distinct_cases() -> None:
    cases = _cases()
    assert len(cases) == 13
    assert len({c["id"] for c in cases}) == 13


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["id"])
def test_malformed_declaration_names_its_field_path(case: dict[str, Any]) -> None:
    with pytest.raises(DeclarationError) as info:
        Integration.parse(_declaration(case))
    error = info.value
    assert [path for path, _ in error.problems] == [case["path"]]
    assert f"  - {case['path']}: " in str(error)
    # The registry validates plain data the same way.
    with pytest.raises(DeclarationError) as again:
        Registry().declare(_declaration(case))
    assert again.value.problems == error.problems


def test_error_message_names_the_declaration() -> None:
    with pytest.raises(DeclarationError, match=r"integration declaration 'payments.charge' is invalid"):
        Integration.parse({**BASE, "delivery_mode": "exactly_once"})
    with pytest.raises(DeclarationError) as info:
        Integration.parse({k: v for k, v in BASE.items() if k != "name"})
    assert info.value.name == "?"


def test_several_problems_are_all_listed() -> None:
    data = copy.deepcopy(BASE)
    del data["name"]
    data.update({
        "delivery_mode": "exactly_once",
        "retries": 3,
        "endpoint": "partner.example",
        "retry": {"max_attempts": 0, "base_backoff_seconds": -1.0},
        "settlement": {"entity_type": "app.orders.Order", "method": "record_charge"},
        "payload": {"amount": "public", "card": "confidential"},
        "deadlines": {"pending": 0},
        "budgets": {"scope": "planet"},
    })
    with pytest.raises(DeclarationError) as info:
        Integration.parse(data)
    expected = {
        "name", "delivery_mode", "retries", "endpoint", "retry.max_attempts", "retry.base_backoff_seconds",
        "settlement.entity_type", "payload.card", "deadlines.pending", "budgets.scope",
    }
    assert {path for path, _ in info.value.problems} == expected
    message = str(info.value)
    for path in expected:
        assert f"  - {path}: " in message


def test_cross_field_problems_are_listed_with_the_others() -> None:
    # Cross-field rules must not hide behind field errors, nor lose their path.
    data = {**BASE, "endpoint": "ftp://partner.example", "adapter": "Web-Hook",
            "retry": {"base_backoff_seconds": 30.0, "max_backoff_seconds": 5.0},
            "payload": {"": "public"}}
    with pytest.raises(DeclarationError) as info:
        Integration.parse(data)
    assert {path for path, _ in info.value.problems} == {
        "endpoint", "adapter", "retry.max_backoff_seconds", "payload"}


# ---------------------------------------------------------------------------------- digest


def _reversed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _reversed(value[k]) for k in reversed(list(value))}
    return value


def test_digest_format_and_stability_across_key_order() -> None:
    digest = Integration.parse(BASE).digest()
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
    assert Integration.parse(_reversed(BASE)).digest() == digest
    assert Integration.parse(json.loads(json.dumps(BASE, sort_keys=True))).digest() == digest
    assert Integration.parse(copy.deepcopy(BASE)).digest() == digest


def test_digest_covers_defaults_whether_written_or_not() -> None:
    minimal = {"name": "payments.charge", "version": 1, "adapter": "webhook", "delivery_mode": "idempotent"}
    explicit = {**minimal, "retry": {"max_attempts": 5}, "requires_approval": False}
    assert Integration.parse(minimal).digest() == Integration.parse(explicit).digest()


RULE_CHANGES: dict[str, tuple[str, ...] | tuple[str, str, Any]] = {
    "version": ("version", 2),
    "adapter": ("adapter", "lro"),
    "delivery_mode": ("delivery_mode", "non_idempotent"),
    "endpoint": ("endpoint", "https://partner.example/v2/charges"),
    "request_timeout": ("request_timeout_seconds", 11.0),
    "retry.max_attempts": ("retry", "max_attempts", 4),
    "retry.base_backoff": ("retry", "base_backoff_seconds", 2.0),
    "retry.max_backoff": ("retry", "max_backoff_seconds", 61.0),
    "retry.jitter": ("retry", "jitter", 0.3),
    "deadlines.pending": ("deadlines", "pending", 3601.0),
    "deadlines.accepted": ("deadlines", "accepted", 3600.0),
    "settlement.method": ("settlement", "method", "record_payment"),
    "settlement.max_attempts": ("settlement", "max_attempts", 6),
    "settlement.removed": ("settlement", None),
    "requires_approval": ("requires_approval", True),
    "budgets.calls": ("budgets", "calls_per_window", 101),
    "budgets.scope": ("budgets", "scope", "integration"),
    "payload.classification": ("payload", "note", "secret"),
    "payload.new_field": ("payload", "email", "internal"),
}


@pytest.mark.parametrize("change", list(RULE_CHANGES.values()), ids=list(RULE_CHANGES))
def test_digest_changes_when_any_rule_changes(change: tuple[Any, ...]) -> None:
    data = copy.deepcopy(BASE)
    if len(change) == 2:
        key, value = change
        if value is None:
            del data[key]
        else:
            data[key] = value
    else:
        section, key, value = change
        data[section][key] = value
    assert Integration.parse(data).digest() != Integration.parse(BASE).digest()


# ---------------------------------------------------------------------------------- registry


def test_registry_redeclare_with_same_digest_is_accepted() -> None:
    registry = Registry()
    first = registry.declare(BASE)
    again = registry.declare(_reversed(BASE))
    assert again.digest() == first.digest()
    assert list(registry) == [again]


def test_registry_rejects_same_version_declared_differently() -> None:
    registry = Registry([Integration.parse(BASE)])
    with pytest.raises(DeclarationError) as info:
        registry.declare({**BASE, "delivery_mode": "non_idempotent"})
    assert [path for path, _ in info.value.problems] == ["version"]
    assert "bump the version" in str(info.value)
    assert registry.get("payments.charge").delivery_mode.value == "idempotent"


def test_registry_latest_version_by_name() -> None:
    registry = Registry()
    registry.declare({**BASE, "version": 2, "delivery_mode": "non_idempotent"})
    registry.declare(BASE)
    registry.declare({**BASE, "name": "payments.refund", "version": 7})
    assert registry.get("payments.charge").version == 2
    assert registry.get("payments.charge", 1).delivery_mode.value == "idempotent"
    assert registry.get("payments.refund").version == 7
    assert [i.key for i in registry] == [("payments.charge", 1), ("payments.charge", 2), ("payments.refund", 7)]


def test_registry_unknown_name_or_version() -> None:
    registry = Registry([Integration.parse(BASE)])
    with pytest.raises(UnknownIntegrationError):
        registry.get("payments.unknown")
    with pytest.raises(UnknownIntegrationError):
        registry.get("payments.charge", 3)


def test_declarations_are_frozen() -> None:
    integration = Integration.parse(BASE)
    with pytest.raises(Exception):
        integration.version = 2  # type: ignore[misc]
