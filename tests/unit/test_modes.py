"""The delivery-mode rules (``ledger.modes``): complete, rendered into the docs, equal to DESIGN §5."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ledger.declarations import DeliveryMode
from ledger.modes import RULES, AfterLostResponse, render_rules, render_table, rules_for

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT.parent / "shared" / "DESIGN.md"  # the shared folder sits beside the clone


def _rendered(name: str) -> str:
    text = (ROOT / "docs" / "delivery-modes.md").read_text()
    match = re.search(rf"<!-- rendered: {name} -->\n(.*?)<!-- /rendered -->", text, re.S)
    assert match, f"docs/delivery-modes.md has no rendered {name} section"
    return match.group(1)


def test_every_mode_has_rules() -> None:
    assert set(RULES) == set(DeliveryMode)
    assert all(rules_for(mode).mode is mode for mode in DeliveryMode)


@pytest.mark.parametrize(("name", "render"), [("render_table", render_table), ("render_rules", render_rules)])
def test_the_docs_show_the_rules_as_the_code_has_them(name: str, render) -> None:
    assert _rendered(name) == render(), "regenerate docs/delivery-modes.md from ledger.modes"


@pytest.mark.skipif(not DESIGN.exists(), reason="the shared DESIGN.md is not beside this checkout")
def test_the_rendered_table_is_design_section_5() -> None:
    section = DESIGN.read_text().split("## 5. Delivery modes", 1)[1]
    table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    first = table.split("\n\n")[0]
    assert render_table().strip() in first


def test_only_modes_whose_provider_dedupes_or_has_no_effect_repeat_a_possibly_applied_attempt() -> None:
    repeating = {mode for mode, rules in RULES.items() if rules.retries_possibly_applied}
    assert repeating == {DeliveryMode.IDEMPOTENT, DeliveryMode.READ_ONLY}
    assert {m for m, r in RULES.items() if r.follows_redirects} == repeating
    assert all(r.after_lost_response is AfterLostResponse.RETRY for m, r in RULES.items() if m in repeating)
