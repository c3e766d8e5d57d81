"""The StatefulSet controller of the local cluster: stable pods and their claims.

For each StatefulSet it keeps pods ``<name>-0 … <name>-(n-1)`` (hostname = pod name,
subdomain = ``serviceName``, so ``<pod>.<service>.<ns>.svc`` resolves), each with the claims
of its ``volumeClaimTemplates`` (``<template>-<name>-<i>``, owned by the StatefulSet when
``persistentVolumeClaimRetentionPolicy.whenDeleted`` is Delete, so the garbage collector takes
them with it). A pod that ends or is deleted is created again, keeping its claims: its data
survives, as it does on a real cluster. Pods and claims whose StatefulSet is gone are deleted
(the part of the garbage collector the emulator leaves out). The objects are built by pure
functions.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from testcluster.localcluster.controllers import PollingController

log = logging.getLogger(__name__)

POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"


def owner(stateful_set: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": stateful_set["metadata"]["name"],
        "uid": stateful_set["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def claim_name(template: dict[str, Any], stateful_set: dict[str, Any], index: int) -> str:
    return f"{template['metadata']['name']}-{stateful_set['metadata']['name']}-{index}"


def stateful_claim(
    stateful_set: dict[str, Any], template: dict[str, Any], index: int
) -> dict[str, Any]:
    """The claim of one pod, from one of the StatefulSet's volumeClaimTemplates."""
    policy = stateful_set["spec"].get("persistentVolumeClaimRetentionPolicy") or {}
    meta: dict[str, Any] = {
        "name": claim_name(template, stateful_set, index),
        "namespace": stateful_set["metadata"]["namespace"],
        "labels": dict(template["metadata"].get("labels") or {}),
    }
    if policy.get("whenDeleted") == "Delete":
        meta["ownerReferences"] = [owner(stateful_set)]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


def stateful_pod(stateful_set: dict[str, Any], index: int) -> dict[str, Any]:
    """Pod ``index`` of the StatefulSet: its template, a stable name and its claims."""
    name = f"{stateful_set['metadata']['name']}-{index}"
    template = copy.deepcopy(stateful_set["spec"]["template"])
    spec = template["spec"]
    spec["hostname"] = name
    spec["subdomain"] = stateful_set["spec"].get("serviceName", "")
    spec.setdefault("volumes", [])
    for claim in stateful_set["spec"].get("volumeClaimTemplates") or []:
        spec["volumes"].append(
            {
                "name": claim["metadata"]["name"],
                "persistentVolumeClaim": {"claimName": claim_name(claim, stateful_set, index)},
            }
        )
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    labels[POD_NAME_LABEL] = name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": stateful_set["metadata"]["namespace"],
            "labels": labels,
            "ownerReferences": [owner(stateful_set)],
        },
        "spec": spec,
    }


def owned_by(obj: dict[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or [])


def orphaned(obj: dict[str, Any], stateful_sets: set[str]) -> bool:
    """Owned by StatefulSets only, none of which exists any more."""
    owners = obj["metadata"].get("ownerReferences") or []
    return bool(owners) and all(
        ref.get("kind") == "StatefulSet" and ref.get("uid") not in stateful_sets for ref in owners
    )


class StatefulSetController(PollingController):
    """Keeps every StatefulSet's pods and claims (see the module docstring)."""

    name = "statefulsets"

    def sync(self) -> None:
        stateful_sets = self._list("/apis/apps/v1/statefulsets")
        pods = self._list("/api/v1/pods")
        claim_objects = self._list("/api/v1/persistentvolumeclaims")
        claims = {(c["metadata"]["namespace"], c["metadata"]["name"]) for c in claim_objects}
        for stateful_set in stateful_sets:
            if stateful_set["metadata"].get("deletionTimestamp"):
                continue
            self._reconcile(stateful_set, pods, claims)
        # A pod or claim created just as its StatefulSet was deleted outlives the garbage
        # collector's pass; a real collector deletes dependents whose owner is gone: so here.
        alive = {s["metadata"]["uid"] for s in stateful_sets}
        for plural, objects in (("pods", pods), ("persistentvolumeclaims", claim_objects)):
            for orphan in (o for o in objects if orphaned(o, alive)):
                meta = orphan["metadata"]
                path = self.api.path(plural, meta["name"], namespace=meta["namespace"])
                self.api.request("DELETE", path)

    def _reconcile(
        self,
        stateful_set: dict[str, Any],
        pods: list[dict[str, Any]],
        claims: set[tuple[str, str]],
    ) -> None:
        namespace = stateful_set["metadata"]["namespace"]
        uid = stateful_set["metadata"]["uid"]
        replicas = int(stateful_set["spec"].get("replicas", 1))
        mine = {
            p["metadata"]["name"]: p
            for p in pods
            if p["metadata"]["namespace"] == namespace and owned_by(p, uid)
        }
        ready = 0
        for index in range(replicas):
            for template in stateful_set["spec"].get("volumeClaimTemplates") or []:
                claim = stateful_claim(stateful_set, template, index)
                if (namespace, claim["metadata"]["name"]) not in claims:
                    self._create("persistentvolumeclaims", namespace, claim)
            pod = stateful_pod(stateful_set, index)
            current = mine.pop(pod["metadata"]["name"], None)
            if current is None:
                self._create("pods", namespace, pod)
                continue
            status = current.get("status") or {}
            if status.get("phase") in ("Succeeded", "Failed"):
                self._delete(namespace, current)  # created again on the next pass
            conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
            ready += conditions.get("Ready") == "True"
        for extra in mine.values():  # scaled down
            self._delete(namespace, extra)
        status_path = self.api.path(
            "statefulsets",
            stateful_set["metadata"]["name"],
            namespace=namespace,
            api_version="apps/v1",
            subresource="status",
        )
        wanted = {"replicas": replicas, "readyReplicas": ready, "availableReplicas": ready}
        if {k: (stateful_set.get("status") or {}).get(k) for k in wanted} != wanted:
            self.api.request(
                "PATCH",
                status_path,
                body={"status": wanted},
                content_type="application/merge-patch+json",
            )

    def _create(self, plural: str, namespace: str, body: dict[str, Any]) -> None:
        response = self.api.request("POST", self.api.path(plural, namespace=namespace), body=body)
        if response.status not in (201, 409):
            log.warning("create %s: %s %s", plural, response.status, response.message)

    def _delete(self, namespace: str, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        self.api.request("DELETE", self.api.path("pods", name, namespace=namespace))
