"""Run the reference partner as a separate process, for tests and the demo.

A separate process is what crash tests need: it can be killed (SIGKILL) while the ledger keeps
running, and its durable log (:class:`~adapters.partner.store.PartnerLog`) still tells what it
applied. The secret travels in the environment, not on the command line where ``ps`` shows it.

Source: DESIGN §2 ("the reference partner server used by the demo and tests"), STYLE rule 15.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from adapters.partner.callbacks import CALLBACK_SECRET_ENV
from adapters.partner.server import SECRET_ENV
from adapters.partner.store import PartnerLog

READY_TIMEOUT_SECONDS = 15.0
STOP_TIMEOUT_SECONDS = 5.0


class PartnerStartError(RuntimeError):
    """The partner process exited or stayed silent instead of printing its URL.

    Fix: read the partner's stderr (inherited by the caller) for the cause, e.g. a port in use.
    """


@dataclass
class PartnerProcess:
    """A running partner process.

    Attributes:
        url: its base URL, ``http://host:port``.
        port: the bound port.
        log: a reader of its durable log.
        process: the child process.
    """

    url: str
    port: int
    log: PartnerLog
    process: subprocess.Popen[str] = field(repr=False)

    def stop(self, timeout_seconds: float = STOP_TIMEOUT_SECONDS) -> None:
        """Stop the partner with SIGTERM (SIGKILL after ``timeout_seconds``) and wait for it."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_seconds)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._close_pipe()

    def kill(self) -> None:
        """Kill the partner with SIGKILL, as a crash would, and wait for it."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> PartnerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def start_partner_process(*, log_path: str | Path, secret: str, host: str = "127.0.0.1", port: int = 0,
                          ready_timeout_seconds: float = READY_TIMEOUT_SECONDS,
                          callback_secret: str | None = None) -> PartnerProcess:
    """Start ``python -m adapters.partner`` and wait until it listens.

    Args:
        log_path: the SQLite file of its durable log (created if missing; kept after it stops).
        secret: the Standard Webhooks secret it verifies with.
        host: the interface to bind.
        port: the port; 0 lets the partner pick a free one.
        ready_timeout_seconds: how long to wait for it to listen.
        callback_secret: the secret its callbacks are signed with (default: ``secret``).

    Returns:
        The running partner; stop it with ``.stop()`` or use it as a context manager.

    Raises:
        PartnerStartError: it exited or did not report its URL in time.
    """
    command = [sys.executable, "-m", "adapters.partner", "--host", host, "--port", str(port),
               "--log", str(log_path)]
    env = {**os.environ, SECRET_ENV: secret}
    if callback_secret is not None:
        env[CALLBACK_SECRET_ENV] = callback_secret
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    line = _first_line(process, ready_timeout_seconds)
    if not line.startswith("http"):
        process.kill()
        process.wait()
        raise PartnerStartError(f"partner did not start (exit status {process.returncode}, said {line!r})")
    url = line.strip()
    return PartnerProcess(url=url, port=int(url.rsplit(":", 1)[1]), log=PartnerLog(log_path), process=process)


def _first_line(process: subprocess.Popen[str], timeout_seconds: float) -> str:
    # readline() cannot time out on a pipe; a helper thread can be abandoned instead.
    lines: list[str] = []
    stdout = process.stdout
    assert stdout is not None, "the partner process is started with stdout=PIPE"
    reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_seconds)
    return lines[0] if lines else ""
