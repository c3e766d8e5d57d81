"""The API side of FinishableSparkSnapshots: record a savepoint as one, read one back.

:mod:`finishable.controller.snapshot.objects` builds the objects (pure); the job's reconcile loop
calls these through the operator's own client (:class:`~finishable.controller.apicalls.Kube`).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from finishable.api.models import API_GROUP, API_VERSION, PLURAL, SavepointTrigger
from finishable.api.savepointspec import SavepointHistorySpec
from finishable.api.snapshot import SNAPSHOT_PLURAL
from finishable.api.status import SavepointStatus
from finishable.controller.apicalls import Kube
from finishable.controller.snapshot import objects as snapshots
from finishable.controller.status import EventPoster
from finishable.kube.api import KubeApiError
from finishable.kube.objects import LABEL_JOB, JobRef, job_label_value
from finishable.lifecycle.decisions import Event

log = logging.getLogger(__name__)


async def record(
    kube: Kube,
    job: JobRef,
    savepoint: SavepointStatus,
    trigger: SavepointTrigger,
    *,
    run: int | None,
    dispose_on_delete: bool = False,
) -> str:
    """Create the snapshot of ``savepoint`` (409: it exists, which is success) and write its
    status unless it has one already (so a retry never overwrites what the first write knew);
    returns its name. :class:`~finishable.state.errors.BackendError` when the API fails."""
    body = snapshots.snapshot_object(
        job, savepoint, trigger, run=run, dispose_on_delete=dispose_on_delete
    )
    name = str(body["metadata"]["name"])
    path = kube.api.path(
        SNAPSHOT_PLURAL, namespace=job.namespace, api_version=snapshots.SNAPSHOT_API_VERSION
    )
    response = await kube.request("POST", path, body=body)
    if response.status == 409:
        existing = await kube.get(
            snapshots.SNAPSHOT_API_VERSION, SNAPSHOT_PLURAL, name, job.namespace
        )
        if existing is None or existing.get("status"):
            return name
    elif response.status not in (200, 201):
        raise KubeApiError(f"cannot create FinishableSparkSnapshot {name}", response)
    else:
        log.info(
            "%s/%s: recorded savepoint %s as FinishableSparkSnapshot %s",
            job.namespace,
            job.name,
            savepoint.location,
            name,
        )
    await kube.patch_status(
        snapshots.SNAPSHOT_API_VERSION, SNAPSHOT_PLURAL, name, job.namespace, body["status"]
    )
    return name


async def restore_location(kube: Kube, namespace: str, ref: str) -> str:
    """The location the snapshot ``ref`` holds;
    :class:`~finishable.controller.snapshot.objects.SnapshotUnusable` when it cannot be started
    from."""
    body = await kube.get(snapshots.SNAPSHOT_API_VERSION, SNAPSHOT_PLURAL, ref, namespace)
    return snapshots.restore_location(ref, body)


async def trim(
    kube: Kube, job: JobRef, history: SavepointHistorySpec, post: EventPoster
) -> list[str]:
    """Delete the snapshots of ``job`` that ``spec.savepoints.history`` lets go
    (:func:`~finishable.controller.snapshot.objects.to_trim`); returns their names. A snapshot with
    ``spec.disposeOnDelete`` takes its files with it (the operator's finalizer)."""
    if history.max_count is None and history.max_age is None:
        return []
    listed = await kube.list(
        SNAPSHOT_PLURAL,
        namespace=job.namespace,
        selector=f"{LABEL_JOB}={job_label_value(job.name)}",
        api_version=snapshots.SNAPSHOT_API_VERSION,
    )
    jobs = await kube.list(
        PLURAL, namespace=job.namespace, selector="", api_version=f"{API_GROUP}/{API_VERSION}"
    )
    names = snapshots.to_trim(job, listed, jobs, history, datetime.now(UTC))
    for name in names:
        await kube.delete(
            SNAPSHOT_PLURAL,
            name,
            namespace=job.namespace,
            api_version=snapshots.SNAPSHOT_API_VERSION,
        )
    if names:
        message = f"deleted {', '.join(names)}, as spec.savepoints.history says"
        log.info("%s/%s: %s", job.namespace, job.name, message)
        post(Event("Normal", "SavepointHistoryTrimmed", message))
    return names
