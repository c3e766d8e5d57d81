"""Dispose of a deleted FinishableSparkSnapshot's savepoint (``spec.disposeOnDelete``).

The deletion handler of such snapshots (behind kopf's finalizer) calls :func:`dispose`, which
does what :func:`~finishable.controller.snapshot.disposalplan.decide` says: wait (a
``kopf.TemporaryError``) while a job holds the savepoint, delete its ConfigMaps (meta, then blob,
parts included, through the ConfigMap backend), or run a disposal pod and wait for it, each
outcome told in an Event on the snapshot. Returning lets the snapshot go.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from finishable.api.models import API_GROUP, API_VERSION, PLURAL
from finishable.api.validation import InvalidManifest, parse_spec
from finishable.controller.apicalls import Kube
from finishable.controller.snapshot import disposalplan
from finishable.controller.snapshot import objects as snapshots
from finishable.controller.snapshot.disposalplan import Action, PodOutcome
from finishable.kube.objects import JobRef
from finishable.state.configmap import ConfigMapBackend
from finishable.state.errors import BackendError
from finishable.state.savepointfiles import configmap_files

log = logging.getLogger(__name__)

HELD_SECONDS = 30.0  # a held savepoint is looked at again so often
POD_POLL_SECONDS = 2.0  # a running disposal pod is looked at so often
FAILED_SECONDS = 30.0  # a failed disposal is tried again after this
RETRY_SECONDS = 10.0  # after an API failure
JOB_API_VERSION = f"{API_GROUP}/{API_VERSION}"
DISPOSED = "SavepointDisposed"
KEPT = "SavepointKept"
HELD = "SavepointHeld"
FAILED = "SavepointDisposalFailed"


async def dispose(kube: Kube, body: kopf.Body) -> None:
    """Dispose of the savepoint of the snapshot ``body`` or raise ``kopf.TemporaryError`` to be
    called again; return when the snapshot may go."""
    meta = body.get("metadata") or {}
    name, namespace = str(meta.get("name")), str(meta.get("namespace") or "")
    location = str((body.get("status") or {}).get("location") or "")
    job, _state = snapshots.job_and_state(body)
    try:
        jobs = await kube.list(
            PLURAL, namespace=namespace, selector="", api_version=JOB_API_VERSION
        )
        decision = disposalplan.decide(
            snapshot=name, namespace=namespace, location=location, job=job, jobs=jobs
        )
        if decision.action is Action.WAIT:
            kopf.warn(body, reason=HELD, message=decision.message)
            raise kopf.TemporaryError(decision.message, delay=HELD_SECONDS)
        if decision.action is Action.KEEP:
            kopf.warn(body, reason=KEPT, message=decision.message)
            log.warning("%s/%s: %s", namespace, name, decision.message)
            return
        if decision.action is Action.NOTHING:
            log.info("%s/%s: %s", namespace, name, decision.message)
            return
        if decision.action is Action.CONFIGMAPS:
            await _delete_configmaps(kube, location, str(job))
        else:
            job_body = next(j for j in jobs if (j.get("metadata") or {}).get("name") == job)
            await _run_pod(kube, body, job_body, location)
    except BackendError as error:
        raise kopf.TemporaryError(f"{error}; retrying", delay=RETRY_SECONDS) from None
    message = f"disposed of the savepoint at {location}"
    kopf.info(body, reason=DISPOSED, message=message)
    log.info("%s/%s: %s", namespace, name, message)


async def _delete_configmaps(kube: Kube, location: str, job: str) -> None:
    """The meta object, then the blob object, parts included (the backend's own deletion)."""
    files = configmap_files(location, job)
    backend = ConfigMapBackend(kube.api, job, namespace=files.root)
    await kube.run(backend.delete, files.meta)
    await kube.run(backend.delete, files.blob)


async def _run_pod(
    kube: Kube, snapshot: kopf.Body, job_body: Mapping[str, Any], location: str
) -> None:
    """Create the disposal pod unless it exists; return once it succeeded (and is deleted)."""
    meta = job_body["metadata"]
    job = JobRef(name=str(meta["name"]), namespace=str(meta["namespace"]), uid=str(meta["uid"]))
    name = str(snapshot["metadata"]["name"])
    try:
        spec = parse_spec(job_body.get("spec") or {})
    except InvalidManifest as error:
        message = f"cannot build the disposal pod of {location}: the job's spec is invalid: {error}"
        kopf.warn(snapshot, reason=FAILED, message=message)
        raise kopf.TemporaryError(message, delay=FAILED_SECONDS) from None
    pod = disposalplan.disposal_pod(job, spec, name, location)
    pod_name = str(pod["metadata"]["name"])
    existing = await kube.get("v1", "pods", pod_name, job.namespace)
    if existing is None:
        await kube.create(pod)
        log.info("%s/%s: disposing of %s in pod %s", job.namespace, name, location, pod_name)
        raise kopf.TemporaryError(f"disposal pod {pod_name} created", delay=POD_POLL_SECONDS)
    outcome, why = disposalplan.pod_outcome(existing)
    if outcome is PodOutcome.RUNNING or existing["metadata"].get("deletionTimestamp"):
        raise kopf.TemporaryError(f"disposal pod {pod_name} is running", delay=POD_POLL_SECONDS)
    await kube.delete("pods", pod_name, namespace=job.namespace)
    if outcome is PodOutcome.FAILED:
        message = f"the disposal of the savepoint at {location} failed (pod {pod_name}): {why}"
        kopf.warn(snapshot, reason=FAILED, message=message)
        raise kopf.TemporaryError(message, delay=FAILED_SECONDS)
