"""What ``opledger migrate`` and ``worker`` say at start about settings and declarations, on
both backends (issue 34 item 3): an unknown ``OPLEDGER_*`` variable is a warning naming the
nearest known one, and the start goes on; a declaration whose settlement target does not
resolve stops it, naming the field."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BROKEN_APP = '''
from ledger.application import LedgerApplication

class Broken(LedgerApplication):
    name = "modes"  # the store migrated for tests.apps:ModesApp, so the worker's store checks pass
    integrations = [{"name": "payments.charge", "version": 1, "adapter": "fake", "delivery_mode": "idempotent",
                     "settlement": {"entity_type": "shop_models_gone:Order", "method": "on_payment"}}]
'''


def _cli(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OPLEDGER_")}
    environ |= {"PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path)]), **env}
    return subprocess.run([sys.executable, "-m", "adapters.cli", *args], capture_output=True, text=True,
                          env=environ, timeout=120, cwd=tmp_path)


def test_an_unknown_setting_is_a_warning_and_migrate_goes_on(database_url: str, tmp_path: Path) -> None:
    result = _cli(["migrate", "--database-url", database_url], tmp_path, OPLEDGER_APP="tests.apps:ModesApp",
                  OPLEDGER_LEASE_SECOND="5")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == ["warning: OPLEDGER_LEASE_SECOND is not an opledger setting and is "
                                          "ignored; did you mean OPLEDGER_LEASE_SECONDS?"]
    assert "migrated store" in result.stdout


def test_a_settlement_target_that_does_not_import_stops_the_start(database_url: str, tmp_path: Path) -> None:
    (tmp_path / "broken_shop.py").write_text(BROKEN_APP)
    assert _cli(["migrate", "--database-url", database_url], tmp_path,
                OPLEDGER_APP="tests.apps:ModesApp").returncode == 0
    for command in (["migrate"], ["worker"]):
        result = _cli([*command, "--database-url", database_url], tmp_path, OPLEDGER_APP="broken_shop:Broken")
        assert result.returncode == 2, result.stderr
        assert "settlement.entity_type: 'shop_models_gone:Order' does not import" in result.stderr
        assert "Traceback" not in result.stderr
