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
from finishable.controller.naming import (
    EXECUTOR,
    IMAGE_GID,
    WORK_VOLUME,
    WORK_VOLUME_DIR,
    work_claim_name,
)
from finishable.controller.podlayers import over, user_pod
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


def layered_pod(
    settings: PodSettings,
    main: str,
    image_pull_secrets: list[str],
    own: dict[str, Any],
    *,
    defaults: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod of the job: the user's template and typed fields for ``main`` (the component whose
    settings they are), under the operator's ``own`` pod (:mod:`finishable.controller.podlayers`).
    Unless the user gives one, the pod gets :data:`POD_SECURITY_CONTEXT`, and ``defaults``."""
    user = user_pod(settings, main, image_pull_secrets)
    pod_defaults = {"securityContext": copy.deepcopy(POD_SECURITY_CONTEXT), **(defaults or {})}
    return over(user, own, defaults=pod_defaults)


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
    (``spark.kubernetes.executor.podTemplateFile``): the user's template and settings for
    executors; Spark's backend adds its container's image, command, environment and resources.
    Executors never call the API, so unless the spec names an account they mount no token."""
    executor = spec.executor
    own = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {},
        "spec": {"containers": [secured({"name": EXECUTOR_CONTAINER})]},
    }
    defaults = {} if executor.service_account_name else {"automountServiceAccountToken": False}
    return layered_pod(executor, EXECUTOR, spec.image_pull_secrets, own, defaults=defaults)
