"""``ledger.operator_actions``: what it offers is exactly what the aggregate's commands accept.

For operations built in every execution and settlement state (and with a late observation,
approval required, cancellation already requested), each offer is tried on a copy of the
operation: an offered action records an event, an action or resolution not offered is refused.
Source: issue 31 item 5.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from builders import Built, build, build_settlement, replay

from ledger.approvals import ApprovalRequest
from ledger.commands import RESOLUTIONS
from ledger.errors import ApprovalRefusedError, IllegalTransitionError
from ledger.operation import Operation
from ledger.operator_actions import ACTIONS, ActionOffer, approval_refusal, state_allows
from ledger.status import ExecutionState as E
from ledger.status import SettlementState as S


def _late_observation() -> Built:
    b = build(E.SUCCEEDED)
    b.op.receive_callback(now=b.tick(), callback_id="late-1", outcome="failed")
    return b


def _cancel_requested() -> Built:
    b = build(E.PENDING)
    b.op.request_cancel(now=b.tick(), principal="otto", reason="asked")
    return b


def _no_attempt_left() -> Built:
    return build(E.AMBIGUOUS, retry={"max_attempts": 1, "base_backoff_seconds": 1.0, "max_backoff_seconds": 60.0})


CASES: dict[str, Callable[[], Built]] = {
    **{f"execution {state.value}": (lambda state=state: build(state)) for state in E},
    **{f"settlement {state.value}": (lambda state=state: build_settlement(state)) for state in S},
    "approval required": lambda: build(E.PENDING, requires_approval=True),
    "late observation": _late_observation,
    "cancel requested": _cancel_requested,
    "ambiguous, no attempt left": _no_attempt_left,
}


def _copy(b: Built) -> Operation:
    b.collect()
    return replay(b.events)


def _records(b: Built, act: Callable[[Operation], Any]) -> bool:
    op = _copy(b)
    try:
        act(op)
    except (IllegalTransitionError, ApprovalRefusedError):
        return False
    return bool(list(op.collect_events()))


def _try(b: Built, action: str, resolution: str = "") -> bool:
    now = b.now
    acts: dict[str, Callable[[Operation], Any]] = {
        "resolve": lambda op: op.resolve(now=now, principal="otto", resolution=resolution, evidence="checked"),
        "retry_settlement": lambda op: op.resolve(now=now, principal="otto", resolution="retry_settlement",
                                                  evidence="fixed"),
        "cancel": lambda op: op.request_cancel(now=now, principal="otto", reason="asked"),
        "approve": lambda op: op.grant_approval(now=now, principal="anna", roles={"approver"}),
        "deny": lambda op: op.deny_approval(now=now, principal="anna", reason="no"),
    }
    return _records(b, acts[action])


@pytest.mark.parametrize("case", sorted(CASES))
def test_offers_are_exactly_what_the_commands_accept(case: str) -> None:
    b = CASES[case]()
    offers = {offer.action: offer for offer in state_allows(_copy(b))}
    assert [o for o in ACTIONS if o in offers] == list(offers)  # in ACTIONS order
    for action in ACTIONS:
        if action == "resolve":
            offered = offers["resolve"].resolutions if "resolve" in offers else ()
            accepted = tuple(r for r in RESOLUTIONS if r != "retry_settlement" and _try(b, "resolve", r))
            assert offered == accepted, case
        else:
            assert (action in offers) == _try(b, action), (case, action)


def test_the_cases_cover_every_action_and_acknowledge() -> None:
    offered = [state_allows(_copy(make())) for make in CASES.values()]
    actions = {offer.action for offers in offered for offer in offers}
    assert actions == set(ACTIONS)
    resolutions = {r for offers in offered for offer in offers for r in offer.resolutions}
    assert {"acknowledge", "retry", "abandon", "succeeded", "failed"} <= resolutions
    assert ActionOffer("resolve", ("acknowledge",)) in state_allows(_copy(_late_observation()))
    assert "retry" not in state_allows(_copy(_no_attempt_left()))[0].resolutions


def test_approval_refusal_asks_the_policy_with_the_approver() -> None:
    b = build(E.PENDING, requires_approval=True)
    seen: list[ApprovalRequest] = []

    def policy(request: ApprovalRequest) -> str | None:
        seen.append(request)
        return "not on Sundays" if request.approver == "sam" else None

    assert approval_refusal(b.op, "anna", ["approver"], policy=policy) is None
    assert approval_refusal(b.op, "sam", ["approver"], policy=policy) == "not on Sundays"
    assert seen[0].roles == frozenset({"approver"}) and seen[0].integration == b.op.integration_name
    assert "self-approval" in (approval_refusal(b.op, b.op.principal, ["approver"]) or "")
    assert "role" in (approval_refusal(b.op, "vera", ["viewer"]) or "")
