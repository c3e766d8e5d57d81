"""Pure builders of a job's child objects: plain dicts, no I/O, unit-tested without a cluster.

The children refer to each other by name, label and mount (the driver pod mounts the config map,
selects the token Secret, is selected by the Services), and one module keeps those references in
step.

Every child carries the labels ``finishable.dev/job`` and ``finishable.dev/component``, a
controller owner reference to the custom resource (so the garbage collector removes it with the
job, and a driver crash never takes the shuffle pods along), and a deterministic name derived from
the job's name, so that "create if absent" is idempotent across reconciles and operator restarts.

The driver pod runs ``finishable driver``, which starts the user's program with the job
configuration mounted from ``<job>-config``. Spark runs in client mode inside that pod and creates
the executor pods itself, from the pod template of :mod:`finishable.controller.podparts`: its
Kubernetes master, executor labels, resources and volumes are derived from the spec in
:mod:`finishable.controller.job.driverconf`; the driver's address is its pod IP (the downward API),
which the pod hands to Spark; the children's names, ports and paths are
:mod:`finishable.controller.naming`.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from finishable.api.jobconfig import (
    ATTEMPT_ENV,
    CONFIG_ENV,
    ENDPOINT_BIND_ENV,
    ENDPOINT_HOST_ENV,
    POD_IP_ENV,
    PREDECESSOR_EXITED_ENV,
    RESTORE_ENV,
    RUN_ENV,
    STANDBY_ENV,
    TOKEN_ENV,
)
from finishable.api.models import JobMode
from finishable.api.spec import FinishableSparkJobSpec
from finishable.controller.job.driverconf import (
    is_kubernetes_master,
    job_config,
)
from finishable.controller.naming import (
    BLOCK_MANAGER_PORT,
    CONFIG_DIR,
    CONFIG_VOLUME,
    CONTROL,
    DRIVER,
    DRIVER_PORT,
    EXECUTOR_TEMPLATE_KEY,
    JOB_CONFIG_KEY,
    KUBERNETES_MASTER,
    SHUFFLE,
    SHUFFLE_DATA_DIR,
    SHUFFLE_DATA_VOLUME,
    SHUFFLE_PORT,
    SPARK_CONF_DIR,
    SPARK_DEFAULTS_KEY,
    TOKEN_KEY,
    UI_PORT,
    WORK_DIR,
    WORK_DIR_VOLUME,
    config_name,
    control_name,
    driver_budget_name,
    driver_pod_name,
    driver_service_name,
    executor_name_prefix,
    rbac_name,
    shuffle_name,
    shuffle_service_name,
    standby_pod_name,
    state_name,
    token_name,
    work_claim_name,
)
from finishable.controller.podparts import (
    container_memory,
    executor_pod_template,
    layered_pod,
    secured,
    storage_env_from,
    storage_volumes,
)
from finishable.kube.objects import (
    ANNOTATION_SPEC_REVISION,
    LABEL_ATTEMPT,
    LABEL_STANDBY,
    JobRef,
    labels,
    owner_reference,
    selector,
)

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


def config_map(
    job: JobRef,
    spec: FinishableSparkJobSpec,
    master: str = KUBERNETES_MASTER,
    *,
    shuffle_replicas: int | None = None,
) -> dict[str, Any]:
    """``<job>-config``: the job configuration, Spark's defaults and the executor pod template,
    mounted into the driver."""
    config = job_config(job, spec, master, shuffle_replicas=shuffle_replicas)
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
            EXECUTOR_TEMPLATE_KEY: json.dumps(executor_pod_template(spec), indent=2),
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


def work_claim(job: JobRef, spec: FinishableSparkJobSpec) -> dict[str, Any] | None:
    """``<job>-work``: the ReadWriteMany claim of ``spec.workVolume.size``, owned by the job."""
    volume = spec.work_volume
    if volume is None or volume.size is None:
        return None
    claim: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": str(volume.size)}},
    }
    if volume.storage_class_name:
        claim["storageClassName"] = volume.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(job, work_claim_name(job.name)),
        "spec": claim,
    }


# -- RBAC -------------------------------------------------------------------------------------


def service_account(job: JobRef) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(job, rbac_name(job.name), DRIVER),
    }


def role(job: JobRef) -> dict[str, Any]:
    """What the driver uses, as recorded from real runs with executor pods (``e2e/test_rbac.py``
    fails on a call it does not grant and on a grant no driver used): Spark's executor pods
    (created, watched, deleted one by one when they fail and by label when Spark stops) and the
    runtime's ConfigMaps (its report, checkpoints, savepoints, event log). Spark's own uses of
    Services, claims and its executor ConfigMap are turned off (``driverconf.spark_conf``).
    The names are not known in advance (executors, snapshot objects), so no ``resourceNames``."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(job, rbac_name(job.name), DRIVER),
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["pods"],
                "verbs": ["get", "list", "watch", "create", "delete", "deletecollection"],
            },
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "verbs": ["get", "list", "create", "update", "delete"],
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
    """Headless, selecting the job's driver pods: ``kubectl port-forward svc/<job>-driver 4040``
    reaches the current driver's Spark UI. Executors and coordinator clients do not use it:
    they reach their own attempt's driver by its pod IP."""
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
                {"name": "spark-ui", "port": UI_PORT, "targetPort": UI_PORT},
            ],
        },
    }


