"""The FinishableSparkJob custom resource's names and shared vocabulary, for spec and status alike.

The resource's models are the single source of truth: the CRD's OpenAPI schema is generated from
them (``finishable.api.crd``), ``finishable validate`` checks manifests with them, and the operator
and the local runner read specs through them. They are split by what they describe:

* this module: the resource's group, version, kind and name rules, the base :class:`ApiModel`
  (camelCase on the wire, snake_case in Python, unknown fields refused), the enums spec and status
  speak, and :func:`dump` (the wire form);
* :mod:`finishable.api.spec`: what the user asks for (``spec``);
* :mod:`finishable.api.status`: what the operator observed (``status``, control requests);
* :mod:`finishable.api.manifest`: a whole manifest (``apiVersion``, ``kind``, ``metadata``, ...).

Every field has a description because ``kubectl explain`` shows it to users.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel

from finishable.api.rules import Rule, check, schema_validations, wire

API_GROUP = "finishable.dev"
API_VERSION = "v1alpha1"
KIND = "FinishableSparkJob"
PLURAL = "finishablesparkjobs"
SINGULAR = "finishablesparkjob"
SHORT_NAME = "fsj"

# Child objects are named "<job>-<suffix>" (the longest suffix is "-shuffle-headless"), and pod
# names of the shuffle StatefulSet must stay DNS labels: 40 characters leave room for all of them.
JOB_NAME_MAX_LENGTH = 40
JOB_NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

OBJECT_STORE_SCHEMES = ("s3", "gs", "gcs", "hdfs", "file")


def _cross_field_rules(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """The model's :attr:`ApiModel.RULES` in its JSON schema, as the CRD carries them."""
    rules: tuple[Rule, ...] = getattr(model, "RULES", ())
    if rules:
        schema["x-kubernetes-validations"] = schema_validations(rules)


class ApiModel(BaseModel):
    """Shared settings: camelCase aliases; unknown fields refused (a typo must not pass).

    :attr:`RULES` are the model's cross-field rules (:mod:`finishable.api.rules`): checked
    here after the fields, and carried by the CRD as CEL, so the API server refuses the same."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=False,
        validate_default=False,
        json_schema_extra=_cross_field_rules,
    )

    RULES: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        if self.RULES:
            check(self.RULES, wire(self))
        return self


class JobMode(StrEnum):
    """How the job runs: an unbounded (or bounded) stream of micro-batches, or staged batch."""

    STREAMING = "Streaming"
    BATCH = "Batch"


class DesiredState(StrEnum):
    """What the user wants: keep running, stop with a savepoint, or stop with drain and finish."""

    RUNNING = "Running"
    SUSPENDED = "Suspended"
    FINISHED = "Finished"


class RestartFrom(StrEnum):
    """Where ``spec.restartNonce`` restarts a Failed job from."""

    LAST_CHECKPOINT = "LastCheckpoint"
    SCRATCH = "Scratch"


class UpgradeMode(StrEnum):
    """How a change of what a Running job's driver runs (``spec_revision``) is applied."""

    SAVEPOINT = "savepoint"
    """Stop with a savepoint, then start the new spec from it: nothing lost, nothing twice."""
    LAST_STATE = "last-state"
    """Replace the driver without a stop: the new one resumes from the run's newest checkpoint."""
    STATELESS = "stateless"
    """Replace the driver by a new run that starts from nothing."""


class UpgradeCheckState(StrEnum):
    """Where the check of an upgraded spec against the running job's state is."""

    CHECKING = "Checking"
    """The new spec's program runs in a check pod, without touching the running job."""
    PASSED = "Passed"
    """The new program can restore the running job's state: the upgrade goes on."""
    REFUSED = "Refused"
    """It cannot (or it failed to start): the running job goes on unchanged."""


class RetainOnDelete(StrEnum):
    """Which of a job's state objects in ConfigMaps outlive the job when it is deleted."""

    SAVEPOINTS = "Savepoints"
    """Savepoints stay (a new job can start from them); checkpoints, event logs, fences go."""
    NOTHING = "Nothing"
    EVERYTHING = "Everything"


