"""Node drains are planned, not failures (docs/operator.md, *Node drains and evictions*): on the
cluster's real API server, whose eviction API and disruption controller enforce the budgets.

A streaming driver evicted, then deleted by hand (and, with several nodes, drained off its node)
takes a savepoint on its way out; the next attempt starts from it at once, the restart budget is
untouched (one restart allowed: a crash counted each time would have failed the job), one
savepoint is recorded per departure; the operator's pod deleted mid-stop is replaced and its
successor completes the stop; and the drained output is the ground truth. A running Batch
job's shuffle pods cannot be evicted: a drain waits for the job, whose end releases the budget.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from e2e.clickcounts import assert_prefix_of_input, committed
from finishable.api.snapshot import SNAPSHOT_PLURAL
from finishable.controller.apicalls import MERGE_PATCH
from finishable.controller.snapshot.objects import SNAPSHOT_API_VERSION as SNAPSHOT_API
from finishable.kube.api import KubeResponse
from testcluster.client import E2ECluster, batch_example, streaming_example, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.full]

NAME = "evicted"
START = 240.0  # a driver pod to Running: Spark's start-up on a busy machine
MOVE = 300.0  # a savepoint, then the next driver to Running
STOP = 300.0


def evict(cluster: E2ECluster, pod: str) -> KubeResponse:
    """``kubectl drain``'s call for one pod: the eviction API, which honours the budgets."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": cluster.namespace},
    }
    path = cluster.api.path("pods", pod, subresource="eviction")
    response = cluster.api.request("POST", path, body=body)
    if response.status == 404 and cluster.pod(pod) is not None:
        pytest.skip("this API server serves no eviction API (the emulator): run on a real one")
    return response


def delete(cluster: E2ECluster, pod: str) -> KubeResponse:
    """``kubectl delete pod``."""
    return cluster.api.request("DELETE", cluster.api.path("pods", pod))


def cordon(cluster: E2ECluster, node: str, *, unschedulable: bool = True) -> None:
    body = {"spec": {"unschedulable": unschedulable}}
    path = f"/api/v1/nodes/{node}"
    assert cluster.api.request("PATCH", path, body=body, content_type=MERGE_PATCH).status == 200


def drain(cluster: E2ECluster, pod: str) -> KubeResponse:
    """``kubectl drain`` of the pod's node, for this one pod: cordon it, then evict."""
    node = (cluster.pod(pod) or {}).get("spec", {}).get("nodeName")
    assert node, f"{pod} runs on no node"
    cordon(cluster, node)
    return evict(cluster, pod)


def ready_nodes(cluster: E2ECluster) -> list[str]:
    nodes = cluster.api.request("GET", "/api/v1/nodes").body.get("items") or []
    return [
        n["metadata"]["name"]
        for n in nodes
        if not n.get("spec", {}).get("unschedulable")
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in n.get("status", {}).get("conditions") or []
        )
    ]


def operator_pods(cluster: E2ECluster) -> list[str]:
    """The API paths of the operator's pods (the chart's Deployment, wherever it is installed)."""
    selector = "app.kubernetes.io/name=finishable-spark-operator"
    found = cluster.api.request("GET", "/api/v1/pods", query={"labelSelector": selector})
    return [
        f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}"
        for pod in found.body.get("items") or []
        if "app.kubernetes.io/component" not in pod["metadata"].get("labels", {})
        and not pod["metadata"].get("deletionTimestamp")
    ]


def checkpoint_id(cluster: E2ECluster) -> int:
    return int((cluster.status(NAME).get("lastCheckpoint") or {}).get("id", -1))


