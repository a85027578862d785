"""The operation's state is declared once (``ledger.operation_state``): a newly intended
operation holds exactly the declared fields, and no two operations share a mutable field."""

from __future__ import annotations

import typing

from builders import new_operation

from ledger import operation_state
from ledger.operation_state import OperationState, not_yet_happened

# The library's own fields of every aggregate (``eventsourcing.domain.Aggregate``), and the
# events collected but not yet saved.
LIBRARY_FIELDS = {"_id", "_version", "_created_on", "_modified_on", "_pending_events"}


def test_an_intended_operation_holds_exactly_the_declared_fields() -> None:
    declared = set(typing.get_type_hints(OperationState, vars(operation_state)))
    held = set(vars(new_operation().op)) - LIBRARY_FIELDS
    assert held == declared


def test_not_yet_happened_names_only_declared_fields() -> None:
    assert set(not_yet_happened()) <= set(OperationState.__annotations__)


def test_no_two_operations_share_a_mutable_field() -> None:
    first, second = new_operation().op, new_operation().op
    first.callback_ids.add("cb-1")
    first.callback_signed_at["cb-1"] = first.due_at
    assert second.callback_ids == set() and second.callback_signed_at == {}
