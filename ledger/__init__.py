"""opledger's core: the ``Operation`` aggregate and everything it stands on.

Imports nothing from ``projections``, ``executors`` or ``adapters`` (DESIGN §2).

The names below load on first use (PEP 562): ``import ledger.clock`` costs that module alone,
not the whole core. Every process the suite and an operator start imports some of it, and the
whole core is about half a second of CPU (mostly pydantic), which a partner, a CLI command that
never opens a store, or a test helper does not need (issue 28 item 5).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ledger.adapter_names import register_adapter
    from ledger.application import LedgerApplication
    from ledger.clock import Clock, FakeClock, SystemClock
    from ledger.config import Settings
    from ledger.declarations import DeliveryMode, Integration, Registry
    from ledger.egress import Adapter, EgressRequest, RemoteOperations
    from ledger.errors import (
        AttemptBudgetExceededError,
        ConfigurationError,
        CorruptRecordError,
        DeclarationError,
        IllegalTransitionError,
        IntentConflictError,
        LeaseExpiredError,
        LedgerError,
        OperationArchivedError,
        OperationNotFoundError,
        PayloadError,
        SettlementEntityMismatchError,
        StaleEpochError,
        StaleSettlementError,
        StoreDamagedError,
        StoreIdentityError,
        StoreLockedError,
        StorePathError,
        UnknownIntegrationError,
        UnreadableEventError,
        UnreadableHistoryError,
    )
    from ledger.identity import Source
    from ledger.intents import Delegation
    from ledger.operation import Operation
    from ledger.outcomes import (
        Accepted,
        Ambiguous,
        CancelConfirmed,
        CancelRefused,
        Failed,
        FailureCategory,
        StillRunning,
        Succeeded,
    )
    from ledger.settlement import SettlementOutcome, SettlementPolicy, SettlementRequest, default_settlement_policy
    from ledger.status import TERMINAL_STATUSES, ExecutionState, SettlementState, Status

_MODULES: dict[str, tuple[str, ...]] = {
    "ledger.adapter_names": ("register_adapter",),
    "ledger.application": ("LedgerApplication",),
    "ledger.clock": ("Clock", "FakeClock", "SystemClock"),
    "ledger.config": ("Settings",),
    "ledger.declarations": ("DeliveryMode", "Integration", "Registry"),
    "ledger.egress": ("Adapter", "EgressRequest", "RemoteOperations"),
    "ledger.errors": ("AttemptBudgetExceededError", "ConfigurationError", "CorruptRecordError", "DeclarationError",
        "IllegalTransitionError", "IntentConflictError", "LeaseExpiredError", "LedgerError", "OperationArchivedError",
        "OperationNotFoundError", "PayloadError", "SettlementEntityMismatchError", "StaleEpochError",
        "StaleSettlementError", "StoreDamagedError", "StoreIdentityError", "StoreLockedError", "StorePathError",
        "UnknownIntegrationError", "UnreadableEventError", "UnreadableHistoryError"),
    "ledger.identity": ("Source",),
    "ledger.intents": ("Delegation",),
    "ledger.operation": ("Operation",),
    "ledger.outcomes": ("Accepted", "Ambiguous", "CancelConfirmed", "CancelRefused", "Failed", "FailureCategory",
        "StillRunning", "Succeeded"),
    "ledger.settlement": ("SettlementOutcome", "SettlementPolicy", "SettlementRequest", "default_settlement_policy"),
    "ledger.status": ("TERMINAL_STATUSES", "ExecutionState", "SettlementState", "Status"),
}
"""Where each public name lives, for ``__getattr__`` (tests/unit/test_architecture.py checks it
against ``__all__`` and the imports above, which are for the type checkers)."""
_WHERE = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    # declaring and intending
    "LedgerApplication",
    "Integration",
    "Registry",
    "register_adapter",
    "DeliveryMode",
    "Source",
    "Settings",
    # the aggregate and its states
    "Operation",
    "ExecutionState",
    "SettlementState",
    "Status",
    "TERMINAL_STATUSES",
    "SettlementOutcome",
    "Delegation",
    "SettlementRequest",
    "SettlementPolicy",
    "default_settlement_policy",
    # the adapter seam
    "Adapter",
    "EgressRequest",
    "RemoteOperations",
    "StillRunning",
    "CancelConfirmed",
    "CancelRefused",
    "Succeeded",
    "Accepted",
    "Failed",
    "Ambiguous",
    "FailureCategory",
    # time
    "Clock",
    "SystemClock",
    "FakeClock",
    # errors
    "LedgerError",
    "IllegalTransitionError",
    "StaleEpochError",
    "SettlementEntityMismatchError",
    "StaleSettlementError",
    "LeaseExpiredError",
    "AttemptBudgetExceededError",
    "IntentConflictError",
    "OperationArchivedError",
    "DeclarationError",
    "PayloadError",
    "CorruptRecordError",
    "ConfigurationError",
    "StoreLockedError",
    "StoreIdentityError",
    "StorePathError",
    "StoreDamagedError",
    "OperationNotFoundError",
    "UnknownIntegrationError",
    "UnreadableEventError",
    "UnreadableHistoryError",
]


def __getattr__(name: str) -> Any:
    """Import ``name``'s module on first use and keep the name (PEP 562).

    Raises:
        AttributeError: ``name`` is not one of ``__all__``.
    """
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'ledger' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
