"""The real operator disposes of a deleted FinishableSparkSnapshot's savepoint
(``spec.disposeOnDelete``), against the API emulator, the test playing kubelet and driver: the
ConfigMaps of a ConfigMap savepoint, the files of an object-storage one through a disposal pod
(whose command the test runs itself), none of a savepoint a job still holds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from finishable.api.control import DriverState
from finishable.api.status import SavepointStatus
from finishable.cli import main
from finishable.state.backends import open_backend
from finishable.state.checkpointstore import CheckpointStore
from finishable.state.configmap import ConfigMapBackend
from testcluster.apiserver.emulator import EmulatorServer
from tests.controller.cluster import JOBS, Cluster, OperatorProcess, install, wait_for

TOKEN = "disposal-tests"
NAMESPACE = "jobs"
SNAPSHOTS = "finishablesparksnapshots"
STREAMING = {
    "application": {"file": "local:///app/job.py"},
    "savepoints": {"disposeOnDelete": True},
}
RETRIED = 90.0  # a held or failed disposal is tried again after 30 s

pytestmark = pytest.mark.full


@pytest.fixture(scope="module")
def k8s(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with EmulatorServer(required_token=TOKEN) as server:
        cluster = Cluster(server.url, TOKEN, NAMESPACE)
        install(cluster.api, [NAMESPACE])
        operator = OperatorProcess(
            tmp_path_factory.mktemp("operator"), server.url, TOKEN, [NAMESPACE]
        )
        operator.start()
        try:
            yield cluster
        finally:
            operator.stop()


def take_savepoint(k8s: Cluster, job: str, nonce: int, location: str) -> dict[str, Any]:
    """A savepoint without stopping, answered at ``location``; its snapshot once recorded, with
    the operator's finalizer."""
    k8s.edit(job, savepointTriggerNonce=nonce)
    request = wait_for(
        lambda: (r := k8s.request_for(job, 1)).id != getattr(take_savepoint, job, None) and r,
        f"savepoint request {nonce} of {job}",
    )
    setattr(take_savepoint, job, request.id)
    savepoint = SavepointStatus(location=location, request_id=request.id, id=nonce)
    k8s.answer(job, 1, request, DriverState.RUNNING, savepoint=savepoint)

    def recorded() -> dict[str, Any] | None:
        for snapshot in k8s.list(SNAPSHOTS, f"finishable.dev/job={job}", JOBS):
            if (snapshot.get("status") or {}).get("location") == location:
                return snapshot if snapshot["metadata"].get("finalizers") else None
        return None

    snapshot = wait_for(recorded, f"the snapshot of {location}, with a finalizer")
    assert snapshot["spec"]["disposeOnDelete"] is True
    return snapshot


def delete_snapshot(k8s: Cluster, name: str) -> None:
    response = k8s.api.request("DELETE", k8s.api.path(SNAPSHOTS, name, api_version=JOBS))
    assert response.status == 200, response.body


def event(k8s: Cluster, name: str, reason: str) -> dict[str, Any]:
    return wait_for(
        lambda: next((e for e in k8s.events(name) if e["reason"] == reason), None),
        f"a {reason} Event on {name}",
        RETRIED,
    )


def state_names(k8s: Cluster, job: str) -> list[str]:
    return sorted(item["metadata"]["name"] for item in k8s.components("configmaps", job, "state"))


def test_a_configmap_savepoint_is_kept_while_held_then_its_configmaps_are_deleted(
    k8s: Cluster,
) -> None:
    k8s.start_running("held", STREAMING)
    backend = ConfigMapBackend(k8s.api, "held", namespace=NAMESPACE, chunk_bytes=64)
    store = CheckpointStore(backend)
    store.put_checkpoint(2, b"c")
    location = store.put_savepoint(7, b"s" * 200).location  # split into parts
    assert location == "configmap://jobs/held-snapshots.sp-000000000007.blob"
    before = state_names(k8s, "held")
    assert "held-snapshots.sp-000000000007.blob-part-0001" in before
    name = take_savepoint(k8s, "held", 7, location)["metadata"]["name"]
    delete_snapshot(k8s, name)
    # the job's newest savepoint: a resume or a recovery starts from it
    warning = event(k8s, name, "SavepointHeld")
    assert warning["type"] == "Warning" and "held" in warning["message"]
    assert k8s.get(SNAPSHOTS, name, JOBS) is not None, "the snapshot waits"
    assert state_names(k8s, "held") == before, "and so do its ConfigMaps"
    # the job lets go: a newer savepoint is the one it would start from
    take_savepoint(k8s, "held", 8, "configmap://jobs/held-snapshots.sp-000000000008.blob")
    wait_for(lambda: k8s.get(SNAPSHOTS, name, JOBS) is None, "the snapshot goes", RETRIED)
    assert event(k8s, name, "SavepointDisposed")["type"] == "Normal"
    left = state_names(k8s, "held")
    assert not [name for name in left if ".sp-000000000007." in name], left
    assert {name for name in before if ".chk-" in name} == set(left), "the checkpoint stays"


