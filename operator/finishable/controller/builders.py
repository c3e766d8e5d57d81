"""Pure builders of a job's child objects: plain dicts, no I/O, unit-tested without a cluster.

Every child carries the labels ``finishable.dev/job`` and ``finishable.dev/component``, a
controller owner reference to the custom resource (so the garbage collector removes it with the
job, and a driver crash never takes the shuffle pods along), and a deterministic name derived from
the job's name, so that "create if absent" is idempotent across reconciles and operator restarts.

The driver pod runs ``finishable driver``, which starts the user's program with the job
configuration mounted from ``<job>-config``. Spark runs in client mode inside that pod: its
Kubernetes master, executor labels and resources, and the driver's address (the headless Service
``<job>-driver``) are derived from the spec in :mod:`finishable.controller.driverconf`; the
children's names, ports and paths are :mod:`finishable.controller.naming`.
"""

from __future__ import annotations

import shlex
from typing import Any

from finishable.api.jobconfig import ATTEMPT_ENV, CONFIG_ENV, RESTORE_ENV, RUN_ENV, TOKEN_ENV
from finishable.api.models import JobMode
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.units import Quantity
from finishable.api.volumes import driver_volumes
from finishable.controller.driverconf import is_kubernetes_master, job_config
from finishable.controller.naming import (
    BLOCK_MANAGER_PORT,
    CONFIG_DIR,
    CONTROL,
    DRIVER,
    DRIVER_PORT,
    JOB_CONFIG_KEY,
    KUBERNETES_MASTER,
    SHUFFLE,
    SHUFFLE_DATA_DIR,
    SHUFFLE_PORT,
    SPARK_DEFAULTS_KEY,
    TOKEN_KEY,
    WORK_DIR,
    config_name,
    control_name,
    driver_host,
    driver_pod_name,
    driver_service_name,
    rbac_name,
    shuffle_name,
    shuffle_service_name,
    state_name,
    token_name,
)
from finishable.kube.objects import LABEL_ATTEMPT, JobRef, labels, owner_reference, selector

# Spark's default memory overhead of a JVM container: 10 %, at least 384 MiB.
MEMORY_OVERHEAD_FACTOR = 0.10
MEMORY_OVERHEAD_MIN = 384 * 1024**2


# -- metadata ---------------------------------------------------------------------------------


def metadata(
    job: JobRef, name: str, component: str | None = None, attempt: int | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": job.namespace,
        "labels": labels(job.name, component, attempt),
        "ownerReferences": [owner_reference(job)],
    }


# -- pod resources and configuration -----------------------------------------------------------


def container_memory(memory: Quantity) -> str:
    """A JVM's memory plus Spark's overhead, in whole mebibytes, as a pod resource."""
    overhead = max(MEMORY_OVERHEAD_MIN, int(memory * MEMORY_OVERHEAD_FACTOR))
    mebibytes = -(-(int(memory) + overhead) // 1024**2)
    return f"{mebibytes}Mi"


def config_map(
    job: JobRef, spec: FinishableSparkJobSpec, master: str = KUBERNETES_MASTER
) -> dict[str, Any]:
    """``<job>-config``: the job configuration and Spark's defaults, mounted into the driver."""
    config = job_config(job, spec, master)
    defaults = "".join(
        f"{key} {value}\n" for key, value in sorted(config.spec.application.spark_conf.items())
    )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(job, config_name(job.name)),
        "data": {
            JOB_CONFIG_KEY: config.model_dump_json(by_alias=True, exclude_none=True, indent=2),
            SPARK_DEFAULTS_KEY: defaults,
        },
    }


def channel_config_map(job: JobRef, name: str) -> dict[str, Any]:
    """An empty ``<job>-control`` or ``<job>-state``: the control channel's two ends."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(job, name, CONTROL),
        "data": {},
    }


def token_secret(job: JobRef, token: str) -> dict[str, Any]:
    """``<job>-token``: the per-job bearer token of the coordinator and shuffle endpoints."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(job, token_name(job.name)),
        "type": "Opaque",
        "stringData": {TOKEN_KEY: token},
    }


