"""Architecture rules that a test can prove (STYLE rules 3 and 13)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ledger", "projections", "executors", "adapters", "migrations")

# Dependencies point inward: what each package may import from the project.
ALLOWED = {
    "ledger": set(),
    "migrations": {"ledger"},
    "projections": {"ledger", "migrations"},
    "executors": {"ledger", "projections", "migrations"},
    "adapters": {"ledger", "projections", "executors", "migrations"},
}


def _project_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found & set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_dependencies_point_inward(package: str) -> None:
    offenders = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = _project_imports(path) - ALLOWED[package] - {package}
        if bad:
            offenders[str(path.relative_to(ROOT))] = sorted(bad)
    assert not offenders, f"{package} must not import {offenders}"


def test_no_wall_clock_in_domain_code() -> None:
    offenders = []
    for package in ("ledger", "executors", "projections"):
        for path in (ROOT / package).rglob("*.py"):
            if path.name == "clock.py":
                continue
            text = path.read_text()
            for needle in ("datetime.now(", "datetime.utcnow(", "time.time()"):
                if needle in text:
                    offenders.append(f"{path.relative_to(ROOT)}: {needle}")
    assert not offenders


PUBLIC_API = {
    "ledger": [
        "LedgerApplication", "Operation", "Integration", "Registry", "register_adapter", "DeliveryMode", "Source",
        "SettlementOutcome", "Delegation", "SettlementRequest", "SettlementPolicy", "default_settlement_policy",
        "SettlementEntityMismatchError", "StaleSettlementError", "Settings", "Clock", "SystemClock", "FakeClock", "ExecutionState",
        "SettlementState", "Status", "TERMINAL_STATUSES", "Succeeded", "Accepted", "Failed", "Ambiguous",
        "FailureCategory", "EgressRequest", "Adapter", "RemoteOperations", "StillRunning", "CancelConfirmed",
        "CancelRefused", "LedgerError", "IllegalTransitionError",
        "StaleEpochError", "LeaseExpiredError", "AttemptBudgetExceededError", "IntentConflictError",
        "DeclarationError", "PayloadError", "CorruptRecordError", "ConfigurationError", "StoreLockedError",
        "StoreIdentityError", "StorePathError", "StoreDamagedError", "OperationNotFoundError", "UnknownIntegrationError", "UnreadableEventError", "UnreadableHistoryError",
    ],
    "executors": [
        "Worker", "WorkerConfig", "Counts", "ClaimService", "ClaimConfig", "EgressService", "EgressConfig",
        "OutcomeService", "PollingService", "PollingConfig", "SettlementService", "LeaseService", "LeaseConfig", "commit_changes", "CommitResult",
        "Committer", "SecretProvider", "SecretResolver", "EnvironmentSecrets", "FileSecrets", "MissingSecretError",
    ],
    "projections": [
        "StatusProjection", "StatusProjectionConfig", "StatusView", "open_view", "StatusRow",
        "row_from_operation", "Lease", "NotLeaderError",
        "ProjectionWriter", "Leadership", "DueWork", "OperatorQueries", "MemoryStatusStore", "MemoryStatusView",
        "OperationFilter", "MetricsProjection", "MetricsProjectionConfig", "MetricsStore",
    ],
}


@pytest.mark.parametrize("package", sorted(PUBLIC_API))
def test_public_api_is_pinned(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(PUBLIC_API[package])
    for name in module.__all__:
        assert getattr(module, name) is not None


def test_no_two_test_modules_share_a_name() -> None:
    # The test folders are not packages: pytest imports each module by its basename, and two of
    # the same name stop the collection of the whole suite ("import file mismatch").
    from collections import Counter
    from pathlib import Path

    names = Counter(path.name for path in (Path(__file__).resolve().parents[1]).rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
