"""The helm chart's static parts: its CRDs, its values and their schema, the dashboard's metrics,
and what the Deployment template must carry. Rendering is not needed for these (and helm is not
installed here); the RBAC rules are checked against the real operator in test_rbac.py."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client import CollectorRegistry

from finishable.controller.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "finishable-spark-operator"


def values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return loaded


def test_the_chart_carries_the_same_crds_as_crds_dir() -> None:
    """helm installs crds/ as it is: a regenerated CRD must be copied into the chart too."""
    for chart_copy, original in (
        ("crds/finishablesparkjobs.finishable.dev.yaml", "finishablesparkjobs.finishable.dev.yaml"),
        ("files/kopf-peering.yaml", "kopf-peering.yaml"),
    ):
        assert (CHART / chart_copy).read_text() == (ROOT / "crds" / original).read_text(), (
            f"charts/finishable-spark-operator/{chart_copy} differs from crds/{original}: "
            f"copy crds/{original} over it"
        )


def test_chart_metadata() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == CHART.name
    from finishable import __version__

    assert chart["appVersion"] == __version__, "the image tag defaults to appVersion"


def test_the_default_values_satisfy_the_schema() -> None:
    jsonschema.Draft7Validator.check_schema(schema())
    jsonschema.validate(values(), schema())
    namespaced = {**values(), "watchNamespaces": ["analytics", "etl"], "replicaCount": 2}
    jsonschema.validate(namespaced, schema())


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        (["watchNamespaces"], ["Not_A_Namespace"]),
        (["watchNamespaces"], "analytics"),
        (["operator", "livenessPort"], 70000),
        (["image", "pullPolicy"], "Sometimes"),
        (["metrics", "serviceMonitor", "interval"], "30 seconds"),
        (["resources", "limits", "memory"], "lots"),
        (["operator", "unknownOption"], True),
        (["replicaCount"], -1),
    ],
)
def test_the_schema_rejects_wrong_values(path: list[str], bad: object) -> None:
    wrong = copy.deepcopy(values())
    target = wrong
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = bad
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, schema())


def test_replicas_beyond_one_need_peering() -> None:
    wrong = copy.deepcopy(values())
    wrong["peering"]["enabled"] = False
    wrong["replicaCount"] = 2
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, schema())
    wrong["replicaCount"] = 1
    jsonschema.validate(wrong, schema())


def exported_series() -> set[str]:
    """Every series name the operator's metrics can produce, as Prometheus scrapes them."""
    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
    registry = CollectorRegistry()
    Metrics(registry)
    return {
        family.name + suffix for family in registry.collect() for suffix in suffixes[family.type]
    }


def test_the_dashboard_uses_only_metrics_the_operator_exports() -> None:
    template = (CHART / "templates" / "dashboard.yaml").read_text()
    assert 'grafana_dashboard: "1"' in template, "labelled for Grafana's sidecar"
    assert '.Files.Get "files/dashboard.json"' in template
    dashboard = json.loads((CHART / "files" / "dashboard.json").read_text())
    expressions = [
        target["expr"] for panel in dashboard["panels"] for target in panel["targets"]
    ] + [variable.get("query", "") for variable in dashboard["templating"]["list"]]
    referenced = {name for expr in expressions for name in re.findall(r"finishable_\w+", expr)}
    assert referenced <= exported_series(), referenced - exported_series()
    for wanted in (
        "finishable_jobs",  # jobs by phase over time
        "finishable_checkpoints_completed_total",
        "finishable_stop_duration_seconds_bucket",
        "finishable_driver_restarts_total",  # recoveries
        "finishable_recovery_duration_seconds_bucket",
        "finishable_recovery_tasks_skipped_total",
        "finishable_recovery_tasks_rerun_total",
    ):
        assert wanted in referenced, f"the dashboard shows no {wanted}"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_the_deployment_template_carries_what_the_operator_needs() -> None:
    """Checked on the template text (no renderer here): the essentials docs/operator.md asks."""
    deployment = (CHART / "templates" / "deployment.yaml").read_text()
    assert 'command: ["finishable"]' in deployment and "- operator" in deployment
    assert re.search(
        r"range \.Values\.watchNamespaces \}\}\s*- --namespace=\{\{ \. \}\}", deployment
    )
    assert "- --standalone" in deployment, "without the peering CRDs it runs standalone"
    assert re.search(
        r"name: POD_ID\s+valueFrom:\s+fieldRef:\s+fieldPath: metadata\.name", deployment
    )
    assert re.search(r"livenessProbe:\s+httpGet:\s+path: /healthz\s+port: liveness", deployment)
    assert "containerPort: {{ .Values.operator.livenessPort }}" in deployment
    assert "--liveness-port={{ .Values.operator.livenessPort }}" in deployment
    assert "toYaml .Values.resources" in deployment
    assert re.search(r"mountPath: /tmp", deployment) and "emptyDir: {}" in deployment
    defaults = values()
    assert defaults["podSecurityContext"]["runAsNonRoot"] is True
    assert defaults["podSecurityContext"]["runAsUser"] >= 1000
    assert defaults["securityContext"]["readOnlyRootFilesystem"] is True
    assert defaults["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_metrics_service_and_service_monitor_select_the_operator() -> None:
    service = (CHART / "templates" / "service.yaml").read_text()
    monitor = (CHART / "templates" / "servicemonitor.yaml").read_text()
    assert "targetPort: metrics" in service
    assert monitor.startswith("{{- if .Values.metrics.serviceMonitor.enabled }}")
    assert "honorLabels: true" in monitor, "per-job series carry their own job/namespace labels"
    assert "app.kubernetes.io/component: metrics" in service
    assert "app.kubernetes.io/component: metrics" in monitor


def test_peering_crds_come_only_with_peering() -> None:
    template = (CHART / "templates" / "kopf-peering-crds.yaml").read_text()
    assert "{{- if .Values.peering.enabled }}" in template
    assert '.Files.Get "files/kopf-peering.yaml"' in template
