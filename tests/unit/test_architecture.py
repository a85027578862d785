"""Architecture rules that a test can prove (STYLE rules 3 and 13)."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
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
        "StaleEpochError", "LeaseExpiredError", "AttemptBudgetExceededError", "IntentConflictError", "OperationArchivedError",
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
    assert set(getattr(module, "_WHERE", module.__all__)) == set(module.__all__), "a lazy name not public, or lost"


def test_a_module_of_the_core_imports_that_module_only() -> None:
    # ledger/__init__.py loads its names on first use: a process that needs the clock (the
    # partner, a test helper) does not pay for the whole core, pydantic and the library included.
    code = "import sys, ledger.clock; print(' '.join(sorted(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    assert {m for m in loaded if m.startswith("ledger.")} == {"ledger.clock", "ledger.errors"}, loaded
    assert not {"pydantic", "eventsourcing", "msgspec"} & set(loaded), loaded


def test_no_two_test_modules_share_a_name() -> None:
    # The test folders are not packages: pytest imports each module by its basename, and two of
    # the same name stop the collection of the whole suite ("import file mismatch").
    from collections import Counter
    from pathlib import Path

    names = Counter(path.name for path in (Path(__file__).resolve().parents[1]).rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []


# --- One store seam (ADR 0008): backends are named only inside the drivers ---------------------

DRIVERS = "migrations/drivers/"
STAND_INS = "adapters/partner/"
"""The reference partner: a stand-in for a remote provider, a program of its own with its own
SQLite file of requests, never the store; its statements are not the store's."""
NOT_YET_MOVED = {
    # ADR 0008, "Where it stands": modules that still name a backend or hold a statement. The set
    # only shrinks: a module that stops offending must leave it (the test says so).
    "ledger/config.py", "ledger/store_files.py", "ledger/store_identity.py",
}
_STATEMENT = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|PRAGMA|LISTEN|NOTIFY|BEGIN|WITH|"
                        r"TRUNCATE|VACUUM)\b|\b(SELECT\s.*\sFROM|INSERT\s+INTO|DELETE\s+FROM|UPDATE\s+\w+\s+SET)\b")
_BACKEND = re.compile(r"^(sqlite|postgres|postgresql|popo|eventsourcing\.(sqlite|postgres|popo))$|"
                      r"^(sqlite|postgres|postgresql):/+$")
_RECORDER = re.compile(r"^(POPO|SQLite|Postgres)\w*(Recorder|Datastore|Factory)$")


def _docstrings(tree: ast.AST) -> set[int]:
    """Ids of the string statements (docstrings, attribute docstrings): prose, not code."""
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        for statement in body if isinstance(body, list) else []:
            if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                found.add(id(statement.value))
    return found


def _backend_mentions(path: Path) -> list[str]:
    """Where ``path`` names a backend (a string that is a backend's name, module or URL scheme),
    holds an SQL statement in a string, or names a library recorder class or module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    prose = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            if _STATEMENT.search(node.value) or _BACKEND.search(node.value):
                found.append(f"{node.lineno}: {node.value[:50]!r}")
        elif isinstance(node, ast.Name | ast.Attribute | ast.alias):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else node.name
            if _RECORDER.match(name):
                found.append(f"{getattr(node, 'lineno', 0)}: {name}")
        if isinstance(node, ast.ImportFrom) and node.module and _BACKEND.search(node.module):
            found.append(f"{node.lineno}: from {node.module}")
    return found


def test_only_the_drivers_name_a_backend_or_hold_a_statement() -> None:
    # STYLE rule 19, ADR 0008: outside migrations/drivers/ no code asks which backend it is on
    # (it asks the driver for a capability) and no statement is written in a Python string.
    offenders = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name.startswith((DRIVERS, STAND_INS)):
                continue
            if found := _backend_mentions(path):
                offenders[name] = found
    unexpected = {name: found for name, found in offenders.items() if name not in NOT_YET_MOVED}
    assert not unexpected, f"ask the store driver instead (ADR 0008): {unexpected}"
    assert NOT_YET_MOVED <= set(offenders), f"moved into the drivers, take off NOT_YET_MOVED: {NOT_YET_MOVED - set(offenders)}"


def test_the_backend_guard_can_fail(tmp_path: Path) -> None:
    module = tmp_path / "example.py"
    module.write_text('"""Docs may say SELECT * FROM x and sqlite."""\n'
                      'from eventsourcing.popo import POPOApplicationRecorder\n'
                      'if backend == "sqlite":\n    sql = f"SELECT a FROM {table}"\n'
                      'message = "the SQLite file is read-only"\n')
    found = _backend_mentions(module)
    assert [line.split(":")[0] for line in found] == ["2", "2", "3", "4"], found
