"""The chart as the real helm renders and lints it (the pinned helm in .venv/bin, ``make tools``),
at the lowest Kubernetes version the chart claims (Chart.yaml's kubeVersion)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from testcluster.tools import installed

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "finishable-spark-operator"
RELEASE = "fso"
NAMESPACE = "ops"

# Every combination of values the docs describe, as --set arguments.
COMBINATIONS: dict[str, tuple[str, ...]] = {
    "defaults (cluster-wide)": (),
    "namespaced": ("watchNamespaces={analytics,etl}",),
    "service monitor and alerts": (
        "metrics.serviceMonitor.enabled=true",
        "metrics.prometheusRule.enabled=true",
    ),
    "no dashboard, no peering": ("grafana.dashboard.enabled=false", "peering.enabled=false"),
    "local spark master, two replicas": ("operator.sparkMaster=local[2]", "replicaCount=2"),
    "partition service on a claim": (
        "partitionService.enabled=true",
        "partitionService.storage=file:///partitions",
        "partitionService.claimName=finishable-partitions",
    ),
}


def lowest_kube_version() -> str:
    """``>=1.25.0-0`` in Chart.yaml gives ``1.25.0``."""
    claimed = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    found = re.fullmatch(r">=\s*(\d+\.\d+\.\d+)(-0)?", claimed)
    assert found, f"Chart.yaml kubeVersion {claimed!r} is not a lower bound"
    return found.group(1)


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([installed("helm"), *args], capture_output=True, text=True, check=check)


def set_args(values: Sequence[str]) -> list[str]:
    return [arg for value in values for arg in ("--set", value)]


def render(
    helm_binary: str,
    release: str,
    namespace: str,
    values: Sequence[str],
    *,
    kube_version: str | None = None,
    include_crds: bool = False,
) -> list[dict[str, Any]]:
    """``helm template`` of the chart with ``--set`` values: the rendered objects (RuntimeError
    with helm's message when it refuses)."""
    args = ["template", release, str(CHART), "--namespace", namespace, *set_args(values)]
    if kube_version:
        args += ["--kube-version", kube_version]
    if include_crds:
        args.append("--include-crds")
    result = subprocess.run([helm_binary, *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"helm template failed: {result.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def template(
    *values: str, kube_version: str | None = None, include_crds: bool = False
) -> list[dict[str, Any]]:
    """The chart as release RELEASE in NAMESPACE, at the lowest Kubernetes unless told."""
    return render(
        installed("helm"),
        RELEASE,
        NAMESPACE,
        values,
        kube_version=kube_version or lowest_kube_version(),
        include_crds=include_crds,
    )


def only(docs: Sequence[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [doc for doc in docs if doc["kind"] == kind]
    return found
