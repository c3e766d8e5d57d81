"""The Deployment and ReplicaSet controllers of the local cluster: what runs the chart's operator.

A Deployment gets one ReplicaSet per pod template, ``<deployment>-<pod-template-hash>``, owned by
it and labelled with the hash; the ReplicaSets of older templates are scaled to 0 (a rollout
with ``maxSurge`` 0, done at once). A ReplicaSet keeps ``replicas`` pods
``<replicaset>-<5 random characters>``, owned by it, and replaces one that ended or was deleted.
Both write the status fields ``kubectl rollout status`` reads. The objects are built by pure
functions; the loop mirrors the StatefulSet controller's.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import secrets
from typing import Any

from testcluster.localcluster.controllers import PollingController
from testcluster.localcluster.statefulsets import owned_by

log = logging.getLogger(__name__)

HASH_LABEL = "pod-template-hash"
# The alphabet of Kubernetes' rand.String and SafeEncodeString: no vowels, no look-alikes.
SAFE = "bcdfghjklmnpqrstvwxz2456789"


def controller_reference(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def template_hash(template: dict[str, Any]) -> str:
    """A stable, name-safe hash of a pod template (as the pod-template-hash label is)."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).digest()
    return "".join(SAFE[byte % len(SAFE)] for byte in digest[:10])


def replica_set_for(deployment: dict[str, Any]) -> dict[str, Any]:
    """The ReplicaSet of the Deployment's current template."""
    spec = deployment["spec"]
    template = copy.deepcopy(spec["template"])
    pod_hash = template_hash(spec["template"])
    labels = {**(template.get("metadata") or {}).get("labels", {}), HASH_LABEL: pod_hash}
    template.setdefault("metadata", {})["labels"] = labels
    selector = copy.deepcopy(spec["selector"])
    selector.setdefault("matchLabels", {})[HASH_LABEL] = pod_hash
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{deployment['metadata']['name']}-{pod_hash}",
            "namespace": deployment["metadata"]["namespace"],
            "labels": labels,
            "ownerReferences": [controller_reference(deployment)],
        },
        "spec": {
            "replicas": int(spec.get("replicas", 1)),
            "selector": selector,
            "template": template,
        },
    }


def replica_pod(replica_set: dict[str, Any], suffix: str) -> dict[str, Any]:
    template = copy.deepcopy(replica_set["spec"]["template"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{replica_set['metadata']['name']}-{suffix}",
            "namespace": replica_set["metadata"]["namespace"],
            "labels": dict(template["metadata"].get("labels") or {}),
            "annotations": dict(template["metadata"].get("annotations") or {}),
            "ownerReferences": [controller_reference(replica_set)],
        },
        "spec": template["spec"],
    }


def random_suffix() -> str:
    return "".join(secrets.choice(SAFE) for _ in range(5))


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def ended(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


class DeploymentController(PollingController):
    """Keeps every Deployment's ReplicaSet and every ReplicaSet's pods (module docstring)."""

    name = "deployments"

    def sync(self) -> None:
        deployments = self._list("/apis/apps/v1/deployments")
        replica_sets = self._list("/apis/apps/v1/replicasets")
        for deployment in deployments:
            if not deployment["metadata"].get("deletionTimestamp"):
                self._deployment(deployment, replica_sets)
        replica_sets = self._list("/apis/apps/v1/replicasets")
        pods = self._list("/api/v1/pods")
        for replica_set in replica_sets:
            if not replica_set["metadata"].get("deletionTimestamp"):
                self._replica_set(replica_set, pods)

    def _deployment(self, deployment: dict[str, Any], replica_sets: list[dict[str, Any]]) -> None:
        meta = deployment["metadata"]
        wanted = replica_set_for(deployment)
        mine = [
            rs
            for rs in replica_sets
            if rs["metadata"]["namespace"] == meta["namespace"] and owned_by(rs, meta["uid"])
        ]
        current = next(
            (rs for rs in mine if rs["metadata"]["name"] == wanted["metadata"]["name"]), None
        )
        if current is None:
            self._create("replicasets", meta["namespace"], wanted)
        elif current["spec"].get("replicas") != wanted["spec"]["replicas"]:
            self._scale(current, wanted["spec"]["replicas"])
        for old in mine:
            if old is not current and old["spec"].get("replicas", 1) != 0:
                self._scale(old, 0)
        status = (current or {}).get("status") or {}
        ready = int(status.get("readyReplicas", 0))
        self._status(
            deployment,
            "deployments",
            {
                "observedGeneration": meta.get("generation", 1),
                "replicas": int(status.get("replicas", 0)),
                "updatedReplicas": int(status.get("replicas", 0)),
                "readyReplicas": ready,
                "availableReplicas": ready,
            },
        )

    def _replica_set(self, replica_set: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        meta = replica_set["metadata"]
        mine = [
            pod
            for pod in pods
            if pod["metadata"]["namespace"] == meta["namespace"] and owned_by(pod, meta["uid"])
        ]
        live = [pod for pod in mine if not pod["metadata"].get("deletionTimestamp")]
        for pod in live:
            if ended(pod):  # a pod that ended is replaced
                self._delete("pods", pod)
        live = [pod for pod in live if not ended(pod)]
        replicas = int(replica_set["spec"].get("replicas", 1))
        for _ in range(replicas - len(live)):
            self._create("pods", meta["namespace"], replica_pod(replica_set, random_suffix()))
        for extra in live[replicas:]:
            self._delete("pods", extra)
        ready = sum(is_ready(pod) for pod in live[:replicas])
        self._status(
            replica_set,
            "replicasets",
            {
                "observedGeneration": meta.get("generation", 1),
                "replicas": min(len(live), replicas),
                "readyReplicas": ready,
                "availableReplicas": ready,
            },
        )

    def _status(self, obj: dict[str, Any], plural: str, wanted: dict[str, Any]) -> None:
        if {k: (obj.get("status") or {}).get(k) for k in wanted} == wanted:
            return
        meta = obj["metadata"]
        path = self.api.path(
            plural, meta["name"], namespace=meta["namespace"], api_version="apps/v1",
            subresource="status",
        )  # fmt: skip
        self.api.request(
            "PATCH", path, body={"status": wanted}, content_type="application/merge-patch+json"
        )

    def _scale(self, replica_set: dict[str, Any], replicas: int) -> None:
        meta = replica_set["metadata"]
        path = self.api.path(
            "replicasets", meta["name"], namespace=meta["namespace"], api_version="apps/v1"
        )
        self.api.request(
            "PATCH",
            path,
            body={"spec": {"replicas": replicas}},
            content_type="application/merge-patch+json",
        )

    def _create(self, plural: str, namespace: str, body: dict[str, Any]) -> None:
        version = "v1" if plural == "pods" else "apps/v1"
        path = self.api.path(plural, namespace=namespace, api_version=version)
        response = self.api.request("POST", path, body=body)
        if response.status not in (201, 409):
            log.warning("create %s: %s %s", plural, response.status, response.message)

    def _delete(self, plural: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.api.request("DELETE", self.api.path(plural, meta["name"], namespace=meta["namespace"]))
