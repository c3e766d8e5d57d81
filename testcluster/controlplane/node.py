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
import threading
from typing import Any

from finishable.kube.api import KubeApi

log = logging.getLogger(__name__)

LEASE_SECONDS = 40  # the kubelet's default lease duration
STRATEGIC = "application/strategic-merge-patch+json"


class NodeError(RuntimeError):
    """The API server refused the node's registration, status or Lease."""


def _now(micro: bool = False) -> str:
    moment = datetime.datetime.now(datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


class NodeAgent:
    """Registers one node and keeps it alive (:meth:`start`) until :meth:`stop`."""

    def __init__(
        self,
        api: KubeApi,
        name: str,
        *,
        capacity: dict[str, str] | None = None,
        renew_seconds: float = 10.0,
    ) -> None:
        self.api = api
        self.name = name
        self.capacity = capacity or {"cpu": "8", "memory": "32Gi", "pods": "110"}
        self.renew_seconds = renew_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.node_uid = ""

    def start(self) -> NodeAgent:
        self.register()
        self.renew_lease()
        self._thread = threading.Thread(target=self._run, name=f"node-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop renewing, as a kubelet that died would: the Node stays, its Lease runs out."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def register(self) -> None:
        """The Node (created, or found as a restarted kubelet finds it) and its Ready status."""
        node = {
            "metadata": {"name": self.name, "labels": {"kubernetes.io/hostname": self.name}},
            "status": {"capacity": self.capacity, "allocatable": self.capacity},
        }
        created = self.api.request("POST", "/api/v1/nodes", body=node)
        if created.status not in (201, 409):
            raise NodeError(f"cannot register node {self.name}: {created.message}")
        found = self.api.request("GET", f"/api/v1/nodes/{self.name}")
        if found.status != 200:
            raise NodeError(f"cannot read node {self.name}: {found.message}")
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
            f"/api/v1/nodes/{self.name}/status",
            body={"status": status},
            content_type=STRATEGIC,
        )
        if response.status != 200:
            raise NodeError(f"cannot post node {self.name}'s status: {response.message}")

    def renew_lease(self) -> None:
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        lease = {
            "metadata": {
                "name": self.name,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self.node_uid}
                ],
            },
            "spec": {
                "holderIdentity": self.name,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": _now(micro=True),
            },
        }
        response = self.api.request(
            "PATCH", f"{path}/{self.name}", body=lease, content_type=STRATEGIC
        )
        if response.status == 404:
            response = self.api.request("POST", path, body=lease)
        if response.status not in (200, 201):
            raise NodeError(f"cannot renew node {self.name}'s lease: {response.message}")

    def _run(self) -> None:
        while not self._stop.wait(self.renew_seconds):
            try:
                self.renew_lease()
            except (NodeError, OSError) as error:  # the server restarting: try again
                log.warning("node %s: %s", self.name, error)
