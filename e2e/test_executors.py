"""Executor faults on a cluster: Spark's own executor pods crash or vanish while a Batch job's
stage runs, and the driver pod is deleted under them; the output stays exactly the ground truth.

* One executor's JVM is SIGKILLed mid-stage: Spark's Kubernetes backend sees the pod fail,
  creates a replacement, and re-runs the lost tasks; the driver's commit coordinator lets one
  attempt of each task commit its partition.
* Every executor pod is deleted at once: Spark creates new ones and the job goes on.
* The driver pod is deleted: its executor pods go with it (their owner reference), the operator
  starts the next attempt, and that one re-runs only what no finished task covers.
"""

from __future__ import annotations

import sys

import pytest

from e2e.test_batch import FILES, ROWS, RUN, START, published
from testcluster.client import ROOT, E2ECluster, batch_example, wait_for

sys.path.insert(0, str(ROOT / "examples" / "batch"))
from orders import ground_truth

pytestmark = [pytest.mark.e2e, pytest.mark.full]

NAME = "executor-faults"


def names(cluster: E2ECluster, attempt: int | None = None) -> set[str]:
    return {pod["metadata"]["name"] for pod in cluster.executor_pods(NAME, attempt)}


def running(cluster: E2ECluster, attempt: int) -> set[str]:
    return cluster.running_executors(NAME, attempt)


def splits_finished(cluster: E2ECluster) -> int:
    return int(cluster.status(NAME).get("coordinator", {}).get("splitsFinished", 0))


def test_executor_crashes_and_a_deleted_driver_pod_keep_the_output_exact(
    cluster: E2ECluster,
) -> None:
    manifest = batch_example(cluster.data_dir, cluster.image, NAME, FILES)
    assert cluster.apply(manifest).status == 201
    cluster.wait_phase(NAME, "Running", START)
    first = running(cluster, 1)
    assert len(first) == 2, first
    wait_for(lambda: splits_finished(cluster) >= 4, "some input read", RUN)

    # One executor crashes mid-stage: Spark replaces it.
    killed = sorted(first)[0]
    cluster.kill_executor(killed)
    replaced = wait_for(
        lambda: (now := running(cluster, 1)) - first and len(now) == 2 and now,
        "Spark to replace the killed executor",
        START,
        on_fail=lambda: cluster.logs(NAME),
    )
    assert killed not in replaced

    # Every executor pod is deleted at once: Spark creates new ones.
    for pod in replaced:
        response = cluster.api.request("DELETE", cluster.api.path("pods", pod))
        assert response.status in (200, 202), response.body
    wait_for(
        lambda: len(running(cluster, 1) - replaced) == 2,
        "Spark to create new executors",
        START,
        on_fail=lambda: cluster.logs(NAME),
    )
    assert cluster.status(NAME)["attempt"] == 1, "Spark recovered without a new driver"

    # The driver pod is deleted: its executors go with it, the next attempt takes over.
    assert cluster.status(NAME)["phase"] == "Running"
    driver = f"{NAME}-driver-1"
    assert cluster.api.request("DELETE", cluster.api.path("pods", driver)).status in (200, 202)
    wait_for(
        lambda: not names(cluster, 1),
        "the deleted driver's executor pods to go",
        30,
        on_fail=lambda: str(names(cluster, 1)),
    )
    cluster.wait_phase(NAME, "Running", START)
    second = running(cluster, 2)
    assert len(second) == 2, second
    status = cluster.wait_phase(NAME, "Finished", RUN)

    assert published(cluster, f"{NAME}/totals") == ground_truth(FILES, ROWS)
    # A driver pod deleted by someone else leaves (SIGTERM, docs/operator.md "Node drains and
    # evictions"): a departure, not a restart charged to the budget.
    assert (status["attempt"], status["restarts"], status["departures"]) == (2, 0, 1)
    assert status["departure"]["reason"] == "PodDeleted", status["departure"]
    # Spark deleted them as it stopped; a real kubelet lets each end within its grace period
    wait_for(lambda: not names(cluster), "no executor pod to outlive the job", 90)
    cluster.assert_executors_ran_tasks(second)
