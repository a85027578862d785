"""Issue 14 items 3 and 4 at intend time: every bad payload is a ``PayloadError`` naming the path;
``secretref:`` only in secret fields; no credentials in URLs; bounded operator text."""

from __future__ import annotations

import hashlib
import math
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest

from ledger.declarations import DEFAULT_MAX_PAYLOAD_BYTES, Integration, canonical_json
from ledger.errors import DeclarationError, InvalidArgumentError, PayloadError
from ledger.identity import Source
from ledger.intents import MAX_EVIDENCE_CHARS, MAX_PAYLOAD_DEPTH, MAX_REASON_CHARS
from ledger.operation import Operation
from tests.unit.builders import in_memory_app

NOW = datetime(2026, 1, 1, tzinfo=UTC)
FIELDS = {"n": "public", "doc": "public", "note": "internal", "key": "secret"}
HOOK = Integration.parse({"name": "hooks.send", "version": 1, "adapter": "webhook",
                          "delivery_mode": "idempotent", "payload": FIELDS})
SOURCE = Source(tenant="t", entity_type="m:E", entity_id=uuid4(), entity_version=1)
TARGET = "https://partner.example/hook"


def _intend(payload: Any, integration: Integration = HOOK, **kwargs: Any) -> Operation:
    return Operation.intend(now=NOW, integration=integration, source=SOURCE, payload=payload,
                            **({"target": TARGET} | kwargs))


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(("payload", "problem"), [
    ({"doc": "a\x00b"}, "payload.doc: holds a NUL character at character 1"),
    ({"doc": {"inner": ["ok", "x\ud800"]}}, "payload.doc.inner[1]: holds a lone surrogate (U+D800)"),
    ({"doc": {"k\x00": 1}}, "payload.doc: key 'k\\x00' holds a NUL character"),
    ({"doc": _nested(MAX_PAYLOAD_DEPTH + 5)}, f"nested deeper than {MAX_PAYLOAD_DEPTH} levels"),
    ({"doc": _nested(100_000)}, f"nested deeper than {MAX_PAYLOAD_DEPTH} levels"),
    ({"doc": {"a": [1.0, -math.inf]}}, "payload.doc.a[1]: numbers must be finite"),
    ({"doc": "x" * DEFAULT_MAX_PAYLOAD_BYTES}, "payload: 65,546 bytes of JSON; the declaration allows 65,536"),
    ({"doc": "secretref:db-password"}, "payload.doc: 'secretref:' references are resolved only in fields"),
    ({"note": ["secretref:anything"]}, "payload.note[0]: 'secretref:' references are resolved only"),
    ({"key": "secretref:ok", "doc": {"deep": {"x": "secretref:k"}}}, "payload.doc.deep.x: 'secretref:'"),
], ids=["nul", "surrogate", "nul-key", "deep", "very-deep", "infinite", "oversize", "secretref-public",
        "secretref-internal-nested", "secretref-deep"])
def test_bad_payloads_are_payload_errors_naming_the_path(payload: dict[str, Any], problem: str) -> None:
    with pytest.raises(PayloadError) as info:
        _intend(payload)
    assert any(p.startswith(problem) or problem in p for p in info.value.problems), info.value.problems


def test_the_payload_limit_is_declared_and_exact() -> None:
    big = Integration.parse({"name": "hooks.big", "version": 1, "adapter": "webhook",
                             "delivery_mode": "idempotent", "payload": FIELDS, "max_payload_bytes": 200_000})
    payload = {"doc": "x" * 100_000}
    assert _intend(payload, big).payload == payload
    with pytest.raises(PayloadError, match="200,000"):
        _intend({"doc": "x" * 200_000}, big)
    exact = {"doc": "x" * (DEFAULT_MAX_PAYLOAD_BYTES - len('{"doc":""}'))}
    _intend(exact)  # exactly at the default limit


NEW_FIELDS = {"max_payload_bytes", "approval_purpose", "approval_valid_seconds", "polling", "retention_seconds"}
"""Declaration fields added since (issue 14; issue 29's retention); a declaration written before
them hashed the rest."""