class Phase(StrEnum):
    """Where the job is in its life (the phase diagram in docs/jobs.md)."""

    PENDING = "Pending"
    SUBMITTED = "Submitted"
    RUNNING = "Running"
    SAVEPOINTING = "Savepointing"
    SUSPENDED = "Suspended"
    DRAINING = "Draining"
    FINISHING = "Finishing"
    FINISHED = "Finished"
    RECOVERING = "Recovering"
    FAILED = "Failed"


class StorageType(StrEnum):
    """Where checkpoints, savepoints and enumerator states are kept."""

    CONFIG_MAP = "ConfigMap"
    OBJECT_STORE = "ObjectStore"
    LOCAL = "Local"


class ConditionType(StrEnum):
    """The conditions the operator maintains on every job."""

    READY = "Ready"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"


class ConditionStatus(StrEnum):
    """Kubernetes condition status."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class RequestAction(StrEnum):
    """Control requests the operator (or ``finishable stop``) sends to a running driver."""

    STOP = "stop"
    SAVEPOINT = "savepoint"


class Transition(StrEnum):
    """A change of the job that spans phases, timed from its start to the phase it aims at (the
    Flink operator's lifecycle transitions)."""

    SUBMISSION = "submission"
    """A new run, or a Failed job restarted: to Running."""
    RESUME = "resume"
    """Suspended to Running."""
    UPGRADE = "upgrade"
    """A changed spec applied (spec.upgradeMode): to Running with the new spec."""
    SUSPEND = "suspend"
    """A stop with savepoint: to Suspended."""
    DRAIN = "drain"
    """A stop with savepoint and drain: to Finished."""
    RECOVERY = "recovery"
    """A lost driver: to Running again."""
    RELOCATION = "relocation"
    """A driver Kubernetes asked to leave (eviction, node drain, deletion): to Running again,
    from the savepoint it took on its way out when it had the time."""
    RESCALE = "rescale"
    """The autoscaler's new executor count applied: stop with savepoint, to Running with it."""


class SavepointTrigger(StrEnum):
    """Why a savepoint was taken (Flink's manual and periodic, and the stops)."""

    MANUAL = "manual"
    """spec.savepointTriggerNonce, or ``finishable savepoint``."""
    PERIODIC = "periodic"
    """spec.savepoints.interval."""
    STOP = "stop"
    """spec.state: Suspended."""
    DRAIN = "drain"
    """spec.state: Finished."""
    UPGRADE = "upgrade"
    """A changed spec applied with spec.upgradeMode: savepoint."""
    DEPARTURE = "departure"
    """The driver's pod was asked to stop (eviction, node drain, deletion): its last act."""
    RESCALE = "rescale"
    """spec.autoscaler: the stop before a restart with another executor count."""


class DepartureReason(StrEnum):
    """Why Kubernetes asked a driver pod to stop: a planned move, not a failure."""

    EVICTED = "Evicted"
    """The eviction API (a PodDisruptionBudget allowed it), or the kubelet under node pressure."""
    NODE_DRAIN = "NodeDrain"
    """Evicted from a node marked unschedulable: ``kubectl drain``, a node upgrade."""
    PREEMPTED = "Preempted"
    """The scheduler made room for a pod of higher priority."""
    NODE_LOST = "NodeLost"
    """The node's taints (not ready, unreachable, shutting down) evicted it."""
    POD_DELETED = "PodDeleted"
    """Someone deleted the pod (``kubectl delete pod``)."""
    TERMINATED = "Terminated"
    """The driver was sent SIGTERM by something the operator cannot name (a local run, or a
    pod the operator did not see ending)."""


def is_valid_job_name(name: str) -> bool:
    """Whether a job name leaves room for every child object name derived from it."""
    return len(name) <= JOB_NAME_MAX_LENGTH and re.fullmatch(JOB_NAME_PATTERN, name) is not None


def dump(model: BaseModel) -> dict[str, Any]:
    """The wire form (camelCase, strings for durations and quantities, no unset optionals)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)
