"""Reading the chart's Grafana dashboard (files/dashboard.json): the board, its panels, and the
metric names each PromQL expression selects, read with a small lexer (no PromQL parser is
installed). ``tests/charts/test_dashboard.py`` checks the board with them, and
``e2e/test_prometheus.py`` evaluates its queries on the local cluster's Prometheus."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "finishable-spark-operator"
DASHBOARD = CHART / "files" / "dashboard.json"
PROMQL_KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "offset", "bool", "inf", "nan", "atan2",
}  # fmt: skip


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, including those folded into rows."""
    found = []
    for panel in board["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def strip_strings(expr: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (a lexer, enough for dashboards)."""
    text = strip_strings(expr)
    selectors = set(re.findall(r'__name__\s*=\s*"([^"]*)"', expr))  # {__name__="..."}
    text = re.sub(r"\$\{\w+(?::\w+)?\}|\$\w+", " ", text)  # Grafana variables
    text = re.sub(r"\{[^{}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\[\]]*\]", " ", text)  # ranges and subqueries' steps
    grouping = r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)"
    text = re.sub(grouping, " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in PROMQL_KEYWORDS:
            continue  # a function or an aggregation, or an operator
        names.add(name)
    return names | selectors