def _env(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def _field_env(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def _submit_args(
    job: JobRef, spec: FinishableSparkJobSpec, attempt: int, master: str, pod_name: str
) -> list[str]:
    """spark-submit's arguments: what only this pod knows (its IP, its name, the attempt)."""
    args = ["--driver-memory", spec.driver.memory.spark_memory()]
    if is_kubernetes_master(master):
        settings = {
            # Executors reach the driver at its pod IP, so an attempt's executors only ever
            # talk to their own driver (a Service would also name a lingering older one).
            "spark.driver.host": f"$({POD_IP_ENV})",
            "spark.driver.bindAddress": f"$({POD_IP_ENV})",
            "spark.kubernetes.driver.pod.name": pod_name,
            f"spark.kubernetes.executor.label.{LABEL_ATTEMPT}": str(attempt),
            "spark.kubernetes.executor.podNamePrefix": executor_name_prefix(job.name, attempt),
        }
        for key, value in settings.items():
            args += ["--conf", f"{key}={value}"]
    return [*args, "pyspark-shell"]


def driver_pod(
    job: JobRef,
    spec: FinishableSparkJobSpec,
    attempt: int,
    restore_from: str,
    master: str = KUBERNETES_MASTER,
    *,
    run: int = 1,
    standby: bool = False,
    predecessor_exited: bool = False,
) -> dict[str, Any]:
    """``<job>-driver-<attempt>``: ``finishable driver`` with the job config, token, run and
    attempt. ``standby``: ``<job>-standby-<attempt>``, the same driver started ahead of time,
    which waits for the order to take over (``driver/standby.py``). ``predecessor_exited``: the
    previous attempt's pod was seen to fail, so the new one need not wait out the fence's grace.

    Volumes declared with ``spark.kubernetes.driver.volumes.*`` in sparkConf are mounted too,
    and the work volume of ``spec.workVolume``.
    """
    name = (standby_pod_name if standby else driver_pod_name)(job.name, attempt)
    driver = spec.driver
    memory = container_memory(driver.memory, driver.memory_overhead)
    env = [
        _env(CONFIG_ENV, f"{CONFIG_DIR}/{JOB_CONFIG_KEY}"),
        _env(RUN_ENV, str(run)),
        _env(ATTEMPT_ENV, str(attempt)),
        _env(RESTORE_ENV, restore_from),
        {
            "name": TOKEN_ENV,
            "valueFrom": {"secretKeyRef": {"name": token_name(job.name), "key": TOKEN_KEY}},
        },
        _field_env("POD_NAMESPACE", "metadata.namespace"),
        _field_env(POD_IP_ENV, "status.podIP"),
        _env(ENDPOINT_BIND_ENV, "0.0.0.0"),
        _env(ENDPOINT_HOST_ENV, f"$({POD_IP_ENV})"),
        _env("SPARK_CONF_DIR", SPARK_CONF_DIR),
        _env("PYSPARK_SUBMIT_ARGS", shlex.join(_submit_args(job, spec, attempt, master, name))),
        _env("PYTHONUNBUFFERED", "1"),
        *([_env(STANDBY_ENV, "1")] if standby else []),
        *([_env(PREDECESSOR_EXITED_ENV, "1")] if predecessor_exited else []),
    ]
    limits: dict[str, str] = {"memory": memory}
    if driver.core_limit is not None:
        limits["cpu"] = driver.core_limit
    mounts: list[dict[str, Any]] = [
        {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": WORK_DIR_VOLUME, "mountPath": WORK_DIR},
    ]
    volumes: list[dict[str, Any]] = [
        {
            "name": CONFIG_VOLUME,
            "configMap": {
                "name": config_name(job.name),
                "items": [
                    {"key": JOB_CONFIG_KEY, "path": JOB_CONFIG_KEY},
                    {"key": EXECUTOR_TEMPLATE_KEY, "path": EXECUTOR_TEMPLATE_KEY},
                    {
                        "key": SPARK_DEFAULTS_KEY,
                        "path": f"{SPARK_CONF_DIR.removeprefix(CONFIG_DIR + '/')}/"
                        f"{SPARK_DEFAULTS_KEY}",
                    },
                ],
            },
        },
        {"name": WORK_DIR_VOLUME, "emptyDir": {}},
    ]
    storage_mounts, storage = storage_volumes(job, spec)
    container: dict[str, Any] = {
        "name": DRIVER,
        "image": spec.image,
        # args, not command: the image's entrypoint (tini) stays the container's PID 1. The
        # kernel gives a PID 1 no default action for SIGTERM, so a driver run as command ignored
        # the kubelet's SIGTERM and every deletion waited out the grace period; tini forwards it
        # and reaps the orphans of Spark's JVM and its Python workers.
        "args": ["finishable", "driver"],
        "env": env,
        "ports": [
            {"name": "driver-rpc", "containerPort": DRIVER_PORT},
            {"name": "blockmanager", "containerPort": BLOCK_MANAGER_PORT},
            {"name": "spark-ui", "containerPort": UI_PORT},
        ],
        "resources": {
            "requests": {"cpu": str(driver.cores), "memory": memory},
            "limits": limits,
        },
        "volumeMounts": [*mounts, *storage_mounts],
        **storage_env_from(spec),
    }
    meta = metadata(job, name, DRIVER, attempt)
    if standby:
        meta["labels"][LABEL_STANDBY] = "true"
        meta["annotations"] = {ANNOTATION_SPEC_REVISION: spec.revision}
    own = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "restartPolicy": "Never",
            # A driver asked to leave takes a savepoint in this time (driver/departure.py).
            "terminationGracePeriodSeconds": int(driver.termination_grace_period.total_seconds()),
            "containers": [secured(container)],
            "volumes": [*volumes, *storage],
        },
    }
    defaults = {"serviceAccountName": rbac_name(job.name)}
    return layered_pod(driver, DRIVER, spec.image_pull_secrets, own, defaults=defaults)


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


def shuffle_stateful_set(
    job: JobRef, spec: FinishableSparkJobSpec, replicas: int | None = None
) -> dict[str, Any]:
    """Shuffle pods owned by the custom resource (never by a driver): they outlive a crash.
    ``replicas``: the run's pinned number (the spec's when None)."""
    shuffle = spec.effective_shuffle
    claim: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": str(shuffle.storage.size)}},
    }
    if shuffle.storage.storage_class_name:
        claim["storageClassName"] = shuffle.storage.storage_class_name
    pod_labels = labels(job.name, SHUFFLE)
    memory = f"{-(-int(shuffle.memory) // 1024**2)}Mi"
    server = {
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
                "valueFrom": {"secretKeyRef": {"name": token_name(job.name), "key": TOKEN_KEY}},
            }
        ],
        "ports": [{"name": "shuffle", "containerPort": SHUFFLE_PORT}],
        "resources": {
            "requests": {"cpu": shuffle.cores, "memory": memory},
            "limits": {"memory": memory},
        },
        "readinessProbe": _health_probe(period=5),
        "livenessProbe": _health_probe(period=20),
        "volumeMounts": [{"name": SHUFFLE_DATA_VOLUME, "mountPath": SHUFFLE_DATA_DIR}],
    }
    own = {"metadata": {"labels": pod_labels}, "spec": {"containers": [secured(server)]}}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata(job, shuffle_name(job.name), SHUFFLE),
        "spec": {
            "serviceName": shuffle_service_name(job.name),
            "replicas": shuffle.replicas if replicas is None else replicas,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector(job.name, SHUFFLE)},
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": "Delete",
                "whenScaled": "Delete",
            },
            "template": layered_pod(shuffle, SHUFFLE, spec.image_pull_secrets, own),
            "volumeClaimTemplates": [
                {"metadata": {"name": SHUFFLE_DATA_VOLUME, "labels": pod_labels}, "spec": claim}
            ],
        },
    }


