"""The chart's RBAC against every API call made during the e2e run (local cluster only: the
API emulator records each call as RBAC would authorize it)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from e2e.localcluster.cluster import LocalCluster
from tests.charts.test_rbac import MODES, OPERATOR_CLIENTS, denied, driver_role_grants, grants_of
from tests.support.k8s_emulator import CALLS_PATH

pytestmark = [pytest.mark.e2e, pytest.mark.after_all]

DRIVER_CLIENTS = {"finishable-state"}  # the runtime's client in driver pods


def recorded(cluster: LocalCluster | None) -> list[dict[str, Any]]:
    if cluster is None:
        pytest.skip("only the local cluster records API calls")
    with urllib.request.urlopen(cluster.url + CALLS_PATH, timeout=10) as response:
        return list(json.loads(response.read()))


def test_the_chart_grants_every_call_the_operator_made(local_cluster: LocalCluster | None) -> None:
    """The local cluster runs the operator as the chart does with watchNamespaces set."""
    calls = [c for c in recorded(local_cluster) if c["client"] in OPERATOR_CLIENTS]
    if not any(c["resource"] == "pods" and c["verb"] == "create" for c in calls):
        pytest.skip("no job ran in this session: run it with the rest of the e2e suite")
    mode = MODES["namespaced"]
    refused = denied(calls, grants_of(mode["namespace"]), grants_of(mode["cluster"]))
    assert not refused, f"the chart's RBAC would deny {refused}"


def test_the_driver_role_grants_every_call_the_drivers_made(
    local_cluster: LocalCluster | None,
) -> None:
    calls = [c for c in recorded(local_cluster) if c["client"] in DRIVER_CLIENTS]
    if not calls:
        pytest.skip("no driver ran in this session: run it with the rest of the e2e suite")
    assert all(c["namespaced"] for c in calls if c["resource"]), "a driver called cluster-wide"
    refused = denied(calls, driver_role_grants(), set())
    assert not refused, f"the driver's Role would deny {refused}"