# -- RBAC -------------------------------------------------------------------------------------


def service_account(job: JobRef) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(job, rbac_name(job.name), DRIVER),
    }


def role(job: JobRef) -> dict[str, Any]:
    """Just what the driver needs: executor pods (Spark), ConfigMaps (its report, snapshots and
    Spark's executor config), Services and PVCs that Spark may create for executors."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(job, rbac_name(job.name), DRIVER),
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["pods", "configmaps", "services", "persistentvolumeclaims"],
                "verbs": [
                    "get",
                    "list",
                    "watch",
                    "create",
                    "update",
                    "patch",
                    "delete",
                    "deletecollection",
                ],
            },
        ],
    }


def role_binding(job: JobRef) -> dict[str, Any]:
    name = rbac_name(job.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(job, name, DRIVER),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": job.namespace}],
    }


# -- driver -----------------------------------------------------------------------------------


def driver_service(job: JobRef) -> dict[str, Any]:
    """Headless: executors and the coordinator clients reach the current driver pod by name."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(job, driver_service_name(job.name), DRIVER),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector(job.name, DRIVER),
            "ports": [
                {"name": "driver-rpc", "port": DRIVER_PORT, "targetPort": DRIVER_PORT},
                {
                    "name": "blockmanager",
                    "port": BLOCK_MANAGER_PORT,
                    "targetPort": BLOCK_MANAGER_PORT,
                },
            ],
        },
    }


def _env(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def driver_pod(
    job: JobRef,
    spec: FinishableSparkJobSpec,
    attempt: int,
    restore_from: str,
    master: str = KUBERNETES_MASTER,
    *,
    run: int = 1,
) -> dict[str, Any]:
    """``<job>-driver-<attempt>``: ``finishable driver`` with the job config, token, run and
    attempt.

    Volumes declared with ``spark.kubernetes.driver.volumes.*`` in sparkConf are mounted too.
    """
    name = driver_pod_name(job.name, attempt)
    memory = container_memory(spec.driver.memory)
    submit_args = ["--driver-memory", spec.driver.memory.spark_memory()]
    if is_kubernetes_master(master):
        submit_args += [
            "--conf",
            f"spark.kubernetes.driver.pod.name={name}",
            "--conf",
            f"spark.kubernetes.executor.label.{LABEL_ATTEMPT}={attempt}",
        ]
    submit_args.append("pyspark-shell")
    user_volumes = driver_volumes(spec.application.spark_conf)
    env = [
        _env(CONFIG_ENV, f"{CONFIG_DIR}/{JOB_CONFIG_KEY}"),
        _env(RUN_ENV, str(run)),
        _env(ATTEMPT_ENV, str(attempt)),
        _env(RESTORE_ENV, restore_from),
        {
            "name": TOKEN_ENV,
            "valueFrom": {"secretKeyRef": {"name": token_name(job.name), "key": TOKEN_KEY}},
        },
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        _env("FINISHABLE_ENDPOINT_BIND", "0.0.0.0"),
        _env("FINISHABLE_ENDPOINT_HOST", driver_host(job)),
        _env("SPARK_CONF_DIR", CONFIG_DIR),
        _env("PYSPARK_SUBMIT_ARGS", shlex.join(submit_args)),
        _env("PYTHONUNBUFFERED", "1"),
    ]
    container: dict[str, Any] = {
        "name": DRIVER,
        "image": spec.image,
        "command": ["finishable", "driver"],
        "env": env,
        "ports": [
            {"name": "driver-rpc", "containerPort": DRIVER_PORT},
            {"name": "blockmanager", "containerPort": BLOCK_MANAGER_PORT},
        ],
        "resources": {
            "requests": {"cpu": str(spec.driver.cores), "memory": memory},
            "limits": {"memory": memory},
        },
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "work", "mountPath": WORK_DIR},
            *(volume.volume_mount() for volume in user_volumes),
        ],
    }
    secret_ref = spec.checkpointing.storage.secret_ref
    if secret_ref:
        container["envFrom"] = [{"secretRef": {"name": secret_ref}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata(job, name, DRIVER, attempt),
        "spec": {
            "serviceAccountName": rbac_name(job.name),
            "restartPolicy": "Never",
            "containers": [container],
            "volumes": [
                {"name": "config", "configMap": {"name": config_name(job.name)}},
                {"name": "work", "emptyDir": {}},
                *(volume.volume() for volume in user_volumes),
            ],
        },
    }


# -- shuffle (Batch) ----------------------------------------------------------------------------


def shuffle_service(job: JobRef) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(job, shuffle_service_name(job.name), SHUFFLE),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector(job.name, SHUFFLE),
            "ports": [{"name": "shuffle", "port": SHUFFLE_PORT, "targetPort": SHUFFLE_PORT}],
        },
    }


