"""A warm standby driver on a cluster (``spec.recovery.standby``), on the streaming example: the
standby pod starts its Spark session and its own executor pods while the first driver works,
waits, and takes over in place when that driver's process is SIGKILLed. No new driver pod is
created, the standby's executors run the rest of the job, and after a drain the output is the
exact counts of a prefix of the input: nothing lost, nothing twice.

A streaming job runs until told to stop, so the test waits for the standby to be warm however
long that takes on a busy machine, instead of racing a job's end."""

from __future__ import annotations

import pytest

from e2e.clickcounts import assert_prefix_of_input, committed
from testcluster.client import E2ECluster, example, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.full]

NAME = "warm-clicks"
START = 240.0
STOP = 300.0
READY = "Spark is warm; waiting for the order to take over"


def checkpoint_id(cluster: E2ECluster) -> int:
    return int((cluster.status(NAME).get("lastCheckpoint") or {}).get("id", -1))


def test_a_standby_pod_takes_over_a_killed_driver_with_its_warm_executors(
    cluster: E2ECluster,
) -> None:
    manifest = example("examples/streaming/cluster.yaml", cluster.data_dir, cluster.image)
    manifest["metadata"]["name"] = NAME
    application = manifest["spec"]["application"]
    application["args"] = [a.replace("/clickstream/", f"/{NAME}/") for a in application["args"]]
    manifest["spec"]["recovery"]["standby"] = True
    assert cluster.apply(manifest).status == 201
    cluster.wait_phase(NAME, "Running", START)
    standby = f"{NAME}-standby-2"
    wait_for(
        lambda: READY in cluster.pod_log(standby),
        "the standby of attempt 2 to be warm",
        START * 2,
        on_fail=lambda: cluster.logs(NAME),
    )
    warm = cluster.running_executors(NAME, 2)
    assert len(warm) == 2, f"the standby's own executors: {warm}"
    wait_for(lambda: checkpoint_id(cluster) >= 1, "a checkpoint", START)

    cluster.kill_driver(f"{NAME}-driver-1")
    taken_over = wait_for(
        lambda: (s := cluster.status(NAME)).get("attempt") == 2 and s,
        "the standby to take over as attempt 2",
        60,
        on_fail=lambda: cluster.logs(NAME),
    )
    assert taken_over["restarts"] == 1
    cluster.wait_phase(NAME, "Running", START)
    assert "standby taking over as attempt 2" in cluster.pod_log(standby)
    assert cluster.pod(f"{NAME}-driver-2") is None, "no new driver pod: the standby became it"
    before = checkpoint_id(cluster)
    wait_for(lambda: checkpoint_id(cluster) > before, "a checkpoint of attempt 2", START)
    wait_for(lambda: cluster.pod(f"{NAME}-standby-3"), "a new standby, of attempt 3", START)

    read_before_drain = cluster.status(NAME)["coordinator"]["splitsFinished"]
    cluster.set_state(NAME, "Finished")
    cluster.wait_phase(NAME, "Finished", STOP)
    cluster.assert_executors_ran_tasks(sorted(warm))
    output = committed(cluster.data_dir / NAME / "output")
    assert_prefix_of_input(output, cluster.data_dir / NAME / "input", read_before_drain)
    wait_for(
        lambda: cluster.pod(f"{NAME}-standby-3") is None and not cluster.executor_pods(NAME),
        "the next standby and every executor gone with the finished job",
        120,
    )
