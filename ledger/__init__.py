"""opledger's core: the ``Operation`` aggregate and everything it stands on.

Imports nothing from ``projections``, ``executors`` or ``adapters`` (DESIGN §2).
"""

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
