"""Call budgets before egress (issue 14 item 1), one process on both backends: no window gives
out more calls than declared, the rest wait (``BudgetWaited``) and all settle."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from uuid import uuid4

from adapters.fake import FakeAdapter
from executors.runtime import Worker, WorkerConfig
from executors.secrets import EnvironmentSecrets
from ledger.budgets import GLOBAL_SCOPE, CallWindow, window_bounds
from ledger.clock import FakeClock
from ledger.config import Database
from ledger.declarations import DeliveryMode
from ledger.operation import Operation
from projections.status import StatusProjection
from projections.views import open_view
from tests.apps import ModesApp, declaration

LIMIT, WINDOW = 2, 10.0


class BudgetApp(ModesApp):
    """The test application, its idempotent integration allowing 2 calls per 10 s."""

    name = "modes"
    integrations = [declaration(DeliveryMode.IDEMPOTENT,
                                budgets={"calls_per_window": LIMIT, "window_seconds": WINDOW})]


def _worker(app: ModesApp, view: Any, adapter: FakeAdapter, clock: FakeClock, worker_id: str) -> Worker:
    return Worker(app=app, view=view, adapters={"webhook": adapter}, clock=clock,
                  secrets=EnvironmentSecrets({"test-token": "tok_test_secret_value"}), config=WorkerConfig(worker_id=worker_id),
                  projection=StatusProjection(app=app, view=view))


@contextmanager
def _running(view: Any, adapter: FakeAdapter, clock: FakeClock, *apps: ModesApp) -> Iterator[list[Worker]]:
    """One worker per app in ``apps`` (ids ``a``, ``b``, …) on one adapter and view; on leaving,
    the workers, the view and the apps are closed."""
    workers = [_worker(app, view, adapter, clock, chr(ord("a") + n)) for n, app in enumerate(apps)]
    try:
        yield workers
    finally:
        for worker in workers:
            worker.close()
        view.close()
        for app in apps:
            app.close()


def test_no_window_gives_out_more_calls_than_declared(modes_db: Database) -> None:
    clock = FakeClock()
    env = modes_db.library_env(create_table=False)
    app, other = BudgetApp(env=env, clock=clock), BudgetApp(env=env, clock=clock)
    ids = [app.make("idempotent", "https://partner.example/pay", n=i) for i in range(7)]
    view = open_view(modes_db)
    sent_at: list[Any] = []

    def record(request: Any) -> Any:
        sent_at.append(clock.now())
        from ledger.outcomes import Succeeded
        return Succeeded(status_code=200)

    with _running(view, FakeAdapter(script=record), clock, app, other) as workers:
        _run(workers, clock, 6)  # 6 windows' worth of time, two workers taking turns
        per_window = Counter(window_bounds(at, WINDOW)[0] for at in sent_at)
        assert len(sent_at) == len(ids) and max(per_window.values()) <= LIMIT, per_window
        assert all(app.get_operation(i).status.value == "settled" for i in ids)
        waited = [e for i in ids for e in app.events.get(i) if isinstance(e, Operation.BudgetWaited)]
        assert waited and all(w.scope == "test.idempotent" for w in waited)


# ----------------------------------------------------------------- hierarchical budgets and lookups

NESTED = {"calls_per_window": 3, "window_seconds": WINDOW, "per_tenant": {"calls_per_window": 2,
                                                                           "window_seconds": WINDOW}}


class NestedApp(ModesApp):
    """A global budget of 4 calls per 10 s around every integration; the idempotent integration
    allows 3 per 10 s, each tenant 2 of them; the non-idempotent one has no budget of its own."""

    name = "modes"
    global_call_budget = {"calls_per_window": 4, "window_seconds": WINDOW}
    integrations = [declaration(DeliveryMode.IDEMPOTENT, budgets=NESTED), declaration(DeliveryMode.NON_IDEMPOTENT)]


def _intend(app: ModesApp, mode: DeliveryMode, tenant: str, n: int) -> Any:
    from tests.apps import Thing
    thing = Thing(label=f"thing-{n}")
    op = app.intend(thing, f"test.{mode.value}", target="https://partner.example/pay", tenant=tenant,
                    payload={"n": n, "note": "internal note", "token": "secretref:test-token"})
    app.save(thing, op)
    return op.id


def _run(workers: list[Worker], clock: FakeClock, windows: int) -> None:
    for _ in range(windows * 2):
        for _ in range(4):
            for worker in workers:
                worker.run_once()
                worker.egress.wait(0.02)
        clock.advance(WINDOW / 2)


def test_a_call_fits_the_tenant_the_integration_and_the_global_budget(modes_db: Database) -> None:
    clock = FakeClock()
    env = modes_db.library_env(create_table=False)
    app, other = NestedApp(env=env, clock=clock), NestedApp(env=env, clock=clock)
    ids = ([_intend(app, DeliveryMode.IDEMPOTENT, tenant, n) for n, tenant in enumerate(["acme", "beta"] * 3)]
           + [_intend(app, DeliveryMode.NON_IDEMPOTENT, "gamma", 10 + n) for n in range(3)])
    view = open_view(modes_db)
    sent: list[tuple[Any, str, str]] = []

    def record(request: Any) -> Any:
        from ledger.outcomes import Succeeded
        sent.append((window_bounds(clock.now(), WINDOW)[0], request.integration, request.tenant))
        return Succeeded(status_code=200)

    with _running(view, FakeAdapter(script=record), clock, app, other) as workers:
        _run(workers, clock, 8)
        assert len(sent) == len(ids)
        assert max(Counter(w for w, _, _ in sent).values()) <= 4  # global
        assert max(Counter(w for w, i, _ in sent if i == "test.idempotent").values()) <= 3  # integration
        assert max(Counter((w, t) for w, i, t in sent if i == "test.idempotent").values()) <= 2  # tenant
        assert all(app.get_operation(i).status.value == "settled" for i in ids)
        waited = {e.scope for i in ids for e in app.events.get(i) if isinstance(e, Operation.BudgetWaited)}
        assert GLOBAL_SCOPE in waited  # 9 calls, 4 a window: the global budget limits
        assert waited <= {GLOBAL_SCOPE, "test.idempotent", "test.idempotent|tenant=acme",
                          "test.idempotent|tenant=beta"}
        _check_metrics(app, view, waited=len(waited_events(app, ids)))


def test_a_tenant_at_its_limit_waits_while_others_use_the_integrations_calls(modes_db: Database) -> None:
    clock = FakeClock()
    app = NestedApp(env=modes_db.library_env(create_table=False), clock=clock)
    acme = [_intend(app, DeliveryMode.IDEMPOTENT, "acme", n) for n in range(3)]
    view = open_view(modes_db)
    with _running(view, FakeAdapter(), clock, app) as (worker,):
        clock.set(window_bounds(clock.now(), WINDOW)[0] + timedelta(seconds=1))  # early in a window
        worker.run_once()
        worker.egress.wait(1.0)
        worker.run_once()
        waits = [e for i in acme for e in app.events.get(i) if isinstance(e, Operation.BudgetWaited)]
        assert [w.scope for w in waits] == ["test.idempotent|tenant=acme"]  # its own level, not the integration's
        assert waits[0].until == window_bounds(clock.now(), WINDOW)[1]
        _check_shown(app, waits[0].originator_id)
        beta = _intend(app, DeliveryMode.IDEMPOTENT, "beta", 9)
        worker.run_once()
        worker.egress.wait(1.0)
        worker.run_once()
        assert app.get_operation(beta).attempts == 1  # the integration's third call, this window


class LookupApp(ModesApp):
    """A recoverable_remote_id integration allowing 2 calls per 10 s, sends and lookups together."""

    name = "modes"
    integrations = [declaration(DeliveryMode.RECOVERABLE_REMOTE_ID,
                                budgets={"calls_per_window": 2, "window_seconds": WINDOW})]


def test_lookups_take_calls_from_the_budget(modes_db: Database) -> None:
    from ledger.outcomes import Ambiguous, Succeeded
    clock = FakeClock()
    app = LookupApp(env=modes_db.library_env(create_table=False), clock=clock)
    ids = [app.make(DeliveryMode.RECOVERABLE_REMOTE_ID, "https://partner.example/pay", n=n) for n in range(3)]
    view = open_view(modes_db)
    calls: list[tuple[Any, str]] = []

    def send(request: Any) -> Any:
        calls.append((window_bounds(clock.now(), WINDOW)[0], "send"))
        return Ambiguous(reason="read_timeout")  # the response is lost: the mode looks it up

    def lookup(request: Any) -> Any:
        calls.append((window_bounds(clock.now(), WINDOW)[0], "lookup"))
        return Succeeded(status_code=200)

    with _running(view, FakeAdapter(script=send, lookup_script=lookup), clock, app) as (worker,):
        _run([worker], clock, 20)
        assert Counter(kind for _, kind in calls) == {"send": 3, "lookup": 3}
        assert max(Counter(w for w, _ in calls).values()) <= 2  # lookups counted with the sends
        assert all(app.get_operation(i).status.value == "settled" for i in ids)
        taken = [e for e in _window_events(app) if isinstance(e, CallWindow.CallTaken)]
        assert Counter(e.kind for e in taken) == {"send": 3, "lookup": 3}


def _window_events(app: ModesApp) -> list[Any]:
    """Every CallWindow event in the log."""
    from eventsourcing.utils import get_topic
    topics = {get_topic(CallWindow.Opened), get_topic(CallWindow.CallTaken)}
    return [app.mapper.to_domain_event(n) for n in app.recorder.select_notifications(1, 10_000, topics=list(topics))]


def waited_events(app: ModesApp, ids: list[Any]) -> list[Any]:
    """Every BudgetWaited of ``ids``."""
    return [e for i in ids for e in app.events.get(i) if isinstance(e, Operation.BudgetWaited)]


def _check_metrics(app: ModesApp, view: Any, *, waited: int) -> None:
    """The metrics projection counts each level's calls and the waits by level; a rebuild from
    the log gives the same; ``/metrics`` shows them with a ``level`` label."""
    from adapters.http.metrics import LedgerCollector, render
    from projections.metrics import MetricsProjection
    from projections.metrics_store import MetricsStore
    store = MetricsStore(view)
    MetricsProjection(app=app, store=store).catch_up()
    totals = store.totals()
    calls = {(i, t, d): v for (n, i, t, _m, d), v in totals.items() if n == "opledger_budget_calls"}
    assert calls == {("", "", "global"): 9, ("test.idempotent", "", "integration"): 6,
                     ("test.idempotent", "acme", "tenant"): 3, ("test.idempotent", "beta", "tenant"): 3}
    waits: Counter[str] = Counter()
    for (name, _i, _t, _m, level), value in totals.items():
        if name == "opledger_budget_waits":
            waits[level] += int(value)
    assert sum(waits.values()) == waited and waits.get("global", 0) >= 1
    MetricsProjection(app=app, store=store).rebuild()
    assert store.totals() == totals
    text = render(LedgerCollector(store=store, now=app.clock.now)).decode()
    from prometheus_client.parser import text_string_to_metric_families
    shown = {(sample.labels["level"], sample.labels["integration"], sample.labels["tenant"]): sample.value
             for family in text_string_to_metric_families(text) if family.name == "opledger_budget_calls"
             for sample in family.samples if sample.name == "opledger_budget_calls_total"}
    assert shown == {(level, i, t): v for (i, t, level), v in calls.items()}


def _check_shown(app: ModesApp, waiting: Any) -> None:
    """``ops show`` (and the API) list the levels outermost first, each window's use, and the
    level the operation waits for."""
    from adapters.cli.ops import _budgets_text
    from adapters.operator import describe
    shown = describe(app, app.get_operation(waiting), None)
    levels = [(b["level"], b["scope"], b["calls_per_window"], b["calls_used"], b["waiting_until"] is not None)
              for b in shown["budgets"]]
    assert levels == [("global", GLOBAL_SCOPE, 4, 2, False), ("integration", "test.idempotent", 3, 2, False),
                      ("tenant", "test.idempotent|tenant=acme", 2, 2, True)]
    assert shown["budget_wait"] == "test.idempotent|tenant=acme"
    text = _budgets_text(shown["budgets"])
    assert text is not None and "tenant test.idempotent|tenant=acme: 2/2 calls in the 10 s window" in text
    assert "waiting until" in text.splitlines()[2] and "waiting" not in text.splitlines()[0]


# ----------------------------------------------------------------- waits outside pending (reclaim, lookup)


def _events(app: ModesApp, op_id: Any) -> list[str]:
    return [type(e).__name__ for e in app.events.get(op_id)]


def _show_waiting(app: ModesApp, op_id: Any) -> list[tuple[str, str | None]]:
    """``ops show``'s budget levels as (scope, waiting_until); the API's declared model
    (``OperationDetail.budgets``) reads the same, typed."""
    from adapters.http.schemas import BudgetLevelOut, OperationDetail
    from adapters.operator import describe
    shown = describe(app, app.get_operation(op_id), None)
    detail = OperationDetail.model_validate(shown)
    assert detail.budgets is not None and all(isinstance(b, BudgetLevelOut) for b in detail.budgets)
    assert detail.budget_wait == shown["budget_wait"] and "budgets" not in (detail.model_extra or {})
    assert [(b.scope, b.waiting_until.isoformat() if b.waiting_until else None) for b in detail.budgets] == [
        (b["scope"], b["waiting_until"]) for b in shown["budgets"]]
    return [(b["scope"], b["waiting_until"]) for b in shown["budgets"]]


def test_a_reclaim_that_meets_a_used_up_budget_records_the_wait_and_looks_up_once_next_window(
        modes_db: Database) -> None:
    """A worker died mid-attempt; the window is used up when its lease lapses: the reclaim records
    ``BudgetWaited`` without claiming (no lease taken, epoch kept), once, and the operation is
    looked up once, in the next window."""
    from ledger.outcomes import Succeeded
    clock = FakeClock()
    app = LookupApp(env=modes_db.library_env(create_table=False), clock=clock)
    start, end = window_bounds(clock.now(), WINDOW)
    clock.set(start + timedelta(seconds=1))
    op_id = app.make(DeliveryMode.RECOVERABLE_REMOTE_ID, "https://partner.example/pay")
    # The dead worker: claimed, recorded its attempt and took the window's calls (its send and another).
    op = app.get_operation(op_id)
    epoch = op.claim(now=clock.now(), worker_id="dead", lease_seconds=3)
    op.start_attempt(epoch=epoch, now=clock.now(), attempt_id=uuid4(), request_fingerprint=op.fingerprint)
    window = CallWindow.open(scope="test.recoverable_remote_id", start=start, end=end, limit=2)
    window.take(op_id, "send")
    window.take(uuid4(), "send")
    app.save(window, op)
    view = open_view(modes_db)
    lookups: list[Any] = []

    def lookup(request: Any) -> Any:
        lookups.append(clock.now())
        return Succeeded(status_code=200)

    with _running(view, FakeAdapter(lookup_script=lookup), clock, app) as (worker,):
        clock.advance(4)  # the lease lapsed; the window (to +10 s) has no call left
        for _ in range(3):  # more passes in the same window record nothing more
            worker.run_once()
            worker.egress.wait(0.5)
            clock.advance(1)
        assert _events(app, op_id) == ["Intended", "Claimed", "AttemptStarted", "BudgetWaited"]
        (wait,) = waited_events(app, [op_id])
        assert (wait.scope, wait.until, wait.epoch) == ("test.recoverable_remote_id", end, None)
        waiting = app.get_operation(op_id)
        assert (waiting.epoch, waiting.worker_id, waiting.execution.value) == (epoch, "dead", "dispatching")
        assert _show_waiting(app, op_id) == [("test.recoverable_remote_id", end.isoformat())]
        assert view.get(op_id).next_due_at == end  # the status row: due when the window ends
        assert lookups == []
        clock.set(end)
        for _ in range(3):
            worker.run_once()
            worker.egress.wait(1.0)
        assert len(lookups) == 1 and window_bounds(lookups[0], WINDOW)[0] == end  # once, in the next window
        done = app.get_operation(op_id)
        assert done.status.value == "settled" and done.lease_takeovers == 1 and done.attempts == 1
        assert _events(app, op_id).count("BudgetWaited") == 1


def test_a_lookup_after_a_lost_response_that_meets_a_used_up_budget_records_the_wait(modes_db: Database) -> None:
    """Both sends of a window lose their response; neither lookup fits: each holder records
    ``BudgetWaited`` under its epoch and gives up its lease; each operation is looked up once, in
    the next window, without counting a takeover."""
    from ledger.outcomes import Ambiguous, Succeeded
    clock = FakeClock()
    app = LookupApp(env=modes_db.library_env(create_table=False), clock=clock)
    start, end = window_bounds(clock.now(), WINDOW)
    clock.set(start + timedelta(seconds=1))
    ids = [app.make(DeliveryMode.RECOVERABLE_REMOTE_ID, "https://partner.example/pay", n=n) for n in range(2)]
    view = open_view(modes_db)
    calls: list[tuple[Any, str]] = []

    def send(request: Any) -> Any:
        calls.append((clock.now(), "send"))
        return Ambiguous(reason="read_timeout")

    def lookup(request: Any) -> Any:
        calls.append((clock.now(), "lookup"))
        return Succeeded(status_code=200)

    with _running(view, FakeAdapter(script=send, lookup_script=lookup), clock, app) as (worker,):
        for _ in range(4):  # within the window
            worker.run_once()
            worker.egress.wait(1.0)
            clock.advance(1)
        assert [kind for _, kind in calls] == ["send", "send"]
        for op_id in ids:
            assert _events(app, op_id) == ["Intended", "Claimed", "AttemptStarted", "BudgetWaited"]
            op = app.get_operation(op_id)
            (wait,) = waited_events(app, [op_id])
            assert (wait.scope, wait.until, wait.epoch) == ("test.recoverable_remote_id", end, op.epoch)
            assert (op.execution.value, op.worker_id, op.lease_expires_at) == ("dispatching", None, None)
            assert _show_waiting(app, op_id) == [("test.recoverable_remote_id", end.isoformat())]
        clock.set(end)
        for _ in range(4):
            worker.run_once()
            worker.egress.wait(1.0)
        lookups = [at for at, kind in calls if kind == "lookup"]
        assert len(lookups) == 2 and all(window_bounds(at, WINDOW)[0] == end for at in lookups)
        for op_id in ids:
            op = app.get_operation(op_id)
            assert op.status.value == "settled" and op.lease_takeovers == 0
            assert _events(app, op_id).count("BudgetWaited") == 1
        taken = [e for e in _window_events(app) if isinstance(e, CallWindow.CallTaken)]
        assert Counter(e.kind for e in taken) == {"send": 2, "lookup": 2}
