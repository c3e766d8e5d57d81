"""The FinishableSparkJob custom resource: spec and status as pydantic v2 models.

These models are the single source of truth: the CRD's OpenAPI schema is generated from them
(``finishable.api.crd``), ``finishable validate`` checks manifests with them, and the operator and
the local runner read specs through them. Field names are camelCase on the wire, snake_case in
Python. Every field has a description because ``kubectl explain`` shows it to users.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Any, Self
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from finishable.api.lifecycle import LifecycleMode, OperatorStatus, TaskKind, TaskStatus
from finishable.api.units import Duration, Quantity
from finishable.api.volumes import driver_volumes

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
APPLICATION_SCHEMES = ("local", "file", "s3", "s3a", "gs", "hdfs", "http", "https")


class ApiModel(BaseModel):
    """Shared settings: camelCase aliases; unknown fields refused (a typo must not pass)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=False,
        validate_default=False,
    )


class JobMode(StrEnum):
    """How the job runs: an unbounded (or bounded) stream of micro-batches, or staged batch."""

    STREAMING = "Streaming"
    BATCH = "Batch"


class DesiredState(StrEnum):
    """What the user wants: keep running, stop with a savepoint, or stop with drain and finish."""

    RUNNING = "Running"
    SUSPENDED = "Suspended"
    FINISHED = "Finished"


class Phase(StrEnum):
    """Where the job is in its life (DESIGN.md section 5)."""

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
    """Where checkpoints, savepoints and coordinator snapshots are kept."""

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


# ---------------------------------------------------------------------------------------------
# spec


