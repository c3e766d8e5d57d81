"""The ``spec`` of a FinishableSparkJob: what the user asks for, as pydantic v2 models.

The program and its resources, the desired state, where snapshots are stored and when they are
taken, how a lost driver is recovered, how an edit is applied (:attr:`revision`) and how long an
ended job is kept. Validators reject what can never run (an unknown URL scheme, a ConfigMap store
with a URL, shuffle pods in Streaming mode) with a message that says what to write instead; the
CRD's schema is generated from these models. The program and its dependencies are
:mod:`finishable.api.application`, the pods' own settings (driver, executors, the work volume)
:mod:`finishable.api.pods`, a Batch job's shuffle pods and cluster partitions
:mod:`finishable.api.batchspec`, savepoints and the upgrade check
:mod:`finishable.api.savepointspec`, crash recovery :mod:`finishable.api.recoveryspec`, the
executors' autoscaler :mod:`finishable.api.autoscalerspec`.
"""

from __future__ import annotations

import hashlib
import json

from pydantic import Field, field_validator

from finishable.api.application import ApplicationSpec
from finishable.api.autoscalerspec import AutoscalerSpec
from finishable.api.batchspec import ClusterPartitionsSpec, ShuffleSpec
from finishable.api.models import (
    OBJECT_STORE_SCHEMES,
    ApiModel,
    DesiredState,
    JobMode,
    RestartFrom,
    RetainOnDelete,
    StorageType,
    UpgradeMode,
)
from finishable.api.pods import DriverSpec, ExecutorSpec, WorkVolumeSpec
from finishable.api.recoveryspec import RecoverySpec
from finishable.api.rules import Not, Rule, all_of, any_of, field, has, implies, unset
from finishable.api.savepointspec import SavepointsSpec, UpgradeCheckSpec
from finishable.api.units import Duration, positive


class RestoreSpec(ApiModel):
    """Where a new job starts from."""

    savepoint: str = Field(
        default="",
        description=(
            "Location of a savepoint to start from (as reported in status.savepoint.location); "
            "empty starts fresh."
        ),
    )
    snapshot_ref: str = Field(
        default="",
        max_length=253,
        description=(
            "The name of a FinishableSparkSnapshot in the job's namespace to start from (its "
            "status.location), instead of savepoint; it must be Completed."
        ),
    )
    allow_drained: bool = Field(
        default=False,
        description=(
            "Start from a drained savepoint anyway. A drained savepoint marks the end of the "
            "stream (event time at its maximum), so a job started from it emits no more windows."
        ),
    )
    allow_non_restored_state: bool = Field(
        default=False,
        description=(
            "Streaming, several queries: start from a savepoint (or, in an upgrade, a running "
            "job) that holds queries this program no longer has; their state is dropped, as "
            "Flink's allowNonRestoredState. A query the savepoint does not hold starts from "
            "nothing either way."
        ),
    )
    allow_sink_ahead: bool = Field(
        default=False,
        description=(
            "Streaming: start although the sink already published batches after the savepoint "
            "(or, starting from nothing, any batch). The sink keeps what it has and drops the "
            "batches of this run that reuse those ids; without this the start is refused."
        ),
    )

    RULES = (
        Rule(
            any_of(field("savepoint").eq(""), field("snapshotRef").eq("")),
            (
                "savepoint (",
                field("savepoint"),
                ") and snapshotRef (",
                field("snapshotRef"),
                ") are both set; set only one (snapshotRef names a FinishableSparkSnapshot, "
                "savepoint a location)",
            ),
            field=".snapshotRef",
        ),
    )


