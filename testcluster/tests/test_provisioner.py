"""The claim provisioner's decisions, without a server: which claims get a volume, what the
volume is, and which volumes go (its run against the real control plane is in
test_controlplane.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testcluster.controlplane.provisioner import (
    ANNOTATION_PROVISIONER,
    PROVISIONER,
    STORAGE_CLASS,
    released,
    volume_for,
    wants_volume,
)

pytestmark = pytest.mark.quick


def claim(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {
            "name": "data-shuffle-0",
            "namespace": "jobs",
            "uid": "u-1",
            "annotations": {ANNOTATION_PROVISIONER: PROVISIONER},
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "2Gi"}},
            "storageClassName": STORAGE_CLASS,
        },
        "status": {"phase": "Pending"},
    }
    for key, value in changes.items():
        body[key] = {**body[key], **value}
    return body


def test_only_a_pending_claim_of_its_class_without_a_volume_gets_one() -> None:
    assert wants_volume(claim())
    assert not wants_volume(claim(metadata={"annotations": {ANNOTATION_PROVISIONER: "other"}}))
    assert not wants_volume(claim(spec={"volumeName": "pvc-u-1"}))
    assert not wants_volume(claim(status={"phase": "Bound"}))
    assert not wants_volume(claim(metadata={"deletionTimestamp": "2026-11-29T00:00:00Z"}))


def test_the_volume_has_the_claims_size_and_modes_a_claim_ref_and_a_directory_of_its_own(
    tmp_path: Path,
) -> None:
    volume = volume_for(claim(), tmp_path)
    spec = volume["spec"]
    assert volume["metadata"]["name"] == "pvc-u-1"
    assert spec["capacity"] == {"storage": "2Gi"} and spec["accessModes"] == ["ReadWriteMany"]
    assert spec["claimRef"] == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": "jobs",
        "name": "data-shuffle-0",
        "uid": "u-1",
    }
    # where the local cluster's kubelet keeps a claim's files
    assert spec["hostPath"]["path"] == str(tmp_path / "claims" / "jobs" / "data-shuffle-0-u-1")
    assert spec["storageClassName"] == STORAGE_CLASS
    assert spec["persistentVolumeReclaimPolicy"] == "Delete"


def test_only_its_own_released_volumes_go(tmp_path: Path) -> None:
    volume = volume_for(claim(), tmp_path)
    assert released({**volume, "status": {"phase": "Released"}})
    assert not released({**volume, "status": {"phase": "Bound"}})
    someone_elses = {**volume, "metadata": {"name": "pv-1", "annotations": {}}}
    assert not released({**someone_elses, "status": {"phase": "Released"}})