class ApplicationSpec(ApiModel):
    """The PySpark program the driver runs."""

    file: str = Field(
        min_length=1,
        description=(
            "The PySpark program: local:///path inside the image, a path relative to the "
            "manifest for `finishable run`, or a URL (file, s3, s3a, gs, hdfs, http, https)."
        ),
    )
    args: list[str] = Field(
        default_factory=list, description="Arguments passed to the program after its file name."
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Extra Spark configuration (spark.* keys). Settings the operator derives from this "
            "resource (master, memory, cores, instances) take precedence."
        ),
    )

    @field_validator("file")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        scheme = urlsplit(value).scheme
        if scheme and len(scheme) > 1 and scheme not in APPLICATION_SCHEMES:
            raise ValueError(
                f"{value!r} has the unknown scheme {scheme!r}; use one of "
                f"{', '.join(APPLICATION_SCHEMES)} or a plain path"
            )
        return value

    @field_validator("spark_conf")
    @classmethod
    def _spark_keys(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [key for key in value if not key.startswith("spark.")]
        if bad:
            raise ValueError(
                f"keys must start with 'spark.'; got {', '.join(repr(key) for key in bad)}"
            )
        driver_volumes(value)  # a VolumeConfError (a ValueError) names the key
        return value


class DriverSpec(ApiModel):
    """Resources of the Spark driver pod, which also hosts the split coordinators."""

    cores: int = Field(default=1, ge=1, le=64, description="CPU cores for the driver.")
    memory: Quantity = Field(
        default=Quantity(1024**3),
        description="Driver memory (spark.driver.memory), for example 1g or 1536Mi.",
    )


class ExecutorSpec(ApiModel):
    """Resources of the Spark executors."""

    instances: int = Field(default=2, ge=1, le=1000, description="Number of executor pods.")
    cores: int = Field(default=1, ge=1, le=64, description="CPU cores per executor.")
    memory: Quantity = Field(
        default=Quantity(2 * 1024**3),
        description="Memory per executor (spark.executor.memory), for example 2g or 4Gi.",
    )


class RestoreSpec(ApiModel):
    """Where a new job starts from."""

    savepoint: str = Field(
        default="",
        description=(
            "Location of a savepoint to start from (as reported in status.savepoint.location); "
            "empty starts fresh."
        ),
    )
    allow_drained: bool = Field(
        default=False,
        description=(
            "Start from a drained savepoint anyway. A drained savepoint marks the end of the "
            "stream (event time at its maximum), so a job started from it emits no more windows."
        ),
    )


class StorageSpec(ApiModel):
    """The backend of the snapshot store."""

    type: StorageType = Field(
        default=StorageType.CONFIG_MAP,
        description=(
            "ConfigMap keeps snapshots in ConfigMaps of the job's namespace (small state, no "
            "setup); ObjectStore in a bucket addressed by url; Local in a directory (local runs)."
        ),
    )
    url: str | None = Field(
        default=None,
        description=(
            "For ObjectStore: s3://bucket/prefix, gs://bucket/prefix, hdfs://... or file:///path. "
            "For Local: a directory. Not used with ConfigMap."
        ),
    )
    secret_ref: str | None = Field(
        default=None,
        description=(
            "For ObjectStore: a Secret in the job's namespace whose keys (for example "
            "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) become the driver's environment."
        ),
    )

    @field_validator("url")
    @classmethod
    def _url_fits_type(cls, value: str | None, info: ValidationInfo) -> str | None:
        storage_type = info.data.get("type")
        if value is None:
            return value
        if storage_type is StorageType.CONFIG_MAP:
            raise ValueError("type ConfigMap takes no url; use type ObjectStore or Local")
        if storage_type is StorageType.OBJECT_STORE:
            scheme = urlsplit(value).scheme
            if scheme not in OBJECT_STORE_SCHEMES:
                raise ValueError(
                    f"{value!r} has the scheme {scheme or '(none)'!r}; ObjectStore accepts "
                    f"{', '.join(OBJECT_STORE_SCHEMES)}, for example s3://bucket/prefix"
                )
        return value

    @model_validator(mode="after")
    def _object_store_needs_url(self) -> Self:
        if self.type is StorageType.OBJECT_STORE and not self.url:
            raise ValueError(
                "type ObjectStore needs url, for example s3://bucket/prefix "
                f"(schemes: {', '.join(OBJECT_STORE_SCHEMES)})"
            )
        if self.type is StorageType.CONFIG_MAP and self.secret_ref:
            raise ValueError("type ConfigMap takes no secretRef; use type ObjectStore")
        return self


class CheckpointingSpec(ApiModel):
    """Periodic checkpoints: one per micro-batch, at most this often."""

    interval: Duration = Field(
        default=Duration(seconds=10),
        description="Trigger interval of micro-batches (each committed batch is a checkpoint).",
    )
    storage: StorageSpec = Field(
        default_factory=StorageSpec, description="Where checkpoints and savepoints are stored."
    )
    retained: int = Field(
        default=3,
        ge=1,
        le=100,
        description="How many completed checkpoints to keep; savepoints stay until disposed.",
    )

    @field_validator("interval")
    @classmethod
    def _positive_interval(cls, value: Duration) -> Duration:
        if value.total_seconds() <= 0:
            raise ValueError(f"must be longer than zero, got {str(value)!r}")
        return value


class EventStoreSpec(ApiModel):
    """Buffering of the batch job event log (FLIP-383)."""

    write_buffer_size: Quantity = Field(
        default=Quantity(1024**2),
        description="Flush the buffered job events when they reach this size.",
    )
    flush_interval: Duration = Field(
        default=Duration(seconds=1),
        description="Flush the buffered job events at least this often.",
    )


class RecoverySpec(ApiModel):
    """What happens when the driver is lost."""

    enabled: bool = Field(default=True, description="Start a new driver attempt after a crash.")
    max_attempts: int = Field(
        default=3,
        ge=0,
        le=100,
        description="Driver restarts allowed before the job is Failed.",
    )
    previous_worker_recovery_timeout: Duration = Field(
        default=Duration(seconds=30),
        description=(
            "Batch: how long a new driver waits for surviving shuffle pods to re-register "
            "their partitions before it recomputes what is missing."
        ),
    )
    snapshot_min_pause: Duration = Field(
        default=Duration(minutes=3),
        description="Batch: minimum pause between coordinator snapshots in the job event log.",
    )
    event_store: EventStoreSpec = Field(
        default_factory=EventStoreSpec, description="Batch: buffering of the job event log."
    )


class ShuffleStorageSpec(ApiModel):
    """The volume of each shuffle pod."""

    size: Quantity = Field(
        default=Quantity(10 * 1024**3), description="Volume size per shuffle pod, such as 10Gi."
    )
    storage_class_name: str | None = Field(
        default=None, description="StorageClass of the volume; the cluster default when unset."
    )

    @field_validator("size")
    @classmethod
    def _positive_size(cls, value: Quantity) -> Quantity:
        if value <= 0:
            raise ValueError("must be larger than zero")
        return value


class ShuffleSpec(ApiModel):
    """Shuffle pods that keep result partitions alive across driver crashes (Batch mode only)."""

    replicas: int = Field(default=2, ge=1, le=100, description="Number of shuffle pods.")
    storage: ShuffleStorageSpec = Field(
        default_factory=ShuffleStorageSpec, description="Volume of each shuffle pod."
    )
    retain_timeout: Duration = Field(
        default=Duration(minutes=5),
        description=(
            "How long shuffle pods keep a job's partitions after its driver stopped "
            "heartbeating; the reconnect window of a new driver attempt."
        ),
    )

    @field_validator("retain_timeout")
    @classmethod
    def _positive_timeout(cls, value: Duration) -> Duration:
        if value.total_seconds() <= 0:
            raise ValueError(f"must be longer than zero, got {str(value)!r}")
        return value


class FinishableSparkJobSpec(ApiModel):
    """The desired state of a FinishableSparkJob."""

    image: str = Field(
        default="finishable-spark-operator:0.1.0",
        min_length=1,
        description="Container image for the driver, executors and shuffle pods.",
    )
    mode: JobMode = Field(default=JobMode.STREAMING, description="Streaming or Batch.")
    application: ApplicationSpec = Field(description="The PySpark program to run.")
    driver: DriverSpec = Field(default_factory=DriverSpec, description="Driver resources.")
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec, description="Executor resources.")
    state: DesiredState = Field(
        default=DesiredState.RUNNING,
        description=(
            "Running; Suspended stops with a savepoint (resume by setting Running again); "
            "Finished stops with a savepoint and drain: every pending window fires, sinks "
            "commit and the job ends."
        ),
    )
    savepoint_trigger_nonce: int = Field(
        default=0,
        ge=0,
        description="Change this number to take a savepoint without stopping the job.",
    )
    restore_from: RestoreSpec = Field(
        default_factory=RestoreSpec, description="Start from a savepoint."
    )
    checkpointing: CheckpointingSpec = Field(
        default_factory=CheckpointingSpec, description="Checkpoints and their storage."
    )
    recovery: RecoverySpec = Field(
        default_factory=RecoverySpec, description="Driver crash recovery."
    )
    shuffle: ShuffleSpec | None = Field(
        default=None,
        description=(
            "Shuffle pods (Batch mode only; two pods of 10Gi with a 5m retain timeout when unset)."
        ),
    )
    stop_timeout: Duration = Field(
        default=Duration(minutes=10),
        description=(
            "How long a stop with savepoint or a drain may take before it is cancelled, the job "
            "is marked Degraded and keeps running."
        ),
    )

    @field_validator("shuffle")
    @classmethod
    def _shuffle_only_in_batch(
        cls, value: ShuffleSpec | None, info: ValidationInfo
    ) -> ShuffleSpec | None:
        if value is not None and info.data.get("mode", JobMode.STREAMING) is JobMode.STREAMING:
            raise ValueError(
                "shuffle pods are only used in Batch mode; remove spec.shuffle or set "
                "spec.mode: Batch"
            )
        return value

    @property
    def effective_shuffle(self) -> ShuffleSpec:
        """The shuffle settings a Batch job runs with (the defaults when unset)."""
        return self.shuffle if self.shuffle is not None else ShuffleSpec()


