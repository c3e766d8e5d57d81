"""The real control plane (kube-apiserver, kube-controller-manager, kube-scheduler of the pinned
release, etcd) as the test cluster starts it: its controllers and scheduler act on what the
server stores, and a node is registered as a kubelet registers it.

Full tier: the first run on a machine builds the control plane from its Go modules (minutes;
cached afterwards).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from finishable.kube.api import KubeApi
from testcluster.controlplane.cluster import ControlPlane, register_ready_node
from testcluster.waiting import wait_for

pytestmark = pytest.mark.full

NAMESPACE = "jobs"
NODE = "node-1"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("controlplane")) as plane:
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
    register_ready_node(plane, NODE)
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
