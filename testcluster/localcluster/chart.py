"""The chart as the local cluster installs it: rendered by the real helm (``helm template``, the
pinned helm of ``make tools``) and applied object by object, CRDs first, as ``helm install``
does. The Prometheus operator's kinds (ServiceMonitor, PrometheusRule) are not stored: the local
Prometheus (``prometheus.py``) reads them, as the Prometheus operator would.

The release: RELEASE in OPERATOR_NAMESPACE, namespaced mode (``watchNamespaces``), peering on,
the ServiceMonitor and the alerting rules on, scraped every SCRAPE_INTERVAL, and a resync of 5 s
(the tests' jobs are short).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from finishable.kube.api import KubeApi
from testcluster.chart.helm import only
from testcluster.chart.helm import render as helm_render
from testcluster.tools import find, missing

RELEASE = "finishable-spark-operator"  # the chart's fullname and ServiceAccount for this release
OPERATOR_NAMESPACE = "finishable-system"
SCRAPE_INTERVAL = "2s"
PROMETHEUS_KINDS = frozenset({"ServiceMonitor", "PrometheusRule"})

# Where each kind the chart renders is created: (API prefix, plural, namespaced).
COLLECTIONS: dict[str, tuple[str, str, bool]] = {
    "CustomResourceDefinition": (
        "/apis/apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        False,
    ),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Service": ("/api/v1", "services", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
}


def release_values(
    namespaces: Sequence[str], spark_master: str | None, partition_storage: str | None = None
) -> list[str]:
    """The release's ``--set`` values (the partition service on ``partition_storage``)."""
    chosen = [
        f"watchNamespaces={{{','.join(namespaces)}}}",
        "metrics.serviceMonitor.enabled=true",
        f"metrics.serviceMonitor.interval={SCRAPE_INTERVAL}",
        f"metrics.serviceMonitor.scrapeTimeout={SCRAPE_INTERVAL}",
        "metrics.prometheusRule.enabled=true",
        "operator.resyncSeconds=5",
    ]
    if spark_master:
        chosen.append(f"operator.sparkMaster={spark_master}")
    if partition_storage:
        chosen += ["partitionService.enabled=true", f"partitionService.storage={partition_storage}"]
    return chosen


def operator_part(docs: Sequence[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The operator's object of ``kind`` (the partition service's are named ``*-partitions``)."""
    found: dict[str, Any] = only(
        [d for d in docs if not d["metadata"]["name"].endswith("-partitions")], kind
    )
    return found


def partition_service_part(docs: Sequence[dict[str, Any]], kind: str) -> dict[str, Any]:
    found: dict[str, Any] = only(
        [d for d in docs if d["metadata"]["name"].endswith("-partitions")], kind
    )
    return found


def render(
    namespaces: Sequence[str], spark_master: str | None = None, partition_storage: str | None = None
) -> list[dict[str, Any]]:
    """``helm template RELEASE CHART --include-crds`` with the release's values."""
    helm = find("helm")
    if helm is None:
        raise RuntimeError(missing("helm"))
    values = release_values(namespaces, spark_master, partition_storage)
    docs: list[dict[str, Any]] = helm_render(
        helm, RELEASE, OPERATOR_NAMESPACE, values, include_crds=True
    )
    return docs


def collection(doc: dict[str, Any]) -> str:
    """The path a rendered object is POSTed to."""
    kind = doc["kind"]
    if kind not in COLLECTIONS:
        raise ValueError(f"the local cluster cannot store a {kind} ({doc['metadata']['name']})")
    prefix, plural, namespaced = COLLECTIONS[kind]
    if namespaced:
        namespace = doc["metadata"].get("namespace") or OPERATOR_NAMESPACE
        return f"{prefix}/namespaces/{namespace}/{plural}"
    return f"{prefix}/{plural}"


def install(api: KubeApi, docs: Sequence[dict[str, Any]]) -> None:
    """Create every object but the Prometheus operator's, CRDs first."""
    ordered = sorted(docs, key=lambda doc: doc["kind"] != "CustomResourceDefinition")
    for doc in ordered:
        if doc["kind"] in PROMETHEUS_KINDS:
            continue
        response = api.request("POST", collection(doc), body=doc)
        if response.status not in (201, 409):
            name = f"{doc['kind']} {doc['metadata']['name']}"
            raise RuntimeError(f"cannot create {name}: {response.message}")
