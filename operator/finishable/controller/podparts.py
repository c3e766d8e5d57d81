"""The parts every pod the operator builds shares, and the executor pod template.

Its memory with the JVM's overhead, the user's scheduling and security settings, its labels and
annotations, what reaches the checkpoint storage (its secret as environment, the volumes a
``file://`` storage may live on), and the template Spark builds each executor pod from. Pure
functions; :mod:`finishable.controller.job.builders` and
:mod:`finishable.controller.snapshot.disposalplan` assemble the pods.
"""

from __future__ import annotations

import copy
from typing import Any

from finishable.api.pods import PodSettings
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.units import Quantity
from finishable.api.volumes import driver_volumes
from finishable.controller.naming import IMAGE_GID, WORK_VOLUME, WORK_VOLUME_DIR, work_claim_name
from finishable.kube.objects import JobRef

# Spark's default memory overhead of a JVM container: 10 %, at least 384 MiB.
MEMORY_OVERHEAD_FACTOR = 0.10
MEMORY_OVERHEAD_MIN = 384 * 1024**2

EXECUTOR_CONTAINER = "executor"  # the container of the executor pod template


def work_volume_claim(job: JobRef, spec: FinishableSparkJobSpec) -> str | None:
    """The claim of the job's work volume: the user's, or the one the operator creates."""
    volume = spec.work_volume
    if volume is None:
        return None
    return volume.claim_name or work_claim_name(job.name)


def container_memory(memory: Quantity, overhead: Quantity | None = None) -> str:
    """A JVM's memory plus its overhead (Spark's default when unset), in whole mebibytes."""
    extra = (
        int(overhead)
        if overhead is not None
        else max(MEMORY_OVERHEAD_MIN, int(memory * MEMORY_OVERHEAD_FACTOR))
    )
    mebibytes = -(-(int(memory) + extra) // 1024**2)
    return f"{mebibytes}Mi"


POD_SECURITY_CONTEXT: dict[str, Any] = {
    "fsGroup": IMAGE_GID,
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
"""A pod's securityContext when the spec gives none: the image's group owns the volumes (so its
user can write them), and with :data:`CONTAINER_SECURITY_CONTEXT` the pod meets the Pod Security
Standards' ``restricted`` level, which a real kube-apiserver's PodSecurity admission checks."""

CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
"""Every container the operator builds: a JVM and Python processes of the image's own user,
which need no privilege and no capability."""


def secured(container: dict[str, Any]) -> dict[str, Any]:
    """``container`` with :data:`CONTAINER_SECURITY_CONTEXT`."""
    return {**container, "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT)}


def pod_settings(settings: PodSettings, image_pull_secrets: list[str]) -> dict[str, Any]:
    """The scheduling and security fields of a pod spec, from the user's settings."""
    fields: dict[str, Any] = {
        "securityContext": copy.deepcopy(settings.security_context or POD_SECURITY_CONTEXT),
    }
    if settings.node_selector:
        fields["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        fields["tolerations"] = [dict(toleration) for toleration in settings.tolerations]
    if settings.affinity:
        fields["affinity"] = dict(settings.affinity)
    if settings.priority_class_name:
        fields["priorityClassName"] = settings.priority_class_name
    if image_pull_secrets:
        fields["imagePullSecrets"] = [{"name": name} for name in image_pull_secrets]
    return fields


def pod_metadata(settings: PodSettings, own_labels: dict[str, str], **extra: Any) -> dict[str, Any]:
    """Labels (the operator's win over the user's) and annotations of a pod."""
    meta: dict[str, Any] = {**extra, "labels": {**settings.labels, **own_labels}}
    if settings.annotations:
        meta["annotations"] = dict(settings.annotations)
    return meta


def storage_env_from(spec: FinishableSparkJobSpec) -> dict[str, Any]:
    """The container field that hands the checkpoint storage's credentials
    (``spec.checkpointing.storage.secretRef``) to the pod as environment; none without one."""
    secret_ref = spec.checkpointing.storage.secret_ref
    return {"envFrom": [{"secretRef": {"name": secret_ref}}]} if secret_ref else {}


def storage_volumes(
    job: JobRef, spec: FinishableSparkJobSpec
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The volume mounts and volumes of the driver's own storage, where a ``file://`` checkpoint
    storage may live: the work volume (``spec.workVolume``) and the driver volumes declared in
    sparkConf (``spark.kubernetes.driver.volumes.*``)."""
    user_volumes = driver_volumes(spec.application.spark_conf)
    mounts = [volume.volume_mount() for volume in user_volumes]
    volumes = [volume.volume() for volume in user_volumes]
    claim = work_volume_claim(job, spec)
    if claim is not None:
        mounts.insert(0, {"name": WORK_VOLUME, "mountPath": WORK_VOLUME_DIR})
        volumes.insert(0, {"name": WORK_VOLUME, "persistentVolumeClaim": {"claimName": claim}})
    return mounts, volumes


def executor_pod_template(spec: FinishableSparkJobSpec) -> dict[str, Any]:
    """The pod template Spark builds every executor pod from
    (``spark.kubernetes.executor.podTemplateFile``): the user's pod settings for executors.
    Executors never call the API, so unless the spec names an account they mount no token."""
    executor = spec.executor
    pod_spec: dict[str, Any] = {
        **pod_settings(executor, spec.image_pull_secrets),
        "containers": [secured({"name": EXECUTOR_CONTAINER})],
    }
    if executor.service_account_name is None:
        pod_spec["automountServiceAccountToken"] = False
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": pod_metadata(executor, {}),
        "spec": pod_spec,
    }