def test_a_driver_asked_to_leave_moves_with_its_savepoint_and_costs_no_restart(
    cluster: E2ECluster,
) -> None:
    manifest = streaming_example(
        cluster.data_dir, cluster.image, NAME, ["--files=4", "--keep-generating=5"]
    )
    manifest["spec"]["recovery"]["maxAttempts"] = 1
    assert cluster.apply(manifest).status == 201
    cluster.wait_phase(NAME, "Running", START)
    wait_for(lambda: checkpoint_id(cluster) >= 1, "a checkpoint", START)

    moves: list[tuple[Any, str]] = [(evict, "Evicted"), (delete, "PodDeleted")]
    if len(ready_nodes(cluster)) > 1:  # a drained node leaves others to run the next driver
        moves.append((drain, "NodeDrain"))
    measured: dict[str, float] = {}
    cordoned: list[str] = []
    try:
        for attempt, (leave, reason) in enumerate(moves, start=1):
            pod = f"{NAME}-driver-{attempt}"
            node = (cluster.pod(pod) or {}).get("spec", {}).get("nodeName", "")
            asked = time.monotonic()
            response = leave(cluster, pod)
            assert response.status in (200, 201), response.body
            if leave is drain:
                cordoned.append(node)
            moved = wait_for(
                lambda a=attempt: (
                    (s := cluster.status(NAME)).get("attempt") == a + 1
                    and s.get("phase") == "Running"
                    and s
                ),
                f"driver attempt {attempt + 1} running after {reason}",
                MOVE,
                on_fail=lambda: cluster.logs(NAME),
            )
            measured[reason] = round(time.monotonic() - asked, 1)
            departure = moved["departure"]
            assert (departure["reason"], departure["attempt"]) == (reason, attempt), departure
            assert departure["node"] == node
            assert departure["savepoint"], f"{reason}: no savepoint on the way out: {moved}"
            assert moved["restoreFrom"] == departure["savepoint"]
            assert (moved["restarts"], moved["departures"]) == (0, attempt)
            assert moved["restartsLeft"] == 1, "the restart budget is untouched"
            if leave is drain:
                assert (cluster.pod(f"{NAME}-driver-{attempt + 1}") or {})["spec"][
                    "nodeName"
                ] != node, "the next driver runs on another node"
            before = checkpoint_id(cluster)
            wait_for(lambda b=before: checkpoint_id(cluster) > b, "a checkpoint after it", START)
    finally:
        for node in cordoned:
            cordon(cluster, node, unschedulable=False)
    (cluster.data_dir / f"{NAME}-relocations.json").write_text(json.dumps(measured) + "\n")

    reasons = [e.get("reason") for e in cluster.events(NAME)]
    assert reasons.count("DriverLeaving") == len(moves)
    snapshots = cluster.objects(SNAPSHOT_PLURAL, f"finishable.dev/job={NAME}", SNAPSHOT_API)
    triggers = [s["status"]["trigger"] for s in snapshots]
    assert triggers.count("departure") == len(moves), "one savepoint per departure"

    # The operator's pod deleted during a stop with savepoint: its successor finishes the stop
    # (the status and the driver's report are the whole state), and the job resumes from it.
    cluster.set_state(NAME, "Suspended")
    cluster.wait_phase(NAME, "Savepointing", 60)
    operators = operator_pods(cluster)
    assert operators, "the operator's pods"
    for path in operators:
        assert cluster.api.request("DELETE", path).status == 200
    suspended = cluster.wait_phase(NAME, "Suspended", STOP)
    assert suspended["restarts"] == 0 and suspended["savepoint"]["location"]
    assert not set(operator_pods(cluster)) & set(operators), "a new operator pod did it"
    cluster.set_state(NAME, "Running")
    resumed = cluster.wait_phase(NAME, "Running", START)
    assert resumed["restoreFrom"] == suspended["savepoint"]["location"]
    before = checkpoint_id(cluster)
    wait_for(lambda: checkpoint_id(cluster) > before, "a checkpoint after the resume", START)

    read_before_drain = cluster.status(NAME)["coordinator"]["splitsFinished"]
    cluster.set_state(NAME, "Finished")
    finished = cluster.wait_phase(NAME, "Finished", STOP)
    assert finished["restarts"] == 0
    output = committed(cluster.data_dir / NAME / "output")
    assert_prefix_of_input(output, cluster.data_dir / NAME / "input", read_before_drain)


def test_a_drain_waits_for_a_running_batch_job_s_shuffle_pods(cluster: E2ECluster) -> None:
    name = "undrained"
    manifest = batch_example(cluster.data_dir, cluster.image, name, 40)
    assert cluster.apply(manifest).status == 201
    budget_path = cluster.api.path(
        "poddisruptionbudgets", f"{name}-shuffle", api_version="policy/v1"
    )
    budget = wait_for(
        lambda: (r := cluster.api.request("GET", budget_path)).status == 200 and r.body,
        "the shuffle pods' disruption budget",
        60,
    )
    assert budget["spec"]["maxUnavailable"] == 0
    selector = f"finishable.dev/job={name},finishable.dev/component=shuffle"

    def running() -> list[str] | None:
        pods = cluster.objects("pods", selector)
        up = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return [p["metadata"]["name"] for p in up] if up and len(up) == len(pods) else None

    # A pending pod is not protected by a budget (the eviction API lets it go: nothing of it
    # runs yet); a running one is.
    pods = wait_for(running, "the shuffle pods running", START)
    for pod in pods:
        refused = evict(cluster, pod)
        assert refused.status == 429, f"{pod}: {refused.status} {refused.body}"
        assert "disruption budget" in json.dumps(refused.body), refused.body
    status = cluster.status(name)
    assert status.get("phase") in ("Submitted", "Running"), status
    cluster.wait_phase(name, "Finished", 600.0)
    wait_for(
        lambda: cluster.api.request("GET", budget_path).status == 404,
        "the budget released with the job's end",
        60,
    )
