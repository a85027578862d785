"""Declarations refuse what could never run (issue 34 item 3): an adapter this process does not
know, a private or dunder settlement method (when parsed), and a settlement entity type that does
not import or lacks the method (when the application is built)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from adapters.runtime import build_adapters
from ledger import register_adapter
from ledger.adapter_names import BUILT_IN_ADAPTERS, known_adapters
from ledger.application import LedgerApplication
from ledger.clock import FakeClock
from ledger.config import Settings
from ledger.declarations import Integration
from ledger.errors import ConfigurationError, DeclarationError
from tests.conftest import SECRET

POPO = {"PERSISTENCE_MODULE": "eventsourcing.popo"}


def _data(**changes: Any) -> dict[str, Any]:
    return {"name": "payments.charge", "version": 1, "adapter": "webhook", "delivery_mode": "idempotent",
            "settlement": {"entity_type": "tests.apps:Thing", "method": "on_result"}, **changes}


def _one_problem(data: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(DeclarationError) as caught:
        Integration.parse(data)
    [problem] = caught.value.problems
    return problem


def test_an_unknown_adapter_names_what_this_process_knows_and_the_nearest() -> None:
    path, message = _one_problem(_data(adapter="webhok"))
    assert path == "adapter"
    assert message.startswith("unknown adapter 'webhok' (this process knows webhook, lro, fake")
    assert "did you mean 'webhook'?" in message and "ledger.register_adapter('webhok')" in message
    assert "did you mean" not in _one_problem(_data(adapter="smtp"))[1]


def test_a_registered_adapter_may_be_declared() -> None:
    assert register_adapter("carrier_pigeon") == "carrier_pigeon"
    assert Integration.parse(_data(adapter="carrier_pigeon")).adapter == "carrier_pigeon"
    assert known_adapters()[:3] == BUILT_IN_ADAPTERS and "carrier_pigeon" in known_adapters()
    with pytest.raises(ValueError, match="lower-case letters"):
        register_adapter("Carrier-Pigeon")


@pytest.mark.parametrize(("method", "kind"), [("_apply", "a private method"), ("__init__", "a dunder method"),
                                              ("__call__", "a dunder method")])
def test_a_settlement_method_must_be_public(method: str, kind: str) -> None:
    path, message = _one_problem(_data(settlement={"entity_type": "tests.apps:Thing", "method": method}))
    assert path == "settlement.method" and message.startswith(f"{method!r} is {kind}")


def _app(settlement: dict[str, str]) -> type[LedgerApplication]:
    class App(LedgerApplication):
        integrations = [_data(settlement=settlement)]

    return App


@pytest.mark.parametrize(("settlement", "path", "message"), [
    ({"entity_type": "no_such_module_here:Order", "method": "on_result"}, "settlement.entity_type",
     "'no_such_module_here:Order' does not import"),
    ({"entity_type": "tests.apps:NoSuchClass", "method": "on_result"}, "settlement.entity_type",
     "'tests.apps:NoSuchClass' does not import"),
    ({"entity_type": "tests.apps:MAX_ATTEMPTS", "method": "on_result"}, "settlement.entity_type", "is not a class"),
    ({"entity_type": "tests.apps:Thing", "method": "on_payment"}, "settlement.method",
     "Thing has no method 'on_payment'"),
])
def test_a_settlement_target_that_does_not_resolve_is_refused_when_the_application_is_built(
        settlement: dict[str, str], path: str, message: str) -> None:
    app_class = _app(settlement)  # declaring is fine: the class may be defined later
    with pytest.raises(DeclarationError) as caught:
        app_class(env=POPO)
    [(found_path, found_message)] = caught.value.problems
    assert found_path == path and message in found_message
    assert f"  - {path}: " in str(caught.value)


def test_a_declaration_above_its_entity_class_in_one_module_builds() -> None:
    # The README's shape: the declaration names "shop_like:Order" before class Order exists.
    module = types.ModuleType("shop_like")
    sys.modules["shop_like"] = module
    try:
        exec(  # noqa: S102 (a module's text, as the README's example is run)
            "from eventsourcing.domain import Aggregate\n"
            "from ledger.application import LedgerApplication\n"
            "from ledger.declarations import Integration\n"
            "CHARGE = Integration.parse({'name': 'payments.charge', 'version': 1, 'adapter': 'fake',\n"
            "    'delivery_mode': 'idempotent', 'settlement': {'entity_type': 'shop_like:Order', 'method': 'paid'}})\n"
            "class Order(Aggregate):\n"
            "    def paid(self, outcome): pass\n"
            "class Shop(LedgerApplication):\n"
            "    integrations = [CHARGE]\n", module.__dict__)
        module.Shop(env=POPO).close()
    finally:
        del sys.modules["shop_like"]


def test_the_runtime_builds_every_built_in_adapter() -> None:
    class Every(LedgerApplication):
        integrations = [_data(name=f"every.{name}", adapter=name, settlement=None) for name in BUILT_IN_ADAPTERS]

    app = Every(env=POPO)
    try:
        built = build_adapters(Settings(webhook_secret=SECRET), app, FakeClock())
        assert set(built) == set(BUILT_IN_ADAPTERS)
    finally:
        app.close()


def test_the_runtime_names_a_registered_adapter_it_cannot_build() -> None:
    class Own(LedgerApplication):
        integrations = [_data(adapter=register_adapter("smtp_relay"), settlement=None)]

    app = Own(env=POPO)
    try:
        with pytest.raises(ConfigurationError, match=r"adapter 'smtp_relay', which `opledger worker` does not build"):
            build_adapters(Settings(webhook_secret=SECRET), app, FakeClock())
    finally:
        app.close()