def disruption_budget(job: JobRef, name: str, component: str) -> dict[str, Any]:
    """No voluntary disruption (eviction, drain) of the job's pods of ``component``."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(job, name, component),
        "spec": {
            "maxUnavailable": 0,
            "selector": {"matchLabels": selector(job.name, component)},
        },
    }


def shuffle_disruption_budget(job: JobRef) -> dict[str, Any]:
    """No voluntary disruption of a running Batch job's shuffle pods: a drain that would evict
    one (and the stage outputs it holds) waits until the job ends and the operator deletes the
    budget with the pods. Crashes and node losses are what the shuffle pods' retain timeout
    and the job event log are for; a drain is not worth re-running a stage."""
    return disruption_budget(job, shuffle_name(job.name), SHUFFLE)


# -- all of it ------------------------------------------------------------------------------------


def static_children(
    job: JobRef,
    spec: FinishableSparkJobSpec,
    token: str,
    master: str = KUBERNETES_MASTER,
    *,
    shuffle_replicas: int | None = None,
) -> list[dict[str, Any]]:
    """Everything but the driver pod, in creation order (RBAC and config before the pod)."""
    children = [
        config_map(job, spec, master, shuffle_replicas=shuffle_replicas),
        channel_config_map(job, control_name(job.name)),
        channel_config_map(job, state_name(job.name)),
        token_secret(job, token),
        service_account(job),
        role(job),
        role_binding(job),
        driver_service(job),
    ]
    claim = work_claim(job, spec)
    if claim is not None:
        children.append(claim)
    if spec.driver.disruption_budget:
        children.append(disruption_budget(job, driver_budget_name(job.name), DRIVER))
    if spec.mode is JobMode.BATCH:
        children += [
            shuffle_service(job),
            shuffle_disruption_budget(job),
            shuffle_stateful_set(job, spec, shuffle_replicas),
        ]
    return children


def describe_child(body: dict[str, Any]) -> str:
    """``Kind/name`` for logs and messages."""
    return f"{body.get('kind')}/{body['metadata']['name']}"
