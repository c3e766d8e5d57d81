"""A Finished or Failed job's time to live, through the real operator against the API emulator,
the test playing kubelet and driver: announced with its deadline, moved by an edit, deleted at
the deadline through the job's finalizer with its savepoint and snapshot kept, left behind by a
restart, and neither forgotten nor announced twice by a restarted operator."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from finishable.api.control import DriverState
from finishable.api.status import SavepointStatus
from finishable.lifecycle.ttl import stamp
from testcluster.apiserver.emulator import EmulatorServer
from tests.controller.cluster import JOBS, Cluster, OperatorProcess, install, wait_for

TOKEN = "ttl-tests"
NAMESPACE = "jobs"
DEFAULT_TTL_AFTER_FAILED = "2s"
"""The operator's ``--ttl-after-failed`` in this module: jobs that set none go this soon."""
SNAPSHOTS = "finishablesparksnapshots"

pytestmark = pytest.mark.quick


@pytest.fixture(scope="module")
def server() -> Iterator[EmulatorServer]:
    with EmulatorServer(required_token=TOKEN) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def cluster(server: EmulatorServer) -> Cluster:
    cluster = Cluster(server.url, TOKEN, NAMESPACE)
    install(cluster.api, [NAMESPACE])
    return cluster


@pytest.fixture(scope="module")
def operator(
    server: EmulatorServer, cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    process = OperatorProcess(
        tmp_path_factory.mktemp("operator"),
        server.url,
        TOKEN,
        [NAMESPACE],
        extra_args=["--ttl-after-failed", DEFAULT_TTL_AFTER_FAILED],
    )
    process.start()
    yield process
    process.stop()


@pytest.fixture
def k8s(cluster: Cluster, operator: OperatorProcess) -> Cluster:
    if operator.process is None or operator.process.poll() is not None:
        operator.start()
    return cluster


STREAMING = {"application": {"file": "local:///app/job.py"}}
NO_RECOVERY = {**STREAMING, "recovery": {"enabled": False}}


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def messages(k8s: Cluster, job: str, reason: str) -> list[str]:
    return [str(e["message"]) for e in k8s.events(job) if e["reason"] == reason]


def announced(k8s: Cluster, job: str, count: int = 1) -> list[str]:
    """The job's ``TTLScheduled`` Events, once there are ``count`` of them."""
    return wait_for(
        lambda: (found := messages(k8s, job, "TTLScheduled")) and len(found) >= count and found,
        f"{count} TTLScheduled Event(s) of {job}",
    )


def deleted(k8s: Cluster, job: str) -> None:
    wait_for(lambda: k8s.job(job) is None, f"{job} is deleted at the end of its time to live")


def sample(text: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == name and labels.items() <= found.labels.items():
                return float(found.value)
    return None


def state_object(k8s: Cluster, job: str, object_name: str) -> str:
    """A state ConfigMap as the driver's backend writes it, owned by its job; its name."""
    body = k8s.job(job)
    assert body is not None
    owner = {
        "apiVersion": JOBS,
        "kind": "FinishableSparkJob",
        "name": job,
        "uid": body["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": False,
    }
    name = f"{job}-{object_name.replace('/', '.')}"
    k8s.create(
        "configmaps",
        {
            "metadata": {
                "name": name,
                "labels": {"finishable.dev/job": job, "finishable.dev/component": "state"},
                "annotations": {"finishable.dev/object-name": object_name},
                "ownerReferences": [owner],
            },
            "binaryData": {"data": "AA=="},
        },
    )
    return name


def fail(k8s: Cluster, job: str, attempt: int) -> dict[str, Any]:
    """Play the kubelet: the attempt's driver exits with an error (no recovery: Failed)."""
    k8s.set_pod_phase(f"{job}-driver-{attempt}", "Failed", exit_code=1)
    return k8s.wait_phase(job, "Failed")


def test_a_drained_job_goes_at_its_deadline_and_its_savepoint_and_snapshot_stay(
    k8s: Cluster, operator: OperatorProcess
) -> None:
    k8s.start_running("drained", {**STREAMING, "ttlAfterFinished": "1h"})
    savepoint_object = state_object(k8s, "drained", "snapshots/sp-000000000001.meta")
    checkpoint_object = state_object(k8s, "drained", "snapshots/chk-000000000004.meta")
    k8s.edit("drained", state="Finished")
    k8s.wait_phase("drained", "Draining")
    request = k8s.request_for("drained", 1)
    location = "configmap://jobs/drained-snapshots.sp-000000000001.blob"
    final = SavepointStatus(location=location, drained=True, request_id=request.id)
    k8s.answer("drained", 1, request, DriverState.FINISHED, savepoint=final)
    status = k8s.wait_phase("drained", "Finished")
    deadline = at(status["phaseSince"]) + timedelta(hours=1)
    assert at(status["expiresAt"]) == deadline, "stored with the phase change"
    (message,) = announced(k8s, "drained")
    assert message == f"will be deleted at {stamp(deadline)} (ttlAfterFinished 1h)"

    def recorded() -> dict[str, Any] | None:
        items = k8s.list(SNAPSHOTS, "finishable.dev/job=drained", JOBS)
        return next((s for s in items if s.get("status", {}).get("location") == location), None)

    snapshot = wait_for(recorded, "the drain's savepoint recorded as a snapshot")

    k8s.edit("drained", ttlAfterFinished="1s")  # a time to live changed while waiting applies
    deleted(k8s, "drained")
    (expired,) = messages(k8s, "drained", "TTLExpired")
    assert expired.startswith("ttlAfterFinished 1s passed at "), expired
    kept = k8s.get(SNAPSHOTS, snapshot["metadata"]["name"], JOBS)
    assert kept is not None, "the snapshot outlives its job (retainOnDelete: Savepoints)"
    assert not kept["metadata"].get("ownerReferences"), "orphaned, not collected"
    assert kept["metadata"]["labels"] == {"finishable.dev/deleted-job": "drained"}
    savepoint = k8s.get("configmaps", savepoint_object)
    assert savepoint is not None and not savepoint["metadata"].get("ownerReferences")
    assert k8s.get("configmaps", checkpoint_object) is None, "checkpoints go with the job"
    assert k8s.get("configmaps", "drained-config") is None, "children go through the finalizer"
    name = "finishable_jobs_expired_total"
    wait_for(
        lambda: sample(operator.metrics(), name, namespace=NAMESPACE, phase="Finished") == 1,
        "the deletion counted",
    )


def test_a_failed_job_goes_at_the_operator_s_default(k8s: Cluster) -> None:
    k8s.create_job("crashed", NO_RECOVERY)
    k8s.wait_phase("crashed", "Submitted")
    fail(k8s, "crashed", 1)
    deleted(k8s, "crashed")
    (message,) = announced(k8s, "crashed")
    assert message.endswith(f"(ttlAfterFailed {DEFAULT_TTL_AFTER_FAILED}, the operator's default)")
    assert messages(k8s, "crashed", "TTLExpired")
    assert k8s.list("pods", "finishable.dev/job=crashed") == []


def test_an_edit_of_a_failed_job_s_ttl_moves_its_deadline_and_a_restart_leaves_its_clock(
    k8s: Cluster,
) -> None:
    k8s.create_job("kept", {**NO_RECOVERY, "ttlAfterFailed": "1h"})
    k8s.wait_phase("kept", "Submitted")
    failed = fail(k8s, "kept", 1)
    assert at(failed["expiresAt"]) == at(failed["phaseSince"]) + timedelta(hours=1)
    # the time to live alone: the deadline moves, the job stays Failed (any other edit restarts)
    k8s.edit("kept", ttlAfterFailed="2h")
    moved = wait_for(
        lambda: (s := k8s.status("kept")).get("observedGeneration") == 2 and s,
        "the edit observed",
    )
    assert at(moved["expiresAt"]) == at(failed["phaseSince"]) + timedelta(hours=2)
    assert (moved["phase"], moved["attempt"], moved["phaseSince"]) == (
        "Failed",
        1,
        failed["phaseSince"],
    )
    assert len(announced(k8s, "kept", 2)) == 2
    assert k8s.get("pods", "kept-driver-2") is None, "nothing restarted"
    # a restart leaves Failed, and the clock with it
    k8s.edit("kept", restartNonce=1)
    restarted = k8s.wait_phase("kept", "Submitted")
    assert "expiresAt" not in restarted and restarted["attempt"] == 2
    again = fail(k8s, "kept", 2)
    assert at(again["expiresAt"]) == at(again["phaseSince"]) + timedelta(hours=2)
    assert again["phaseSince"] != failed["phaseSince"]
    k8s.edit("kept", ttlAfterFailed="0s")  # 0s: at once
    deleted(k8s, "kept")


def test_a_restarted_operator_keeps_the_deadline_and_does_not_announce_it_again(
    k8s: Cluster, operator: OperatorProcess
) -> None:
    k8s.start_running("settled", {**STREAMING, "ttlAfterFinished": "1h"})
    k8s.report("settled", 1, DriverState.FINISHED)
    k8s.wait_phase("settled", "Finished")
    announced(k8s, "settled")
    operator.stop()
    operator.start()
    wait_for(  # the new process's loop of the job has stepped: it wrote its metrics
        lambda: (
            sample(operator.metrics(), "finishable_driver_restarts_left", job_name="settled")
            is not None
        ),
        "the restarted operator reconciles the job",
    )
    k8s.edit("settled", ttlAfterFinished="2h")
    found = announced(k8s, "settled", 2)
    assert len(found) == 2, f"announced once per deadline, not per operator: {found}"
    assert found[1].endswith("(ttlAfterFinished 2h)")
    k8s.edit("settled", ttlAfterFinished="0s")
    deleted(k8s, "settled")