class StorageSpec(ApiModel):
    """The backend of the checkpoint store."""

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

    RULES = (
        Rule(
            implies(field("type").eq(StorageType.CONFIG_MAP.value), Not(has(field("url")))),
            ("type ConfigMap takes no url (", field("url"), "); use type ObjectStore or Local"),
            field=".url",
            reason="FieldValueForbidden",
        ),
        Rule(
            implies(
                field("type").eq(StorageType.OBJECT_STORE.value),
                all_of(has(field("url")), field("url").ne("")),
            ),
            (
                "type ObjectStore needs url, for example s3://bucket/prefix "
                f"(schemes: {', '.join(OBJECT_STORE_SCHEMES)})",
            ),
            reason="FieldValueRequired",
        ),
        Rule(
            implies(
                all_of(field("type").eq(StorageType.OBJECT_STORE.value), has(field("url"))),
                field("url").matches(f"^({'|'.join(OBJECT_STORE_SCHEMES)})://"),
            ),
            (
                field("url"),
                f" is not an object store URL; ObjectStore accepts "
                f"{', '.join(f'{scheme}://' for scheme in OBJECT_STORE_SCHEMES)}, for example "
                "s3://bucket/prefix",
            ),
            field=".url",
        ),
        Rule(
            implies(field("type").eq(StorageType.CONFIG_MAP.value), Not(has(field("secretRef")))),
            ("type ConfigMap takes no secretRef (", field("secretRef"), "); use type ObjectStore"),
            field=".secretRef",
            reason="FieldValueForbidden",
        ),
    )


class CheckpointHealthSpec(ApiModel):
    """The checkpoint-progress health check of a Running streaming job."""

    max_missed_intervals: int = Field(
        default=10,
        ge=0,
        le=100_000,
        description=(
            "A Running job with unread input and no checkpoint for this many checkpoint "
            "intervals is marked Degraded (reason CheckpointsStalled); 0 turns the check off."
        ),
    )
    restart_driver: bool = Field(
        default=False,
        description=(
            "Also replace a stalled job's driver, as after a crash (it counts against "
            "spec.recovery.maxAttempts)."
        ),
    )


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
    health: CheckpointHealthSpec = Field(
        default_factory=CheckpointHealthSpec,
        description="Streaming: what happens when checkpoints stop completing.",
    )
    retain_on_delete: RetainOnDelete = Field(
        default=RetainOnDelete.SAVEPOINTS,
        description=(
            "ConfigMap storage: which state objects outlive the job when it is deleted "
            "(Savepoints, Nothing or Everything). They are owned by the job, so whatever is not "
            "retained goes with it. Object storage is never deleted by the operator."
        ),
    )

    @field_validator("interval")
    @classmethod
    def _positive_interval(cls, value: Duration) -> Duration:
        return positive(value)


