"""Claims bound before their pods start: a provisioner of host directories for the real
control plane.

On a real cluster a claim stays ``Pending`` until a PersistentVolume is bound to it, and the
scheduler and kubelet wait for that. Here the default StorageClass names this provisioner; the
controller-manager's volume controller marks each new claim of the class for it, the provisioner
creates a volume (a directory under its root) with a ``claimRef`` to the claim, and the volume
controller binds the two. When a claim is deleted its volume is ``Released``; the provisioner
deletes it and its directory (reclaim policy ``Delete``), as a dynamic provisioner does. Like
kind's local-path provisioner, but in-process and for one node.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from finishable.kube.api import KubeApi
from testcluster.localcluster.controllers import PollingController
from testcluster.localcluster.volumes import claim_dir

log = logging.getLogger(__name__)

STORAGE_CLASS = "local-path"
PROVISIONER = "finishable.dev/local-path"
ANNOTATION_PROVISIONER = "volume.kubernetes.io/storage-provisioner"  # set by the volume controller
PV_PATH = "/api/v1/persistentvolumes"


class ProvisionError(RuntimeError):
    """The API server refused a volume the provisioner made or deleted."""


def storage_class() -> dict[str, Any]:
    """The cluster's default StorageClass, provisioned here; claims bind at once."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }


def wants_volume(claim: Mapping[str, Any]) -> bool:
    """A claim of this provisioner's class that has no volume yet."""
    spec, status = claim.get("spec") or {}, claim.get("status") or {}
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    return (
        annotations.get(ANNOTATION_PROVISIONER) == PROVISIONER
        and not spec.get("volumeName")
        and status.get("phase", "Pending") == "Pending"
        and not (claim.get("metadata") or {}).get("deletionTimestamp")
    )


def volume_name(claim: Mapping[str, Any]) -> str:
    return f"pvc-{claim['metadata']['uid']}"


def volume_for(claim: Mapping[str, Any], root: Path) -> dict[str, Any]:
    """The volume the claim gets: its size and access modes, a directory under ``root``, a
    ``claimRef`` the volume controller binds by."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": volume_name(claim),
            "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
        },
        "spec": {
            "capacity": {"storage": size},
            "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": STORAGE_CLASS,
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "hostPath": {"path": str(directory_of(claim, root)), "type": "DirectoryOrCreate"},
        },
    }


def directory_of(claim: Mapping[str, Any], root: Path) -> Path:
    """The claim's directory, where the local cluster's kubelet keeps a claim's files."""
    return claim_dir(root, str(claim["metadata"]["namespace"]), claim)


def released(volume: Mapping[str, Any]) -> bool:
    """One of this provisioner's volumes whose claim is gone."""
    annotations = (volume.get("metadata") or {}).get("annotations") or {}
    return (
        annotations.get("pv.kubernetes.io/provisioned-by") == PROVISIONER
        and (volume.get("status") or {}).get("phase") in ("Released", "Failed")
        and (volume.get("spec") or {}).get("persistentVolumeReclaimPolicy") == "Delete"
    )


class Provisioner(PollingController):
    """Follows the claims of every namespace (see the module docstring) until :meth:`stop`."""

    name = "provisioner"

    def __init__(self, api: KubeApi, root: Path) -> None:
        super().__init__(api)
        self.root = root

    def start(self) -> Self:
        response = self.api.request(
            "POST", "/apis/storage.k8s.io/v1/storageclasses", body=storage_class()
        )
        if response.status not in (201, 409):
            raise ProvisionError(f"cannot create StorageClass {STORAGE_CLASS}: {response.message}")
        return super().start()

    def sync(self) -> None:
        claims, volumes = self._list("/api/v1/persistentvolumeclaims"), self._list(PV_PATH)
        existing = {v["metadata"]["name"] for v in volumes}
        for claim in claims:
            if wants_volume(claim) and volume_name(claim) not in existing:
                self._provision(claim)
        for volume in volumes:
            if released(volume):
                self._delete(volume)

    def _provision(self, claim: dict[str, Any]) -> None:
        directory = directory_of(claim, self.root)
        directory.mkdir(parents=True, exist_ok=True)
        # Writable by any pod's user, as kind's local-path provisioner makes its volumes
        # (``mkdir -m 0777``): a kubelet applies no fsGroup to a hostPath volume.
        directory.chmod(0o777)
        created = self.api.request("POST", PV_PATH, body=volume_for(claim, self.root))
        if created.status not in (201, 409):
            raise ProvisionError(f"cannot create {volume_name(claim)}: {created.message}")
        meta = claim["metadata"]
        log.info("provisioned %s for %s/%s", volume_name(claim), meta["namespace"], meta["name"])

    def _delete(self, volume: dict[str, Any]) -> None:
        name = volume["metadata"]["name"]
        path = Path(volume["spec"]["hostPath"]["path"])
        deleted = self.api.request("DELETE", f"{PV_PATH}/{name}")
        if deleted.status not in (200, 202, 404):
            raise ProvisionError(f"cannot delete {name}: {deleted.message}")
        if path.is_relative_to(self.root):  # never a directory the provisioner did not make
            shutil.rmtree(path, ignore_errors=True)
        log.info("deleted %s and %s", name, path)
