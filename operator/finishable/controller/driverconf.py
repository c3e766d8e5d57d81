"""What the driver is configured with: Spark's settings and the job configuration, from the spec.

The user's ``sparkConf`` is overridden by what the operator derives from the resource: the master,
the driver's resources and address, and (with a Kubernetes master) the executors' image, labels
and resources. The job configuration (``job.json`` in ``<job>-config``) carries that spec, where
snapshots are stored and the shuffle pods' addresses; ``FinishableJob.from_env()`` reads it in the
driver. Pure functions of the job and its spec; :mod:`finishable.controller.builders` puts the
result into ``<job>-config`` and the driver pod.
"""

from __future__ import annotations

from finishable.api.jobconfig import ControlType, JobConfig
from finishable.api.models import JobMode, StorageType
from finishable.api.spec import FinishableSparkJobSpec
from finishable.controller.naming import (
    BLOCK_MANAGER_PORT,
    DRIVER_PORT,
    EXECUTOR,
    KUBERNETES_MASTER,
    SERVICE_ACCOUNT_DIR,
    SHUFFLE_PORT,
    WORK_DIR,
    driver_host,
    shuffle_name,
    shuffle_service_name,
)
from finishable.kube.objects import (
    LABEL_COMPONENT,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    MANAGER,
    JobRef,
    job_label_value,
)


def is_kubernetes_master(master: str) -> bool:
    return master.startswith("k8s://")


def spark_conf(
    job: JobRef, spec: FinishableSparkJobSpec, master: str = KUBERNETES_MASTER
) -> dict[str, str]:
    """The user's sparkConf, overridden by what the operator derives from the resource.

    With a Kubernetes master (the default) Spark starts executor pods itself; with another master
    (``finishable operator --spark-master local[2]``: small clusters, CI, the e2e local cluster)
    Spark runs inside the driver pod and the Kubernetes and driver-address settings are left out.
    """
    derived = {
        "spark.master": master,
        "spark.submit.deployMode": "client",
        "spark.app.name": job.name,
        "spark.driver.cores": str(spec.driver.cores),
        "spark.driver.memory": spec.driver.memory.spark_memory(),
    }
    if is_kubernetes_master(master):
        executor_label = "spark.kubernetes.executor.label."
        derived |= {
            "spark.kubernetes.namespace": job.namespace,
            "spark.kubernetes.container.image": spec.image,
            "spark.kubernetes.authenticate.oauthTokenFile": f"{SERVICE_ACCOUNT_DIR}/token",
            "spark.kubernetes.authenticate.caCertFile": f"{SERVICE_ACCOUNT_DIR}/ca.crt",
            "spark.kubernetes.executor.podNamePrefix": job.name,
            f"{executor_label}{LABEL_JOB}": job_label_value(job.name),
            f"{executor_label}{LABEL_COMPONENT}": EXECUTOR,
            f"{executor_label}{LABEL_MANAGED_BY}": MANAGER,
            "spark.driver.host": driver_host(job),
            "spark.driver.bindAddress": "0.0.0.0",
            "spark.driver.port": str(DRIVER_PORT),
            "spark.driver.blockManager.port": str(BLOCK_MANAGER_PORT),
            "spark.executor.instances": str(spec.executor.instances),
            "spark.executor.cores": str(spec.executor.cores),
            "spark.executor.memory": spec.executor.memory.spark_memory(),
        }
    return {**spec.application.spark_conf, **derived}


def state_url(spec: FinishableSparkJobSpec) -> str:
    """Where the driver keeps checkpoints and savepoints (the runtime's snapshot store URL)."""
    storage = spec.checkpointing.storage
    if storage.type is StorageType.CONFIG_MAP:
        return "configmap:"
    return storage.url or f"{WORK_DIR}/state"


def job_config(
    job: JobRef, spec: FinishableSparkJobSpec, master: str = KUBERNETES_MASTER
) -> JobConfig:
    """What ``FinishableJob.from_env()`` reads in the driver: the spec with the derived conf."""
    conf = spark_conf(job, spec, master)
    application = spec.application.model_copy(update={"spark_conf": conf})
    return JobConfig(
        name=job.name,
        namespace=job.namespace,
        uid=job.uid,
        spec=spec.model_copy(update={"application": application}),
        state_url=state_url(spec),
        work_dir=f"{WORK_DIR}/work",
        control=ControlType.CONFIG_MAP,
        shuffle_urls=shuffle_urls(job, spec),
    )


def shuffle_urls(job: JobRef, spec: FinishableSparkJobSpec) -> list[str]:
    """The shuffle pods' stable addresses (StatefulSet pod names under the headless Service)."""
    if spec.mode is not JobMode.BATCH:
        return []
    domain = f"{shuffle_service_name(job.name)}.{job.namespace}.svc"
    return [
        f"http://{shuffle_name(job.name)}-{index}.{domain}:{SHUFFLE_PORT}"
        for index in range(spec.effective_shuffle.replicas)
    ]
