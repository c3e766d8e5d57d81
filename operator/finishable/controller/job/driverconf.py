"""What the driver is configured with: Spark's settings and the job configuration, from the spec.

Spark's settings come in three layers, each overriding the one before: defaults that suit where
the job runs (with a Kubernetes master: parallelism sized from the executors the spec asks for,
the UI on, tasks held until the executors registered), the user's ``sparkConf``, and what the
operator derives from the resource (the master, resources, the executors' image, labels, pod
template and volumes). The driver's address is the pod's own IP, which only the pod knows: the
pod passes it to Spark itself (``builders.driver_pod``). The job configuration (``job.json`` in
``<job>-config``) carries the spec with those settings, where snapshots are stored, the work
directory and the shuffle pods' addresses; ``FinishableJob.from_env()`` reads it in the driver.
Pure functions of the job and its spec; :mod:`finishable.controller.job.builders` puts the result
into ``<job>-config`` and the driver pod.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from urllib.parse import urlsplit

from finishable.api.jobconfig import ControlType, JobConfig
from finishable.api.models import JobMode, StorageType
from finishable.api.spec import FinishableSparkJobSpec
from finishable.controller.naming import (
    BLOCK_MANAGER_PORT,
    CONFIG_DIR,
    DRIVER_PORT,
    EXECUTOR,
    EXECUTOR_TEMPLATE_KEY,
    KUBERNETES_MASTER,
    SERVICE_ACCOUNT_DIR,
    SHUFFLE_PORT,
    UI_PORT,
    WORK_DIR,
    WORK_VOLUME,
    WORK_VOLUME_DIR,
    shuffle_name,
    shuffle_service_name,
)
from finishable.controller.podparts import EXECUTOR_CONTAINER, work_volume_claim
from finishable.kube.objects import (
    LABEL_COMPONENT,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    MANAGER,
    JobRef,
    job_label_value,
)
from finishable.partitions.manifest import object_url

POD_ADDRESS_KEYS = ("spark.driver.host", "spark.driver.bindAddress")
"""Where the driver listens and how executors reach it: the pod's IP, set by the pod itself."""
EXECUTOR_TEMPLATE_FILE = f"{CONFIG_DIR}/{EXECUTOR_TEMPLATE_KEY}"
SHUFFLE_PARTITIONS_PER_CORE = 2


def is_kubernetes_master(master: str) -> bool:
    return master.startswith("k8s://")


def default_master(environ: Mapping[str, str]) -> str:
    """Spark's master for the drivers: the API server as a pod reaches it. The kubelet names it
    in every container (``KUBERNETES_SERVICE_HOST`` and ``_PORT``), as Spark's own cluster mode
    reads it; an operator outside the cluster falls back to ``kubernetes.default.svc``."""
    host = environ.get("KUBERNETES_SERVICE_HOST")
    if not host:
        return KUBERNETES_MASTER
    port = environ.get("KUBERNETES_SERVICE_PORT") or "443"
    return f"k8s://https://{f'[{host}]' if ':' in host else host}:{port}"


def executor_cores(spec: FinishableSparkJobSpec) -> int:
    """Task slots of all the executors the spec asks for (a Batch job with the autoscaler: as
    many as it may get, so that its reads are cut for them and tasks wait for more)."""
    if dynamic_allocation(spec):
        return spec.autoscaler.max_executors * spec.executor.cores
    return spec.executor.instances * spec.executor.cores


def dynamic_allocation(spec: FinishableSparkJobSpec) -> bool:
    """A Batch job with the autoscaler runs Spark's dynamic allocation (docs/autoscaler.md)."""
    return spec.mode is JobMode.BATCH and spec.autoscaler.enabled


