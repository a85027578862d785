"""The base of every ``Operation`` event, and how events defined by concern keep their topics.

A stored record names its event class by topic, ``module:Qualname``; every ``Operation`` event
was written as ``ledger.operation:Operation.<Name>`` while the events were nested in
``ledger/operation.py``. The events now live in modules by concern (``ledger.events.*``), and
:func:`stored_as` gives each the module and qualified name it had, so new records carry the same
topic as old ones and ``resolve_topic`` finds the class through ``Operation``, which nests them
(``ledger/operation.py``). No ``register_topic`` alias is needed, and readers selecting records
by topic (``ledger.topics.topics_of``) see one topic per event, as before.

The codec resolves the events' field annotations in ``ledger.operation``'s namespace
(``typing.get_type_hints`` reads the module an event class names): field types are kept to
builtins, ``datetime``, ``UUID`` and ``Any``, which that module imports.

Source: issue 33 item 1 ("the events keep their stored topics"); eventsourcing 9.5
``utils.get_topic``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from eventsourcing.domain import Aggregate, OriginatorIDError, OriginatorVersionError
from eventsourcing.utils import get_topic

from ledger.errors import CorruptRecordError

if TYPE_CHECKING:
    from ledger.operation import Operation

STORED_MODULE = "ledger.operation"
"""The module every ``Operation`` event's stored topic names."""
STORED_OWNER = "Operation"
"""The class every ``Operation`` event's stored topic nests it in."""

T = TypeVar("T", bound=type)


def stored_as(name: str) -> Callable[[T], T]:
    """Give an event class the stored topic ``ledger.operation:Operation.<name>``.

    Args:
        name: the event's class name as nested in ``Operation`` (its stored topic's last part).

    Returns:
        A class decorator; the class itself must also be set as ``Operation.<name>``
        (``ledger/operation.py`` does), so that the topic resolves.
    """

    def mark(cls: T) -> T:
        cls.__module__ = STORED_MODULE
        cls.__qualname__ = f"{STORED_OWNER}.{name}"
        return cls

    return mark


@stored_as("Event")
class OperationEvent(Aggregate.Event):
    """Base of every ledger event. ``timestamp`` is the injected ``now`` (UTC)."""

    # The library types this generically (TAggregate); ours folds only into an Operation.
    def mutate(self, aggregate: Operation | None) -> Operation | None:  # type: ignore[override]
        # The library's ``CanMutateAggregate.mutate``: the same checks, errors and steps, on
        # the aggregate's fields rather than through its properties (0.87 against 0.63 µs
        # a fold, timeit; every event a projection or a command applies passes here).
        if aggregate is None:  # records before this one are missing from the store
            raise CorruptRecordError(self.originator_id, self.originator_version, get_topic(type(self)),
                                     "the operation's earlier records are missing (its history must start "
                                     "with Intended)")
        if self.originator_id != aggregate._id:
            raise OriginatorIDError(self.originator_id, aggregate._id)
        next_version = aggregate._version + 1
        if self.originator_version != next_version:
            if self.originator_version > next_version:  # a gap: records are missing
                raise CorruptRecordError(self.originator_id, self.originator_version, get_topic(type(self)),
                                         f"records {next_version} to {self.originator_version - 1} are missing")
            raise OriginatorVersionError(self.originator_version, next_version)
        self.apply(aggregate)
        aggregate._version = next_version
        aggregate._modified_on = self.timestamp
        return aggregate


def without_status_or_detail(state: dict[str, Any]) -> None:
    """Upcast: version 1 of RetryScheduled and BudgetExhausted kept neither the attempt's HTTP
    status nor its detail (issue 34 item 5)."""
    state["status_code"] = None
    state["detail"] = ""


def without_settled_outcome(state: dict[str, Any]) -> None:
    """Upcast: version 1 of Settled, SettlementFailed and SettlementBlocked did not name the
    outcome they settled (issue 32 item 3)."""
    state["attempt_id"] = None
    state["epoch"] = None
