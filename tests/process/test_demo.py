"""The README's first command, `opledger demo`, end to end (SQLite, real processes, a SIGKILL)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adapters.demo.run import closing_line

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.process


@pytest.mark.slow
def test_demo_loses_nothing_and_applies_nothing_twice(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, "-m", "adapters.cli", "demo", "--json", "--orders", "6"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    summary = json.loads(run.stdout)
    assert summary["operations"] == 12 + 5  # two per order, and the provisioning flow's five
    assert summary["lost"] == 0 and summary["duplicate_effects"] == 0
    assert sum(summary["by_status"].values()) == 17
    assert set(summary["by_status"]) <= {"settled", "ambiguous"}
    assert not summary["succeeded_without_exactly_one_effect"]
    assert (tmp_path / ".opledger" / "demo.db").exists()
    assert (tmp_path / ".opledger").stat().st_mode & 0o777 == 0o700, "the store's directory, as doctor wants it"
    # The closing line counts what `ops list` lists in the demo's store.
    listed = subprocess.run([sys.executable, "-m", "adapters.cli", "ops", "list", "--json", "--database-url",
                             f"sqlite:///{tmp_path / '.opledger' / 'demo.db'}"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    line = closing_line(summary, "opledger", "sqlite:///demo.db")
    assert line.startswith(f"[bold green]OK[/]: {len(json.loads(listed.stdout))} operations (12 payments and "
                           "notifications, 5 provisioning, 3 fulfilments), lost 0, duplicate effects 0,"), line
    callbacks = summary["callbacks"]
    assert callbacks["operations"] == 3 and callbacks["serve_killed_mid_callback"]
    assert callbacks["lost"] == 0 and callbacks["duplicate_effects"] == 0
    assert callbacks["callbacks_recorded"] == 3 and set(callbacks["by_status"].values()) == {"settled"}
    assert (callbacks["forged_status"], callbacks["replayed_status"]) == (401, 401)
    assert callbacks["forged_accepted"] == callbacks["replayed_accepted"] == 0
    # The long-running-operation flow, checked against the provider's own state (issue 12 item 6).
    flow = summary["lro"]
    assert flow["mismatches"] == [] and flow["creates_applied"] == 5
    assert flow["outcomes"] == {"ws-quick": "succeeded", "ws-throttled": "succeeded", "ws-long": "succeeded",
                                "ws-broken": "failed", "ws-cancelled": "cancelled"}
    assert flow["provider"]["ws-cancelled"] == "cancelled" and flow["cancel_requests"] >= 1
    # The first worker was killed mid-poll: the workspace it was polling until the cancel (and
    # any other still running then) was resumed by the second worker, read from the ledger.
    assert "ws-cancelled" in flow["resumed_by_another_worker"]
    _evidence_names_its_provenance(tmp_path, env, summary["example_timeline"]["operation_id"])


def _evidence_names_its_provenance(tmp_path: Path, env: dict[str, str], operation_id: str) -> None:
    """The evidence of a demo operation names the commit, a non-empty host module digest and its
    trace ids, and still verifies (issue 31 item 2)."""
    env = {**env, "OPLEDGER_DATABASE_URL": f"sqlite:///{tmp_path / '.opledger' / 'demo.db'}",
           "OPLEDGER_APP": "adapters.demo.orders:OrdersApp"}
    out = tmp_path / "evidence.json"
    exported = subprocess.run([sys.executable, "-m", "adapters.cli", "evidence", operation_id, "--out", str(out)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert exported.returncode == 0, exported.stderr
    document = json.loads(out.read_text())
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    authority = document["operation"]["authority"]
    if head.returncode == 0:  # run from a checkout, as CI does: the commit is known
        assert document["opledger"]["commit"].removesuffix("-dirty") == head.stdout.strip()
        assert authority["opledger_commit"] == document["opledger"]["commit"]
    assert authority["code_digest"].startswith("sha256:") and len(authority["code_digest"]) == 71
    assert document["trace_ids"] and all(len(t) == 32 for t in document["trace_ids"])
    verified = subprocess.run([sys.executable, "-m", "adapters.cli", "evidence", "verify", str(out), "--json"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["matches"] is True


def test_a_serve_that_dies_before_its_health_check_is_waited_for_only_when_asked(tmp_path: Path) -> None:
    # The demo's doomed serve is killed by the first callback it records, which the partner may
    # retry before a health check gets through: spawning it must not require one (a demo run
    # under load ended "opledger serve exited with -9").
    from adapters.processes import spawn_serve

    env = {"OPLEDGER_DATABASE_URL": f"sqlite:///{tmp_path / 'absent' / 'store.db'}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    with pytest.raises(RuntimeError, match="exited"):
        spawn_serve(env, tmp_path / "waited.log")
    served = spawn_serve(env, tmp_path / "not-waited.log", wait_ready=False)
    assert served.process.wait(timeout=60) != 0
    assert "no store at" in (tmp_path / "not-waited.log").read_text()


@pytest.mark.parametrize(("signum", "when", "code"), [(signal.SIGINT, "-2.log", 130), (signal.SIGTERM, "-1.log", 143)],
                         ids=["ctrl-c-with-the-second-worker", "sigterm-with-the-first-worker"])
def test_a_stopped_demo_stops_every_process_it_started(tmp_path: Path, signum: int, when: str, code: int) -> None:
    """Ctrl-C (SIGINT to the demo alone, as `kill -INT` sends it) or SIGTERM while a worker runs:
    the demo exits and no process it started outlives it (issue 34 item 6)."""
    import psutil

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    demo = subprocess.Popen([sys.executable, "-m", "adapters.cli", "demo", "--orders", "3"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while not list((tmp_path / ".opledger").glob(f"demo-worker-*{when}")):
            assert demo.poll() is None and time.monotonic() < deadline, "the demo ended before its worker started"
            time.sleep(0.05)
        time.sleep(0.5)
        children = psutil.Process(demo.pid).children(recursive=True)
        assert any("worker" in " ".join(child.cmdline()) for child in children)
        demo.send_signal(signum)
        assert demo.wait(timeout=60) == code
        gone, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, [child.cmdline() for child in alive]
    finally:
        if demo.poll() is None:
            demo.kill()
