"""Starting real worker processes: for the demo, process-level tests and benchmarks.

A worker is started as ``python -m adapters.cli worker`` with its settings in the environment,
so a test can SIGKILL it at any moment and start another, as an operator would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class WorkerProcess:
    """A running ``opledger worker`` child process.

    Attributes:
        process: the child.
        log_path: where its stderr (structured logs) goes.
    """

    process: subprocess.Popen[bytes] = field(repr=False)
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no chance to record anything (a crash)."""
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def terminate(self, timeout_seconds: float = 30.0) -> int:
        """SIGTERM (graceful stop), then wait; SIGKILL after ``timeout_seconds``. Returns the exit code."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_seconds)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def spawn_worker(env: Mapping[str, str], log_path: Path) -> WorkerProcess:
    """Start a worker process.

    Args:
        env: ``OPLEDGER_*`` settings added to this process's environment.
        log_path: file for the worker's stderr (appended).

    Returns:
        The :class:`WorkerProcess`.
    """
    full_env = {**os.environ, **env}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "adapters.cli", "worker"], env=full_env,
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    return WorkerProcess(process=process, log_path=log_path)
