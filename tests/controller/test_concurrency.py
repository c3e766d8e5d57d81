"""Two writers of one job's status (two operators started without peering): no lost update.

Each loop decides on the resourceVersion it read and writes conditionally; the one that lost
the race reads the job again instead of acting on what it decided, against a real HTTP API.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from finishable.api.control import DriverReport, DriverState
from finishable.controller.kube import Kube
from finishable.controller.metrics import Metrics
from finishable.controller.observe import DriverPod
from finishable.controller.reconcile import Controller, JobLoop
from finishable.kube.api import KubeApi
from finishable.lifecycle.decisions import Event, PodPhase
from testcluster.apiserver.emulator import EmulatorServer
from tests.conftest import TOKEN
from tests.controller.cluster import Cluster, install

pytestmark = pytest.mark.quick

NAMESPACE = "racing"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with EmulatorServer(required_token=TOKEN) as server:
        cluster = Cluster(server.url, TOKEN, NAMESPACE)
        install(cluster.api, [NAMESPACE])
        yield cluster


class Operator:
    """One operator's loop for one job, observing what the test says the driver does."""

    def __init__(self, cluster: Cluster, body: dict[str, Any]) -> None:
        api = KubeApi.for_url(cluster.url, token=TOKEN, namespace=NAMESPACE, user_agent="op")
        self.controller = Controller(Kube(api), Metrics(CollectorRegistry()))
        self.pods: list[DriverPod] = []
        self.report: str | None = None
        self.events: list[Event] = []
        self.loop = JobLoop(self.controller, copy.deepcopy(body), self.observe, self.events.append)

    def observe(self) -> tuple[list[DriverPod], str | None]:
        return self.pods, self.report

    def sees_driver_running(self, attempt: int) -> None:
        name = f"{self.loop.job.name}-driver-{attempt}"
        self.pods = [DriverPod(name, attempt, PodPhase.RUNNING)]
        report = DriverReport(attempt=attempt, state=DriverState.RUNNING, message="running")
        self.report = report.model_dump_json(by_alias=True)


def driver_pods(cluster: Cluster, job: str) -> list[str]:
    response = cluster.api.request(
        "GET",
        cluster.api.path("pods", namespace=NAMESPACE),
        query={"labelSelector": f"finishable.dev/job={job},finishable.dev/component=driver"},
    )
    return sorted(pod["metadata"]["name"] for pod in response.body["items"])


async def test_a_loop_deciding_on_an_old_version_re_reads_instead_of_overwriting(
    cluster: Cluster,
) -> None:
    body = cluster.create_job("racing", {"application": {"file": "local:///app/job.py"}})
    first, second = Operator(cluster, body), Operator(cluster, body)

    await first.loop.step()  # Pending -> Submitted: attempt 1's driver pod is created
    first.sees_driver_running(1)
    await first.loop.step()  # -> Running
    assert cluster.status("racing")["phase"] == "Running"

    # The second operator still holds the job as created (Pending): its decision would submit
    # attempt 1 again and put the phase back to Submitted. Its write is refused instead.
    requeue = await second.loop.step()
    assert requeue == 0.0, "the loop that lost the race asks to decide again at once"
    status = cluster.status("racing")
    assert (status["phase"], status["attempt"]) == ("Running", 1), "no lost update"
    assert second.events == [], "nothing was announced for a decision never stored"

    second.sees_driver_running(1)
    await second.loop.step()  # decides again on what the first one stored: nothing to do
    status = cluster.status("racing")
    assert (status["phase"], status["attempt"]) == ("Running", 1)
    assert driver_pods(cluster, "racing") == ["racing-driver-1"], "one driver, acted on once"


async def test_a_users_edit_between_read_and_write_is_decided_on_not_overwritten(
    cluster: Cluster,
) -> None:
    body = cluster.create_job("edited", {"application": {"file": "local:///app/job.py"}})
    operator = Operator(cluster, body)
    await operator.loop.step()
    operator.sees_driver_running(1)
    cluster.edit("edited", savepointTriggerNonce=1)  # bumps the resourceVersion under the loop
    assert await operator.loop.step() == 0.0
    assert cluster.status("edited")["phase"] == "Submitted", "the stale decision was not stored"
    await operator.loop.step()
    assert cluster.status("edited")["phase"] == "Running"
