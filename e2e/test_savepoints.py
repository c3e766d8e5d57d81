"""Savepoints as resources on a cluster: periodic savepoints trimmed to the history, a second job
restored by ``snapshotRef`` that goes on exactly where the first one stopped, a ``last-state``
upgrade of it (checked first, then a new driver from the newest checkpoint, without a stop), and
a ``stateless`` one (no check, no savepoint: a new run from nothing).

Both jobs keep their state in the cluster's object storage (a savepoint in one job's ConfigMaps
is not another job's to read) and publish into the same sink until the stateless upgrade, so
that sink must hold every window up to its newest exactly: nothing the first job committed is
published again, nothing is skipped between them or across the last-state upgrade. The
stateless run publishes into a sink of its own, which after the drain must hold the counts of a
prefix of the input files from the first: it started from nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e.clickcounts import assert_closed_windows_exact, assert_prefix_of_input, committed
from finishable.api.snapshot import SNAPSHOT_PLURAL
from finishable.controller.snapshot.objects import SNAPSHOT_API_VERSION as SNAPSHOT_API
from testcluster.client import DATA_MOUNT, E2ECluster, example, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.full]

ORIGIN = "sp-origin"
FOLLOWER = "sp-follower"
DATA = "savepoints"  # under /data: the input both jobs read and the sink both publish to
START = 240.0
STOP = 300.0
HISTORY = 2


def manifest(cluster: E2ECluster, name: str, **spec: Any) -> dict[str, Any]:
    storage = cluster.object_storage(f"state/{name}")
    if storage is None:
        pytest.skip("needs object storage that pods reach (the local cluster's)")
    body = example("examples/streaming/cluster.yaml", cluster.data_dir, cluster.image, **spec)
    body["metadata"]["name"] = name
    body["spec"]["application"]["args"] = [
        f"--input={DATA_MOUNT}/{DATA}/input",
        f"--output={DATA_MOUNT}/{DATA}/output",
        "--files=4",
        "--keep-generating=5",
    ]
    body["spec"]["executor"]["instances"] = 1
    body["spec"]["checkpointing"]["storage"] = {"type": "ObjectStore", "url": storage}
    return body


def snapshots(cluster: E2ECluster, job: str) -> list[dict[str, Any]]:
    return cluster.objects(SNAPSHOT_PLURAL, f"finishable.dev/job={job}", SNAPSHOT_API)


def reasons(cluster: E2ECluster, job: str) -> list[str]:
    return [str(event.get("reason")) for event in cluster.events(job)]


def checkpoint_id(cluster: E2ECluster, job: str) -> int:
    return int((cluster.status(job).get("lastCheckpoint") or {}).get("id", -1))


def a_checkpoint_after_now(cluster: E2ECluster, job: str, what: str) -> None:
    before = checkpoint_id(cluster, job)
    wait_for(
        lambda: checkpoint_id(cluster, job) > before,
        f"a checkpoint of {job} {what}",
        START,
        on_fail=lambda: cluster.logs(job),
    )


def test_periodic_savepoints_a_restore_by_name_a_last_state_and_a_stateless_upgrade(
    cluster: E2ECluster,
) -> None:
    # Periodic savepoints, each a FinishableSparkSnapshot, the history trimmed to the newest 2.
    savepoints = {"interval": "15s", "history": {"maxCount": HISTORY}}
    response = cluster.apply(manifest(cluster, ORIGIN, savepoints=savepoints))
    assert response.status == 201, response.body
    cluster.wait_phase(ORIGIN, "Running", START)
    wait_for(
        lambda: "SavepointHistoryTrimmed" in reasons(cluster, ORIGIN),
        "a third periodic savepoint, and the oldest trimmed",
        START + 60,
        on_fail=lambda: cluster.logs(ORIGIN),
    )
    cluster.set_state(ORIGIN, "Suspended")
    stopped = cluster.wait_phase(ORIGIN, "Suspended", STOP)
    before_stop = committed(cluster.data_dir / DATA / "output")
    location = stopped["savepoint"]["location"]
    assert location.startswith("s3://"), location

    def trimmed() -> list[dict[str, Any]] | None:
        kept = snapshots(cluster, ORIGIN)
        stop_kept = any(s["status"]["location"] == location for s in kept)
        return kept if stop_kept and len(kept) == HISTORY else None

    kept = wait_for(
        trimmed,
        f"the stop's snapshot and the newest periodic one kept ({HISTORY} in all)",
        60,
        on_fail=lambda: str([s["status"] for s in snapshots(cluster, ORIGIN)]),
    )
    by_trigger = {s["status"]["trigger"]: s for s in kept}
    assert sorted(by_trigger) == ["periodic", "stop"], [s["status"] for s in kept]
    stop = by_trigger["stop"]
    assert stop["status"]["location"] == location and stop["status"]["state"] == "Completed"

    # A second job restored by the snapshot's name, into the same sink: it goes on from the
    # savepoint's batch (the sink has published nothing after it).
    restore = {"snapshotRef": stop["metadata"]["name"]}
    follower = manifest(cluster, FOLLOWER, upgradeMode="last-state", restoreFrom=restore)
    response = cluster.apply(follower)
    assert response.status == 201, response.body
    running = cluster.wait_phase(FOLLOWER, "Running", START)
    assert running["restoreFrom"] == location and running["attempt"] == 1
    a_checkpoint_after_now(cluster, FOLLOWER, "after its restore")

    # A last-state upgrade: the check passes, then the run's next attempt replaces the driver
    # and resumes from the newest checkpoint; nothing is stopped with a savepoint.
    args = [*follower["spec"]["application"]["args"], "--files-per-batch=3"]
    cluster.patch_spec(FOLLOWER, {"application": {"args": args}})
    upgraded = wait_for(
        lambda: (
            (s := cluster.status(FOLLOWER)).get("attempt") == 2 and s["phase"] == "Running" and s
        ),
        "the upgraded follower running as attempt 2",
        STOP + START,
        on_fail=lambda: cluster.logs(FOLLOWER),
    )
    assert (upgraded["run"], upgraded["restarts"]) == (1, 0), "the same run, no crash"
    assert upgraded["restoreFrom"] == location, "the run's restore point is unchanged"
    assert "UpgradeCheckPassed" in reasons(cluster, FOLLOWER)
    assert snapshots(cluster, FOLLOWER) == [], "a last-state upgrade takes no savepoint"
    a_checkpoint_after_now(cluster, FOLLOWER, "after the upgrade")

    # A stateless upgrade, into a sink of its own: not checked, no savepoint; the old driver
    # goes and run 2 starts from nothing.
    fresh_output = f"{DATA_MOUNT}/{DATA}/fresh"
    fresh_args = [
        *(arg for arg in args if not arg.startswith("--output=")),
        f"--output={fresh_output}",
    ]
    cluster.patch_spec(FOLLOWER, {"upgradeMode": "stateless", "application": {"args": fresh_args}})
    fresh = wait_for(
        lambda: (s := cluster.status(FOLLOWER)).get("run") == 2 and s["phase"] == "Running" and s,
        "the follower's run 2 running",
        START,
        on_fail=lambda: cluster.logs(FOLLOWER),
    )
    assert (fresh["attempt"], fresh.get("restarts", 0), fresh.get("restoreFrom", "")) == (3, 0, "")
    assert reasons(cluster, FOLLOWER).count("UpgradeCheckPassed") == 1, "stateless is not checked"
    assert snapshots(cluster, FOLLOWER) == [], "a stateless upgrade takes no savepoint"
    a_checkpoint_after_now(cluster, FOLLOWER, "in run 2")

    read_before_drain = cluster.status(FOLLOWER)["coordinator"]["splitsFinished"]
    cluster.set_state(FOLLOWER, "Finished")
    cluster.wait_phase(FOLLOWER, "Finished", STOP)
    # Run 1's sink (both jobs' until the stateless upgrade): what the origin published is kept,
    # and every window up to the newest is exact across the restore and the last-state upgrade.
    output = committed(cluster.data_dir / DATA / "output")
    assert {key: output.get(key) for key in before_stop} == before_stop
    assert_closed_windows_exact(output, cluster.data_dir / DATA / "input")
    # Run 2's sink: the counts of the first n files, all counted again by run 2 from nothing.
    fresh_counts = committed(cluster.data_dir / DATA / "fresh")
    assert_prefix_of_input(fresh_counts, cluster.data_dir / DATA / "input", read_before_drain)

    cluster.delete(FOLLOWER)
    cluster.delete(ORIGIN)
