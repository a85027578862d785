"""Starting real worker processes: for the demo, process-level tests and benchmarks.

A worker is started as ``python -m adapters.cli worker`` with its settings in the environment,
so a test can SIGKILL it at any moment and start another, as an operator would.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar


@dataclass
class ChildProcess:
    """A running child process this process started (the shared part of :class:`WorkerProcess`
    and :class:`ServeProcess`).

    Attributes:
        process: the child.
    """

    process: subprocess.Popen[bytes] = field(repr=False)

    grace_seconds: ClassVar[float] = 30.0
    """How long :meth:`terminate` waits after SIGTERM before SIGKILL, by default."""

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.process.pid

    def alive(self) -> bool:
        """Whether the child has not exited yet."""
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no chance to record anything (a crash)."""
        _kill(self.process)

    def terminate(self, timeout_seconds: float | None = None) -> int:
        """SIGTERM (graceful stop), then wait; SIGKILL after ``timeout_seconds`` (default
        :attr:`grace_seconds`). Returns the exit code."""
        return _terminate(self.process, self.grace_seconds if timeout_seconds is None else timeout_seconds)


@dataclass
class WorkerProcess(ChildProcess):
    """A running ``opledger worker`` child process (SIGTERM grace: 30 s).

    Attributes:
        process: the child.
        log_path: where its stderr (structured logs) goes.
    """

    log_path: Path


_SPAWNED: list[subprocess.Popen[bytes]] = []
"""Every child :func:`spawn_worker` and :func:`spawn_serve` started in this process."""


def _spawned(process: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
    _SPAWNED.append(process)
    return process


class Terminated(Exception):
    """SIGTERM arrived inside :func:`children_stopped` (raised in the main thread, so every
    ``finally`` on the way out runs, as for Ctrl-C's ``KeyboardInterrupt``)."""


@contextmanager
def children_stopped(grace_seconds: float = 5.0) -> Iterator[None]:
    """Stop every child spawned here inside the block when the block ends, however it ends:
    normally, by an exception, by Ctrl-C (SIGINT) or by SIGTERM (raised as :class:`Terminated`).

    Each child still running gets SIGTERM (a worker stops gracefully), then SIGKILL after
    ``grace_seconds``, and is waited for, so none outlives the command that started it.

    Args:
        grace_seconds: how long each child may take to stop after SIGTERM, seconds.

    Source: issue 34 item 6 (Ctrl-C on ``opledger demo`` left its second worker running).
    """
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if main else None
    first = len(_SPAWNED)
    try:
        yield
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
        for child in _SPAWNED[first:]:
            _terminate(child, grace_seconds)


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(f"signal {signum}")


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait()


def _terminate(process: subprocess.Popen[bytes], timeout_seconds: float) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout_seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


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
        process = _spawned(subprocess.Popen([sys.executable, "-m", "adapters.cli", "worker"], env=full_env,
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=log))
    return WorkerProcess(process=process, log_path=log_path)


@dataclass
class ServeProcess(ChildProcess):
    """A running ``opledger serve`` child process (SIGTERM grace: 10 s).

    Attributes:
        process: the child.
        url: its base URL, ``http://127.0.0.1:<port>``.
        log_path: where its stderr goes.
    """

    url: str
    log_path: Path

    grace_seconds: ClassVar[float] = 10.0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (another process may take it before it is bound)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def spawn_serve(env: Mapping[str, str], log_path: Path, *, port: int | None = None, write: bool = False,
                ready_timeout_seconds: float = 30.0, wait_ready: bool = True,
                command: Sequence[str] = ("serve",)) -> ServeProcess:
    """Start ``opledger serve`` and wait until ``/health/live`` answers.

    Args:
        env: ``OPLEDGER_*`` settings added to this process's environment.
        log_path: file for its stderr (appended).
        port: the port to bind; a free one when None.
        write: pass ``--write`` (SQLite: own the store).
        command: the ``opledger`` command that serves: ``("worker", "--serve")`` runs the worker
            and the server in one process.
        ready_timeout_seconds: how long to wait for it to answer.
        wait_ready: False returns at once, for a serve armed with a failpoint
            (``ledger.failpoints``) that may be killed by the first request it takes, before a
            health check gets through (the demo's: a callback retried by the partner).

    Returns:
        The :class:`ServeProcess`.

    Raises:
        RuntimeError: it exited or did not answer in time (its log says why).
    """
    import httpx

    port = port or free_port()
    argv = [sys.executable, "-m", "adapters.cli", *command, "--port", str(port)] + (["--write"] if write else [])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = _spawned(subprocess.Popen(argv, env={**os.environ, **env}, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=log))
    served = ServeProcess(process=process, url=f"http://127.0.0.1:{port}", log_path=log_path)
    if not wait_ready:
        return served
    deadline = time.monotonic() + ready_timeout_seconds
    while time.monotonic() < deadline:
        if not served.alive():
            raise RuntimeError(f"opledger serve exited with {process.returncode}; see {log_path}")
        try:
            if httpx.get(served.url + "/health/live", timeout=1).status_code == 200:
                return served
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    served.kill()
    raise RuntimeError(f"opledger serve did not answer within {ready_timeout_seconds} s; see {log_path}")