def test_new_fields_at_their_defaults_leave_recorded_digests_unchanged() -> None:
    explicit = Integration.parse({"name": "hooks.send", "version": 1, "adapter": "webhook",
                                  "delivery_mode": "idempotent", "payload": FIELDS,
                                  "max_payload_bytes": DEFAULT_MAX_PAYLOAD_BYTES, "approval_purpose": "",
                                  "approval_valid_seconds": 86_400})
    assert explicit.digest() == HOOK.digest()
    before = {k: v for k, v in HOOK.model_dump(mode="json").items() if k not in NEW_FIELDS}
    del before["budgets"]["per_tenant"]  # nested, added by the hierarchical budgets
    assert HOOK.digest() == "sha256:" + hashlib.sha256(canonical_json(before)).hexdigest()
    changed = Integration.parse({**explicit.model_dump(mode="json"), "approval_purpose": "refund above 1,000 EUR"})
    assert changed.digest() != HOOK.digest()


def test_a_huge_payload_lists_a_bounded_number_of_problems() -> None:
    with pytest.raises(PayloadError) as info:
        _intend({"doc": [math.nan] * 10_000})
    assert len(info.value.problems) == 51 and info.value.problems[-1] == "... and 9,950 more"


@pytest.mark.parametrize("target", ["https://user:pw@partner.example/hook", "https://token@partner.example/h",
                                    "http://a:b@127.0.0.1:8080/x"])
def test_credentials_in_a_target_url_are_refused_without_printing_them(target: str) -> None:
    with pytest.raises(PayloadError, match="carries credentials") as info:
        _intend({"n": 1}, target=target)
    assert "pw" not in str(info.value).replace("password", "") and ":b@" not in str(info.value)


def test_a_non_http_target_is_printed_without_its_password() -> None:
    with pytest.raises(PayloadError) as info:
        _intend({"n": 1}, target="ftp://user:hunter2@host/x")
    assert "hunter2" not in str(info.value) and "ftp://user:***@host/x" in str(info.value)


def test_credentials_in_a_declared_endpoint_are_refused() -> None:
    with pytest.raises(DeclarationError, match="must not carry credentials"):
        Integration.parse({"name": "hooks.x", "version": 1, "adapter": "webhook", "delivery_mode": "idempotent",
                           "endpoint": "https://u:p@partner.example/"})


def test_an_empty_tenant_is_refused_not_defaulted() -> None:
    app, thing = in_memory_app(HOOK)
    with pytest.raises(PayloadError, match="tenant: must not be empty"):
        app.intend(thing, "hooks.send", payload={"n": 1}, target=TARGET, tenant="")
    with pytest.raises(PayloadError, match="tenant: must not be empty"):
        app.intend(thing, "hooks.send", payload={"n": 1}, target=TARGET, tenant="   ")
    assert app.intend(thing, "hooks.send", payload={"n": 1}, target=TARGET).tenant == "default"


@pytest.mark.parametrize(("command", "limit"), [
    (lambda op, text: op.request_cancel(now=NOW, principal="ops", reason=text), MAX_REASON_CHARS),
    (lambda op, text: op.deny_approval(now=NOW, principal="ops", reason=text), MAX_REASON_CHARS),
], ids=["cancel-reason", "deny-reason"])
def test_operator_reasons_are_bounded(command: Any, limit: int) -> None:
    needs_approval = Integration.parse({"name": "hooks.approve", "version": 1, "adapter": "webhook",
                                        "delivery_mode": "idempotent", "requires_approval": True,
                                        "payload": FIELDS})
    op = _intend({"n": 1}, needs_approval)
    with pytest.raises(InvalidArgumentError, match=f"reason is 1,000,000 characters; the limit is {limit:,}"):
        command(op, "x" * 1_000_000)
    with pytest.raises(InvalidArgumentError, match="reason holds a NUL character at character 2"):
        command(op, "ab\x00")
    command(op, "y" * limit)  # at the limit: recorded
    assert op.pending_events[-1].reason == "y" * limit


def test_resolve_evidence_is_bounded() -> None:
    op = _intend({"n": 1})
    with pytest.raises(InvalidArgumentError, match=f"evidence is {MAX_EVIDENCE_CHARS + 1:,} characters"):
        op.resolve(now=NOW, principal="ops", resolution="abandon", evidence="e" * (MAX_EVIDENCE_CHARS + 1))
    with pytest.raises(InvalidArgumentError, match="lone surrogate"):
        op.resolve(now=NOW, principal="ops", resolution="abandon", evidence="checked \udc80")
    with pytest.raises(InvalidArgumentError, match="principal is 257 characters"):
        op.request_cancel(now=NOW, principal="p" * 257, reason="r")
