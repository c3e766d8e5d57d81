"""A loop that steps before its watch shows its own pod writes acts on what it wrote.

A status write wakes the loop at once, usually before the watch brings the driver pod it just
created or deleted. Found on a real kube-apiserver: every driver pod was created twice (the
second create 409) and an upgrade's stop deleted the old driver twice. Here the watch is held
back by hand and the API server counts what the operator asked of it.
"""

from __future__ import annotations

import copy
import json
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from finishable.api.control import DriverState, SavepointStatus
from finishable.controller.apicalls import Kube
from finishable.controller.job.observe import WRITES_UNSEEN_FOR, DriverPod, OwnPodWrites
from finishable.controller.job.reconcile import Controller, JobLoop
from finishable.controller.metrics import Metrics
from finishable.kube.api import KubeApi
from finishable.lifecycle.decisions import PodPhase
from testcluster.apiserver.emulator import CALLS_PATH, EmulatorServer
from tests.conftest import TOKEN
from tests.controller.cluster import Cluster, install

pytestmark = pytest.mark.quick

NAMESPACE = "own-writes"
CLIENT = "lagging-operator"
T0 = datetime(2026, 11, 29, tzinfo=UTC)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with EmulatorServer(required_token=TOKEN) as server:
        cluster = Cluster(server.url, TOKEN, NAMESPACE)
        install(cluster.api, [NAMESPACE])
        yield cluster


def pod_calls(cluster: Cluster, verb: str) -> int:
    """How many times the operator asked the API server to ``verb`` a pod."""
    with urllib.request.urlopen(cluster.url + CALLS_PATH, timeout=10) as response:
        calls = json.loads(response.read())
    return sum(
        call["count"]
        for call in calls
        if (call["client"], call["verb"], call["resource"]) == (CLIENT, verb, "pods")
    )


class LaggingWatch:
    """One operator loop whose watch shows only what the test lets through."""

    def __init__(self, cluster: Cluster, body: dict[str, Any]) -> None:
        api = KubeApi.for_url(cluster.url, token=TOKEN, namespace=NAMESPACE, user_agent=CLIENT)
        controller = Controller(Kube(api), Metrics(CollectorRegistry()))
        self.body = copy.deepcopy(body)
        self.pods: list[DriverPod] = []
        self.loop = JobLoop(controller, self.body, lambda: (self.pods, None), lambda _: None)


async def test_a_driver_pod_is_created_once_though_the_watch_has_not_shown_it(
    cluster: Cluster,
) -> None:
    body = cluster.create_job("created", {"application": {"file": "local:///app/job.py"}})
    operator = LaggingWatch(cluster, body)

    await operator.loop.step()  # Pending -> Submitted: attempt 1's driver pod is created
    assert cluster.status("created")["phase"] == "Submitted"
    for _ in range(3):  # woken by its own status write, the watch still empty
        await operator.loop.step()

    assert pod_calls(cluster, "create") == 1, "the pod it created was not asked for again"
    assert cluster.get("pods", "created-driver-1") is not None
    assert cluster.status("created")["attempt"] == 1


async def test_a_suspended_jobs_driver_is_deleted_once_though_the_watch_still_shows_it(
    cluster: Cluster,
) -> None:
    body = cluster.create_job("stopped", {"application": {"file": "local:///app/job.py"}})
    operator = LaggingWatch(cluster, body)
    await operator.loop.step()
    operator.pods = [DriverPod("stopped-driver-1", 1, PodPhase.RUNNING)]
    cluster.report("stopped", 1, DriverState.RUNNING)
    operator.loop.observe = lambda: (operator.pods, _report(cluster, "stopped"))
    await operator.loop.step()
    assert cluster.status("stopped")["phase"] == "Running"

    cluster.edit("stopped", state="Suspended")
    operator.body["spec"]["state"] = "Suspended"
    operator.body["metadata"]["generation"] = 2
    await operator.loop.step()  # re-reads the job the edit changed under it
    await operator.loop.step()  # -> Stopping: a stop with savepoint is sent
    request = cluster.request_for("stopped", 1)
    saved = SavepointStatus(location="configmap:stopped/sp-1", request_id=request.id)
    cluster.answer("stopped", 1, request, DriverState.SUSPENDED, savepoint=saved)
    deletes_before = pod_calls(cluster, "delete")
    for _ in range(3):  # Suspended: the driver is deleted; the watch still shows it running
        await operator.loop.step()

    assert cluster.status("stopped")["phase"] == "Suspended"
    assert pod_calls(cluster, "delete") - deletes_before == 1, "deleted once, not on every step"
    assert cluster.get("pods", "stopped-driver-1") is None


def _report(cluster: Cluster, job: str) -> str | None:
    report = cluster.channel(job).read_report()
    return None if report is None else report.model_dump_json(by_alias=True)


def test_the_watch_wins_once_it_shows_a_write_or_the_write_is_old() -> None:
    writes = OwnPodWrites()
    created = DriverPod("job-driver-2", 2, PodPhase.PENDING)
    old = DriverPod("job-driver-1", 1, PodPhase.RUNNING)
    writes.create(created, T0)
    writes.delete(old.name, T0)

    # not shown yet: the writes stand in for the watch
    assert writes.overlay([old], T0) == [
        DriverPod("job-driver-1", 1, PodPhase.RUNNING, deleting=True),
        created,
    ]
    # shown: the watch's own view (a created pod already Running, a deleted one gone)
    running = DriverPod("job-driver-2", 2, PodPhase.RUNNING)
    assert writes.overlay([running], T0 + timedelta(seconds=1)) == [running]
    assert writes.created == {} and writes.deleted == {}

    # a write the watch never shows (the pod deleted by someone else first) is not awaited forever
    writes.create(created, T0)
    assert writes.overlay([], T0 + WRITES_UNSEEN_FOR) == [created]
    assert writes.overlay([], T0 + WRITES_UNSEEN_FOR + timedelta(seconds=1)) == []


def test_a_pod_deleted_and_created_again_under_its_name_is_the_new_one() -> None:
    writes = OwnPodWrites()
    writes.delete("job-standby-3", T0)
    fresh = DriverPod("job-standby-3", 3, PodPhase.PENDING, standby=True)
    writes.create(fresh, T0)
    assert writes.overlay([], T0) == [fresh]
