"""The README's Python example runs as written (STYLE rule 14: examples in docs run)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

from adapters.fake import FakeAdapter
from executors.runtime import Worker, WorkerConfig
from executors.secrets import EnvironmentSecrets
from ledger.clock import FakeClock
from ledger.config import Database
from migrations import migrate
from projections.status import StatusProjection
from projections.view import open_view

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
        for _ in range(20):
            worker.run_once()
            if app.get_operation(op_id).status.value == "settled":
                break
            clock.advance(1)
        assert app.get_operation(op_id).status.value == "settled"
        assert app.repository.get(order_id).payment == "succeeded"
    finally:
        worker.close()
        view.close()
        app.close()
        del sys.modules["shop"]
