"""After the suite: Prometheus scraped the operator as the chart's ServiceMonitor says, every
query of the chart's dashboard evaluates (its variables substituted as Grafana would), each panel
whose metrics the e2e jobs moved shows data, and the chart's alerting rules load (local cluster
only: it runs the Prometheus)."""

from __future__ import annotations

import math
import re
import time
from typing import Any

import pytest

from testcluster.chart.dashboard import dashboard, metric_names, panels
from testcluster.chart.helm import only
from testcluster.client import E2ECluster
from testcluster.localcluster.chart import OPERATOR_NAMESPACE, operator_part
from testcluster.localcluster.cluster import ClusterAccess
from testcluster.localcluster.prometheus import Prometheus

pytestmark = [pytest.mark.e2e, pytest.mark.after_all, pytest.mark.quick]

RATE_INTERVAL = "1m"  # Grafana's $__rate_interval for a 2 s scrape and a 15 s step, rounded up
STEP = "5"
# What the e2e smoke's two flows move (checkpoints, stops, driver kills, recoveries): the streaming
# job the README's kubectl commands drive, and the Batch job whose driver is killed half way.
SMOKE_FLOWS = {
    "test_the_readme_commands_run_a_job_through_its_phases",
    "test_a_driver_killed_half_way_recovers_without_re_running_finished_tasks",
}
SMOKE_MOVES = {
    "finishable_checkpoints_completed_total",
    "finishable_stop_duration_seconds_bucket",
    "finishable_driver_restarts_total",
    "finishable_recovery_duration_seconds_bucket",
    "finishable_recovery_tasks_skipped_total",
    "finishable_last_checkpoint_timestamp_seconds",
}


def prometheus_of(local_cluster: ClusterAccess | None) -> Prometheus:
    if local_cluster is None or local_cluster.prometheus is None:
        pytest.skip("runs on the local cluster, which runs Prometheus")
    return local_cluster.prometheus


def grafana(expr: str) -> str:
    """The dashboard's variables as Grafana substitutes them: namespace "All" is its allValue."""
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    return re.sub(r"\$\{?namespace\}?", ".*", expr)


def over_the_run(prometheus: Prometheus, expr: str) -> list[float]:
    """Every value a range query over the whole e2e run returns (as a Grafana panel would)."""
    end = time.time()
    data = prometheus.api(
        "query_range", query=expr, start=str(end - 3 * 3600), end=str(end), step=STEP
    )
    return [float(value) for series in data["result"] for _, value in series["values"]]


def test_prometheus_scrapes_the_operator_as_the_service_monitor_says(
    local_cluster: ClusterAccess | None,
) -> None:
    prometheus = prometheus_of(local_cluster)
    assert local_cluster is not None
    monitor = operator_part(local_cluster.chart, "ServiceMonitor")
    service = operator_part(local_cluster.chart, "Service")
    (target,) = prometheus.api("targets", state="active")["activeTargets"]
    assert target["health"] == "up", target.get("lastError")
    assert (
        target["scrapePool"]
        == f"serviceMonitor/{OPERATOR_NAMESPACE}/{monitor['metadata']['name']}/0"
    )
    assert target["labels"]["job"] == service["metadata"]["name"]
    assert target["scrapeInterval"] == monitor["spec"]["endpoints"][0]["interval"]
    up = prometheus.query(f'up{{job="{service["metadata"]["name"]}"}}')
    assert [sample["value"][1] for sample in up] == ["1"]
    # honorLabels keeps the jobs' namespace; no series of the operator's carries its own job
    jobs = prometheus.query('count by (job) ({__name__=~"finishable_.+"})')
    assert [series["metric"]["job"] for series in jobs] == [service["metadata"]["name"]]


def test_every_dashboard_query_evaluates_and_panels_of_moved_metrics_show_data(
    local_cluster: ClusterAccess | None, cluster: E2ECluster, request: pytest.FixtureRequest
) -> None:
    prometheus = prometheus_of(local_cluster)
    moved: dict[str, bool] = {}
    empty: list[str] = []
    evaluated = 0
    for panel in panels(dashboard()):
        for target in panel.get("targets", []):
            expr = grafana(target["expr"])
            values = over_the_run(prometheus, expr)  # raises on an expression Prometheus refuses
            evaluated += 1
            names = metric_names(target["expr"])
            for name in names - set(moved):
                peak = over_the_run(prometheus, f"max(max_over_time({name}[1h]))")
                moved[name] = any(value > 0 for value in peak)
            if any(moved[name] for name in names) and not any(not math.isnan(v) for v in values):
                empty.append(f"{panel['title']}: {expr}")
    assert evaluated >= 15
    assert not empty, f"panels whose metrics moved but show no data: {empty}"
    must_move = {"finishable_jobs", "finishable_phase_duration_seconds_bucket"}
    ran = {item.name for item in request.session.items}
    if ran >= SMOKE_FLOWS:  # stops, drains, kills and recoveries
        must_move |= SMOKE_MOVES
    unmoved = sorted(name for name in must_move if not moved.get(name))
    assert not unmoved, f"the e2e jobs never moved {unmoved}"
    # the namespace variable's query offers the e2e namespace
    offered = prometheus.api(
        "label/namespace/values", **{"match[]": "finishable_shuffle_pods_retained"}
    )
    assert cluster.namespace in offered


def test_the_charts_alerting_rules_are_loaded_and_healthy(
    local_cluster: ClusterAccess | None,
) -> None:
    prometheus = prometheus_of(local_cluster)
    assert local_cluster is not None
    shipped = {
        rule["alert"]
        for group in only(local_cluster.chart, "PrometheusRule")["spec"]["groups"]
        for rule in group["rules"]
    }
    groups: list[dict[str, Any]] = prometheus.api("rules")["groups"]
    loaded = {rule["name"]: rule for group in groups for rule in group["rules"]}
    assert set(loaded) == shipped
    for name, rule in loaded.items():
        assert rule["health"] == "ok", f"{name}: {rule.get('lastError')}"
