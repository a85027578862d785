"""The README's examples run as written (STYLE rule 14: examples in docs run): its Python, and
its commands on a clean directory, secret included (issue 34 item 2)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import types
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from adapters.fake import FakeAdapter
from executors.runtime import Worker, WorkerConfig
from executors.secrets import EnvironmentSecrets
from ledger.clock import FakeClock
from ledger.config import Database
from migrations import migrate
from projections.status import StatusProjection
from projections.views import open_view
from tests.loopback import QuietHandler
from tests.workers import drive_until, status_of

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_module() -> types.ModuleType:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    module = types.ModuleType("shop")  # the example's settlement topic is "shop:Order"
    sys.modules["shop"] = module
    exec(compile(blocks[0], str(README), "exec"), module.__dict__)
    return module


def test_readme_example_co_commits_and_settles(tmp_path: Path) -> None:
    shop = _readme_module()
    shop.CHARGE = shop.CHARGE.model_copy(update={"adapter": "fake"})  # no network in this test
    shop.Shop.integrations = [shop.CHARGE]
    database = Database.parse(f"sqlite:///{tmp_path / 'shop.db'}")
    migrate(database, shop.Shop)
    clock = FakeClock()
    app = shop.Shop(env=database.library_env(create_table=False), clock=clock)
    order_id, op_id = app.place(1999, "https://psp.example/charges")
    view = open_view(database)
    worker = Worker(app=app, view=view, adapters={"fake": FakeAdapter()}, clock=clock,
                    config=WorkerConfig(worker_id="docs"), projection=StatusProjection(app=app, view=view),
                    secrets=EnvironmentSecrets({"card": "tok_visa"}))
    try:
        # The call runs on an egress thread: wait for it rather than count cycles (a loaded
        # machine can take more than twenty cycles to finish it).
        drive_until(worker, lambda: status_of(app, op_id) == "settled", what="the README's charge settled")
        assert app.repository.get(order_id).payment == "succeeded"
    finally:
        worker.close()
        view.close()
        app.close()
        del sys.modules["shop"]


class _Provider(QuietHandler):
    """A provider that answers every POST 200 and keeps the requests' headers (``received``)."""

    received: list[dict[str, str]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.read_body()
        type(self).received.append({k.lower(): v for k, v in self.headers.items()})
        self.answer(b"{}", {"Content-Type": "application/json"})


def _readme_shell_lines() -> list[str]:
    usage = README.read_text().split("## Using it in your application")[1]
    block = re.findall(r"```bash\n(.*?)```", usage, flags=re.S)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.process
def test_readme_commands_run_as_written_with_a_new_secret(tmp_path: Path) -> None:
    """On a clean directory holding only the README's ``shop.py``: its ``migrate``, its secret
    (``$(opledger secret new)``) and its ``worker --serve`` line, as written, execute a charge
    signed with that secret and settle it (issue 34 item 2)."""
    lines = _readme_shell_lines()
    migrate_line, secret_line, tokens_line, worker_line = lines[0], lines[1], lines[2], lines[3]
    assert migrate_line.startswith("opledger migrate") and "$(opledger secret new)" in secret_line
    assert tokens_line.startswith("export OPLEDGER_API_TOKENS=")
    assert worker_line.split("#")[0].strip().endswith("opledger worker --serve")
    (tmp_path / "shop.py").write_text(re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)[0])
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]), "PYTHONPATH": ".",
           "OPLEDGER_APP": "shop:Shop", "OPLEDGER_DATABASE_URL": "sqlite:///shop.db",
           "OPLEDGER_HTTP_PORT": str(_free_port()), "OPLEDGER_POLL_INTERVAL_SECONDS": "0.05"}
    env.pop("OPLEDGER_WEBHOOK_SECRET", None)
    run = subprocess.run(["bash", "-c", migrate_line], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr

    _Provider.received = []
    provider = ThreadingHTTPServer(("127.0.0.1", 0), _Provider)
    threading.Thread(target=provider.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    place = ("import sys; from ledger.config import Database; import shop; "
             "app = shop.Shop(env=Database.parse('sqlite:///shop.db').library_env(create_table=False)); "
             "print(app.place(1999, sys.argv[1])[1]); app.close()")
    placed = subprocess.run([sys.executable, "-c", place, f"http://127.0.0.1:{provider.server_port}/charges"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert placed.returncode == 0, placed.stderr
    op_id = placed.stdout.strip()

    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(["bash", "-c", f"set -e\n{secret_line}\n{tokens_line}\n{worker_line}"], cwd=tmp_path, env=env,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not _Provider.received and time.monotonic() < deadline and worker.poll() is None:
            time.sleep(0.1)
        assert _Provider.received, (tmp_path / "worker.log").read_text()
        headers = _Provider.received[0]
        assert headers["idempotency-key"] == op_id and headers["webhook-signature"].startswith("v1,")
        status = ""
        while status != "settled" and time.monotonic() < deadline:
            shown = subprocess.run(["opledger", "ops", "show", op_id, "--json"], cwd=tmp_path, env=env,
                                   capture_output=True, text=True, timeout=60)
            status = json.loads(shown.stdout)["status"] if shown.returncode == 0 else ""
            time.sleep(0.2)
        assert status == "settled", (tmp_path / "worker.log").read_text()
    finally:
        os.killpg(worker.pid, signal.SIGTERM)  # bash and the worker it started: this test's own group
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        log.close()
        provider.shutdown()
    assert "not an opledger setting" not in (tmp_path / "worker.log").read_text()
