"""The rules of governed settlement (issue 32), each one pure function: the entity type a
declaration settles into, the settlement fence, the default settlement policy and its loader."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from uuid import UUID

import pytest

from ledger.decisions import OutcomeRef, settlement_fence_problem
from ledger.errors import ConfigurationError, InvalidArgumentError
from ledger.intents import Delegation, check_delegation
from ledger.settlement import SettlementRequest, default_settlement_policy, entity_type_problem, load_settlement_policy
from tests.apps import Thing, Ticket

# Fixed ids, so each parametrized test has the same id in every process (pytest-xdist compares them).
A1, A2 = UUID(int=1), UUID(int=2)


@pytest.mark.parametrize(("declared", "entity_type", "matches"), [
    ("tests.apps:Thing", Thing, True),
    ("tests.apps:Thing", Ticket, False),
    ("tests.nowhere:Thing", Thing, False),  # does not resolve, and is not the class's own topic
])
def test_entity_type_problem(declared: str, entity_type: type, matches: bool) -> None:
    problem = entity_type_problem(declared, entity_type)
    assert (problem is None) is matches
    if problem is not None:
        assert declared in problem


@pytest.mark.parametrize(("recorded", "settles", "allowed", "says"), [
    ((A1, 1), (A1, 1), True, ""),
    ((None, 0), (None, 0), True, ""),  # cancelled before any attempt
    ((A2, 3), (A1, 1), False, "epoch 1"),  # a zombie's copy from before the takeover
    ((A2, 3), (A1, 3), False, f"attempt {A1}"),
    ((A1, 1), (None, 1), False, "attempt None"),
])
def test_settlement_fence(recorded: tuple[Any, int], settles: tuple[Any, int], allowed: bool, says: str) -> None:
    op = SimpleNamespace(outcome_attempt_id=recorded[0], outcome_epoch=recorded[1])
    problem = settlement_fence_problem(op, OutcomeRef(*settles))
    assert (problem is None) is allowed
    assert problem is None or says in problem


def _request(method: str) -> SettlementRequest:
    outcome: Any = SimpleNamespace(principal_chain=("clerk:7", "customer:42"))
    return SettlementRequest(operation=SimpleNamespace(), outcome=outcome, entity=object(),  # type: ignore[arg-type]
                             entity_type="tests.apps:Thing", method=method, declared_method="on_result")


def test_the_default_policy_allows_exactly_the_declared_method() -> None:
    assert default_settlement_policy(_request("on_result")) is None
    assert "on_result" in (default_settlement_policy(_request("delete")) or "")
    assert _request("on_result").principal_chain == ("clerk:7", "customer:42")


def test_a_named_policy_is_loaded_and_a_bad_name_refused() -> None:
    assert load_settlement_policy(None) is default_settlement_policy
    assert load_settlement_policy("ledger.settlement:default_settlement_policy") is default_settlement_policy
    with pytest.raises(ConfigurationError, match="does not resolve"):
        load_settlement_policy("tests.nowhere:policy")
    with pytest.raises(ConfigurationError, match="not callable"):
        load_settlement_policy("ledger.settlement:__doc__")


def test_the_delegation_chain_is_checked() -> None:
    assert check_delegation([Delegation("customer:42", "customer")], "Placed") == [
        {"principal": "customer:42", "role": "customer"}]
    with pytest.raises(InvalidArgumentError, match="principal"):
        check_delegation([Delegation(" ", "customer")], "")
    with pytest.raises(InvalidArgumentError, match="Delegation"):
        check_delegation([{"principal": "x"}], "")  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match="limit"):
        check_delegation([Delegation(f"p{i}") for i in range(17)], "")


def _guide_policy() -> Any:
    import re
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "docs" / "guide.md").read_text()
    block = re.search(r"<!-- settlement-policy-example -->\n```python\n(.*?)```", guide, flags=re.S)
    assert block is not None
    namespace: dict[str, Any] = {}
    exec(compile(block.group(1), "docs/guide.md", "exec"), namespace)
    return namespace["orders_policy"]


def test_the_guides_example_policy_runs_as_written() -> None:
    policy = _guide_policy()

    def request(principal: str, links: tuple[Delegation, ...], entity_type: str, method: str = "on_payment") -> Any:
        outcome = SimpleNamespace(principal=principal, on_behalf_of=links,
                                  principal_chain=(principal, *(link.principal for link in links)))
        return SettlementRequest(operation=SimpleNamespace(), outcome=outcome, entity=object(),  # type: ignore[arg-type]
                                 entity_type=entity_type, method=method, declared_method="on_payment")

    assert policy(request("system", (Delegation("customer:42", "customer"),), "shop.orders:Order")) is None
    assert "customer:42 (customer) may not settle" in policy(
        request("system", (Delegation("customer:42", "customer"),), "shop.stock:Item"))
    assert "clerk:7 (no role)" in policy(request("clerk:7", (), "shop.orders:Order"))
    assert "declared settlement method" in policy(request("system", (), "shop.orders:Order", "delete"))