def dynamic_allocation_conf(spec: FinishableSparkJobSpec) -> dict[str, str]:
    """Spark's dynamic allocation within the autoscaler's bounds. Kubernetes has no external
    shuffle service, so Spark tracks which executors hold shuffle files; a Batch job's stage
    outputs are on the shuffle pods, and only a running stage's exchange lives on executors,
    so an idle executor holding some is released after twice the idle timeout (a lost map
    output is recomputed from the staged partitions on the shuffle pods)."""
    autoscaler = spec.autoscaler
    idle = int(autoscaler.idle_timeout.total_seconds())
    return {
        "spark.dynamicAllocation.enabled": "true",
        "spark.dynamicAllocation.shuffleTracking.enabled": "true",
        "spark.dynamicAllocation.shuffleTracking.timeout": f"{2 * idle}s",
        "spark.dynamicAllocation.minExecutors": str(autoscaler.min_executors),
        "spark.dynamicAllocation.maxExecutors": str(autoscaler.max_executors),
        "spark.dynamicAllocation.initialExecutors": str(spec.executors),
        "spark.dynamicAllocation.executorIdleTimeout": f"{idle}s",
    }


def program_dir(spec: FinishableSparkJobSpec) -> str | None:
    """The directory of a program inside the image (``local:///...``): the executors' Python
    workers import the program's modules from there, as the driver does."""
    parts = urlsplit(spec.application.file)
    if parts.scheme != "local":
        return None
    return posixpath.dirname(parts.path) or None


def spark_conf(
    job: JobRef, spec: FinishableSparkJobSpec, master: str = KUBERNETES_MASTER
) -> dict[str, str]:
    """Spark's settings: deployment defaults, then the user's sparkConf, then what the operator
    derives from the resource (see the module docstring).

    With a Kubernetes master (the default) Spark starts executor pods itself; with another master
    (``finishable operator --spark-master local[2]``: small clusters, CI) Spark runs inside the
    driver pod and the Kubernetes settings are left out.
    """
    user = dict(spec.application.spark_conf)
    derived = {
        "spark.master": master,
        "spark.submit.deployMode": "client",
        "spark.app.name": job.name,
        "spark.driver.cores": str(spec.driver.cores),
        "spark.driver.memory": spec.driver.memory.spark_memory(),
    }
    if not is_kubernetes_master(master):
        return {**user, **derived}
    for key in POD_ADDRESS_KEYS:
        user.pop(key, None)
    slots = executor_cores(spec)
    defaults = {
        "spark.default.parallelism": str(slots),
        "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS_PER_CORE * slots),
        "spark.ui.enabled": "true",
        "spark.ui.port": str(UI_PORT),
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": (
            f"{int(spec.executor.registration_timeout.total_seconds())}s"
        ),
        # What the driver's Role need not grant (builders.role): Spark's executor ConfigMap
        # carries only the driver's conf directory, which executors do not need; in client mode
        # Spark creates no driver Service to delete; and it owns no claims unless a volume says
        # claimName: OnDemand (then run the driver with an account that may create them).
        "spark.kubernetes.executor.disableConfigMap": "true",
        "spark.kubernetes.driver.service.deleteOnTermination": "false",
        "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
        "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
    }
    directory = program_dir(spec)
    if directory:
        defaults["spark.executorEnv.PYTHONPATH"] = directory
    executor_label = "spark.kubernetes.executor.label."
    executor = spec.executor
    derived |= {
        "spark.kubernetes.namespace": job.namespace,
        "spark.kubernetes.container.image": spec.image,
        "spark.kubernetes.authenticate.oauthTokenFile": f"{SERVICE_ACCOUNT_DIR}/token",
        "spark.kubernetes.authenticate.caCertFile": f"{SERVICE_ACCOUNT_DIR}/ca.crt",
        "spark.kubernetes.executor.podTemplateFile": EXECUTOR_TEMPLATE_FILE,
        "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
        f"{executor_label}{LABEL_JOB}": job_label_value(job.name),
        f"{executor_label}{LABEL_COMPONENT}": EXECUTOR,
        f"{executor_label}{LABEL_MANAGED_BY}": MANAGER,
        "spark.driver.port": str(DRIVER_PORT),
        "spark.driver.blockManager.port": str(BLOCK_MANAGER_PORT),
        "spark.executor.instances": str(spec.executors),
        "spark.executor.cores": str(executor.cores),
        "spark.executor.memory": executor.memory.spark_memory(),
    }
    if dynamic_allocation(spec):
        derived |= dynamic_allocation_conf(spec)
    if executor.memory_overhead is not None:
        derived["spark.executor.memoryOverhead"] = executor.memory_overhead.spark_memory()
    if executor.core_request is not None:
        derived["spark.kubernetes.executor.request.cores"] = executor.core_request
    if executor.core_limit is not None:
        derived["spark.kubernetes.executor.limit.cores"] = executor.core_limit
    if executor.service_account_name is not None:
        derived["spark.kubernetes.authenticate.executor.serviceAccountName"] = (
            executor.service_account_name
        )
    if spec.work_volume is not None:
        prefix = f"spark.kubernetes.executor.volumes.persistentVolumeClaim.{WORK_VOLUME}"
        derived |= {
            f"{prefix}.mount.path": WORK_VOLUME_DIR,
            f"{prefix}.options.claimName": work_volume_claim(job, spec) or "",
        }
    return {**defaults, **user, **derived}


