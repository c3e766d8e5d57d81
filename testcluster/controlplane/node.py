"""A node's side of its life on a real API server, as a kubelet does it.

The Node object is registered with the kubelet's own identity (``system:node:<name>`` in
``system:nodes``: the Node authorizer and NodeRestriction let it write its own Node and Lease and
nothing of another node's), its ``Ready`` condition is posted, and its Lease in
``kube-node-lease`` is renewed every ``renew_seconds``: the controller-manager's node lifecycle
controller judges a node's health by that Lease, and marks the node ``Unknown`` (and taints it
unreachable) once the renewals stop for its grace period. A node that is not registered at all
fares worse: the pod garbage collector deletes the pods bound to it.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any, Self

from finishable.kube.api import KubeApi
from testcluster.localcluster.controllers import PollingController

log = logging.getLogger(__name__)

LEASE_SECONDS = 40  # the kubelet's default lease duration
STRATEGIC = "application/strategic-merge-patch+json"


class NodeError(RuntimeError):
    """The API server refused the node's registration, status or Lease."""


def _now(micro: bool = False) -> str:
    moment = datetime.datetime.now(datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


class NodeAgent(PollingController):
    """Registers one node (:meth:`start`) and renews its Lease every ``renew_seconds`` until
    :meth:`stop`: then the Node stays and its Lease runs out, as when a kubelet dies."""

    def __init__(
        self,
        api: KubeApi,
        name: str,
        *,
        capacity: dict[str, str] | None = None,
        renew_seconds: float = 10.0,
    ) -> None:
        self.name = f"node-{name}"
        self.period = renew_seconds
        super().__init__(api)
        self.node = name
        self.capacity = capacity or {"cpu": "8", "memory": "32Gi", "pods": "110"}
        self.node_uid = ""

    def start(self) -> Self:
        self.register()
        self.renew_lease()  # the Lease is there when start returns
        return super().start()

    def sync(self) -> None:
        self.renew_lease()

    def register(self) -> None:
        """The Node (created, or found as a restarted kubelet finds it) and its Ready status."""
        node = {
            "metadata": {"name": self.node, "labels": {"kubernetes.io/hostname": self.node}},
            "status": {"capacity": self.capacity, "allocatable": self.capacity},
        }
        created = self.api.request("POST", "/api/v1/nodes", body=node)
        if created.status not in (201, 409):
            raise NodeError(f"cannot register node {self.node}: {created.message}")
        found = self.api.request("GET", f"/api/v1/nodes/{self.node}")
        if found.status != 200:
            raise NodeError(f"cannot read node {self.node}: {found.message}")
        self.node_uid = str(found.body["metadata"]["uid"])
        self.post_status()

    def post_status(self) -> None:
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": _now(),
            "lastTransitionTime": _now(),
        }
        status: dict[str, Any] = {
            "conditions": [ready],
            "capacity": self.capacity,
            "allocatable": self.capacity,
        }
        response = self.api.request(
            "PATCH",
            f"/api/v1/nodes/{self.node}/status",
            body={"status": status},
            content_type=STRATEGIC,
        )
        if response.status != 200:
            raise NodeError(f"cannot post node {self.node}'s status: {response.message}")

    def renew_lease(self) -> None:
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        lease = {
            "metadata": {
                "name": self.node,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": self.node_uid}
                ],
            },
            "spec": {
                "holderIdentity": self.node,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": _now(micro=True),
            },
        }
        response = self.api.request(
            "PATCH", f"{path}/{self.node}", body=lease, content_type=STRATEGIC
        )
        if response.status == 404:
            response = self.api.request("POST", path, body=lease)
        if response.status not in (200, 201):
            raise NodeError(f"cannot renew node {self.node}'s lease: {response.message}")
