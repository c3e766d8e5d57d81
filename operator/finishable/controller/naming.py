"""The fixed names and addresses of a job's child objects, derived from the job's name alone.

Every child has a deterministic name (``<job>-driver-<attempt>``, ``<job>-shuffle`` ...), so that
"create if absent" is idempotent across reconciles and operator restarts, and the operator can
find and delete what it made without listing. The component labels, ports and paths inside the
pods are here too: the builders, the Spark configuration and the reconciler all agree on them.
"""

from __future__ import annotations

from finishable.api.podtemplate import (  # what the operator owns in its pods: the API says
    BLOCK_MANAGER_PORT,
    CONFIG_DIR,
    CONFIG_VOLUME,
    DRIVER,
    DRIVER_PORT,
    EXECUTOR,
    SHUFFLE,
    SHUFFLE_DATA_DIR,
    SHUFFLE_DATA_VOLUME,
    SHUFFLE_PORT,
    UI_PORT,
    WORK_DIR,
    WORK_DIR_VOLUME,
    WORK_VOLUME,
    WORK_VOLUME_DIR,
)
from finishable.state.control import CONTROL_SUFFIX, STATE_SUFFIX

__all__ = [
    "BLOCK_MANAGER_PORT",
    "CONFIG_DIR",
    "CONFIG_VOLUME",
    "DRIVER",
    "DRIVER_PORT",
    "EXECUTOR",
    "SHUFFLE",
    "SHUFFLE_DATA_DIR",
    "SHUFFLE_DATA_VOLUME",
    "SHUFFLE_PORT",
    "UI_PORT",
    "WORK_DIR",
    "WORK_DIR_VOLUME",
    "WORK_VOLUME",
    "WORK_VOLUME_DIR",
]

ANNOTATION_PREFIX = "finishable.dev"
FINALIZER = f"{ANNOTATION_PREFIX}/cleanup"
"""kopf's finalizer on jobs, and on snapshots that dispose of their files when deleted."""

CONTROL = "control"  # the component label the control channel gives its ConfigMaps

JOB_CONFIG_KEY = "job.json"
SPARK_DEFAULTS_KEY = "spark-defaults.conf"
# Spark's configuration directory: Spark copies what it holds into the executors' ConfigMap, so
# it holds Spark's files only, not the job configuration beside it.
SPARK_CONF_DIR = f"{CONFIG_DIR}/spark"
EXECUTOR_TEMPLATE_KEY = "executor-pod-template.yaml"
TOKEN_KEY = "token"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
KUBERNETES_MASTER = "k8s://https://kubernetes.default.svc:443"

# The image's user (Dockerfile: USER 1000): pods get it as fsGroup, so it can write volumes.
IMAGE_GID = 1000
EXECUTOR_NAME_PREFIX_MAX = 47  # Spark's limit on spark.kubernetes.executor.podNamePrefix


def driver_pod_name(job: str, attempt: int) -> str:
    return f"{job}-driver-{attempt}"


def standby_pod_name(job: str, attempt: int) -> str:
    """A standby driver's pod: its own name, so that a new driver of the same attempt number
    (the job was upgraded, not recovered) never waits for the standby's pod to go."""
    return f"{job}-standby-{attempt}"


def driver_service_name(job: str) -> str:
    return f"{job}-driver"


def rbac_name(job: str) -> str:
    """ServiceAccount, Role and RoleBinding of the driver share one name."""
    return f"{job}-driver"


def config_name(job: str) -> str:
    return f"{job}-config"


def control_name(job: str) -> str:
    return f"{job}{CONTROL_SUFFIX}"


def state_name(job: str) -> str:
    return f"{job}{STATE_SUFFIX}"


def token_name(job: str) -> str:
    return f"{job}-token"


def shuffle_name(job: str) -> str:
    return f"{job}-shuffle"


def driver_budget_name(job: str) -> str:
    """The driver's PodDisruptionBudget (``spec.driver.disruptionBudget``)."""
    return f"{job}-{DRIVER}"


def shuffle_service_name(job: str) -> str:
    return f"{job}-shuffle-headless"


def work_claim_name(job: str) -> str:
    """The ReadWriteMany claim the operator creates for ``spec.workVolume.size``."""
    return f"{job}-work"


def executor_name_prefix(job: str, attempt: int) -> str:
    """Executor pods are ``<job>-<attempt>-exec-<id>``: an attempt's executors never take the
    names of an earlier attempt's, which may still be going away."""
    suffix = f"-{attempt}"
    return job[: EXECUTOR_NAME_PREFIX_MAX - len(suffix)].rstrip("-") + suffix
