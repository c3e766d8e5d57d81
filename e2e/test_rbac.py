"""The chart's RBAC and the drivers' Role against every API call made during the e2e run, and
the API server's answers to Spark's own client (local cluster only: the API emulator records
each call as RBAC would authorize it and every request a real server would refuse; on the real
control plane its audit log says the same)."""

from __future__ import annotations

from typing import Any

import pytest

from testcluster.chart.rbac import (
    MODES,
    OPERATOR_CLIENTS,
    Grant,
    denied,
    driver_role_grants,
    grants_of,
    used,
)
from testcluster.localcluster.cluster import ClusterAccess

pytestmark = [pytest.mark.e2e, pytest.mark.after_all, pytest.mark.quick]

SPARK_CLIENT = "fabric8-kubernetes-client"  # Spark's Kubernetes backend in the driver pods
DRIVER_CLIENTS = {"finishable-state", SPARK_CLIENT}  # the runtime's client, and Spark's


def recorded(cluster: ClusterAccess | None, *, refusals: bool = False) -> list[dict[str, Any]]:
    """The API calls the local cluster's server counted (the emulator's record, or the real
    control plane's audit log), or those it refused."""
    if cluster is None:
        pytest.skip("only the local cluster records API calls")
    return cluster.api_refusals() if refusals else cluster.api_calls()


def test_the_chart_grants_every_call_the_operator_made(local_cluster: ClusterAccess | None) -> None:
    """The local cluster runs the operator as the chart does with watchNamespaces set."""
    calls = [c for c in recorded(local_cluster) if c["client"] in OPERATOR_CLIENTS]
    if not any(c["resource"] == "pods" and c["verb"] == "create" for c in calls):
        pytest.skip("no job ran in this session: run it with the rest of the e2e suite")
    mode = MODES["namespaced"]
    refused = denied(calls, grants_of(mode["namespace"]), grants_of(mode["cluster"]))
    assert not refused, f"the chart's RBAC would deny {refused}"


def test_the_driver_role_grants_every_call_the_drivers_made(
    local_cluster: ClusterAccess | None,
) -> None:
    calls = [c for c in recorded(local_cluster) if c["client"] in DRIVER_CLIENTS]
    if not calls:
        pytest.skip("no driver ran in this session: run it with the rest of the e2e suite")
    assert all(c["namespaced"] for c in calls if c["resource"]), "a driver called cluster-wide"
    refused = denied(calls, driver_role_grants(), set())
    assert not refused, f"the driver's Role would deny {refused}"


def test_the_api_server_refused_none_of_the_drivers_calls(
    local_cluster: ClusterAccess | None,
) -> None:
    """Spark's fabric8 client in each driver created, watched (over WebSockets) and deleted its
    executor pods through the API: the emulator answered each call as a real server would, or
    this lists what it refused or failed to answer."""
    calls = [c for c in recorded(local_cluster) if c["client"] == SPARK_CLIENT]
    if not any(c["resource"] == "pods" and c["verb"] == "create" for c in calls):
        pytest.skip("Spark created no executor pod in this session: run the whole e2e suite")
    assert any(c["resource"] == "pods" and c["verb"] == "watch" for c in calls)
    refused = [r for r in recorded(local_cluster, refusals=True) if r["client"] in DRIVER_CLIENTS]
    assert not refused, f"the API server refused or failed these driver calls: {refused}"


WATCH_FAILED = "AbstractWatchManager: Error received"
"""What Spark's client logs when a watch fails inside its stream: the HTTP answer was 200, so no
record of the server's shows it (a real API server on an etcd too old for initial-events watches
failed every one of a driver's watches so, and the job only went on by retrying)."""


def test_no_watch_of_a_driver_failed_inside_its_stream(
    local_cluster: ClusterAccess | None,
) -> None:
    if local_cluster is None:
        pytest.skip("the pods' logs are the local cluster's")
    logs = sorted((local_cluster.directory / "pods").glob("*/*/driver.log"))
    if not logs:
        pytest.skip("no driver ran in this session: run it with the rest of the e2e suite")
    failed = {
        str(log.relative_to(local_cluster.directory)): line.strip()[:300]
        for log in logs
        for line in log.read_text(errors="replace").splitlines()
        if WATCH_FAILED in line
    }
    assert not failed, f"watches failed inside their streams: {failed}"


ON_DEMAND: set[Grant] = set()
"""Rights of the drivers' Role that only some jobs use, so a run of the suite need not show them
(each says which job)."""


@pytest.mark.full  # only every flow together uses every right
def test_the_driver_role_grants_nothing_the_drivers_did_not_use(
    local_cluster: ClusterAccess | None,
) -> None:
    """Least privilege, shown by a real run: every right of the drivers' Role was used by Spark
    or by the runtime in the suite's jobs (with executor pods), or is listed in ON_DEMAND."""
    calls = [c for c in recorded(local_cluster) if c["client"] in DRIVER_CLIENTS]
    if not any(c["resource"] == "pods" and c["verb"] == "create" for c in calls):
        pytest.skip("Spark created no executor pod in this session: run the whole e2e suite")
    unused = driver_role_grants() - used(calls) - ON_DEMAND
    assert not unused, f"granted but never used: {sorted(unused)}; used: {sorted(used(calls))}"
