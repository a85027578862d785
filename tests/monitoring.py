"""The shipped monitors (``docs/monitoring/``): their PromQL, and the metric and label names it uses.

PromQL is read here with a small tokenizer rather than a parser (none is a dependency): enough
for the rules and the dashboard queries this project writes, and checked against promtool, which
parses every expression (``tests/unit/test_monitoring.py``).

Source: DESIGN §9 ("Monitors"); issue 31 item 3.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
MONITORING = ROOT / "docs" / "monitoring"
RULES = MONITORING / "opledger-rules.yml"
RULE_TESTS = MONITORING / "opledger-rules.test.yml"
DASHBOARD = MONITORING / "opledger-dashboard.json"
OPERATIONS = ROOT / "docs" / "operations.md"

PROMETHEUS_OWN = {"up"}
"""Series Prometheus makes itself for every target; never on ``/metrics``."""
TARGET_LABELS = {"job", "instance"}
"""Labels Prometheus adds to every scraped series."""

# Grafana's variables, replaced by something PromQL parses.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h", "$integration": ".*",
                     "$tenant": ".*"}
_LABEL_VALUES = re.compile(r"^label_values\((?:(.*),\s*)?([A-Za-z_][A-Za-z0-9_]*)\)$")

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_IDENT = re.compile(r"(?<![A-Za-z0-9_:.])([A-Za-z_:][A-Za-z0-9_:]*)(?![A-Za-z0-9_:]|\s*\()")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
             "offset", "atan2", "inf", "nan", "Inf", "NaN"}


@dataclass
class Names:
    """What one PromQL expression names.

    Attributes:
        metrics: series names (``opledger_outcomes_total``, ``up``).
        recorded: recording rule names it reads (they contain a colon).
        selectors: ``(series name, label names of its matchers)`` for each selector.
        grouping: label names of ``by``/``without``/``on``/``ignoring``/``group_*`` clauses.
    """

    metrics: set[str] = field(default_factory=set)
    recorded: set[str] = field(default_factory=set)
    selectors: list[tuple[str, set[str]]] = field(default_factory=list)
    grouping: set[str] = field(default_factory=set)


def names_in(expr: str) -> Names:
    """The series, recording rules and labels a PromQL expression names."""
    found = Names()
    text = _STRING.sub('""', expr)
    for match in _SELECTOR.finditer(text):
        labels = set(_MATCHER.findall(match.group(2)))
        name = match.group(1) or ""
        found.selectors.append((name, labels))
    text = _SELECTOR.sub(lambda m: f" {m.group(1) or ''} ", text)
    for match in _GROUPING.finditer(text):
        found.grouping |= {label.strip() for label in match.group(1).split(",") if label.strip()}
    text = _RANGE.sub(" ", _GROUPING.sub(" ", text))
    for name in _IDENT.findall(text):
        if name in _KEYWORDS:
            continue
        (found.recorded if ":" in name else found.metrics).add(name)
    return found


def rule_groups() -> list[dict[str, Any]]:
    """The groups of ``opledger-rules.yml``."""
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def rules() -> Iterator[dict[str, Any]]:
    """Every rule, recording and alerting."""
    for group in rule_groups():
        yield from group["rules"]


def alerts() -> list[dict[str, Any]]:
    """Every alerting rule."""
    return [rule for rule in rules() if "alert" in rule]


def rule_expressions() -> list[tuple[str, str]]:
    """``(rule name, expression)`` of every rule."""
    return [(rule.get("alert") or rule["record"], rule["expr"]) for rule in rules()]


def dashboard_queries() -> list[tuple[str, str]]:
    """``(where, query)`` of every panel target and variable of the Grafana dashboard, as written."""
    board = json.loads(DASHBOARD.read_text())
    found: list[tuple[str, str]] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            for target in panel.get("targets", []):
                found.append((f"panel {panel['title']!r} {target['refId']}", target["expr"]))
            walk(panel.get("panels", []))

    walk(board["panels"])
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            found.append((f"variable {variable['name']}", query["query"] if isinstance(query, dict) else query))
    return found


def as_promql(query: str) -> str:
    """A dashboard query as PromQL: Grafana's variables replaced, and a variable's
    ``label_values(selector, label)`` as ``count by (label) (selector)`` (what it lists)."""
    for variable in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        query = query.replace("${" + variable[1:] + "}", GRAFANA_VARIABLES[variable])
        query = query.replace(variable, GRAFANA_VARIABLES[variable])
    listed = _LABEL_VALUES.match(query.strip())
    if listed:
        return f"count by ({listed.group(2)}) ({listed.group(1) or 'up'})"
    return query


def exposed(metrics_text: str) -> dict[str, set[str]]:
    """Every series name a ``/metrics`` exposition declares, with the label names its samples
    carry: a counter family ``X`` is ``X_total``, a histogram ``X`` is ``X_bucket``, ``X_sum``
    and ``X_count`` (the buckets with ``le``), a gauge is its name. A family without samples has
    no other labels here."""
    series: dict[str, set[str]] = {}
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
    for family in text_string_to_metric_families(metrics_text):
        for suffix in suffixes.get(family.type, [""]):
            series.setdefault(family.name + suffix, {"le"} if suffix == "_bucket" else set())
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
    return series


def unexposed(expressions: list[tuple[str, str]], metrics_text: str, *, recorded: set[str]) -> list[str]:
    """What the expressions name that ``/metrics`` does not expose: a series, a label of a
    selector's series, a grouping label none of the expression's series has, or a recording rule
    not in ``recorded``. A series without samples on ``/metrics`` is checked against every label.

    Args:
        expressions: ``(where, PromQL)`` pairs.
        metrics_text: a ``/metrics`` body.
        recorded: the recording rules that exist.

    Returns:
        One line per problem, naming where; empty when everything named is exposed.
    """
    series = exposed(metrics_text)
    every_label = set().union(*series.values()) | TARGET_LABELS

    def labels_of(name: str) -> set[str]:
        # A series without samples (only its family declared, or only ``le``) may carry any label.
        labels = series.get(name, set())
        return labels if labels - {"le"} else labels | every_label

    problems = []
    for where, expr in expressions:
        names = names_in(expr)
        for name in sorted(names.metrics - set(series) - PROMETHEUS_OWN):
            problems.append(f"{where}: /metrics does not expose {name}")
        for name in sorted(names.recorded - recorded):
            problems.append(f"{where}: no recording rule {name}")
        for name, labels in names.selectors:
            known = labels_of(name) | TARGET_LABELS
            for label in sorted(labels - known):
                problems.append(f"{where}: {name or 'a selector'} has no label {label!r} on /metrics")
        carried = set().union(*(labels_of(name) for name in names.metrics if name in series)) or every_label
        for label in sorted(names.grouping - carried - TARGET_LABELS):
            problems.append(f"{where}: none of {sorted(names.metrics)} has a label {label!r} on /metrics")
    return problems


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings (lower case, punctuation dropped,
    spaces as hyphens)."""
    anchors = set()
    for line in markdown.splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*$", line)
        if match:
            anchors.add(re.sub(r"[^\w\- ]", "", match.group(1).lower()).replace(" ", "-"))
    return anchors


def promtool() -> str:
    """The promtool binary (Debian's ``prometheus`` package; ``OPLEDGER_PROMTOOL`` names another);
    skips the test on a developer machine without it, and fails it when ``CI`` is set (``.ci/run``
    installs it)."""
    path = shutil.which(os.environ.get("OPLEDGER_PROMTOOL", "promtool"))
    if path is None:
        problem = "no promtool on PATH; apt-get install -y --no-install-recommends prometheus"
        if os.environ.get("CI"):
            pytest.fail(f"{problem} (CI is set: the monitors' tests must run)")
        pytest.skip(problem)
    return path
