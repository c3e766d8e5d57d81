"""One job's loop at the end of its time to live, in process against the API emulator over HTTP:
the deletion is conditional on the version it was decided on, and it does not wait for a
snapshot that cannot be recorded (no FinishableSparkSnapshot CRD)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from finishable.api.crd import build_crd
from finishable.api.models import Phase, dump
from finishable.api.status import FinishableSparkJobStatus, SavepointStatus
from finishable.api.validation import parse_spec
from finishable.controller.apicalls import Kube
from finishable.controller.job.observe import DriverPod
from finishable.controller.job.reconcile import Controller, JobLoop
from finishable.controller.metrics import Metrics
from finishable.kube.api import KubeApi
from finishable.lifecycle.decisions import Event, Observation
from finishable.lifecycle.phases import next_status
from finishable.lifecycle.ttl import TimeToLive, expiry, settle, time_to_live
from testcluster.apiserver.emulator import EmulatorServer
from tests.conftest import TOKEN
from tests.controller.cluster import MERGE, Cluster

pytestmark = pytest.mark.quick

NAMESPACE = "expiring"
STREAMING = {"application": {"file": "local:///app/job.py"}}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """The job CRD alone, as on a cluster where the snapshot CRD was never applied (helm does
    not add a CRD on an upgrade)."""
    with EmulatorServer(required_token=TOKEN) as server:
        cluster = Cluster(server.url, TOKEN, NAMESPACE)
        crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        assert cluster.api.request("POST", crds, body=build_crd()).status == 201
        namespace = {"metadata": {"name": NAMESPACE}}
        assert cluster.api.request("POST", "/api/v1/namespaces", body=namespace).status == 201
        yield cluster


class Loop:
    """The operator's loop of one job, its driver long gone."""

    def __init__(self, cluster: Cluster, body: dict[str, Any]) -> None:
        api = KubeApi.for_url(cluster.url, token=TOKEN, namespace=NAMESPACE, user_agent="op")
        self.events: list[Event] = []
        controller = Controller(Kube(api), Metrics(CollectorRegistry()))
        self.loop = JobLoop(controller, copy.deepcopy(body), self.observe, self.events.append)

    def observe(self) -> tuple[list[DriverPod], str | None]:
        return [], None

    def reasons(self) -> list[str]:
        return [event.reason for event in self.events]


def finished(
    cluster: Cluster, name: str, savepoint: SavepointStatus | None = None, **spec: Any
) -> dict[str, Any]:
    """A job Finished an hour ago, as the loop reads it from kopf's body: its status as the
    phase machine and the time to live settled it then, so that a step now changes nothing."""
    body = cluster.create_job(name, {**STREAMING, **spec})
    since = datetime.now(UTC) - timedelta(hours=1)
    ended = FinishableSparkJobStatus(
        phase=Phase.FINISHED, phase_since=since, run=1, attempt=1, savepoint=savepoint
    )
    then = Observation(now=since, generation=1)
    decision = next_status(ended, parse_spec(body["spec"]), then)
    found = expiry(time_to_live(body["spec"]), TimeToLive(), decision.status, since)
    status = {"status": dump(settle(decision, ended, found, body["spec"]).status)}
    path = cluster.job_path(name, "status")
    stored = cluster.api.request("PATCH", path, body=status, content_type=MERGE)
    assert stored.status == 200, stored.body
    return stored.body


async def test_an_edit_just_before_the_deletion_is_decided_on_instead_of_overtaken(
    cluster: Cluster,
) -> None:
    body = finished(cluster, "raced", ttlAfterFinished="30m")
    since = datetime.fromisoformat(body["status"]["phaseSince"])
    operator = Loop(cluster, body)
    cluster.edit("raced", ttlAfterFinished="2h")  # after the loop read the job
    assert await operator.loop.step() == 0.0, "refused on the old version: decide again"
    assert cluster.job("raced") is not None
    assert "TTLExpired" in operator.reasons(), "it was told, and tried"
    operator.loop.body = cluster.job("raced") or {}  # what kopf's watch then brings
    requeue = await operator.loop.step()
    assert cluster.job("raced") is not None, "the longer time to live applies"
    assert requeue is not None and requeue > 0
    status = cluster.status("raced")
    assert datetime.fromisoformat(status["expiresAt"]) == since + timedelta(hours=2)
    assert operator.reasons()[-1] == "TTLScheduled"


async def test_without_the_snapshot_crd_an_expired_job_is_deleted_all_the_same(
    cluster: Cluster,
) -> None:
    """Its savepoint cannot be recorded as a snapshot: the deletion does not wait for one."""
    savepoint = SavepointStatus(location=f"configmap://{NAMESPACE}/unrecorded-snapshots.sp-1.blob")
    operator = Loop(cluster, finished(cluster, "unrecorded", savepoint, ttlAfterFinished="10m"))
    assert await operator.loop.step() is None
    assert cluster.job("unrecorded") is None, "no finalizer here: gone at once"
    assert operator.reasons() == ["TTLExpired"]
