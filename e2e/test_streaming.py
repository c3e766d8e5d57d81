"""Streaming on a cluster: Running → Suspended (savepoint) → Running (resumed) → Finished
(drained), all by editing ``spec.state``, and the output equals the ground truth.

The job runs as users run it: Spark's Kubernetes backend in the driver creates two executor pods
through the API, the windowed counts' state is written by those executors onto the job's work
volume, and checkpoints and savepoints carry it (a resume that missed it would count windows
again from zero, and the output would not be the ground truth)."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.clickcounts import Counts, assert_prefix_of_input
from e2e.clickcounts import committed as committed_counts
from finishable.api.snapshot import SNAPSHOT_PLURAL
from finishable.controller.apicalls import MERGE_PATCH
from finishable.controller.naming import FINALIZER
from finishable.controller.snapshot.objects import SNAPSHOT_API_VERSION as SNAPSHOT_API
from finishable.state.savepointfiles import configmap_files
from testcluster.client import E2ECluster, example, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.full]

NAME = "clickstream"
START = 240.0
STOP = 300.0


def committed(cluster: E2ECluster) -> Counts:
    return committed_counts(cluster.data_dir / NAME / "output")


def checkpoint_id(cluster: E2ECluster) -> int:
    return int((cluster.status(NAME).get("lastCheckpoint") or {}).get("id", -1))


def running_executors(cluster: E2ECluster, attempt: int) -> list[str]:
    """The attempt's executor pods: two, created by Spark, owned by their driver pod."""
    driver = cluster.pod(f"{NAME}-driver-{attempt}")
    assert driver is not None
    pods = cluster.executor_pods(NAME, attempt)
    assert len(pods) == 2, [pod["metadata"]["name"] for pod in pods]
    for pod in pods:
        owners = pod["metadata"].get("ownerReferences") or []
        assert [(o["kind"], o["uid"]) for o in owners] == [("Pod", driver["metadata"]["uid"])]
        assert pod["metadata"]["labels"]["finishable.dev/component"] == "executor"
    return [pod["metadata"]["name"] for pod in pods]


def no_executors_left(cluster: E2ECluster, what: str) -> None:
    wait_for(
        lambda: cluster.executor_pods(NAME) == [],
        f"no executor pod left {what}",
        30,
        on_fail=lambda: str([p["metadata"]["name"] for p in cluster.executor_pods(NAME)]),
    )


def upgrade_refused(cluster: E2ECluster) -> str | None:
    """The message of the job's Degraded condition when an upgrade was refused."""
    for condition in cluster.status(NAME).get("conditions") or []:
        if condition["type"] == "Degraded" and condition["reason"] == "UpgradeRefused":
            return str(condition["message"])
    return None


