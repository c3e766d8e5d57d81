"""Jobs that ended go when their time to live ends: a Streaming job drained to Finished (its final
savepoint taken) and a job the driver failed, each deleted by the operator through the job's
finalizer, announced first by an Event that names the time to live and the deadline. The drain's
savepoint stays, and so does its FinishableSparkSnapshot, orphaned rather than collected with
the job (``retainOnDelete: Savepoints``, the default)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from finishable.api.snapshot import SNAPSHOT_PLURAL
from finishable.controller.snapshot.objects import SNAPSHOT_API_VERSION as SNAPSHOT_API
from finishable.lifecycle.ttl import stamp
from finishable.state.checkpointstore import is_savepoint_object
from finishable.state.configmap import ANNOTATION_NAME
from testcluster.client import E2ECluster, example, streaming_example, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.full]

START = 240.0
STOP = 300.0
TTL = "30s"
STATE = "finishable.dev/component=state"
GONE = 120.0  # the time to live, the finalizer's clean-up and the API's pace, with room


def event(cluster: E2ECluster, job: str, reason: str, timeout: float = 60) -> str:
    """The message of the job's first Event of ``reason``, once there is one (Events outlive
    their job)."""
    return wait_for(
        lambda: next(
            (str(e["message"]) for e in cluster.events(job) if e.get("reason") == reason), None
        ),
        f"a {reason} Event of {job}",
        timeout,
        on_fail=lambda: cluster.logs(job),
    )


def gone(cluster: E2ECluster, job: str) -> None:
    wait_for(
        lambda: cluster.job(job) is None,
        f"{job} deleted at the end of its time to live",
        GONE,
        on_fail=lambda: str(cluster.status(job)),
    )
    wait_for(lambda: cluster.children(job) == {}, f"{job}'s children removed", 60)


def test_a_drained_job_goes_at_its_ttl_and_its_final_savepoint_and_snapshot_stay(
    cluster: E2ECluster,
) -> None:
    name = "ttl-drained"
    job = streaming_example(
        cluster.data_dir,
        cluster.image,
        name,
        ["--files=4", "--keep-generating=5"],
        ttlAfterFinished=TTL,
    )
    job["spec"]["executor"]["instances"] = 1
    response = cluster.apply(job)
    assert response.status == 201, response.body
    cluster.wait_phase(name, "Running", START)
    cluster.set_state(name, "Finished")  # a stop with savepoint and drain
    finished = cluster.wait_phase(name, "Finished", STOP)
    assert finished["savepoint"]["drained"] is True
    location = finished["savepoint"]["location"]
    deadline = datetime.fromisoformat(finished["expiresAt"])
    assert deadline == datetime.fromisoformat(finished["phaseSince"]) + timedelta(seconds=30)
    scheduled = event(cluster, name, "TTLScheduled")
    assert scheduled == f"will be deleted at {stamp(deadline)} (ttlAfterFinished {TTL})"

    def recorded() -> dict[str, Any] | None:
        snapshots = cluster.objects(SNAPSHOT_PLURAL, f"finishable.dev/job={name}", SNAPSHOT_API)
        return next((s for s in snapshots if s["status"].get("location") == location), None)

    snapshot = wait_for(recorded, "the drain's savepoint recorded as a snapshot", 60)
    assert snapshot["status"]["trigger"] == "drain"

    gone(cluster, name)
    assert event(cluster, name, "TTLExpired").startswith(f"ttlAfterFinished {TTL} passed at ")
    path = cluster.api.path(SNAPSHOT_PLURAL, snapshot["metadata"]["name"], api_version=SNAPSHOT_API)
    kept = cluster.api.request("GET", path)
    assert kept.status == 200, "the snapshot outlives its job"
    assert not kept.body["metadata"].get("ownerReferences"), "orphaned, not collected"
    assert kept.body["metadata"]["labels"] == {"finishable.dev/deleted-job": name}
    state = cluster.objects("configmaps", f"finishable.dev/job={name},{STATE}")
    objects = [c["metadata"].get("annotations", {}).get(ANNOTATION_NAME, "") for c in state]
    assert objects, "the savepoint's ConfigMaps stay"
    assert all(is_savepoint_object(o) for o in objects), f"and nothing else of its state: {objects}"
    assert not any(c["metadata"].get("ownerReferences") for c in state)
    assert cluster.api.request("DELETE", path).status == 200  # what a user does by hand


def test_a_failed_job_goes_at_its_ttl(cluster: E2ECluster) -> None:
    """The driver refuses a stateful query without a work volume: Failed at once, no restart."""
    name = "ttl-failed"
    job = example("examples/streaming/cluster.yaml", cluster.data_dir, cluster.image)
    job["metadata"]["name"] = name
    del job["spec"]["workVolume"]
    job["spec"]["application"]["args"] = [f"--input=/data/{name}/in", f"--output=/data/{name}/out"]
    job["spec"]["ttlAfterFailed"] = TTL
    response = cluster.apply(job)
    assert response.status == 201, response.body
    scheduled = event(cluster, name, "TTLScheduled", START)
    assert scheduled.endswith(f"(ttlAfterFailed {TTL})"), scheduled
    gone(cluster, name)
    reasons = [str(e.get("reason")) for e in cluster.events(name)]
    assert "TTLExpired" in reasons
    failed = [e for e in cluster.events(name) if "-> Failed" in str(e.get("message"))]
    assert failed, "it failed before it went"
