"""What deleting a job removes: its children at once, and its state as ``retainOnDelete`` says.

The driver writes the job's state ConfigMaps (checkpoints, savepoints, the Batch event log, the
fence claims) owned by the job, so the garbage collector removes them with it even when the
finalizer was forced away. The finalizer (:func:`remove_children`) applies the retention policy
first: the objects to keep lose their owner (orphaned), the rest are deleted in order. The job's
FinishableSparkSnapshots stay (orphaned) unless the policy is ``Nothing``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from finishable.api.models import RetainOnDelete
from finishable.api.snapshot import SNAPSHOT_PLURAL
from finishable.controller import naming
from finishable.controller.apicalls import Kube
from finishable.controller.job.observe import attempt_of
from finishable.controller.snapshot.objects import SNAPSHOT_API_VERSION
from finishable.kube.api import KubeApiError
from finishable.kube.objects import (
    LABEL_COMPONENT,
    LABEL_DELETED_JOB,
    LABEL_JOB,
    JobRef,
    job_label_value,
    owner_reference,
)
from finishable.state.checkpointstore import is_savepoint_object
from finishable.state.configmap import ANNOTATION_NAME
from finishable.state.configmap import COMPONENT as STATE_COMPONENT
from finishable.state.control import ConfigMapControlChannel

log = logging.getLogger(__name__)

STOP_MARGIN = timedelta(seconds=30)  # past a terminating pod's grace period

_CHILDREN: tuple[tuple[str, str, Callable[[str], str]], ...] = (
    ("apps/v1", "statefulsets", naming.shuffle_name),
    ("v1", "services", naming.shuffle_service_name),
    ("v1", "services", naming.driver_service_name),
    ("v1", "configmaps", naming.config_name),
    ("v1", "configmaps", naming.control_name),
    ("v1", "configmaps", naming.state_name),
    ("v1", "secrets", naming.token_name),
    ("rbac.authorization.k8s.io/v1", "rolebindings", naming.rbac_name),
    ("rbac.authorization.k8s.io/v1", "roles", naming.rbac_name),
    ("v1", "serviceaccounts", naming.rbac_name),
)


@dataclass(frozen=True)
class StateDisposal:
    """Which state ConfigMaps go with the job and which stay."""

    delete: list[str] = field(default_factory=list)
    keep: list[str] = field(default_factory=list)


def dispose_state(configmaps: Iterable[Mapping[str, Any]], policy: RetainOnDelete) -> StateDisposal:
    """Sort a job's state ConfigMaps by ``policy``. A ConfigMap without the object-name
    annotation is not one the state backend wrote: it stays only under ``Everything``."""
    disposal = StateDisposal()
    for configmap in configmaps:
        metadata = configmap.get("metadata") or {}
        object_name = (metadata.get("annotations") or {}).get(ANNOTATION_NAME, "")
        keep = policy is RetainOnDelete.EVERYTHING or (
            policy is RetainOnDelete.SAVEPOINTS and is_savepoint_object(object_name)
        )
        (disposal.keep if keep else disposal.delete).append(str(metadata["name"]))
    return disposal


def retain_on_delete(spec: Mapping[str, Any]) -> RetainOnDelete:
    """The policy of a job's raw spec. A deletion never fails on a spec it cannot read: one
    that says nothing, or something unknown, keeps the savepoints (the default)."""
    value = (spec.get("checkpointing") or {}).get("retainOnDelete")
    try:
        return RetainOnDelete(str(value))
    except ValueError:
        return RetainOnDelete.SAVEPOINTS


class PodsStopping(Exception):
    """The job's pods were asked to stop and are still terminating."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(f"waiting for {', '.join(names)} to stop")
        self.names = names


def still_stopping(pods: Iterable[Mapping[str, Any]], now: datetime) -> list[str]:
    """The pods to wait for: those marked for deletion whose grace period (ending at their
    ``deletionTimestamp``) is not ``STOP_MARGIN`` past. One stuck past that (its node is lost)
    is waited for no longer, or the job could never be deleted."""
    waiting = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        marked = meta.get("deletionTimestamp")
        if marked is None or now < datetime.fromisoformat(str(marked)) + STOP_MARGIN:
            waiting.append(str(meta.get("name")))
    return waiting


