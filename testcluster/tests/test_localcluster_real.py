"""The local cluster on the real control plane (``control_plane="real"``): the controller-manager
runs the chart's Deployment, the scheduler binds its pods to the node the kubelet registers with
its own identity, the real endpoints controllers give the operator's Service its pod's address,
and the audit log records what each client asked.

Full tier: it builds the control plane on a machine's first run and needs the image.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testcluster import image
from testcluster.localcluster.chart import OPERATOR_NAMESPACE, operator_part
from testcluster.localcluster.cluster import LocalCluster
from testcluster.localcluster.kubelet import NODE_NAME
from testcluster.waiting import wait_for

pytestmark = pytest.mark.full


def test_a_real_control_plane_needs_pods_with_addresses_of_their_own(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="runs pods as containers"):
        LocalCluster(tmp_path, runtime="process", control_plane="real")
    with pytest.raises(ValueError, match="one of emulator, real"):
        LocalCluster(tmp_path, control_plane="kind")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    image.build()  # a cache hit after make image
    directory = tmp_path_factory.mktemp("real")
    with LocalCluster(
        directory, namespaces=("jobs",), runtime="container", control_plane="real"
    ) as cluster:
        yield cluster


def test_the_operator_runs_as_the_real_controllers_and_scheduler_place_it(
    cluster: LocalCluster,
) -> None:
    pod = cluster.operator_pod
    assert pod is not None
    assert pod["spec"]["nodeName"] == NODE_NAME, "bound by the scheduler"
    (owner,) = pod["metadata"]["ownerReferences"]
    assert owner["kind"] == "ReplicaSet", "made by the controller-manager's ReplicaSet controller"
    address = ipaddress.ip_address(pod["status"]["podIP"])
    assert not address.is_loopback, "an address of its own on the container network"

    api = cluster.api("tests", OPERATOR_NAMESPACE)
    service = operator_part(cluster.chart, "Service")["metadata"]["name"]

    def endpoints() -> list[dict[str, Any]] | None:
        slices = api.request(
            "GET",
            f"/apis/discovery.k8s.io/v1/namespaces/{OPERATOR_NAMESPACE}/endpointslices",
            query={"labelSelector": f"kubernetes.io/service-name={service}"},
        ).body.get("items")
        found = [e for s in slices or [] for e in s.get("endpoints") or []]
        return found or None

    (endpoint,) = wait_for(endpoints, "the operator Service's endpoints, filled for real", 60)
    assert endpoint["addresses"] == [pod["status"]["podIP"]]

    calls = cluster.api_calls()
    kubelet = {(c["verb"], c["resource"]) for c in calls if c["client"] == "kubelet"}
    assert ("patch", "pods/status") in kubelet and ("list", "pods") in kubelet, sorted(kubelet)
    assert not [r for r in cluster.api_refusals() if r["client"] in ("kubelet", "provisioner")]