# ---------------------------------------------------------------------------------------------
# status


class LifecycleTaskStatus(ApiModel):
    """One task's place in the FLIP-147 lifecycle table, as the driver reports it."""

    name: str = Field(description="Task name: operator or stage and subtask, such as parse[3].")
    kind: TaskKind = Field(default=TaskKind.SOURCE, description="SOURCE or NON_SOURCE.")
    task_status: TaskStatus = Field(description="Stream task status from the lifecycle table.")
    operator_status: OperatorStatus = Field(description="Operator status from the table.")


class LifecycleStatus(ApiModel):
    """The termination the driver is walking through, if any."""

    mode: LifecycleMode | None = Field(
        default=None, description="FINAL_CHECKPOINT, STOP_WITH_SAVEPOINT_DRAIN or ..._SAVEPOINT."
    )
    tasks: list[LifecycleTaskStatus] = Field(
        default_factory=list, description="Per-task lifecycle state."
    )


class CheckpointStatus(ApiModel):
    """The newest completed checkpoint."""

    id: int = Field(ge=0, description="Checkpoint id: the committed micro-batch or stage id.")
    location: str = Field(default="", description="Where the checkpoint is stored.")
    time: datetime | None = Field(default=None, description="When it completed.")


class SavepointStatus(ApiModel):
    """The newest savepoint."""

    location: str = Field(description="Where the savepoint is stored; use it in restoreFrom.")
    drained: bool = Field(default=False, description="Taken by a stop with drain.")
    time: datetime | None = Field(default=None, description="When it completed.")
    request_id: str | None = Field(default=None, description="The request that produced it.")


class CoordinatorStatus(ApiModel):
    """Split progress of the sources' coordinators."""

    snapshot: str | None = Field(default=None, description="Location of the newest snapshot.")
    splits_total: int = Field(default=0, ge=0, description="Splits discovered.")
    splits_finished: int = Field(default=0, ge=0, description="Splits fully read.")


class RecoveryStatus(ApiModel):
    """What the last driver crash cost and saved."""

    reason: str = Field(default="", description="Why the last driver attempt was lost.")
    next_attempt_at: datetime | None = Field(
        default=None, description="When the next driver attempt starts (backoff)."
    )
    driver_lost_at: datetime | None = Field(default=None, description="When the driver was lost.")
    shuffle_retained_until: datetime | None = Field(
        default=None, description="Shuffle pods are deleted then unless a new driver reconnects."
    )
    tasks_skipped: int = Field(default=0, ge=0, description="Finished tasks not run again.")
    tasks_rerun: int = Field(default=0, ge=0, description="Tasks run again.")
    splits_reread: int = Field(default=0, ge=0, description="Finished splits read again.")


