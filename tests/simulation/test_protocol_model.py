"""The protocol model (docs/model/): its generated rules are current, SPIN verifies it with zero
errors for every delivery mode (exhaustive, partial-order reduction), every planted bug is found
and its trail names the broken property, and one counterexample replays against the real
aggregate with the same bug planted.

Needs Debian's ``spin`` and ``gcc``: skipped locally without them, failed when ``CI`` is set
(``.ci/run`` installs both). Source: issue 33 items 2-5; docs/model.md.
"""

from __future__ import annotations

import importlib.util
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any
from uuid import uuid4

import pytest

from ledger.errors import StaleEpochError

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "docs" / "model"
BUDGET_SECONDS = 120.0
"""Issue 33: the model check and the planted bugs together, on 2 cores: at most
``2 * BUDGET_SECONDS`` of CPU in the tools' processes (spin, gcc, the verifiers). CPU, not wall
time: under CI's four test processes on 2 cores the same work took 126 s of wall time and 36 s
alone, while its CPU time stays near 70 s."""


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("model_generate", MODEL / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["model_generate"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


gen = _generator()


def _tools() -> None:
    missing = [tool for tool in ("spin", "gcc") if shutil.which(tool) is None]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{', '.join(missing)} missing: .ci/run installs Debian's spin and gcc")
        pytest.skip(f"{', '.join(missing)} not installed (apt-get install spin gcc)")


MODES = {i: mode.value for i, mode in enumerate(gen.MODES)}
DEFINES = {3: ("-DMAX_RESOLVES=0",)}
"""Per-mode bounds (docs/model.md): callback mode runs without operator resolutions."""
PLANT_MODE = {"ambiguity": 2, "callback_new": 3, "authenticated": 3}
"""The mode a planted bug is checked in (idempotent, 0, unless named)."""


@dataclass
class Run:
    errors: int
    states: int
    seconds: float
    output: str
    folder: Path

    def trail(self) -> str:
        """The counterexample replayed by ``spin -t`` (its printed commands and assertions)."""
        return subprocess.run(["spin", *self.defines, "-t", "-p", "protocol.pml"], cwd=self.folder,
                              capture_output=True, text=True, timeout=60).stdout

    defines: tuple[str, ...] = ()


def verify(folder: Path, rules: str, mode: int, *, liveness: bool = False, shortest: bool = False) -> Run:
    """Generate, compile and run SPIN's verifier in ``folder``: exhaustive, with partial-order
    reduction (pan's default), safety (assertions, invalid end states) or, with ``liveness``,
    the LTL formula ``progress`` under weak fairness (``-a -f``)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(MODEL / "protocol.pml", folder / "protocol.pml")
    (folder / "rules.pml").write_text(rules)
    defines = (f"-DMODE={mode}", *DEFINES.get(mode, ()))
    started = time.monotonic()
    subprocess.run(["spin", *defines, "-a", "protocol.pml"], cwd=folder, check=True, capture_output=True, timeout=60)
    flags = ["-DNFAIR=4"] if liveness else ["-DNOCLAIM", "-DSAFETY"]
    # -O0: compiling pan.c with optimisation takes longer than running it at these bounds.
    subprocess.run(["gcc", "-O0", *flags, "-DNOBOUNDCHECK", "-DSFH", "-DVECTORSZ=2048", "-o", "pan", "pan.c"], cwd=folder,
                   check=True, capture_output=True, timeout=120)
    args = ["./pan", "-m200000", "-w24", *(["-a", "-f"] if liveness else []), *(["-i"] if shortest else [])]
    out = subprocess.run(args, cwd=folder, capture_output=True, text=True, timeout=BUDGET_SECONDS).stdout
    errors = re.search(r"errors: (\d+)", out)
    states = re.search(r"(\d+) states, stored", out)
    assert errors and states, out
    return Run(int(errors.group(1)), int(states.group(1)), time.monotonic() - started, out, folder, defines)


def test_the_generated_rules_are_current() -> None:
    assert (MODEL / "rules.pml").read_text() == gen.render(), "run: python docs/model/generate.py"


@pytest.mark.slow
def test_the_model_holds_and_every_planted_bug_is_found(tmp_path: Path) -> None:
    # One test, so the whole check runs on two cores at once and its time can be bounded.
    _tools()
    rules = (MODEL / "rules.pml").read_text()
    jobs: dict[str, Any] = {}
    started, cpu = time.monotonic(), _children_cpu()
    with ThreadPoolExecutor(max_workers=2) as pool:
        for mode in MODES:
            jobs[f"safety-{mode}"] = pool.submit(verify, tmp_path / f"safety-{mode}", rules, mode)
            jobs[f"progress-{mode}"] = pool.submit(verify, tmp_path / f"progress-{mode}", rules, mode, liveness=True)
        for name, plant in gen.PLANTED.items():
            jobs[f"plant-{name}"] = pool.submit(verify, tmp_path / f"plant-{name}", gen.render(name),
                                                PLANT_MODE.get(name, 0), liveness=plant.prop == "progress")
        results = {key: job.result() for key, job in jobs.items()}
    elapsed, cpu = time.monotonic() - started, _children_cpu() - cpu
    report = {key: (run.errors, run.states, round(run.seconds, 1)) for key, run in results.items()}
    print("model check (errors, states, seconds):", report, f"total {elapsed:.1f} s, CPU {cpu:.1f} s")
    for mode, name in MODES.items():
        assert results[f"safety-{mode}"].errors == 0, (name, results[f"safety-{mode}"].output)
        assert results[f"progress-{mode}"].errors == 0, (name, results[f"progress-{mode}"].output)
    for name, plant in gen.PLANTED.items():
        run = results[f"plant-{name}"]
        assert run.errors > 0, f"planted bug {name} was not found: {run.output}"
        if plant.prop == "progress":
            assert "acceptance cycle" in run.output, run.output
        else:
            assert f"assertion violated  !(violated_{plant.prop})" in run.output, (name, run.output)
            assert f"violated_{plant.prop} = 1" in run.trail().replace("\t", " "), name
    assert cpu < 2 * BUDGET_SECONDS, f"{cpu:.1f} s of CPU: more than {BUDGET_SECONDS:.0f} s on 2 cores"


def _children_cpu() -> float:
    """Seconds of CPU (user and system) of this process's finished child processes."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# ------------------------------------------------------------------ a trail against the real code

def _builders() -> ModuleType:
    # The unit tests' builders (tests/unit/builders.py): operations reached by legal commands.
    if "builders" not in sys.modules:
        spec = importlib.util.spec_from_file_location("builders", ROOT / "tests" / "unit" / "builders.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["builders"] = module
        spec.loader.exec_module(module)
    return sys.modules["builders"]


def _replay(trail: str, patched: bool) -> list[tuple[str, int, int, bool]]:
    """Run the trail's commands on a real ``Operation``; return (command, caller's epoch, the
    operation's epoch before, recorded) for each. ``patched``: with the planted bug applied."""
    builders = _builders()
    b = builders.new_operation()
    lease = builders.LEASE_SECONDS
    b.collect()
    done: list[tuple[str, int, int, bool]] = []
    for line in trail.splitlines():
        line = line.strip()
        if line == "CLOCK expire":
            b.now += timedelta(seconds=lease + 1)
            continue
        found = re.fullmatch(r"CMD (\w+) (\w+) (\S+) w=(\d+) e=(\d+) a=(\d+)", line)
        if found is None:
            continue
        command, e = found.group(1), int(found.group(5))
        before = b.op.epoch
        with gen.planted("epoch" if patched else None):
            if command == "claim":
                b.op.claim(now=b.tick(), worker_id=f"worker-{found.group(4)}", lease_seconds=lease)
            elif command == "start_attempt":
                b.op.start_attempt(epoch=e, now=b.tick(), attempt_id=uuid4(), request_fingerprint="f")
            else:
                raise AssertionError(f"the replay does not map {command}: extend _replay")
        done.append((command, e, before, bool(b.collect())))
    return done


def test_a_counterexample_replays_against_the_real_aggregate(tmp_path: Path) -> None:
    # The planted fencing bug: SPIN's shortest counterexample is a zombie (a worker paused past
    # its lease writes with its stale epoch after another took over). Replayed on the real
    # aggregate with the same rule patched out, the stale write lands there too; unpatched, the
    # real code refuses it (StaleEpochError).
    _tools()
    run = verify(tmp_path, gen.render("epoch"), 0, shortest=True)
    assert "violated_stale_epoch" in run.output
    trail = run.trail()
    steps = _replay(trail, patched=True)
    stale = [(command, e, epoch) for command, e, epoch, recorded in steps
             if recorded and e != epoch and command != "claim"]
    assert stale, f"the trail's stale write did not land in the real code: {steps}"
    with pytest.raises(StaleEpochError):
        _replay(trail, patched=False)
    assert steps[0][0] == "claim" and steps[-1][3]  # it ends with the zombie's write recorded
