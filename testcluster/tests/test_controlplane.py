"""The real control plane (kube-apiserver, kube-controller-manager, kube-scheduler of the pinned
release, etcd) as the test cluster starts it: its controllers and scheduler act on what the
server stores, and a node lives (and dies) by its kubelet's Lease.

Full tier: the first run on a machine builds the control plane from its Go modules (minutes;
cached afterwards).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from finishable.kube.api import KubeApi
from testcluster.controlplane.cluster import ControlPlane
from testcluster.controlplane.provisioner import Provisioner
from testcluster.waiting import wait_for

pytestmark = pytest.mark.full

NAMESPACE = "jobs"
NODE = "node-1"
GRACE = 8  # seconds without a Lease renewal before a node is Unknown (production: 50)


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    flags = (f"--node-monitor-grace-period={GRACE}s", "--node-monitor-period=1s")
    with ControlPlane(
        tmp_path_factory.mktemp("controlplane"), controller_manager_flags=flags
    ) as plane:
        yield plane


@pytest.fixture(scope="module")
def admin(plane: ControlPlane) -> Iterator[KubeApi]:
    api = KubeApi.from_kubeconfig(plane.admin.kubeconfig)
    body = {"metadata": {"name": NAMESPACE}}
    assert api.request("POST", "/api/v1/namespaces", body=body).status == 201
    yield api
    api.close()


def test_the_controllers_and_the_scheduler_act_on_what_the_server_stores(
    plane: ControlPlane, admin: KubeApi
) -> None:
    node = plane.node(NODE, renew_seconds=1)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "web:1"}]},
            },
        },
    }
    path = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments"
    assert admin.request("POST", path, body=deployment).status == 201

    def bound() -> list[dict[str, Any]] | None:
        pods = admin.request(
            "GET", f"/api/v1/namespaces/{NAMESPACE}/pods", query={"labelSelector": "app=web"}
        ).body["items"]
        return pods if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = wait_for(bound, "the ReplicaSet's two pods, bound by the scheduler", 120)
    assert {pod["spec"]["nodeName"] for pod in pods} == {NODE}
    owner = pods[0]["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "ReplicaSet" and owner["controller"] is True

    # deleted in the background: the garbage collector takes the ReplicaSet, then its pods
    assert admin.request("DELETE", f"{path}/web").status == 200
    wait_for(
        lambda: (
            not admin.request("GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/replicasets").body[
                "items"
            ]
        ),
        "the ReplicaSet collected",
        60,
    )
    node.stop()


def ready(admin: KubeApi, name: str) -> str:
    """The status of the node's Ready condition: True, False or Unknown."""
    conditions = admin.request("GET", f"/api/v1/nodes/{name}").body["status"].get("conditions")
    return next((c["status"] for c in conditions or [] if c["type"] == "Ready"), "")


def test_a_node_stays_ready_while_its_lease_is_renewed_and_is_unknown_once_it_is_not(
    plane: ControlPlane, admin: KubeApi
) -> None:
    node = plane.node("node-2", renew_seconds=1)
    try:
        lease = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-2"
        first = admin.request("GET", lease).body["spec"]["renewTime"]
        wait_for(
            lambda: admin.request("GET", lease).body["spec"]["renewTime"] != first,
            "the lease renewed",
            30,
        )
        # past the grace period by renewals alone (its status was posted once, at registration)
        wait_for(
            lambda: (
                admin.request("GET", lease).body["spec"]["renewTime"] > first
                and ready(admin, "node-2") == "True"
                and _seconds_since_registered(admin, "node-2") > GRACE + 2
            ),
            "the node Ready past the grace period",
            60,
        )
    finally:
        node.stop()
    wait_for(lambda: ready(admin, "node-2") == "Unknown", "the node Unknown", GRACE + 60)
    taints = admin.request("GET", "/api/v1/nodes/node-2").body["spec"].get("taints") or []
    assert "node.kubernetes.io/unreachable" in {taint["key"] for taint in taints}