class RequestAction(StrEnum):
    """Control requests the operator (or ``finishable stop``) sends to a running driver."""

    STOP = "stop"
    SAVEPOINT = "savepoint"


class ControlRequest(ApiModel):
    """A stop or savepoint request: written to ``<job>-control``, kept in status while in flight."""

    id: str = Field(min_length=1, description="Request id, echoed by the driver in its answer.")
    attempt: int | None = Field(
        default=None,
        ge=1,
        description="The driver attempt it is meant for; other attempts ignore it.",
    )
    action: RequestAction = Field(description="stop (with a savepoint) or savepoint (no stop).")
    drain: bool = Field(default=False, description="Stop with drain: fire every pending window.")
    target_directory: str | None = Field(
        default=None, description="Where to write the savepoint; the job's storage when unset."
    )
    requested_at: datetime | None = Field(default=None, description="When it was sent.")


class Condition(ApiModel):
    """A Kubernetes-style condition."""

    type: ConditionType = Field(description="Ready, Progressing or Degraded.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(default="", description="One CamelCase word for machines.")
    message: str = Field(default="", description="A sentence for people.")
    last_transition_time: datetime | None = Field(
        default=None, description="When status last changed."
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The spec generation the condition was set for."
    )


class FinishableSparkJobStatus(ApiModel):
    """The observed state of a FinishableSparkJob, written by the operator only."""

    phase: Phase = Field(default=Phase.PENDING, description="Where the job is in its life.")
    phase_since: datetime | None = Field(default=None, description="When the phase was entered.")
    message: str = Field(default="", description="Why the job is in its phase.")
    observed_generation: int = Field(
        default=0, ge=0, description="The spec generation this status reflects."
    )
    attempt: int = Field(default=0, ge=0, description="Driver attempt number, from 1.")
    restarts: int = Field(default=0, ge=0, description="Driver restarts after crashes.")
    restore_from: str = Field(
        default="",
        description=(
            "The savepoint the current run started from; a recovered attempt falls back to it "
            "when the run has no checkpoint yet."
        ),
    )
    lifecycle: LifecycleStatus = Field(
        default_factory=LifecycleStatus, description="The FLIP-147 lifecycle state."
    )
    last_checkpoint: CheckpointStatus | None = Field(
        default=None, description="The newest completed checkpoint."
    )
    savepoint: SavepointStatus | None = Field(default=None, description="The newest savepoint.")
    savepoint_trigger_nonce: int = Field(
        default=0, ge=0, description="The spec.savepointTriggerNonce last acted on."
    )
    pending_request: ControlRequest | None = Field(
        default=None, description="A stop or savepoint request in flight."
    )
    coordinator: CoordinatorStatus = Field(
        default_factory=CoordinatorStatus, description="Split progress."
    )
    recovery: RecoveryStatus = Field(
        default_factory=RecoveryStatus, description="Crash recovery figures."
    )
    conditions: list[Condition] = Field(
        default_factory=list, description="Ready, Progressing and Degraded."
    )


class ObjectMeta(BaseModel):
    """The parts of metadata the project reads; everything else passes through untouched."""

    model_config = ConfigDict(extra="allow")

    name: str
    namespace: str | None = None
    generation: int | None = None
    uid: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _job_name(cls, value: str) -> str:
        if not is_valid_job_name(value):
            raise ValueError(
                f"{value!r} is not a valid job name: use at most {JOB_NAME_MAX_LENGTH} lowercase "
                "letters, digits and '-', starting with a letter and ending with a letter or digit "
                "(child objects such as <name>-shuffle-headless are derived from it)"
            )
        return value


class FinishableSparkJob(BaseModel):
    """A whole manifest: apiVersion, kind, metadata, spec (and status when read back)."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    api_version: str = Field(alias="apiVersion")
    kind: str
    metadata: ObjectMeta
    spec: FinishableSparkJobSpec
    status: FinishableSparkJobStatus | None = None

    @field_validator("api_version")
    @classmethod
    def _api_version(cls, value: str) -> str:
        expected = f"{API_GROUP}/{API_VERSION}"
        if value != expected:
            raise ValueError(f"must be {expected!r}, got {value!r}")
        return value

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if value != KIND:
            raise ValueError(f"must be {KIND!r}, got {value!r}")
        return value


def is_valid_job_name(name: str) -> bool:
    """Whether a job name leaves room for every child object name derived from it."""
    return len(name) <= JOB_NAME_MAX_LENGTH and re.fullmatch(JOB_NAME_PATTERN, name) is not None


def dump(model: BaseModel) -> dict[str, Any]:
    """The wire form (camelCase, strings for durations and quantities, no unset optionals)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)