def work_dir(job: JobRef, spec: FinishableSparkJobSpec) -> str:
    """Spark's live checkpoint and scratch files: on the work volume (a directory per job, as
    the claim may be shared), else in the driver pod."""
    if spec.work_volume is None:
        return f"{WORK_DIR}/work"
    return f"{WORK_VOLUME_DIR}/{job.namespace}/{job.name}-{job.uid}/work"


def state_url(spec: FinishableSparkJobSpec) -> str:
    """Where the driver keeps checkpoints and savepoints (the runtime's checkpoint store URL)."""
    storage = spec.checkpointing.storage
    if storage.type is StorageType.CONFIG_MAP:
        return "configmap:"
    return storage.url or f"{WORK_DIR}/state"


def with_operator_defaults(
    spec: FinishableSparkJobSpec, partition_storage: str | None
) -> FinishableSparkJobSpec:
    """The spec with what the operator's options fill in where the job says nothing: the
    cluster's partition storage (where its partition service serves from)."""
    if partition_storage is None or spec.cluster_partitions.storage is not None:
        return spec
    partitions = spec.cluster_partitions.model_copy(update={"storage": partition_storage})
    return spec.model_copy(update={"cluster_partitions": partitions})


def partition_url(spec: FinishableSparkJobSpec) -> str | None:
    """Where the job's promoted datasets go: ``spec.clusterPartitions.storage``, else beside
    the checkpoints when they are in object storage (a ConfigMap cannot hold datasets)."""
    if spec.cluster_partitions.storage:
        return spec.cluster_partitions.storage
    storage = spec.checkpointing.storage
    if storage.type is StorageType.OBJECT_STORE and storage.url:
        return object_url(storage.url, "cluster-partitions")
    return None


def job_config(
    job: JobRef,
    spec: FinishableSparkJobSpec,
    master: str = KUBERNETES_MASTER,
    *,
    shuffle_replicas: int | None = None,
) -> JobConfig:
    """What ``FinishableJob.from_env()`` reads in the driver: the spec with the derived conf.
    ``shuffle_replicas``: the shuffle pods the run started with (the spec's when None)."""
    conf = spark_conf(job, spec, master)
    application = spec.application.model_copy(update={"spark_conf": conf})
    return JobConfig(
        name=job.name,
        namespace=job.namespace,
        uid=job.uid,
        spec=spec.model_copy(update={"application": application}),
        state_url=state_url(spec),
        work_dir=work_dir(job, spec),
        control=ControlType.CONFIG_MAP,
        shuffle_urls=shuffle_urls(job, spec, shuffle_replicas),
        partition_url=partition_url(spec) if spec.mode is JobMode.BATCH else None,
    )


def shuffle_urls(
    job: JobRef, spec: FinishableSparkJobSpec, replicas: int | None = None
) -> list[str]:
    """The shuffle pods' stable addresses (StatefulSet pod names under the headless Service)."""
    if spec.mode is not JobMode.BATCH:
        return []
    domain = f"{shuffle_service_name(job.name)}.{job.namespace}.svc"
    count = spec.effective_shuffle.replicas if replicas is None else replicas
    return [
        f"http://{shuffle_name(job.name)}-{index}.{domain}:{SHUFFLE_PORT}" for index in range(count)
    ]