def _seconds_since_registered(admin: KubeApi, name: str) -> float:
    created = admin.request("GET", f"/api/v1/nodes/{name}").body["metadata"]["creationTimestamp"]
    then = datetime.datetime.fromisoformat(created.replace("Z", "+00:00"))
    return (datetime.datetime.now(datetime.UTC) - then).total_seconds()


def test_claims_are_bound_to_provisioned_volumes_before_their_pods_are_scheduled(
    plane: ControlPlane, admin: KubeApi, tmp_path: Path
) -> None:
    node = plane.node("node-3", renew_seconds=1)
    provisioner = Provisioner(admin, tmp_path / "volumes").start()
    try:
        stateful = {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "shuffle"},
            "spec": {
                "serviceName": "shuffle",
                "replicas": 2,
                "podManagementPolicy": "Parallel",  # as the shuffle pods': no kubelet runs them
                "selector": {"matchLabels": {"app": "shuffle"}},
                "template": {
                    "metadata": {"labels": {"app": "shuffle"}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": "node-3"},
                        "containers": [
                            {
                                "name": "shuffle",
                                "image": "shuffle:1",
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                            }
                        ],
                    },
                },
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "data"},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}},
                        },
                    }
                ],
            },
        }
        path = f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets"
        assert admin.request("POST", path, body=stateful).status == 201
        shared = {
            "metadata": {"name": "shared"},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": "2Gi"}},
            },
        }
        claims = f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims"
        assert admin.request("POST", claims, body=shared).status == 201

        def bound() -> list[dict[str, Any]] | None:
            items = admin.request("GET", claims).body["items"]
            phases = {c["metadata"]["name"]: c["status"].get("phase") for c in items}
            want = {"data-shuffle-0", "data-shuffle-1", "shared"}
            return (
                items
                if want <= set(phases) and all(phases[name] == "Bound" for name in want)
                else None
            )

        items = wait_for(
            bound,
            "the three claims Bound by the volume controller",
            120,
            on_fail=lambda: str(
                [
                    (c["metadata"]["name"], c["status"])
                    for c in admin.request("GET", claims).body["items"]
                ]
            ),
        )
        volumes = {c["spec"]["volumeName"] for c in items}
        for claim in items:
            volume = admin.request(
                "GET", f"/api/v1/persistentvolumes/{claim['spec']['volumeName']}"
            )
            path = Path(volume.body["spec"]["hostPath"]["path"])
            # any pod's user writes there: a kubelet gives a hostPath volume no fsGroup
            assert path.is_dir() and path.stat().st_mode & 0o777 == 0o777, oct(path.stat().st_mode)
        pods = wait_for(
            lambda: (
                (
                    found := admin.request(
                        "GET",
                        f"/api/v1/namespaces/{NAMESPACE}/pods",
                        query={"labelSelector": "app=shuffle"},
                    ).body["items"]
                )
                and len(found) == 2
                and all(p["spec"].get("nodeName") == "node-3" for p in found)
                and found
            ),
            "the StatefulSet's pods scheduled with their claims bound",
            120,
        )
        assert {p["metadata"]["name"] for p in pods} == {"shuffle-0", "shuffle-1"}

        # a deleted claim's volume is released, then deleted with its directory
        (shared_volume,) = [
            c["spec"]["volumeName"] for c in items if c["metadata"]["name"] == "shared"
        ]
        directory = Path(
            admin.request("GET", f"/api/v1/persistentvolumes/{shared_volume}").body["spec"][
                "hostPath"
            ]["path"]
        )
        assert admin.request("DELETE", f"{claims}/shared").status == 200
        wait_for(
            lambda: (
                admin.request("GET", f"/api/v1/persistentvolumes/{shared_volume}").status == 404
            ),
            "the released volume deleted",
            60,
        )
        assert not directory.exists()
        assert shared_volume in volumes
    finally:
        provisioner.stop()
        node.stop()
