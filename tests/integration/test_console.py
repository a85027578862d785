"""The operator console in a real browser: Playwright driving Debian's headless Chromium against
``opledger serve``'s app on a local port (one server and one browser for the module; each test
uses its own operations and its own tab). Without chromium or playwright these tests skip on a
developer machine and FAIL when ``CI`` is set (``.ci/run`` installs both).

Screenshots of each page go to the module's tmp dir; with ``OPLEDGER_UPDATE_SCREENSHOT=1`` the
operation page and the metrics page are also written to ``docs/console-operation.png`` and
``docs/console-metrics.png`` (the README shows one):
``OPLEDGER_UPDATE_SCREENSHOT=1 .venv/bin/python -m pytest tests/integration/test_console.py``.

Source: issue 13 item 3; issue 31 item 5.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from adapters.operator import catch_up_status
from projections.metrics import MetricsProjection
from projections.metrics_store import MetricsStore
from tests.console_seed import TRACEPARENT, more_work, seed_callbacks
from tests.desk import Desk, desk
from tests.loopback import uvicorn_serving
from tests.observe_seed import CANARY_INTERNAL, CANARY_SECRET

CHROMIUM = os.environ.get("OPLEDGER_CHROMIUM", "/usr/bin/chromium")
DOCS = Path(__file__).resolve().parents[2] / "docs"
TRACE_UI = "http://127.0.0.1:16686/trace/{trace_id}"
# As root in a container, with no network beyond localhost: no sandbox, nothing in the background.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def _require_browser() -> Any:
    problem = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        problem = f"playwright is not installed ({exc}); pip install -e '.[browser]'"
    if problem is None and not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        problem = f"no chromium at {CHROMIUM}; apt-get install -y chromium"
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{problem} (CI is set: browser tests must run)")
        pytest.skip(problem)
    return sync_playwright


@dataclass
class Console:
    """The served desk, its base URL, the browser, and where screenshots go. Each test uses its
    own operations, so the tests pass in any order and split over processes (pytest-xdist)."""

    desk: Desk
    base: str
    browser: Any
    shots: Path
    errors: list[str]
    """Script errors and Content-Security-Policy refusals in any tab (each test expects none)."""

    @property
    def ids(self) -> dict[str, UUID]:
        return self.desk.ids

    def tab(self) -> Any:
        """A new tab whose script errors and CSP refusals are collected in ``errors``."""
        page = self.browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("pageerror", lambda error: self.errors.append(f"{error}"))
        page.on("console", lambda message: self.errors.append(message.text)
                if "Content Security Policy" in message.text else None)
        return page

    def page(self, token: str, hash_: str = "attention", *, query: str = "") -> Any:
        """A new tab signed in with ``token`` on ``#hash_``, loaded."""
        page = self.tab()
        page.goto(f"{self.base}/console{query}#{hash_}")
        page.fill("#token", token)
        page.click("#login button")
        page.wait_for_selector(f'body[data-loaded="{hash_}"]')
        return page

    def open(self, page: Any, hash_: str) -> None:
        page.goto(f"{self.base}/console#{hash_}")
        page.wait_for_selector(f'body[data-loaded="{hash_}"]')


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """The seeded desk (plus ``tests.console_seed``'s two payments) served by uvicorn on a free
    port with a tracing UI link, and a headless Chromium."""
    sync_playwright = _require_browser()
    tmp = tmp_path_factory.mktemp("console")
    with desk(f"sqlite:///{tmp / 'store' / 'opledger.db'}", trace_url_template=TRACE_UI) as d:
        d.ids.update(seed_callbacks(d.store.app, d.clock))
        catch_up_status(d.store)
        MetricsProjection(app=d.store.app, store=MetricsStore(d.store.view)).catch_up()
        with uvicorn_serving(d.app) as base, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            try:
                yield Console(desk=d, base=base, browser=browser, shots=tmp, errors=[])
            finally:
                browser.close()


@pytest.fixture(autouse=True)
def _no_script_errors(console: Console) -> Iterator[None]:
    console.errors.clear()
    yield
    assert console.errors == [], "script errors or CSP refusals in the console"