def test_suspend_resume_upgrade_and_drain_by_editing_the_spec(cluster: E2ECluster) -> None:
    manifest = example("examples/streaming/cluster.yaml", cluster.data_dir, cluster.image)
    response = cluster.apply(manifest)
    assert response.status == 201, response.body
    cluster.wait_phase(NAME, "Running", START)
    first = running_executors(cluster, 1)
    wait_for(
        lambda: checkpoint_id(cluster) >= 1,
        "a checkpoint",
        START,
        on_fail=lambda: cluster.logs(NAME),
    )

    cluster.set_state(NAME, "Suspended")
    suspended = cluster.wait_phase(NAME, "Suspended", STOP)
    before_suspend = committed(cluster)
    savepoint = suspended["savepoint"]
    assert savepoint["location"] and not savepoint.get("drained"), savepoint
    wait_for(lambda: cluster.pod(f"{NAME}-driver-1") is None, "the suspended driver is removed", 60)
    no_executors_left(cluster, "by the suspended job")
    cluster.assert_executors_ran_tasks(first)

    cluster.set_state(NAME, "Running")
    resumed = cluster.wait_phase(NAME, "Running", START)
    assert resumed["attempt"] == 2 and resumed["restoreFrom"] == savepoint["location"]
    second = running_executors(cluster, 2)
    before = checkpoint_id(cluster)
    wait_for(lambda: checkpoint_id(cluster) > before, "a checkpoint after the resume", START)

    # An upgrade whose program cannot restore the state (its source bounded now: another
    # source) is refused by its check pod, a pod of the new spec, before anything is stopped.
    original = manifest["spec"]["application"]["args"]
    bounded = [arg for arg in original if not arg.startswith("--keep-generating")]
    cluster.patch_spec(NAME, {"application": {"args": bounded}})
    refusal = wait_for(
        lambda: upgrade_refused(cluster),
        "the incompatible upgrade refused",
        START,
        on_fail=lambda: cluster.logs(NAME),
    )
    assert "the source 'clicks' changed since it was taken" in refusal, refusal
    still = cluster.status(NAME)
    assert (still["phase"], still["attempt"]) == ("Running", 2), "the running job goes on"
    before = checkpoint_id(cluster)
    wait_for(lambda: checkpoint_id(cluster) > before, "a checkpoint after the refusal", START)

    # An upgrade of the program (spec.upgradeMode: savepoint, the default): its check passes,
    # then stop with savepoint, and attempt 3 of the new program from it, its windows kept (the
    # exactness check below).
    args = [*original, "--files-per-batch=3"]
    cluster.patch_spec(NAME, {"application": {"args": args}})
    upgraded = wait_for(
        lambda: (s := cluster.status(NAME)).get("attempt") == 3 and s["phase"] == "Running" and s,
        "the upgraded program running as attempt 3",
        STOP + START,
        on_fail=lambda: cluster.logs(NAME),
    )
    assert upgraded["restoreFrom"] == upgraded["savepoint"]["location"] != savepoint["location"]
    assert upgraded["restarts"] == 0, "an upgrade is no crash"
    assert upgrade_refused(cluster) is None, "the refusal ended with the spec it refused"
    assert "UpgradeCheckPassed" in [event.get("reason") for event in cluster.events(NAME)]
    config_path = cluster.api.path("configmaps", f"{NAME}-config", namespace=cluster.namespace)
    config = cluster.api.request("GET", config_path).body
    assert "--files-per-batch=3" in str(config), "attempt 3 runs the new program's arguments"
    third = running_executors(cluster, 3)
    before = checkpoint_id(cluster)
    wait_for(lambda: checkpoint_id(cluster) > before, "a checkpoint after the upgrade", START)

    read_before_drain = cluster.status(NAME)["coordinator"]["splitsFinished"]
    cluster.set_state(NAME, "Finished")
    finished = cluster.wait_phase(NAME, "Finished", STOP)
    assert finished["savepoint"]["drained"] is True
    no_executors_left(cluster, "by the finished job")
    cluster.assert_executors_ran_tasks(second)
    cluster.assert_executors_ran_tasks(third)

    # Nothing lost, nothing twice (e2e/clickcounts.py); windows published before the suspend
    # are unchanged.
    output = committed(cluster)
    assert {key: output.get(key) for key in before_suspend} == before_suspend
    assert_prefix_of_input(output, cluster.data_dir / NAME / "input", read_before_drain)
    snapshots_and_disposal(cluster, savepoint)


def snapshots_and_disposal(cluster: E2ECluster, savepoint: dict[str, Any]) -> None:
    """Each savepoint is a FinishableSparkSnapshot; one deleted with spec.disposeOnDelete takes
    its files (here the job's ConfigMaps) with it, once no job holds it (this one Finished)."""
    snapshots = cluster.objects(SNAPSHOT_PLURAL, f"finishable.dev/job={NAME}", SNAPSHOT_API)
    by_trigger = {s["status"]["trigger"]: s for s in snapshots}
    assert sorted(s["status"]["trigger"] for s in snapshots) == ["drain", "stop", "upgrade"]
    stop = by_trigger["stop"]
    assert stop["status"]["location"] == savepoint["location"]
    files = configmap_files(savepoint["location"], NAME)
    state = cluster.state_backend(NAME)
    assert state.list(files.meta) == [files.meta] and state.get(files.blob)
    path = cluster.api.path(SNAPSHOT_PLURAL, stop["metadata"]["name"], api_version=SNAPSHOT_API)
    patch = {"spec": {"disposeOnDelete": True}}
    assert cluster.api.request("PATCH", path, body=patch, content_type=MERGE_PATCH).status == 200

    def finalizers() -> list[str]:
        return list(cluster.api.request("GET", path).body["metadata"].get("finalizers") or ())

    wait_for(lambda: FINALIZER in finalizers(), "the operator's finalizer on the snapshot", 30)
    assert cluster.api.request("DELETE", path).status in (200, 202)
    wait_for(lambda: cluster.api.request("GET", path).status == 404, "the snapshot to go", 60)
    assert state.list(files.meta) == [] and state.list(files.blob) == [], "its files went with it"
    assert state.list("snapshots/sp-"), "the other savepoints stay"
