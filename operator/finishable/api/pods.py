"""What a job's pods are: the driver, the executors, the settings every pod takes, and the volume
the driver shares with its executors.

Every pod (driver, executors, shuffle pods) takes the settings users expect of a pod spec
(labels, annotations, nodeSelector, tolerations, affinity, priority class, securityContext);
the driver and the executors add their resources and ServiceAccount. Kubernetes objects passed
through (a toleration, an affinity) are checked for unknown fields here, so a typo is refused
with the field's name instead of being dropped by the API server.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from finishable.api.models import ApiModel
from finishable.api.podtemplate import (
    CONTAINERS_MAX,
    DRIVER_PARTS,
    ENV_MAX,
    EXECUTOR_PARTS,
    LABELS_MAX,
    LIST_MAX,
    NAME_MAX,
    Container,
    EnvVar,
    KubeObject,
    PodTemplate,
    Volume,
    VolumeMount,
    pod_rules,
)
from finishable.api.rules import Not, Rule, field, has, implies
from finishable.api.units import Duration, Quantity, positive

TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")
AFFINITY_KEYS = ("nodeAffinity", "podAffinity", "podAntiAffinity")
_CPU = re.compile(r"^([0-9]+(\.[0-9]+)?|[0-9]+m)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _unknown_keys(value: dict[str, Any], known: tuple[str, ...], what: str) -> None:
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ValueError(
            f"{what} has the unknown field(s) {', '.join(unknown)}; a {what} has {', '.join(known)}"
        )


class PodSettings(ApiModel):
    """What a job's pods carry and where they run, as in any pod spec: for the driver (and the
    pods built like it: standby, upgrade check, savepoint disposal), the executors (Spark builds
    their pods from a pod template file made of these) and the shuffle pods alike.

    Three layers, each over the one before: ``template`` (any field of a pod), the typed fields
    below, and what the operator owns (its container's name, image, command, ports, CPU and
    memory, its volumes and mounts, ``finishable.dev/*`` labels, ``FINISHABLE_*`` variables),
    which neither may set (docs/your-own-job.md)."""

    template: PodTemplate | None = Field(
        default=None,
        description=(
            "A PodTemplateSpec the pods start from: any pod field (hostNetwork, dnsPolicy, "
            "ephemeral containers' volumes, ...). The container named as the component "
            "(driver, executor, shuffle) is merged into the operator's; the typed fields below "
            "override the template; what the operator owns may not be set."
        ),
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        max_length=LABELS_MAX,
        description="Labels added to the pods (finishable.dev/* are the operator's).",
    )
    annotations: dict[str, str] = Field(
        default_factory=dict, max_length=LABELS_MAX, description="Annotations added to the pods."
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, max_length=LABELS_MAX, description="The pods' nodeSelector."
    )
    tolerations: list[KubeObject] = Field(
        default_factory=list,
        max_length=LIST_MAX,
        description="The pods' tolerations (key, operator, value, effect, tolerationSeconds).",
    )
    affinity: KubeObject | None = Field(
        default=None,
        description="The pods' affinity (nodeAffinity, podAffinity, podAntiAffinity).",
    )
    priority_class_name: str | None = Field(default=None, description="The pods' PriorityClass.")
    scheduler_name: str | None = Field(
        default=None,
        max_length=NAME_MAX,
        description="The scheduler that places the pods (a batch scheduler such as Volcano's).",
    )
    runtime_class_name: str | None = Field(
        default=None, max_length=NAME_MAX, description="The pods' RuntimeClass (gVisor, Kata...)."
    )
    topology_spread_constraints: list[KubeObject] = Field(
        default_factory=list,
        max_length=LIST_MAX,
        description="How the pods spread over zones and nodes (added to the template's).",
    )
    host_aliases: list[KubeObject] = Field(
        default_factory=list,
        max_length=LIST_MAX,
        description="Entries of the pods' /etc/hosts (ip, hostnames; added to the template's).",
    )
    dns_config: KubeObject | None = Field(
        default=None, description="The pods' dnsConfig (nameservers, searches, options)."
    )
    security_context: KubeObject | None = Field(
        default=None,
        description=(
            "The pods' securityContext. Unset: fsGroup 1000 (the image's user, so that it can "
            "write its volumes), runAsNonRoot and the RuntimeDefault seccomp profile, which "
            "with the operator's container settings (no privilege escalation, every "
            "capability dropped) meet the Pod Security Standards' restricted level."
        ),
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=ENV_MAX,
        description=(
            "Environment of the main container, by name over the template's: credentials "
            "from a Secret with valueFrom.secretKeyRef, never as a plain value."
        ),
    )
    env_from: list[KubeObject] = Field(
        default_factory=list,
        max_length=LIST_MAX,
        description=(
            "Environment of the main container from whole Secrets or ConfigMaps "
            "({secretRef: {name: s3-credentials}}), after the template's."
        ),
    )
    volumes: list[Volume] = Field(
        default_factory=list,
        max_length=LIST_MAX,
        description=(
            "Volumes of the pods, of any source (secret, configMap, projected, csi, ephemeral, "
            "persistentVolumeClaim, emptyDir...), by name over the template's."
        ),
    )
    volume_mounts: list[VolumeMount] = Field(
        default_factory=list,
        max_length=LIST_MAX,
        description="Mounts of the main container, by mount path over the template's.",
    )
    init_containers: list[Container] = Field(
        default_factory=list,
        max_length=CONTAINERS_MAX,
        description="Init containers, run before the main container (by name over the template's).",
    )
    sidecars: list[Container] = Field(
        default_factory=list,
        max_length=CONTAINERS_MAX,
        description=(
            "Containers that run beside the main one for the pod's life (log shippers, "
            "proxies): Kubernetes' native sidecars (init containers with restartPolicy "
            "Always), so a driver pod still ends when its driver does."
        ),
    )

    @field_validator("tolerations")
    @classmethod
    def _tolerations(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for index, toleration in enumerate(value):
            if not isinstance(toleration, dict):
                raise ValueError(f"[{index}] must be an object, got {toleration!r}")
            _unknown_keys(toleration, TOLERATION_KEYS, f"toleration [{index}]")
        return value

    @field_validator("affinity")
    @classmethod
    def _affinity(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            _unknown_keys(value, AFFINITY_KEYS, "affinity")
        return value


def cpu_quantity(value: str | None) -> str | None:
    """A CPU quantity as Kubernetes writes one (cores or millicores), or a clear error."""
    if value is not None and not _CPU.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a CPU quantity: use cores (1, 1.5) or millicores (500m)"
        )
    return value


class SparkPodSpec(PodSettings):
    """What the driver and executor pods share beyond pod settings: a CPU limit, the memory
    beyond the JVM heap, and the ServiceAccount they run as."""

    core_limit: str | None = Field(
        default=None, description="CPU limit of the pod (1, 1.5 or 1500m); no limit when unset."
    )
    memory_overhead: Quantity | None = Field(
        default=None,
        description=(
            "Memory of the pod beyond the JVM heap (Python workers, off-heap): 10 % of memory, "
            "at least 384Mi, when unset."
        ),
    )
    service_account_name: str | None = Field(
        default=None, description="The ServiceAccount the pod runs as."
    )

    @field_validator("core_limit")
    @classmethod
    def _core_limit(cls, value: str | None) -> str | None:
        return cpu_quantity(value)

    @field_validator("service_account_name")
    @classmethod
    def _account_name(cls, value: str | None) -> str | None:
        if value is not None and (len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value)):
            raise ValueError(f"{value!r} is not a ServiceAccount name (a lowercase DNS subdomain)")
        return value


class DriverSpec(SparkPodSpec):
    """The Spark driver pod, which also hosts the split coordinators."""

    RULES = pod_rules(DRIVER_PARTS)

    cores: int = Field(default=1, ge=1, le=64, description="CPU cores for the driver.")
    memory: Quantity = Field(
        default=Quantity(1024**3),
        description="Driver memory (spark.driver.memory), for example 1g or 1536Mi.",
    )
    service_account_name: str | None = Field(
        default=None,
        description=(
            "Run the driver as this ServiceAccount instead of the one the operator creates "
            "(<job>-driver); it needs the rights of that account's Role (docs/operator.md)."
        ),
    )
    termination_grace_period: Duration = Field(
        default=Duration(seconds=60),
        description=(
            "The driver pod's terminationGracePeriodSeconds: how long a driver asked to leave "
            "(eviction, node drain, pod deletion) may take. A Streaming driver takes a stop "
            "with savepoint at its next batch boundary within it (less a margin to exit), else "
            "leaves with its newest checkpoint; a Batch driver suspends after its running tasks. "
            "Give it a trigger interval plus a savepoint's time (docs/operator.md, Node drains)."
        ),
    )

    disruption_budget: bool = Field(
        default=False,
        description=(
            "A PodDisruptionBudget (maxUnavailable 0) on the driver: evictions and drains wait "
            "until the job is suspended or ends. For a driver whose savepoint cannot fit "
            "terminationGracePeriod (large state): a drain then waits for someone to suspend "
            "the job, which takes its savepoint within spec.stopTimeout."
        ),
    )

    @field_validator("termination_grace_period")
    @classmethod
    def _grace(cls, value: Duration) -> Duration:
        if not 1 <= value.total_seconds() <= 3600:
            raise ValueError(f"must be between 1s and 1h, got {str(value)!r}")
        return value


class ExecutorSpec(SparkPodSpec):
    """The Spark executors: pods that Spark's Kubernetes backend creates from the driver."""

    RULES = pod_rules(EXECUTOR_PARTS)

    instances: int = Field(default=2, ge=1, le=1000, description="Number of executor pods.")
    cores: int = Field(default=1, ge=1, le=64, description="CPU cores per executor.")
    core_request: str | None = Field(
        default=None,
        description=(
            "CPU request of an executor pod (spark.kubernetes.executor.request.cores, for "
            "example 500m); cores when unset."
        ),
    )
    memory: Quantity = Field(
        default=Quantity(2 * 1024**3),
        description="Memory per executor (spark.executor.memory), for example 2g or 4Gi.",
    )
    service_account_name: str | None = Field(
        default=None,
        description=(
            "The executors' ServiceAccount. Unset: they mount no API token (they never call the "
            "API)."
        ),
    )
    registration_timeout: Duration = Field(
        default=Duration(minutes=3),
        description=(
            "How long the driver waits for every executor to register before it plans tasks "
            "(spark.scheduler.maxRegisteredResourcesWaitingTime); with none registered by then "
            "the attempt fails, naming what keeps the executor pods from running."
        ),
    )

    @field_validator("core_request")
    @classmethod
    def _core_request(cls, value: str | None) -> str | None:
        return cpu_quantity(value)

    @field_validator("registration_timeout")
    @classmethod
    def _positive_timeout(cls, value: Duration) -> Duration:
        return positive(value)


class WorkVolumeSpec(ApiModel):
    """A volume the driver and every executor mount: Spark's live checkpoint directory (the
    state-store files executors write), and the staging of callback sinks, live on it."""

    RULES = (
        Rule(
            has(field("claimName")).ne(has(field("size"))),
            (
                "name an existing ReadWriteMany claim (claimName) or give a size for the "
                "operator to create one, not both and not neither",
            ),
        ),
        Rule(
            implies(has(field("claimName")), Not(has(field("storageClassName")))),
            ("storageClassName applies only to a claim the operator creates",),
            field=".storageClassName",
            reason="FieldValueForbidden",
        ),
    )

    claim_name: str | None = Field(
        default=None,
        description=(
            "An existing ReadWriteMany PersistentVolumeClaim in the job's namespace (it may be "
            "shared by several jobs: each uses a directory of its own)."
        ),
    )
    size: Quantity | None = Field(
        default=None,
        description=(
            "Have the operator create a ReadWriteMany claim <job>-work of this size, owned by "
            "the job (deleted with it)."
        ),
    )
    storage_class_name: str | None = Field(
        default=None,
        description=(
            "StorageClass of the claim the operator creates (it must offer ReadWriteMany: NFS, "
            "CephFS, EFS, Filestore...); the cluster default when unset."
        ),
    )