async def stop_pods(kube: Kube, job: JobRef) -> int:
    """Delete the driver and executor pods; :class:`PodsStopping` while any is terminating.

    A terminating driver still calls the API (Spark deletes its executors, the runtime may write
    its state): its Role, token and ConfigMaps must outlive it, so nothing else is deleted
    before it is gone.
    """
    deleted = 0
    job_label = f"{LABEL_JOB}={job_label_value(job.name)}"
    selector = f"{job_label},{LABEL_COMPONENT} in ({naming.DRIVER},{naming.EXECUTOR})"
    pods = await kube.list("pods", namespace=job.namespace, selector=selector)
    running = [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")]
    attempts = [attempt_of(pod) for pod in running]
    if attempts:  # its drivers leave at SIGTERM without a savepoint no one would use
        channel = ConfigMapControlChannel(
            kube.api, job.name, namespace=job.namespace, owner_references=[owner_reference(job)]
        )
        await kube.run(channel.release, max(attempts))
    for pod in running:
        deleted += await kube.delete("pods", pod["metadata"]["name"], namespace=job.namespace)
    if running:  # a pod no node runs is gone at once; one that runs is now terminating
        pods = await kube.list("pods", namespace=job.namespace, selector=selector)
    waiting = still_stopping(pods, datetime.now(UTC))
    if waiting:
        raise PodsStopping(waiting)
    return deleted


async def remove_children(kube: Kube, job: JobRef, *, retain: RetainOnDelete) -> int:
    """Stop the driver and its executors, then delete every other child, and dispose of the
    state by ``retain``.

    The garbage collector would remove the owned children too, but only after the job is gone
    and in no particular order; deleting them here stops the driver and its executors first,
    while the Role they call the API with still exists (:func:`stop_pods`).
    """
    deleted = await stop_pods(kube, job)
    job_label = f"{LABEL_JOB}={job_label_value(job.name)}"
    for api_version, plural, name_of in _CHILDREN:
        deleted += await kube.delete(
            plural, name_of(job.name), namespace=job.namespace, api_version=api_version
        )
    selector = f"{job_label},{LABEL_COMPONENT}={STATE_COMPONENT}"
    state = await kube.list("configmaps", namespace=job.namespace, selector=selector)
    disposal = dispose_state(state, retain)
    for name in disposal.keep:
        await kube.orphan("configmaps", name, namespace=job.namespace)
    for name in disposal.delete:
        deleted += await kube.delete("configmaps", name, namespace=job.namespace)
    if retain is not RetainOnDelete.NOTHING:
        await keep_snapshots(kube, job)
    if disposal.keep:
        log.info(
            "%s/%s: %d state ConfigMap(s) kept (retainOnDelete: %s)",
            job.namespace,
            job.name,
            len(disposal.keep),
            retain.value,
        )
    return deleted


async def keep_snapshots(kube: Kube, job: JobRef) -> None:
    """The job's FinishableSparkSnapshots outlive it, as its savepoints do (orphaned), so that a
    new job can still start from one by name. Their ``finishable.dev/job`` label becomes
    ``finishable.dev/deleted-job``: the label lists a job's own snapshots, and a new job of the
    same name has none yet. Where their CRD is not installed (an operator upgraded without it),
    there are none."""
    selector = f"{LABEL_JOB}={job_label_value(job.name)}"
    path = kube.api.path(SNAPSHOT_PLURAL, namespace=job.namespace, api_version=SNAPSHOT_API_VERSION)
    response = await kube.request("GET", path, query={"labelSelector": selector})
    if response.status == 404:
        return
    if response.status != 200:
        raise KubeApiError(f"cannot list the snapshots of {job.name}", response)
    for item in response.body.get("items") or []:
        meta = item.get("metadata") or {}
        if any(ref.get("uid") == job.uid for ref in meta.get("ownerReferences") or []):
            await kube.orphan(
                SNAPSHOT_PLURAL,
                str(meta["name"]),
                namespace=job.namespace,
                api_version=SNAPSHOT_API_VERSION,
                labels={LABEL_JOB: None, LABEL_DELETED_JOB: job_label_value(job.name)},
            )
