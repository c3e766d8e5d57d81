"""The chart through the real helm: ``helm lint --strict`` and ``helm template`` of every
documented combination of values at the lowest Kubernetes version the chart claims, what the
rendered objects carry, and helm refusing what it must refuse."""

from __future__ import annotations

import json

import pytest
import yaml

from testcluster.chart.helm import (
    CHART,
    COMBINATIONS,
    NAMESPACE,
    helm,
    lowest_kube_version,
    only,
    set_args,
    template,
)

pytestmark = pytest.mark.quick

# apiVersion of every kind the chart renders: all served by Kubernetes 1.25 and still today.
API_VERSIONS = {
    "ServiceAccount": "v1",
    "Service": "v1",
    "ConfigMap": "v1",
    "Deployment": "apps/v1",
    "PodDisruptionBudget": "policy/v1",  # GA since 1.21
    "ClusterRole": "rbac.authorization.k8s.io/v1",
    "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "CustomResourceDefinition": "apiextensions.k8s.io/v1",
    "ServiceMonitor": "monitoring.coreos.com/v1",
    "PrometheusRule": "monitoring.coreos.com/v1",
}


@pytest.mark.parametrize("combination", COMBINATIONS)
def test_helm_lint_strict_passes(combination: str) -> None:
    values = COMBINATIONS[combination]
    result = helm(
        "lint", "--strict", str(CHART), "--namespace", NAMESPACE,
        "--kube-version", lowest_kube_version(), *set_args(values), check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("combination", COMBINATIONS)
def test_helm_template_renders_objects_the_lowest_kubernetes_serves(combination: str) -> None:
    docs = template(*COMBINATIONS[combination], include_crds=True)
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        assert doc["apiVersion"] == API_VERSIONS.get(kind), f"{kind} {name}"
        cluster_scoped = kind in {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
        if not cluster_scoped and kind != "RoleBinding":
            assert doc["metadata"]["namespace"] == NAMESPACE, f"{kind} {name}"
    names = [
        (doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"]) for doc in docs
    ]
    assert len(names) == len(set(names)), "no object is rendered twice"
    operators = [
        d for d in docs if d["kind"] == "Deployment" and "-partitions" not in d["metadata"]["name"]
    ]
    assert len(operators) == 1


def test_each_combination_renders_what_it_promises() -> None:
    default = template()
    kinds = {doc["kind"] for doc in default}
    assert {"ServiceMonitor", "PrometheusRule"}.isdisjoint(kinds), "both are opt-in"
    assert only(default, "ConfigMap")["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert {doc["kind"] for doc in template(*COMBINATIONS["namespaced"])} >= {"RoleBinding"}
    monitored = template(*COMBINATIONS["service monitor and alerts"])
    endpoint = only(monitored, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["port"] == only(monitored, "Service")["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics" and endpoint["honorLabels"] is True
    rules = only(monitored, "PrometheusRule")["spec"]
    assert rules == yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    bare = template(*COMBINATIONS["no dashboard, no peering"])
    assert "ConfigMap" not in {doc["kind"] for doc in bare}
    (container,) = only(bare, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "--standalone" in container["args"]


def test_the_dashboard_configmap_carries_the_dashboard_as_it_is() -> None:
    data = only(template(), "ConfigMap")["data"]
    (board,) = data.values()
    assert json.loads(board) == json.loads((CHART / "files" / "dashboard.json").read_text())


def test_helm_refuses_a_kubernetes_older_than_the_chart_claims() -> None:
    result = helm("template", "fso", str(CHART), "--kube-version", "1.24.17", check=False)
    assert result.returncode != 0
    assert "requires kubeVersion: >=1.25.0-0" in result.stderr, result.stderr


def test_helm_refuses_values_the_schema_forbids_and_names_them() -> None:
    result = helm("template", "fso", str(CHART), "--set", "replicaCount=-1", check=False)
    assert result.returncode != 0
    assert "/replicaCount': minimum: got -1, want 0" in result.stderr, result.stderr
    result = helm(
        "template", "fso", str(CHART), "--set", "operator.sparkMaster=kubernetes", check=False
    )
    assert result.returncode != 0 and "sparkMaster" in result.stderr, result.stderr
