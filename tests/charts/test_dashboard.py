"""The chart's Grafana dashboard (files/dashboard.json, shipped in a ConfigMap for Grafana's
sidecar): it loads as Grafana dashboard JSON, shows what the issue asks for, and every query names
only metrics the operator exports.

There is no Grafana here, so "loads as Grafana dashboard JSON" is checked against the dashboard
model Grafana's provisioning and sidecar accept: a bare dashboard object (not the API's
``{"dashboard": ...}`` envelope, and no numeric ``id`` that would clash with Grafana's database),
with ``title``, ``uid`` and ``schemaVersion``; panels on the 24-column grid that do not overlap;
every query bound to the ``datasource`` template variable of type ``prometheus``; every variable a
query uses defined. The metric names are read from each PromQL expression with a small lexer (no
PromQL parser is installed) and compared with the series a scrape of the operator's registry, or
of the partition service's, can hold, so a renamed metric or a query for something neither
exports fails here.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from finishable.controller.metrics import Metrics
from finishable.partitions.catalog import PartitionCatalog
from finishable.partitions.service import DirectoryTokens, PartitionService
from testcluster.chart.dashboard import dashboard, metric_names, panels, strip_strings

pytestmark = pytest.mark.quick

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "finishable-spark-operator"
GRID_COLUMNS = 24
PANEL_TYPES = {
    "timeseries", "stat", "gauge", "bargauge", "table", "heatmap", "piechart", "text", "row",
}  # fmt: skip
# Grafana's own variables a query may use besides the dashboard's.
BUILTIN_VARIABLES = {
    "__rate_interval", "__interval", "__interval_ms", "__range", "__range_s", "__range_ms",
    "__all", "__dashboard", "__from", "__to",
}  # fmt: skip


def exported_series() -> set[str]:
    """Every series name a scrape of the operator's metrics can hold.

    prometheus_client names a counter ``<name>_total`` (and ``<name>_created``), a histogram
    ``_bucket``, ``_sum``, ``_count`` (and ``_created``), a gauge as it is. Labelled metrics have
    no series until a label set is used, so the suffixes come from this table, which the second
    half checks against the series actually exposed by the families that do have samples.
    """
    suffixes = {
        "counter": ("_total", "_created"),
        "gauge": ("",),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
    }
    registry = CollectorRegistry()
    Metrics(registry)
    families = list(registry.collect())
    with tempfile.TemporaryDirectory() as storage:  # the partition service's own registry
        service = PartitionService(PartitionCatalog(storage), DirectoryTokens(Path(storage)))
        families += list(service.registry.collect())
    names = {family.name + suffix for family in families for suffix in suffixes[family.type]}
    scraped = text_string_to_metric_families(generate_latest(registry).decode())
    # (the service's families are checked against the same table by name only: its gauges
    # have no samples in an empty storage)
    seen = {sample.name for family in scraped for sample in family.samples}
    assert seen, "the unlabelled metrics have samples in a fresh registry"
    assert seen <= names, f"prometheus_client exposes series this table lacks: {seen - names}"
    return names


def legend_labels(legend: str) -> set[str]:
    return set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))


def grouping_labels(expr: str) -> set[str]:
    return {
        label.strip()
        for group in re.findall(r"\b(?:by|without)\s*\(([^()]*)\)", expr)
        for label in group.split(",")
        if label.strip()
    }


def variables_used(text: str) -> set[str]:
    """``$name``, ``${name}`` and ``${name:format}``."""
    return {a or b for a, b in re.findall(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", text)}


def balanced(expr: str) -> bool:
    pairs, stack = {")": "(", "]": "[", "}": "{"}, []
    for char in strip_strings(expr):
        if char in "([{":
            stack.append(char)
        elif char in pairs and (not stack or stack.pop() != pairs[char]):
            return False
    return not stack


def queries(board: dict[str, Any]) -> list[str]:
    """Every PromQL expression: the panels' targets and the query variables'."""
    exprs = [target["expr"] for panel in panels(board) for target in panel.get("targets", [])]
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        query = query["query"] if isinstance(query, dict) else query
        labels = re.fullmatch(r"label_values\((?:(.+),\s*)?(\w+)\)", query.strip())
        exprs.append((labels.group(1) or "") if labels else query)
    return exprs


# --- the dashboard model ---------------------------------------------------------------------


def test_the_dashboard_is_a_bare_grafana_dashboard_model() -> None:
    board = dashboard()
    assert "dashboard" not in board, "the sidecar loads the model itself, not the API envelope"
    assert board.get("id") is None, "a fixed id would clash with dashboards in Grafana's database"
    assert isinstance(board["title"], str) and board["title"].strip()
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", board["uid"]), "uid: at most 40 URL-safe chars"
    assert isinstance(board["schemaVersion"], int)
    assert board["schemaVersion"] >= 36, "datasource references as {type, uid} objects"
    assert isinstance(board["panels"], list) and board["panels"]
    assert isinstance(board["templating"]["list"], list)
    assert set(board["time"]) == {"from", "to"}
    assert all(isinstance(tag, str) for tag in board.get("tags", []))
    assert json.loads(json.dumps(board)) == board, "plain JSON (the ConfigMap carries it as text)"


def test_queries_use_the_datasource_variable() -> None:
    board = dashboard()
    variables = {variable["name"]: variable for variable in board["templating"]["list"]}
    assert len(variables) == len(board["templating"]["list"]), "variable names are unique"
    source = variables["datasource"]
    assert source["type"] == "datasource" and source["query"] == "prometheus"
    reference = {"type": "prometheus", "uid": "${datasource}"}
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == reference, variable["name"]
    for panel in panels(board):
        if panel["type"] in {"row", "text"}:
            continue
        assert panel["datasource"] == reference, panel["title"]
        for target in panel["targets"]:
            assert target.get("datasource", reference) == reference, panel["title"]


def test_every_variable_a_query_uses_is_defined() -> None:
    board = dashboard()
    defined = {variable["name"] for variable in board["templating"]["list"]}
    used = set().union(*(variables_used(expr) for expr in queries(board)))
    assert used <= defined | BUILTIN_VARIABLES, used - defined - BUILTIN_VARIABLES


def test_every_panel_is_complete() -> None:
    board = dashboard()
    ids = [panel["id"] for panel in panels(board)]
    assert all(isinstance(panel_id, int) and panel_id > 0 for panel_id in ids)
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for panel in panels(board):
        assert panel["type"] in PANEL_TYPES, panel["type"]
        assert isinstance(panel["title"], str) and panel["title"].strip(), panel["id"]
        if panel["type"] in {"row", "text"}:
            continue
        targets = panel["targets"]
        assert targets, f"panel {panel['title']!r} has no query"
        ref_ids = [target["refId"] for target in targets]
        assert len(ref_ids) == len(set(ref_ids)), f"panel {panel['title']!r}: refIds repeat"
        for target in targets:
            assert isinstance(target["expr"], str) and target["expr"].strip(), panel["title"]
            assert balanced(target["expr"]), target["expr"]
            # a legend label must survive the query's aggregation
            missing = legend_labels(target.get("legendFormat", "")) - grouping_labels(
                target["expr"]
            )
            assert not missing, f"{panel['title']!r}: legend uses {missing}, not in by (...)"


def test_the_panels_sit_on_the_grid_without_overlapping() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in panels(dashboard()):
        grid = panel["gridPos"]
        x, y, w, h = (grid[key] for key in ("x", "y", "w", "h"))
        assert all(isinstance(value, int) for value in (x, y, w, h)), panel["title"]
        assert x >= 0 and w >= 1 and x + w <= GRID_COLUMNS, f"{panel['title']!r}: {grid}"
        assert y >= 0 and h >= 1, f"{panel['title']!r}: {grid}"
        for column in range(x, x + w):
            for row in range(y, y + h):
                other = cells.setdefault((column, row), panel["title"])
                assert other == panel["title"], f"{panel['title']!r} overlaps {other!r}"


# --- what it shows, and only what the operator exports ---------------------------------------


def test_every_query_names_only_metrics_the_operator_or_the_partition_service_exports() -> None:
    exported = exported_series()
    for expr in queries(dashboard()):
        names = metric_names(expr)
        assert names, f"{expr!r} selects no metric"
        assert names <= exported, f"{expr!r}: the operator exports no {names - exported}"


# Each view the issue asks for: the metrics one panel must query (all of them, in one panel).
VIEWS = {
    "jobs by phase over time": {"finishable_jobs"},
    "checkpoints": {"finishable_checkpoints_completed_total"},
    "stop latency": {"finishable_stop_duration_seconds_bucket"},
    "recoveries": {"finishable_driver_restarts_total"},
    "departures": {"finishable_driver_departures_total"},
    "recovery time": {"finishable_recovery_duration_seconds_bucket"},
    "lifecycle transitions": {"finishable_lifecycle_transition_duration_seconds_bucket"},
    "snapshots by state": {"finishable_snapshots"},
    "tasks skipped": {"finishable_recovery_tasks_skipped_total"},
    "tasks re-run": {"finishable_recovery_tasks_rerun_total"},
    "cluster partitions": {"finishable_cluster_partitions"},
    "cluster partition bytes": {"finishable_cluster_partition_bytes"},
    "jobs deleted at the end of their time to live": {"finishable_jobs_expired_total"},
}


@pytest.mark.parametrize("view", VIEWS)
def test_a_panel_shows(view: str) -> None:
    shown = [
        panel
        for panel in panels(dashboard())
        if VIEWS[view]
        <= set().union(*(metric_names(target["expr"]) for target in panel.get("targets", [])))
    ]
    assert shown, f"no panel shows {view} ({', '.join(VIEWS[view])})"
    assert any(panel["type"] == "timeseries" for panel in shown), f"{view}: over time"


def test_jobs_by_phase_is_split_by_phase() -> None:
    (panel,) = [
        panel
        for panel in panels(dashboard())
        if any("finishable_jobs" in metric_names(t["expr"]) for t in panel["targets"])
    ]
    assert all("phase" in grouping_labels(target["expr"]) for target in panel["targets"])


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("sum by (phase) (finishable_jobs)", {"finishable_jobs"}),
        (
            'histogram_quantile(0.95, sum by (le) (rate(x_bucket{a=~"$ns", b!="by (z)"}'
            "[$__rate_interval])))",
            {"x_bucket"},
        ),
        ("increase(a_total[5m]) / on (job) group_left (phase) b offset 1h", {"a_total", "b"}),
        ("up == 1 and kube_pod_info", {"up", "kube_pod_info"}),
        ('{__name__="c_total", job="x"}', {"c_total"}),
        ("count(sum by (namespace) (d) > bool 0)", {"d"}),
    ],
)
def test_the_lexer_finds_metric_names(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_the_dashboard_configmap_is_labelled_for_the_sidecar() -> None:
    template = (CHART / "templates" / "dashboard.yaml").read_text()
    assert template.startswith("{{- if .Values.grafana.dashboard.enabled }}")
    assert re.search(r"labels:\n(\s+.*\n)*?\s+grafana_dashboard: \"1\"", template)
    assert re.search(r"^data:\n\s+\S+\.json: \|-\n", template, re.MULTILINE), "a .json key"
    assert '{{- .Files.Get "files/dashboard.json" | nindent 4 }}' in template
