"""What disposing of a deleted FinishableSparkSnapshot's savepoint takes (pure).

A snapshot with ``spec.disposeOnDelete`` carries the operator's finalizer; before it goes,
:mod:`finishable.controller.snapshot.disposal` does what :func:`decide` says:

* nothing, when the snapshot has no location (its savepoint never completed);
* wait, while a job of its namespace may still start from the savepoint
  (:func:`~finishable.controller.snapshot.objects.holders`);
* delete the ConfigMaps itself, for a ``configmap://`` savepoint;
* keep the files, for one in object storage whose job is gone (nobody can reach the storage: the
  operator holds no storage credentials), or for a location that names no savepoint blob;
* otherwise run a disposal pod (:func:`disposal_pod`): ``finishable dispose-savepoint`` in the
  job's image, with the job's storage secret and volumes, as the driver gets them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from finishable.api.spec import FinishableSparkJobSpec
from finishable.controller.naming import DRIVER
from finishable.controller.podparts import (
    layered_pod,
    secured,
    storage_env_from,
    storage_volumes,
)
from finishable.controller.snapshot.objects import holders
from finishable.kube.objects import JobRef, labels, owner_reference
from finishable.state.savepointfiles import (
    STATE_URL_ENV,
    configmap_files,
    is_configmap,
    object_storage_files,
)

DISPOSER = "disposer"  # the component label (and container name) of disposal pods
POD_SUFFIX = "-dispose"
NAME_MAX_LENGTH = 63
HASH_LENGTH = 8
DEADLINE_SECONDS = 600  # a disposal pod that hangs (storage unreachable) fails, and is retried
ANNOTATION_SNAPSHOT = "finishable.dev/snapshot"


class Action(StrEnum):
    NOTHING = "nothing"
    WAIT = "wait"
    CONFIGMAPS = "configmaps"
    POD = "pod"
    KEEP = "keep"


@dataclass(frozen=True)
class Decision:
    """What to do with the savepoint of a deleted snapshot, and why (an Event's message)."""

    action: Action
    message: str = ""
    holders: list[str] = field(default_factory=list)


def decide(
    *,
    snapshot: str,
    namespace: str,
    location: str,
    job: str | None,
    jobs: Iterable[Mapping[str, Any]],
) -> Decision:
    """What to do before snapshot ``snapshot`` of ``job`` (``spec.jobName``) goes, its savepoint
    at ``location``; ``jobs`` are the FinishableSparkJobs of its namespace, ``namespace``."""
    if not location:
        return Decision(Action.NOTHING, "the snapshot has no savepoint: nothing to dispose of")
    jobs = list(jobs)
    held = holders(jobs, snapshot, location)
    if held:
        return Decision(
            Action.WAIT,
            f"not disposing of the savepoint at {location}: job(s) {', '.join(held)} may still "
            "start from it; remove the reference (or set the snapshot's spec.disposeOnDelete "
            "to false to keep its files)",
            held,
        )
    try:
        if is_configmap(location):
            if configmap_files(location, job or "").root != namespace:
                raise ValueError(f"{location} is in another namespace than the snapshot")
            return Decision(Action.CONFIGMAPS)
        object_storage_files(location)
    except ValueError as error:
        return Decision(Action.KEEP, f"{error}: the files at {location} are kept")
    if not any((item.get("metadata") or {}).get("name") == job for item in jobs):
        return Decision(
            Action.KEEP,
            f"the job {job!r} is gone, and with it the credentials of its storage: "
            f"the savepoint at {location} is kept",
        )
    return Decision(Action.POD)


def disposal_pod_name(snapshot: str) -> str:
    """``<snapshot>-dispose``, a DNS label of at most 63 characters (a longer snapshot name is
    shortened and a hash of it keeps the names of two snapshots apart)."""
    base = re.sub(r"[^a-z0-9-]", "-", snapshot.lower()).strip("-")
    if base == snapshot and len(base) + len(POD_SUFFIX) <= NAME_MAX_LENGTH:
        return base + POD_SUFFIX
    digest = hashlib.sha256(snapshot.encode()).hexdigest()[:HASH_LENGTH]
    suffix = f"-{digest}{POD_SUFFIX}"
    return base[: NAME_MAX_LENGTH - len(suffix)].rstrip("-") + suffix


def disposal_pod(
    job: JobRef, spec: FinishableSparkJobSpec, snapshot: str, location: str
) -> dict[str, Any]:
    """The pod that runs ``finishable dispose-savepoint <location>`` for snapshot ``snapshot``:
    the job's image and pull secrets, its storage's secret as environment and the driver's
    storage volumes (what the driver writes savepoints with), the driver's scheduling settings,
    owned by the job. It calls no Kubernetes API: it mounts no token unless the job names the
    driver's service account (whose token may be what the storage trusts)."""
    driver = spec.driver
    mounts, volumes = storage_volumes(job, spec)
    container: dict[str, Any] = {
        "name": DISPOSER,
        "image": spec.image,
        "command": ["finishable", "dispose-savepoint", location],
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            # how the driver reaches the storage: a location in a status has no credentials
            {"name": STATE_URL_ENV, "value": spec.checkpointing.storage.url or ""},
        ],
        **storage_env_from(spec),
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"memory": "512Mi"},
        },
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if mounts:
        container["volumeMounts"] = mounts
    meta = {
        "name": disposal_pod_name(snapshot),
        "namespace": job.namespace,
        "ownerReferences": [owner_reference(job)],
        "labels": labels(job.name, DISPOSER),
        "annotations": {ANNOTATION_SNAPSHOT: snapshot},
    }
    own = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": DEADLINE_SECONDS,
            "containers": [secured(container)],
            **({"volumes": volumes} if volumes else {}),
        },
    }
    # the driver's template and settings: what reaches the storage (its env, its mounted
    # Secrets) reaches the disposal too
    pod = layered_pod(driver, DRIVER, spec.image_pull_secrets, own)
    if "serviceAccountName" not in pod["spec"]:
        pod["spec"]["automountServiceAccountToken"] = False
    return pod


class PodOutcome(StrEnum):
    RUNNING = "running"  # Pending or Running (or a phase this release does not know)
    SUCCEEDED = "succeeded"
    FAILED = "failed"


def pod_outcome(pod: Mapping[str, Any]) -> tuple[PodOutcome, str]:
    """Where a disposal pod is, and for a failed one why (its message, else its container's
    termination message, else its reason and exit code)."""
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase == "Succeeded":
        return PodOutcome.SUCCEEDED, ""
    if phase != "Failed":
        return PodOutcome.RUNNING, ""
    reasons = [str(status.get("message") or "").strip()]
    for container in status.get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated") or {}
        reasons.append(str(terminated.get("message") or "").strip())
        if terminated:
            reasons.append(
                f"{terminated.get('reason') or 'terminated'} "
                f"(exit code {terminated.get('exitCode')})"
            )
    reasons.append(str(status.get("reason") or ""))
    why = next((reason for reason in reasons if reason), "the pod failed")
    return PodOutcome.FAILED, " ".join(why.split())