def _queue_ids(page: Any) -> list[str]:
    return page.eval_on_selector_all("#attention-table tbody tr", "rows => rows.map(r => r.dataset.id)")


def _texts(page: Any, selector: str) -> list[str]:
    return page.eval_on_selector_all(selector, "nodes => nodes.map(n => n.textContent.trim())")


def _visible_errors(page: Any) -> list[str]:
    return page.eval_on_selector_all(".banner.error", "nodes => nodes.filter(n => !n.hidden && "
                                                      "n.offsetParent !== null).map(n => n.textContent)")


def test_pages_show_the_queue_operations_and_approvals(console: Console) -> None:
    page = console.page("viewer-token")
    queue = _queue_ids(page)  # operations no other test acts on
    assert str(console.ids["blocked"]) in queue and str(console.ids["cancel_failed"]) in queue
    reasons = _texts(page, "#attention-table [data-badge]")
    assert "settlement blocked" in reasons and "cancel failed" in reasons  # any reason, in words
    assert page.inner_text("#glance")  # the metrics at a glance
    page.screenshot(path=str(console.shots / "attention.png"), full_page=True)
    for name, table in {"operations": "#operations-table", "approvals": "#approvals-table"}.items():
        console.open(page, name)
        assert page.locator(f"{table} tbody tr").count() > 0, name
        assert "null" not in page.inner_text(table)
        page.screenshot(path=str(console.shots / f"{name}.png"), full_page=True)
        assert "CANARY" not in page.content()
    console.open(page, "operations")
    page.select_option("#filters select[name=status]", "failed")
    page.click("#filters button")
    from playwright.sync_api import expect

    expect(page.locator("#operations-table tbody tr")).to_have_count(2)  # a settled failure included
    console.open(page, f"op/{console.ids['refund']}")
    content = page.content()
    assert CANARY_INTERNAL not in content and CANARY_SECRET not in content and "[internal]" in content


def test_a_wrong_token_is_refused_and_said_so(console: Console) -> None:
    page = console.tab()
    page.goto(f"{console.base}/console#attention")
    page.wait_for_selector("#page-attention .banner.error:has-text('Sign in with a bearer token')")
    assert page.get_attribute("body", "data-signed-in") == "no" and page.inner_text("#who") == "not signed in"
    page.fill("#token", "wrong-token-000000000000")
    page.click("#login button")
    page.wait_for_selector('body[data-signed-in="refused"]')
    page.wait_for_selector("#page-attention .banner.error:has-text('The token was refused')")
    assert page.inner_text("#who") == "token refused: not signed in"
    assert "signed in" not in page.inner_text("#who").replace("not signed in", "")
    assert _visible_errors(page) == ["The token was refused: sign in with a configured token."]
    assert page.locator("#attention-table tbody tr").count() == 0 and page.is_visible("#login")
    page.screenshot(path=str(console.shots / "refused.png"))
    page.fill("#token", "operator-token")
    page.click("#login button")
    page.wait_for_selector('body[data-loaded="attention"]')
    assert page.get_attribute("body", "data-signed-in") == "yes"
    assert page.inner_text("#who .principal") == "otto" and _texts(page, "#who [data-badge]") == ["operator"]
    assert _visible_errors(page) == [] and page.is_hidden("#login") and page.is_visible("#sign-out")
    page.click("#sign-out")
    page.wait_for_selector('body[data-signed-in="no"]')


def test_signing_out_or_a_refused_token_leaves_no_data_on_any_page(console: Console) -> None:
    # Found by a new user: the previous token's operation page and queue stayed on screen.
    page = console.page("viewer-token")
    assert page.locator("#attention-table tbody tr").count() > 0
    console.open(page, f"op/{console.ids['refund']}")
    assert page.locator("#timeline-table tbody tr").count() > 0
    page.click("#sign-out")
    page.wait_for_selector('body[data-signed-in="no"]')
    page.wait_for_selector("#page-operation .banner.error:has-text('Sign in')")
    assert page.locator(".page tbody tr").count() == 0
    assert page.inner_text("#op-cards") == "" and page.inner_text("#phases") == "" and page.inner_text("#op-id") == ""
    page.fill("#token", "viewer-token")
    page.click("#login button")
    page.wait_for_selector(f'body[data-loaded="op/{console.ids["refund"]}"]')
    # a token refused later (revoked while signed in) forgets as well
    page.evaluate("sessionStorage.setItem('opledger-token', 'wrong-token-000000000000')")
    page.evaluate("location.hash = '#attention'")
    page.wait_for_selector('body[data-signed-in="refused"]')
    assert page.locator(".page tbody tr").count() == 0 and page.inner_text("#op-cards") == ""


