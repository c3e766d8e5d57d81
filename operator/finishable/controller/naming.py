"""The fixed names and addresses of a job's child objects, derived from the job's name alone.

Every child has a deterministic name (``<job>-driver-<attempt>``, ``<job>-shuffle`` ...), so that
"create if absent" is idempotent across reconciles and operator restarts, and the operator can
find and delete what it made without listing. The component labels, ports and paths inside the
pods are here too: the builders, the Spark configuration and the reconciler all agree on them.
"""

from __future__ import annotations

from finishable.kube.objects import JobRef
from finishable.state.control import CONTROL_SUFFIX, STATE_SUFFIX

DRIVER = "driver"
EXECUTOR = "executor"
SHUFFLE = "shuffle"
CONTROL = "control"  # the component label the control channel gives its ConfigMaps

CONFIG_DIR = "/etc/finishable"
JOB_CONFIG_KEY = "job.json"
SPARK_DEFAULTS_KEY = "spark-defaults.conf"
WORK_DIR = "/tmp/finishable"
TOKEN_KEY = "token"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
KUBERNETES_MASTER = "k8s://https://kubernetes.default.svc:443"

DRIVER_PORT = 7078
BLOCK_MANAGER_PORT = 7079
SHUFFLE_PORT = 7337
SHUFFLE_DATA_DIR = "/data"


def driver_pod_name(job: str, attempt: int) -> str:
    return f"{job}-driver-{attempt}"


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


def shuffle_service_name(job: str) -> str:
    return f"{job}-shuffle-headless"


def driver_host(job: JobRef) -> str:
    """The driver's DNS name: its headless Service resolves to the current driver pod."""
    return f"{driver_service_name(job.name)}.{job.namespace}.svc"
