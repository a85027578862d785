"""The operator console in a real browser: Playwright driving Debian's headless Chromium against
``opledger serve``'s app on a local port. Without chromium or playwright these tests skip on a
developer machine and FAIL when ``CI`` is set (``.ci/run`` installs both).

Screenshots of each page go to the test's tmp dir; with ``OPLEDGER_UPDATE_SCREENSHOT=1`` the
attention queue's is also written to ``docs/console.png`` (the README shows it).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from tests.desk import Desk, desk
from tests.observe_seed import CANARY_INTERNAL, CANARY_SECRET

CHROMIUM = os.environ.get("OPLEDGER_CHROMIUM", "/usr/bin/chromium")
DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "console.png"
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def console(tmp_path: Path) -> Iterator[tuple[Desk, str, Any]]:
    """The seeded desk served by uvicorn on a free port, and a headless Chromium."""
    sync_playwright = _require_browser()
    with desk(f"sqlite:///{tmp_path / 'store' / 'opledger.db'}") as d:
        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(d.app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.started, "uvicorn did not start"
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
                try:
                    yield d, f"http://127.0.0.1:{port}", browser
                finally:
                    browser.close()
        finally:
            server.should_exit = True
            thread.join(timeout=10)


def _sign_in(page: Any, base: str, token: str, hash_: str = "attention") -> None:
    page.goto(f"{base}/console#{hash_}")
    page.fill("#token", token)
    page.click("#login button")
    page.wait_for_selector(f'body[data-loaded="{hash_}"]')


def _queue_ids(page: Any) -> list[str]:
    return page.eval_on_selector_all("#attention-table tbody tr", "rows => rows.map(r => r.dataset.id)")


def test_pages_show_the_queue_operations_timeline_and_metrics(console: tuple[Desk, str, Any],
                                                              tmp_path: Path) -> None:
    d, base, browser = console
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    _sign_in(page, base, "viewer-token")
    assert str(d.ids["ambiguous"]) in _queue_ids(page)
    assert "ambiguous" in page.inner_text("#attention-table")
    assert page.inner_text("#glance")  # the metrics at a glance
    page.screenshot(path=str(tmp_path / "attention.png"), full_page=True)
    if os.environ.get("OPLEDGER_UPDATE_SCREENSHOT"):
        page.screenshot(path=str(DOCS_SCREENSHOT), full_page=True)
    pages = {"operations": "#operations-table", "approvals": "#approvals-table", "metrics": "#metrics-table"}
    for name, table in pages.items():
        page.goto(f"{base}/console#{name}")
        page.wait_for_selector(f'body[data-loaded="{name}"]')
        assert page.locator(f"{table} tbody tr").count() > 0, name
        page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
        assert "CANARY" not in page.content()
    page.goto(f"{base}/console#operations")
    page.wait_for_selector('body[data-loaded="operations"]')
    page.select_option("#filters select[name=status]", "failed")
    page.click("#filters button")
    from playwright.sync_api import expect

    expect(page.locator("#operations-table tbody tr")).to_have_count(2)  # a settled failure included
    page.goto(f"{base}/console#op/{d.ids['refund']}")
    page.wait_for_selector(f'body[data-loaded="op/{d.ids["refund"]}"]')
    assert "Intended" in page.inner_text("#timeline-table")
    content = page.content()
    assert CANARY_INTERNAL not in content and CANARY_SECRET not in content and "[internal]" in content
    page.screenshot(path=str(tmp_path / "operation.png"), full_page=True)
    for name in ("attention", "operations", "approvals", "metrics", "operation"):
        assert (tmp_path / f"{name}.png").stat().st_size > 1000


def test_resolving_with_evidence_moves_it_off_the_queue(console: tuple[Desk, str, Any]) -> None:
    d, base, browser = console
    page = browser.new_page()
    _sign_in(page, base, "operator-token", f"op/{d.ids['ambiguous']}")
    page.select_option("#resolution", "succeeded")
    page.fill("#evidence", "partner dashboard shows delivery n-123")
    questions: list[str] = []
    page.on("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
    page.click("#resolve")
    page.wait_for_selector("#message:has-text('recorded Resolved')")
    assert questions and "Resolve as succeeded" in questions[0]
    page.goto(f"{base}/console#attention")
    page.wait_for_selector('body[data-loaded="attention"]')
    assert str(d.ids["ambiguous"]) not in _queue_ids(page)


def test_a_viewer_cannot_resolve(console: tuple[Desk, str, Any]) -> None:
    d, base, browser = console
    page = browser.new_page()
    _sign_in(page, base, "viewer-token", f"op/{d.ids['ambiguous']}")
    page.fill("#evidence", "I looked")
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("#resolve")
    page.wait_for_selector("#message.error")
    assert "403" in page.inner_text("#message") and "operator role" in page.inner_text("#message")
    page.goto(f"{base}/console#attention")
    page.wait_for_selector('body[data-loaded="attention"]')
    assert str(d.ids["ambiguous"]) in _queue_ids(page)


def test_cancel_asks_for_confirmation_and_does_nothing_when_declined(console: tuple[Desk, str, Any]) -> None:
    d, base, browser = console
    page = browser.new_page()
    _sign_in(page, base, "operator-token", f"op/{d.ids['pending']}")
    page.on("dialog", lambda dialog: dialog.dismiss())
    page.click("#cancel")
    page.wait_for_timeout(300)
    assert "CancelRequested" not in page.inner_text("#timeline-table")