def _offered(page: Any) -> list[str]:
    return page.eval_on_selector_all("#actions fieldset", "sets => sets.map(s => s.dataset.action)")


def test_only_the_actions_the_role_and_the_state_allow_are_offered(console: Console) -> None:
    blocked, refund = console.ids["blocked"], console.ids["refund"]
    viewer = console.page("viewer-token", f"op/{blocked}")
    assert _offered(viewer) == [] and viewer.is_visible("#no-actions")
    assert "needs the operator role; vera has viewer" in viewer.inner_text("#actions .withheld")
    operator = console.page("operator-token", f"op/{blocked}")
    assert _offered(operator) == ["resolve", "retry_settlement"]
    operator.screenshot(path=str(console.shots / "blocked-operator.png"), full_page=True)
    assert _texts(operator, "#resolution option") == ["abandon"]  # what a blocked settlement allows
    console.open(operator, f"op/{refund}")
    assert _offered(operator) == ["cancel"]
    assert "needs the approver role" in operator.inner_text("#actions .withheld")
    approver = console.page("approver-token", f"op/{refund}")
    assert _offered(approver) == ["approval"] and approver.is_visible("#approve") and approver.is_visible("#deny")
    console.open(approver, f"op/{console.ids['success']}")  # succeeded, awaiting settlement: nothing to do
    assert _offered(approver) == [] and approver.is_visible("#no-actions")


