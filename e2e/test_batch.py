"""Batch on a cluster: a driver SIGKILLed half way recovers without re-running finished tasks,
and shuffle pods nobody reconnects to are deleted at the retain deadline. The stages run on two
executor pods per attempt, which Spark's Kubernetes backend creates; a lost driver's executors
are gone before the next attempt's start."""

from __future__ import annotations

import sys

import pytest

from finishable.connectors.sinks import TransactionalFiles
from finishable.driver.batch.core import event_log_prefix, logged_runs
from finishable.driver.batch.joblog import TaskFinished, decode_event
from finishable.state.eventlog import read_events
from testcluster.batchlog import durable_at_crash
from testcluster.client import ROOT, E2ECluster, batch_example, wait_for

sys.path.insert(0, str(ROOT / "examples" / "batch"))
from orders import ground_truth

pytestmark = [pytest.mark.e2e, pytest.mark.quick]

FILES = 40  # examples/batch/cluster.yaml
ROWS = 5000  # aggregate.py's default rows per generated file
START = 240.0  # a driver pod to Running: Spark's start-up on a busy machine
RUN = 600.0


def published(cluster: E2ECluster, output: str) -> dict[str, tuple[int, int]]:
    table = TransactionalFiles(str(cluster.data_dir / output), name="totals").read_committed()
    rows = table.to_pylist()
    customers = [row["customer"] for row in rows]
    assert len(customers) == len(set(customers)), "a customer was published twice"
    return {row["customer"]: (row["orders"], row["amount_cents"]) for row in rows}


def events(cluster: E2ECluster, job: str) -> list[tuple[int, object]]:
    backend = cluster.state_backend(job)
    (run,) = logged_runs(backend)
    return [
        (event.seq, typed)
        for event in read_events(backend, prefix=event_log_prefix(run))
        if (typed := decode_event(event.type, event.data)) is not None
    ]


def shuffle_pods(cluster: E2ECluster, job: str) -> dict[str, str]:
    """The job's shuffle pods: name to uid."""
    pods = cluster.objects("pods", f"finishable.dev/job={job},finishable.dev/component=shuffle")
    return {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in pods}


def test_a_driver_killed_half_way_recovers_without_re_running_finished_tasks(
    cluster: E2ECluster,
) -> None:
    name = "paid-totals"
    manifest = batch_example(cluster.data_dir, cluster.image, name, FILES)
    manifest["spec"]["recovery"]["readTaskSize"] = "1Ki"  # many small reader tasks, whatever size
    response = cluster.apply(manifest)
    assert response.status == 201, response.body
    cluster.wait_phase(name, "Running", START)
    assert len(shuffle_pods(cluster, name)) == 2
    first = [pod["metadata"]["name"] for pod in cluster.executor_pods(name, 1)]
    assert len(first) == 2, first
    wait_for(
        lambda: cluster.status(name).get("coordinator", {}).get("splitsFinished", 0) >= FILES // 2,
        "half the input read",
        RUN,
        on_fail=lambda: cluster.logs(name),
    )
    before = shuffle_pods(cluster, name)
    cluster.kill_driver(f"{name}-driver-1")

    cluster.wait_phase(name, "Recovering", 60)
    wait_for(
        lambda: cluster.executor_pods(name, 1) == [],
        "the lost driver's executor pods to go",
        60,
        on_fail=lambda: cluster.logs(name),
    )
    cluster.wait_phase(name, "Running", START)
    second = [pod["metadata"]["name"] for pod in cluster.executor_pods(name, 2)]
    assert len(second) == 2, second
    status = cluster.wait_phase(name, "Finished", RUN)
    cluster.assert_executors_ran_tasks(first)
    cluster.assert_executors_ran_tasks(second)

    assert published(cluster, f"{name}/totals") == ground_truth(FILES, ROWS)
    assert status["restarts"] == 1 and status["attempt"] == 2
    # none replaced while the job ran: those left (a finished job's go) are the same pods
    assert shuffle_pods(cluster, name).items() <= before.items()
    log = events(cluster, name)
    _, finished = durable_at_crash(log)
    assert finished, "the crash came after some tasks had finished"
    redone = {
        (e.stage, e.task) for _, e in log if isinstance(e, TaskFinished) and e.attempt >= 2
    } & finished
    assert redone == set(), f"finished tasks run again: {sorted(redone)}"
    recovery = status["recovery"]
    assert recovery["tasksSkipped"] >= len(finished)
    assert recovery.get("splitsReread", 0) == 0
    # The job is over: its shuffle pods are released.
    wait_for(lambda: shuffle_pods(cluster, name) == {}, "the shuffle pods are deleted", 60)


@pytest.mark.full
def test_shuffle_pods_nobody_reconnects_to_are_deleted_at_the_retain_deadline(
    cluster: E2ECluster,
) -> None:
    """A retain timeout shorter than a driver's start-up: the pods go before anyone returns."""
    name = "short-retain"
    shuffle = {"replicas": 1, "storage": {"size": "1Gi"}, "retainTimeout": "1s"}
    manifest = batch_example(cluster.data_dir, cluster.image, name, FILES, shuffle=shuffle)
    assert cluster.apply(manifest).status == 201
    cluster.wait_phase(name, "Running", START)
    wait_for(
        lambda: cluster.status(name).get("coordinator", {}).get("splitsFinished", 0) >= 4,
        "some input read",
        RUN,
        on_fail=lambda: cluster.logs(name),
    )
    retained = shuffle_pods(cluster, name)
    assert len(retained) == 1
    cluster.kill_driver(f"{name}-driver-1")

    wait_for(
        lambda: "ShuffleReleased" in [e.get("reason") for e in cluster.events(name)],
        "a ShuffleReleased event",
        120,
        on_fail=lambda: cluster.logs(name),
    )
    wait_for(
        lambda: not set(retained.values()) & set(shuffle_pods(cluster, name).values()),
        "the retained shuffle pods are deleted",
        60,
    )
    # The job goes on with fresh shuffle pods, re-running what was lost, and ends right.
    status = cluster.wait_phase(name, "Finished", RUN)
    assert published(cluster, f"{name}/totals") == ground_truth(FILES, ROWS)
    assert status["restarts"] == 1