def test_an_object_storage_savepoint_is_disposed_of_by_a_pod_of_the_job(
    k8s: Cluster, tmp_path: Path
) -> None:
    url = (tmp_path / "bucket").as_uri()
    with open_backend(url) as storage:
        location = CheckpointStore(storage).put_savepoint(3, b"state").location
    storage_spec = {"type": "ObjectStore", "url": url, "secretRef": "storage-keys"}
    spec = {**STREAMING, "checkpointing": {"storage": storage_spec}}
    k8s.start_running("files", spec)
    name = take_savepoint(k8s, "files", 3, location)["metadata"]["name"]
    take_savepoint(k8s, "files", 4, f"{url}/snapshots/sp-000000000004.blob")  # lets go of 3
    delete_snapshot(k8s, name)
    pod_name = f"{name}-dispose"
    pod = wait_for(lambda: k8s.get("pods", pod_name), "the disposal pod")
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["finishable", "dispose-savepoint", location]
    assert container["image"] == "finishable-spark:test"
    assert container["envFrom"] == [{"secretRef": {"name": "storage-keys"}}]
    assert pod["spec"]["restartPolicy"] == "Never"
    job_uid = k8s.job("files")["metadata"]["uid"]  # type: ignore[index]
    assert [ref["uid"] for ref in pod["metadata"]["ownerReferences"]] == [job_uid]
    # the pod fails: a Warning with its message, and the next try runs a new pod
    k8s.set_pod_phase(pod_name, "Failed", exit_code=1)
    failed = event(k8s, name, "SavepointDisposalFailed")
    assert failed["type"] == "Warning" and "exit code 1" in failed["message"]
    assert k8s.get(SNAPSHOTS, name, JOBS) is not None
    wait_for(
        lambda: (p := k8s.get("pods", pod_name)) and p["metadata"]["uid"] != pod["metadata"]["uid"],
        "a new disposal pod",
        RETRIED,
    )
    # play the kubelet: run the pod's command, then report it Succeeded
    assert main(container["command"][1:]) == 0
    k8s.set_pod_phase(pod_name, "Succeeded")
    wait_for(lambda: k8s.get(SNAPSHOTS, name, JOBS) is None, "the snapshot goes")
    assert event(k8s, name, "SavepointDisposed")["type"] == "Normal"
    wait_for(lambda: k8s.get("pods", pod_name) is None, "the disposal pod is deleted")
    assert sorted(p.name for p in (tmp_path / "bucket" / "snapshots").iterdir()) == []


def test_an_object_storage_savepoint_of_a_deleted_job_is_kept(k8s: Cluster, tmp_path: Path) -> None:
    url = (tmp_path / "bucket").as_uri()
    with open_backend(url) as storage:
        location = CheckpointStore(storage).put_savepoint(5, b"state").location
    spec = {**STREAMING, "checkpointing": {"storage": {"type": "ObjectStore", "url": url}}}
    k8s.start_running("gone", spec)
    name = take_savepoint(k8s, "gone", 5, location)["metadata"]["name"]
    k8s.delete_job("gone")  # its snapshots stay (retainOnDelete: Savepoints)
    wait_for(lambda: k8s.job("gone") is None, "the job is deleted")
    delete_snapshot(k8s, name)
    wait_for(lambda: k8s.get(SNAPSHOTS, name, JOBS) is None, "the snapshot goes")
    kept = event(k8s, name, "SavepointKept")
    assert kept["type"] == "Warning" and location in kept["message"]
    assert sorted(p.name for p in (tmp_path / "bucket" / "snapshots").iterdir()) == [
        "sp-000000000005.blob",
        "sp-000000000005.meta",
    ]