def test_resolving_with_evidence_moves_it_off_the_queue(console: Console) -> None:
    page = console.page("operator-token", f"op/{console.ids['ambiguous']}")
    assert _texts(page, "#resolution option") == ["succeeded", "failed", "retry", "abandon"]
    page.select_option("#resolution", "succeeded")
    questions: list[str] = []
    page.on("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
    page.fill("#evidence", "   ")  # no evidence: said at once, nothing asked, nothing sent
    page.click("#resolve")
    page.wait_for_selector("#page-operation .banner.error:has-text('Evidence is required')")
    assert questions == [] and page.evaluate("document.activeElement.id") == "evidence"
    page.fill("#evidence", "partner dashboard shows delivery n-123")
    page.click("#resolve")
    page.wait_for_selector("#page-operation .banner.note:has-text('recorded Resolved')")
    assert questions and "Resolve as succeeded" in questions[0]
    assert _offered(page) == []  # nothing left to resolve
    console.open(page, "attention")
    assert str(console.ids["ambiguous"]) not in _queue_ids(page)
    assert page.is_hidden("#page-attention .banner")  # the operation page's note stayed there


def test_acknowledging_a_late_observation_from_the_console(console: Console) -> None:
    late = console.ids["late"]
    page = console.page("operator-token", "attention")
    assert str(late) in _queue_ids(page) and "late observation" in _texts(page, "#attention-table [data-badge]")
    console.open(page, f"op/{late}")
    assert "late observation" in _texts(page, "#op-badges [data-badge]")
    assert _offered(page) == ["acknowledge"]
    page.fill("#ack-evidence", "provider confirms the chargeback was reversed")
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("#acknowledge")
    page.wait_for_selector("#page-operation .banner.note:has-text('recorded Resolved')")
    page.wait_for_selector("#timeline-table:has-text('acknowledge')")
    assert "late observation" not in _texts(page, "#op-badges [data-badge]")
    assert _offered(page) == []
    console.open(page, "attention")
    assert str(late) not in _queue_ids(page)


def test_the_phase_timeline_of_a_retried_operation_settled_by_callback(console: Console) -> None:
    page = console.page("viewer-token", f"op/{console.ids['callback']}")
    phases = page.eval_on_selector_all("#phases li.phase", "items => items.map(i => [i.dataset.phase, "
                                       "i.querySelector('.label').textContent, i.querySelector('.duration').textContent])")
    assert phases == [
        ["intent", "intent", "2 s"], ["claim", "claim", "0 s"], ["attempt", "attempt 1", "1.5 s"],
        ["retry wait", "retry wait", "4 s"], ["claim", "claim", "0 s"], ["attempt", "attempt 2", "800 ms"],
        ["accepted", "accepted", "20 s"], ["callback", "callback", "25 s"],
        ["callback", "succeeded by callback", "1 s"], ["settled", "settled", ""],
    ]
    assert page.inner_text("#phases li.total") == "intent to last event 54 s"
    assert _texts(page, "#op-badges [data-badge]") == ["settled", "succeeded"]
    assert "ok" in (page.get_attribute("#op-badges [data-badge=settled]", "class") or "")
    trace_id = TRACEPARENT.split("-")[1]
    link = page.locator("a.trace")
    assert link.inner_text() == trace_id and link.get_attribute("href") == TRACE_UI.replace("{trace_id}", trace_id)
    cards = page.inner_text("#op-cards")
    assert "null" not in cards and "{" not in cards and "callback" in cards and "pay_7781" in cards
    assert "[secret]" in cards  # the card token, redacted by classification
    page.screenshot(path=str(console.shots / "operation.png"), full_page=True)
    if os.environ.get("OPLEDGER_UPDATE_SCREENSHOT"):
        page.screenshot(path=str(DOCS / "console-operation.png"), full_page=True)


def test_a_takeover_is_its_own_phase_and_the_phases_wrap_on_a_narrow_screen(console: Console) -> None:
    page = console.page("viewer-token", f"op/{console.ids['takeover']}")
    phases = page.eval_on_selector_all("#phases li.phase", "items => items.map(i => [i.dataset.phase, "
                                       "i.querySelector('.label').textContent])")
    assert ["takeover", "takeover (lease expired)"] in phases
    assert phases.index(["takeover", "takeover (lease expired)"]) == phases.index(["claim", "claim"]) + 1
    assert "warn" not in (page.get_attribute("#phases li.claim", "class") or "")
    # A phone's width: the boxes wrap onto rows, none is cut, and the list never scrolls sideways.
    page.set_viewport_size({"width": 360, "height": 800})
    console.open(page, f"op/{console.ids['callback']}")
    fits = page.eval_on_selector_all("#phases .label, #phases .duration", "spans => spans.every(s => "
                                     "s.scrollWidth <= s.clientWidth)")
    sideways = page.evaluate("document.documentElement.scrollWidth > document.documentElement.clientWidth")
    rows = page.eval_on_selector_all("#phases li.phase", "items => new Set(items.map(i => i.offsetTop)).size")
    assert fits and rows > 1 and not sideways


def test_the_metrics_page_draws_charts_from_samples(console: Console) -> None:
    page = console.page("viewer-token", "metrics", query="?sample=1")
    for figure in ("outcomes", "throughput", "depth", "oldest", "latency", "attention"):
        page.wait_for_selector(f"#chart-{figure}[data-rendered=yes] svg.chart")
    assert page.locator("#page-metrics table").count() == 0  # no raw rows
    bars = _texts(page, "#chart-outcomes svg text.axis")
    assert {"succeeded", "failed", "ambiguous"} <= set(bars)
    latency = _texts(page, "#chart-latency svg text.axis")
    assert "intent to claim p50" in latency and "outcome to settled p99" in latency
    # The page samples on its own timer (every second: ?sample=1).
    _wait_for_sample(page, 2)
    # Work arrives and finishes between samples. The timer is stopped and each sample taken after
    # a round, so the last rate always spans a round of work: on a loaded machine the timer could
    # take a sample after the last round and show a rate of 0 (seen in CI).
    page.evaluate("stopSampling()")
    queued: list[UUID] = []
    for n in range(5):
        queued = more_work(console.desk.store.app, console.desk.clock, placed=2 + n, finish=queued)
        catch_up_status(console.desk.store)
        MetricsProjection(app=console.desk.store.app, store=MetricsStore(console.desk.store.view)).catch_up()
        page.evaluate("takeSample()")
    depth = page.eval_on_selector_all("#chart-depth path.line", "paths => paths.map(p => Number(p.dataset.points))")
    assert depth and min(depth) >= 5
    rates = page.eval_on_selector_all("#chart-throughput .legend li", "items => items.map(i => i.textContent)")
    assert any(rate.startswith("succeeded") and not rate.endswith(" 0/min") for rate in rates), rates
    assert "pending" in page.inner_text("#chart-depth .legend")
    # The quantiles are PromQL's histogram_quantile: linear inside the bucket the rank falls in,
    # the highest finite bound when it falls in +Inf, nothing without observations.
    buckets = [("0.5", 0), ("1", 10), ("2", 20), ("+Inf", 20)]
    assert _quantiles(page, buckets, [0.5, 0.75, 1.0]) == [1.0, 1.5, 2.0]
    assert _quantiles(page, [("1", 5), ("+Inf", 10)], [0.99]) == [1.0]
    assert _quantiles(page, [("1", 0), ("+Inf", 0)], [0.5]) == [None]
    page.screenshot(path=str(console.shots / "metrics.png"), full_page=True)
    if os.environ.get("OPLEDGER_UPDATE_SCREENSHOT"):
        page.screenshot(path=str(DOCS / "console-metrics.png"), full_page=True)


def _quantiles(page: Any, buckets: list[tuple[str, int]], qs: list[float]) -> list[float | None]:
    samples = [{"name": "h_bucket", "labels": {"le": le}, "value": count} for le, count in buckets]
    found: list[float | None] = page.evaluate("([samples, qs]) => qs.map(q => quantile(samples, 'h', q))",
                                              [samples, qs])
    return found


def _wait_for_sample(page: Any, count: int) -> None:
    deadline = time.monotonic() + 10
    while int(page.get_attribute("body", "data-samples") or 0) < count and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert int(page.get_attribute("body", "data-samples") or 0) >= count


@pytest.mark.parametrize("asked", ["abc", "0", "600"])
def test_a_sample_interval_the_page_cannot_use_is_said(console: Console, asked: str) -> None:
    page = console.page("viewer-token", "metrics", query=f"?sample={asked}")
    assert _texts(page, "#page-metrics .banner.note") == [
        f"?sample={asked} is not a number of seconds from 1 to 60: sampling every 5 s."]


def test_an_error_banner_stays_on_the_page_that_raised_it(console: Console) -> None:
    page = console.page("viewer-token", "attention")
    page.goto(f"{console.base}/console#op/00000000-0000-0000-0000-000000000000")
    page.wait_for_selector('body[data-loaded="error"]')
    assert len(_visible_errors(page)) == 1 and "404" in _visible_errors(page)[0]
    console.open(page, "attention")
    assert _visible_errors(page) == [] and page.is_hidden("#page-attention .banner")
    console.open(page, f"op/{console.ids['refund']}")
    assert _visible_errors(page) == []  # a later visit starts clean


def test_an_unknown_address_shows_the_queue_and_says_so(console: Console) -> None:
    page = console.page("viewer-token", f"op/{console.ids['refund']}")
    page.goto(f"{console.base}/console#no-such-page")
    page.wait_for_selector('body[data-loaded="unknown"]')
    assert page.is_visible("#page-attention") and page.is_hidden("#page-operation")
    assert _visible_errors(page) == ['There is no page "no-such-page": this is the attention queue.']
    assert _queue_ids(page), "the queue is shown"


def test_cancel_asks_for_confirmation_and_does_nothing_when_declined(console: Console) -> None:
    page = console.page("operator-token", f"op/{console.ids['pending']}")
    page.on("dialog", lambda dialog: dialog.dismiss())
    page.click("#cancel")
    page.wait_for_timeout(300)
    assert "CancelRequested" not in page.inner_text("#timeline-table")
    assert _offered(page) == ["cancel"]
