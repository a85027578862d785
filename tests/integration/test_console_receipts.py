"""The console's attention page shows a keyed command's receipt that recovery gave up on, as the
API names it (``receipt_stuck``), with its id and detail and no link to an operation page, in
headless Chromium against a served desk (issue 31 item 4). Skips without a browser on a
developer machine and fails when ``CI`` is set, as ``test_console.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ledger.receipts import Receipt, receipt_id
from projections.metrics import MetricsProjection
from projections.metrics_store import MetricsStore
from tests.desk import desk
from tests.integration.test_console import CHROMIUM, CHROMIUM_ARGS, _require_browser
from tests.loopback import uvicorn_serving

KEY = "console-stuck"


@pytest.fixture
def served(tmp_path: Any) -> Iterator[str]:
    """A seeded desk with one stuck receipt, served by uvicorn; yields its base URL."""
    with desk(f"sqlite:///{tmp_path / 'store' / 'opledger.db'}") as d:
        request = {"route": "/v1/commands/request_refund", "command": "request_refund", "principal": "vera",
                   "body": {}, "body_error": None}
        receipt = Receipt.open(principal="vera", scope="request_refund", key=KEY, request=request, owner="serve:gone",
                               now=d.clock.now(), lease_seconds=5)
        receipt.release(epoch=1, reason="RuntimeError", now=d.clock.now())
        receipt.stop_recovery(adoptions=3, now=d.clock.now())
        d.store.app.save(receipt)
        MetricsProjection(app=d.store.app, store=MetricsStore(d.store.view)).catch_up()
        with uvicorn_serving(d.app) as base:
            yield base

def test_the_attention_page_shows_a_stuck_receipt(served: str) -> None:
    sync_playwright = _require_browser()
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("pageerror", lambda error: errors.append(f"{error}"))
            page.goto(f"{served}/console#attention")
            page.fill("#token", "viewer-token")
            page.click("#login button")
            page.wait_for_selector('body[data-loaded="attention"]')
            rid = str(receipt_id("vera", "request_refund", KEY))
            row = page.locator("#attention-table tbody tr", has_text=rid)
            assert row.count() == 1
            text = row.inner_text()
            assert "receipt stuck" in text.replace("_", " ") and "request_refund" in text and "RuntimeError" in text
            assert row.locator("a").count() == 0  # no operation page to link to
            # The glance counts the whole queue: the stuck receipt with the operations.
            queued = page.locator("#attention-table tbody tr").count()
            tile = page.locator("#glance div", has_text="on the attention queue").locator("b").inner_text()
            assert int(tile) == queued
        finally:
            browser.close()
    assert errors == []


@pytest.mark.parametrize(("token", "offered"), [("viewer-token", False), ("operator-token", True)])
def test_an_operator_resolves_a_stuck_receipt_from_its_row(served: str, token: str, offered: bool) -> None:
    # The receipt has no page of its own, so its resolutions sit in its row, for roles that may
    # resolve (issue 31 item 4: "on the attention queue ... with a reason and an action").
    sync_playwright = _require_browser()
    errors: list[str] = []
    questions: list[str] = []
    rid = str(receipt_id("vera", "request_refund", KEY))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("pageerror", lambda error: errors.append(f"{error}"))
            page.on("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
            page.goto(f"{served}/console#attention")
            page.fill("#token", token)
            page.click("#login button")
            page.wait_for_selector('body[data-loaded="attention"]')
            row = page.locator("#attention-table tbody tr", has_text=rid)
            assert row.locator("button.receipt-resolve").count() == (1 if offered else 0)
            if not offered:
                return
            row.locator("select.receipt-resolution").select_option("abandon")
            row.locator("input.receipt-evidence").fill("the client gave up on this refund")
            row.locator("button.receipt-resolve").click()
            banner = page.locator("#page-attention .banner")
            banner.wait_for(state="visible")
            assert "ReceiptResolved" in banner.inner_text() and rid in questions[0]
            assert page.locator("#attention-table tbody tr", has_text=rid).count() == 0  # off the queue
        finally:
            browser.close()
    assert errors == []
