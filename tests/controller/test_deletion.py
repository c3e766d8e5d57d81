"""What deleting a job removes: the retention policy's decisions, without I/O (which state
ConfigMaps outlive their job), and the order against an API server (a stopping driver keeps its
Role until it is gone)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from finishable.api.models import RetainOnDelete
from finishable.controller import naming
from finishable.controller.apicalls import Kube
from finishable.controller.job.deletion import (
    STOP_MARGIN,
    PodsStopping,
    dispose_state,
    remove_children,
    retain_on_delete,
    still_stopping,
)
from finishable.kube.api import KubeApi
from finishable.kube.objects import LABEL_COMPONENT, LABEL_JOB, JobRef, job_label_value
from testcluster.apiserver.emulator import EmulatorServer
from tests.conftest import TOKEN

pytestmark = pytest.mark.quick


def configmap(name: str, object_name: str | None) -> dict[str, Any]:
    annotations = {"finishable.dev/object-name": object_name} if object_name else {}
    return {"metadata": {"name": name, "annotations": annotations}}


STATE = [
    configmap("etl-snapshots.sp-000000000002.blob", "snapshots/sp-000000000002.blob"),
    configmap("etl-snapshots.sp-000000000002.blob-part-0001", "snapshots/sp-000000000002.blob"),
    configmap("etl-snapshots.chk-000000000009.meta", "snapshots/chk-000000000009.meta"),
    configmap("etl-pending-offsets", "pending-offsets"),
    configmap("etl-events.uid-r1.seg-000000000000", "events/uid-r1/seg-000000000000"),
    configmap("etl-fence.uid.claims.r000001-a000002", "fence/uid/claims/r000001-a000002"),
    configmap("etl-by-hand", None),
]


def test_the_default_keeps_savepoints_and_their_parts_only() -> None:
    disposal = dispose_state(STATE, RetainOnDelete.SAVEPOINTS)
    assert disposal.keep == [
        "etl-snapshots.sp-000000000002.blob",
        "etl-snapshots.sp-000000000002.blob-part-0001",
    ]
    assert len(disposal.delete) == len(STATE) - 2


def test_nothing_and_everything() -> None:
    assert dispose_state(STATE, RetainOnDelete.NOTHING).keep == []
    assert dispose_state(STATE, RetainOnDelete.EVERYTHING).delete == []


def test_a_spec_that_says_nothing_or_nonsense_keeps_the_savepoints() -> None:
    assert retain_on_delete({}) is RetainOnDelete.SAVEPOINTS
    assert retain_on_delete({"checkpointing": {"retainOnDelete": "Sometimes"}}) is (
        RetainOnDelete.SAVEPOINTS
    )
    assert retain_on_delete({"checkpointing": {"retainOnDelete": "Nothing"}}) is (
        RetainOnDelete.NOTHING
    )


def pod(name: str, marked: datetime | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if marked is not None:
        meta["deletionTimestamp"] = marked.isoformat().replace("+00:00", "Z")
    return {"metadata": meta}


def test_terminating_pods_are_waited_for_until_a_margin_past_their_grace_period() -> None:
    now = datetime(2026, 11, 26, 12, tzinfo=UTC)
    pods = [
        pod("not-yet-asked", None),
        pod("in-its-grace-period", now + timedelta(seconds=20)),
        pod("just-past-it", now - STOP_MARGIN + timedelta(seconds=1)),
        pod("stuck-on-a-lost-node", now - STOP_MARGIN - timedelta(seconds=1)),
    ]
    assert still_stopping(pods, now) == ["not-yet-asked", "in-its-grace-period", "just-past-it"]


def test_a_deleted_jobs_role_outlives_its_stopping_driver(k8s_server: EmulatorServer) -> None:
    """The driver pod, bound to a node, terminates gracefully: until its kubelet has stopped it,
    the deletion stops there (Spark in the driver still deletes its executors with the Role);
    then every child goes."""
    namespace, name = "deletion-order", "etl"
    api = KubeApi.for_url(k8s_server.url, token=TOKEN, namespace=namespace)
    labels = {LABEL_JOB: job_label_value(name), LABEL_COMPONENT: naming.DRIVER}
    driver = {
        "metadata": {"name": f"{name}-driver-1", "labels": labels},
        "spec": {"containers": [{"name": "driver", "image": "i"}]},
    }
    assert api.request("POST", api.path("pods"), body=driver).status == 201
    binding = {"target": {"kind": "Node", "name": "n"}, "metadata": {"name": f"{name}-driver-1"}}
    bind = api.path("pods", f"{name}-driver-1", subresource="binding")
    assert api.request("POST", bind, body=binding).status == 201
    role = {"metadata": {"name": naming.rbac_name(name)}, "rules": []}
    roles = api.path("roles", namespace=namespace, api_version="rbac.authorization.k8s.io/v1")
    assert api.request("POST", roles, body=role).status == 201
    kube = Kube(api)
    job = JobRef(name=name, namespace=namespace, uid="u")

    with pytest.raises(PodsStopping, match=f"{name}-driver-1"):
        asyncio.run(remove_children(kube, job, retain=RetainOnDelete.NOTHING))
    role_path = f"{roles}/{naming.rbac_name(name)}"
    assert api.request("GET", role_path).status == 200, "the stopping driver keeps its Role"
    with pytest.raises(PodsStopping):  # retried: asked once, still waited for
        asyncio.run(remove_children(kube, job, retain=RetainOnDelete.NOTHING))

    stopped = {"gracePeriodSeconds": 0}  # what its kubelet does once the process is gone
    assert api.request("DELETE", api.path("pods", f"{name}-driver-1"), body=stopped).status == 200
    asyncio.run(remove_children(kube, job, retain=RetainOnDelete.NOTHING))
    assert api.request("GET", role_path).status == 404
    api.close()