def _health_probe(*, period: int) -> dict[str, Any]:
    """The shuffle server's unauthenticated ``/healthz``."""
    return {
        "httpGet": {"path": "/healthz", "port": SHUFFLE_PORT},
        "periodSeconds": period,
        "failureThreshold": 3,
    }


def shuffle_stateful_set(job: JobRef, spec: FinishableSparkJobSpec) -> dict[str, Any]:
    """Shuffle pods owned by the custom resource (never by a driver): they outlive a crash."""
    shuffle = spec.effective_shuffle
    claim: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": str(shuffle.storage.size)}},
    }
    if shuffle.storage.storage_class_name:
        claim["storageClassName"] = shuffle.storage.storage_class_name
    pod_labels = labels(job.name, SHUFFLE)
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata(job, shuffle_name(job.name), SHUFFLE),
        "spec": {
            "serviceName": shuffle_service_name(job.name),
            "replicas": shuffle.replicas,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector(job.name, SHUFFLE)},
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": "Delete",
                "whenScaled": "Delete",
            },
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "containers": [
                        {
                            "name": SHUFFLE,
                            "image": spec.image,
                            "command": ["finishable", "shuffle-server"],
                            "args": [
                                "--port",
                                str(SHUFFLE_PORT),
                                "--data-dir",
                                SHUFFLE_DATA_DIR,
                                "--job",
                                job.name,
                                "--retain-timeout",
                                str(shuffle.retain_timeout),
                            ],
                            "env": [
                                {
                                    "name": TOKEN_ENV,
                                    "valueFrom": {
                                        "secretKeyRef": {
                                            "name": token_name(job.name),
                                            "key": TOKEN_KEY,
                                        }
                                    },
                                }
                            ],
                            "ports": [{"name": "shuffle", "containerPort": SHUFFLE_PORT}],
                            "readinessProbe": _health_probe(period=5),
                            "livenessProbe": _health_probe(period=20),
                            "volumeMounts": [{"name": "data", "mountPath": SHUFFLE_DATA_DIR}],
                        }
                    ],
                },
            },
            "volumeClaimTemplates": [
                {"metadata": {"name": "data", "labels": pod_labels}, "spec": claim}
            ],
        },
    }


# -- all of it ------------------------------------------------------------------------------------


def static_children(
    job: JobRef, spec: FinishableSparkJobSpec, token: str, master: str = KUBERNETES_MASTER
) -> list[dict[str, Any]]:
    """Everything but the driver pod, in creation order (RBAC and config before the pod)."""
    children = [
        config_map(job, spec, master),
        channel_config_map(job, control_name(job.name)),
        channel_config_map(job, state_name(job.name)),
        token_secret(job, token),
        service_account(job),
        role(job),
        role_binding(job),
        driver_service(job),
    ]
    if spec.mode is JobMode.BATCH:
        children += [shuffle_service(job), shuffle_stateful_set(job, spec)]
    return children


def describe_child(body: dict[str, Any]) -> str:
    """``Kind/name`` for logs and messages."""
    return f"{body.get('kind')}/{body['metadata']['name']}"
