"""The shipped monitors (``docs/monitoring/``): promtool checks and unit-tests the rules, every
alert is annotated, linked to a runbook heading, documented and tested firing and silent, and
every attention reason has its own alert.

promtool comes from Debian's ``prometheus`` package: without it these tests skip on a developer
machine and FAIL when ``CI`` is set (``.ci/run`` installs it). Whether every metric the monitors
name is on ``/metrics``: ``tests/integration/test_monitoring_metrics.py``.

Source: DESIGN §9 ("Monitors"); issue 31 item 3.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.monitoring import (
    MONITORING,
    OPERATIONS,
    RULE_TESTS,
    RULES,
    alerts,
    as_promql,
    dashboard_queries,
    heading_anchors,
    names_in,
    promtool,
    unexposed,
)

SEVERITIES = {"critical", "warning", "info"}
CATCH_ALL = "OpledgerAttentionOther"


def _run(*args: str, cwd: Path = MONITORING) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_promtool_checks_the_rules() -> None:
    done = _run("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_unit_tests_of_the_rules_pass() -> None:
    done = _run("test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_dashboard_query_is_promql_promtool_parses(tmp_path: Path) -> None:
    # Each query (Grafana's variables replaced) as a recording rule: `check rules` parses them all.
    queries = [{"record": f"dashboard:query_{i}:check", "expr": as_promql(query)}
               for i, (_where, query) in enumerate(dashboard_queries())]
    assert len(queries) > 20
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": queries}]}))
    done = _run("check", "rules", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_severity_a_summary_a_description_and_a_runbook_heading() -> None:
    anchors = heading_anchors(OPERATIONS.read_text())
    for alert in alerts():
        name = alert["alert"]
        assert alert["labels"]["severity"] in SEVERITIES, name
        annotations = alert["annotations"]
        assert annotations["summary"] and annotations["description"], name
        page, _, anchor = annotations["runbook_url"].partition("#")
        assert page == "docs/operations.md" and anchor in anchors, f"{name}: no heading for {annotations['runbook_url']}"


def test_every_alert_is_tested_firing_and_silent() -> None:
    fired: set[str] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for expectation in case.get("alert_rule_test", []):
            (fired if expectation.get("exp_alerts") else silent).add(expectation["alertname"])
    names = {alert["alert"] for alert in alerts()}
    assert names - fired == set(), "alerts never tested firing"
    assert names - silent == set(), "alerts never tested silent"


def test_the_alerting_section_lists_every_alert() -> None:
    text = OPERATIONS.read_text()
    section = text.split("\n## Alerting\n", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(Opledger\w+)` \|", section, flags=re.MULTILINE))
    headed = set(re.findall(r"^### (Opledger\w+)$", section, flags=re.MULTILINE))
    names = {alert["alert"] for alert in alerts()}
    assert listed == names and headed == names


def _documented_reasons() -> set[str]:
    table = OPERATIONS.read_text().split("\n## The attention queue\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.MULTILINE))


OWN_METRIC = {"receipt_stuck": "opledger_receipts_stuck", "late_after_archive": "opledger_archive_late_records"}
"""Attention reasons not counted by ``opledger_attention`` (a receipt's; a late record of an
archived operation, which has no status row), with the gauge their alert reads instead (issue 31
item 4; ADR 0010 §4)."""


def test_every_attention_reason_has_its_own_alert_and_the_catch_all_excludes_exactly_those() -> None:
    dedicated: dict[str, str] = {}
    for alert in alerts():
        if alert["alert"] == CATCH_ALL:
            continue
        for reason in re.findall(r'opledger_attention\{reason="([a-z_]+)"\}', alert["expr"]):
            dedicated[reason] = alert["alert"]
    documented = _documented_reasons()
    assert len(documented) >= 12
    for reason, metric in OWN_METRIC.items():
        assert reason in documented and any(metric in alert["expr"] for alert in alerts()), reason
    assert documented - set(dedicated) - set(OWN_METRIC) == set(), "attention reasons without an alert"
    catch_all = next(alert for alert in alerts() if alert["alert"] == CATCH_ALL)
    excluded = re.search(r'reason!~"([^"]+)"', catch_all["expr"])
    assert excluded is not None and set(excluded.group(1).split("|")) == set(dedicated)


EXPOSITION = """\
# HELP opledger_outcomes_total outcomes
# TYPE opledger_outcomes_total counter
opledger_outcomes_total{integration="a",tenant="t",delivery_mode="idempotent",outcome="failed"} 1.0
# HELP opledger_claim_latency_seconds claims
# TYPE opledger_claim_latency_seconds histogram
# HELP opledger_attention attention
# TYPE opledger_attention gauge
opledger_attention{integration="a",tenant="t",delivery_mode="idempotent",reason="ambiguous"} 1.0
"""


@pytest.mark.parametrize(("expr", "problem"), [
    ("sum(rate(opledger_outcomes_total[5m]))", None),
    ('sum by (integration, le) (rate(opledger_claim_latency_seconds_bucket{tenant="t"}[5m]))', None),
    ('absent(up{job="opledger"}) or opledger_attention{reason="ambiguous"} > bool 0', None),
    ("sum(rate(opledger_outcomes[5m]))", "does not expose opledger_outcomes"),
    ("opledger_claim_latency_seconds > 1", "does not expose opledger_claim_latency_seconds"),
    ("increase(opledger_settled_total[15m]) > 0", "does not expose opledger_settled_total"),
    ('opledger_attention{kind="claim"}', "opledger_attention has no label 'kind'"),
    ("sum by (category) (opledger_outcomes_total)", "has a label 'category'"),
    ("job:opledger_outcomes:rate5m", "no recording rule job:opledger_outcomes:rate5m"),
])
def test_a_name_that_metrics_does_not_expose_is_found(expr: str, problem: str | None) -> None:
    found = unexposed([("rule", expr)], EXPOSITION, recorded=set())
    assert found == [] if problem is None else (len(found) == 1 and problem in found[0]), found


def test_the_tokenizer_reads_functions_ranges_and_strings_apart_from_series() -> None:
    names = names_in('histogram_quantile(0.95, sum by (le) (rate(x_bucket{a=~"b|c", d!="rate(y)"}[5m] offset 1h)))'
                     " / on (a) group_left (e) z:recorded:rate5m")
    assert names.metrics == {"x_bucket"} and names.recorded == {"z:recorded:rate5m"}
    assert names.selectors == [("x_bucket", {"a", "d"})] and names.grouping == {"le", "a", "e"}
