"""Two writers of one job's status (two operators started without peering): no lost update.

Each loop decides on the resourceVersion it read and writes conditionally; the one that lost
the race reads the job again instead of acting on what it decided, against a real HTTP API.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from finishable.api.control import DriverReport, DriverState
from finishable.controller.apicalls import Kube
from finishable.controller.job.observe import DriverPod
from finishable.controller.job.reconcile import Controller, JobLoop
from finishable.controller.metrics import Metrics
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


class StopFlag:
    """kopf's DaemonStopped as the loop uses it: true once set, awaitable until then."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()


async def test_a_deleted_jobs_loop_leaves_mid_step_and_creates_nothing_more(
    cluster: Cluster,
) -> None:
    """kopf lets a deleted job's loop run on for its cancellation backoff while the deletion
    handler removes the children: a step still creating them then raced the removal (seen as
    a driver pod refused for its ServiceAccount, deleted a moment before). The loop leaves the
    step when the stop flag is set instead of finishing it."""
    body = cluster.create_job("deleted", {"application": {"file": "local:///app/job.py"}})
    operator = Operator(cluster, body)
    entered, release = asyncio.Event(), asyncio.Event()
    perform = operator.loop.perform

    async def slow_perform(*args: Any, **kwargs: Any) -> float | None:
        entered.set()  # the status says Submitted; the children are being created
        await release.wait()
        return await perform(*args, **kwargs)

    operator.loop.perform = slow_perform  # type: ignore[method-assign]
    stopped = StopFlag()
    running = asyncio.ensure_future(operator.loop.run(stopped))
    await asyncio.wait_for(entered.wait(), 60)
    stopped.event.set()  # the job is deleted
    await asyncio.wait_for(running, 60)  # returns without waiting for the step's end
    release.set()
    await asyncio.sleep(0)

    assert cluster.status("deleted")["phase"] == "Submitted"
    assert driver_pods(cluster, "deleted") == [], "no pod created after the stop"