class FinishableSparkJobSpec(ApiModel):
    """The desired state of a FinishableSparkJob."""

    RULES = (
        Rule(
            implies(field("mode").eq(JobMode.STREAMING.value), Not(has(field("shuffle")))),
            (
                "shuffle pods are only used in Batch mode; remove spec.shuffle or set "
                "spec.mode: Batch",
            ),
            field=".shuffle",
            reason="FieldValueForbidden",
        ),
        Rule(
            implies(
                field("mode").eq(JobMode.BATCH.value), unset(field("savepoints"), SavepointsSpec)
            ),
            (
                "a Batch job takes no savepoints (its job event log and shuffle partitions are "
                "its state); remove spec.savepoints or set spec.mode: Streaming",
            ),
            field=".savepoints",
            reason="FieldValueForbidden",
        ),
    )

    image: str = Field(
        default="finishable-spark-operator:0.1.0",
        min_length=1,
        description="Container image for the driver, executors and shuffle pods.",
    )
    mode: JobMode = Field(default=JobMode.STREAMING, description="Streaming or Batch.")
    application: ApplicationSpec = Field(description="The PySpark program to run.")
    driver: DriverSpec = Field(default_factory=DriverSpec, description="Driver resources.")
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec, description="Executor resources.")
    image_pull_secrets: list[str] = Field(
        default_factory=list,
        description="Secrets to pull the image with, for the driver, executor and shuffle pods.",
    )
    work_volume: WorkVolumeSpec | None = Field(
        default=None,
        description=(
            "A ReadWriteMany volume the driver and every executor pod mount, for Spark's live "
            "checkpoint (state-store files that executors write) and sink staging. Required by "
            "a stateful Streaming query (aggregations, deduplication, stream joins) on executor "
            "pods; unset, the driver keeps them in its own pod (enough for stateless queries and "
            "local[N])."
        ),
    )
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
    restart_nonce: int = Field(
        default=0,
        ge=0,
        description=(
            "Change this number to restart a Failed job, from where restartFrom says. Every "
            "other phase leaves it alone (a Finished job stays finished: create a new job)."
        ),
    )
    restart_from: RestartFrom = Field(
        default=RestartFrom.LAST_CHECKPOINT,
        description=(
            "LastCheckpoint continues the failed run from its newest checkpoint (Batch: its "
            "finished tasks); Scratch starts a new run that shares no state with the failed "
            "one (from restoreFrom's savepoint when one is named, else from nothing)."
        ),
    )
    savepoints: SavepointsSpec = Field(
        default_factory=SavepointsSpec,
        description="Periodic savepoints (Streaming).",
    )
    upgrade_mode: UpgradeMode = Field(
        default=UpgradeMode.SAVEPOINT,
        description=(
            "How a change to image, application, driver, executor, imagePullSecrets or "
            "workVolume of a Running job is applied: savepoint (stop with savepoint, start the "
            "new spec from it), last-state (a new driver resumes from the newest checkpoint, "
            "without a stop) or stateless (a new run from nothing). A Batch run keeps the spec "
            "it started with unless stateless."
        ),
    )
    upgrade_check: UpgradeCheckSpec = Field(
        default_factory=UpgradeCheckSpec,
        description=(
            "Streaming, upgradeMode savepoint or last-state: check the new spec against the "
            "running job's state before stopping it."
        ),
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
    cluster_partitions: ClusterPartitionsSpec = Field(
        default_factory=ClusterPartitionsSpec,
        description="Batch: where promoted datasets (cluster partitions) are kept, and how long.",
    )
    autoscaler: AutoscalerSpec = Field(
        default_factory=AutoscalerSpec,
        description=(
            "Size the executors from the load, within bounds. Streaming: a rescale is a stop "
            "with savepoint and a restart with the new count; Batch: Spark's dynamic "
            "allocation (docs/autoscaler.md)."
        ),
    )
    stop_timeout: Duration = Field(
        default=Duration(minutes=10),
        description=(
            "How long a stop with savepoint or a drain may take before it is cancelled, the job "
            "is marked Degraded and keeps running."
        ),
    )
    ttl_after_finished: Duration | None = Field(
        default=None,
        description=(
            "Delete the job this long after it became Finished (e.g. 24h; 0s: at once). The "
            "deletion goes through the job's finalizer: savepoints and FinishableSparkSnapshots "
            "stay as checkpointing.retainOnDelete says. Unset: the operator's default "
            "(--ttl-after-finished), else the job is kept."
        ),
    )
    ttl_after_failed: Duration | None = Field(
        default=None,
        description=(
            "Delete the job this long after it became Failed (e.g. 7d; 0s: at once), as "
            "ttlAfterFinished does. A restart (restartNonce, or any edit but one of the two "
            "ttl fields alone) leaves Failed and this clock with it. Unset: the operator's "
            "default (--ttl-after-failed), else the job is kept."
        ),
    )

    @property
    def executors(self) -> int:
        """The executor pods a new run starts with: spec.executor.instances, within the
        autoscaler's bounds when it is on."""
        instances = self.executor.instances
        return self.autoscaler.bounded(instances) if self.autoscaler.enabled else instances

    def sized(self, executors: int | None) -> FinishableSparkJobSpec:
        """The spec a Streaming driver attempt runs: with the autoscaler on, ``executors`` (the
        attempt's count, ``status.executors``) in place of spec.executor.instances."""
        if not self.autoscaler.enabled or self.mode is JobMode.BATCH or executors is None:
            return self
        executor = self.executor.model_copy(update={"instances": executors})
        return self.model_copy(update={"executor": executor})

    @property
    def effective_shuffle(self) -> ShuffleSpec:
        """The shuffle settings a Batch job runs with (the defaults when unset)."""
        return self.shuffle if self.shuffle is not None else ShuffleSpec()

    @property
    def revision(self) -> str:
        """A hash of what the driver pod and its program are built from (:data:`REVISION_FIELDS`):
        when it changes on a Running job, only a new driver applies the change. Values left at
        their defaults are not hashed, so a release that adds a field does not upgrade every
        running job."""
        fields = self.model_dump(
            by_alias=True, mode="json", include=set(REVISION_FIELDS), exclude_defaults=True
        )
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


REVISION_FIELDS = (
    "image",
    "application",
    "driver",
    "executor",
    "image_pull_secrets",
    "work_volume",
)
"""The spec fields a driver attempt is started with and cannot change while it runs. The others
act on the running job (state, nonces, stopTimeout), on the next attempt's recovery or restore
(recovery, restoreFrom, restartFrom) or on what the controller does (checkpoint health, the time
to live of a Finished or Failed job)."""
