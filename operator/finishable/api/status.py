"""The ``status`` of a FinishableSparkJob: what the operator observed, as pydantic v2 models.

The phase and its conditions, the FLIP-147 lifecycle of the tasks, the newest checkpoint and
savepoint, split progress, what the last driver crash cost, and the control request in flight
(which is also what the operator writes to ``<job>-control``). The operator is the one writer of
the status; the driver reports the parts it knows (:mod:`finishable.api.control`).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from finishable.api.lifecycle import LifecycleMode, OperatorStatus, TaskKind, TaskStatus
from finishable.api.models import (
    ApiModel,
    ConditionStatus,
    ConditionType,
    DepartureReason,
    Phase,
    RequestAction,
    SavepointTrigger,
    Transition,
    UpgradeCheckState,
)


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
    id: int | None = Field(
        default=None, ge=0, description="The micro-batch (checkpoint) id it holds, when known."
    )
    size_bytes: int | None = Field(default=None, ge=0, description="Its size, when known.")


class ClusterPartitionStatus(ApiModel):
    """A cluster partition the job promoted (docs/cluster-partitions.md); it outlives the job,
    and may since have been deleted or have expired: the partition service is the reference."""

    id: str = Field(description="Its id: what restores, reads and deletes name.")
    name: str = Field(description="<job>/<dataset>.")
    rows: int = Field(default=0, ge=0, description="Rows.")
    bytes: int = Field(default=0, ge=0, description="Bytes in the partition storage.")
    expires_at: datetime | None = Field(default=None, description="When its time to live ends.")


class CoordinatorStatus(ApiModel):
    """Split progress of the sources' coordinators."""

    snapshot: str | None = Field(default=None, description="Location of the newest snapshot.")
    splits_total: int = Field(default=0, ge=0, description="Splits discovered.")
    splits_finished: int = Field(default=0, ge=0, description="Splits fully read.")


class QueryStatus(ApiModel):
    """One query of a Streaming job of several: its own checkpoints and input."""

    name: str = Field(description="The query's name (its sink's, or write_stream(name=...)).")
    last_checkpoint: CheckpointStatus | None = Field(
        default=None, description="The query's newest completed checkpoint."
    )
    splits_total: int = Field(default=0, ge=0, description="Splits its sources discovered.")
    splits_finished: int = Field(default=0, ge=0, description="Splits it fully read.")


class SourceLoad(ApiModel):
    """How far one source is behind, and how fast it is read (the autoscaler's catch-up)."""

    name: str = Field(description="The source's name.")
    unit: str = Field(description="splits (files) or offsets (Kafka).")
    backlog: int = Field(ge=0, description="Input not read yet, in unit.")
    read_per_second: float = Field(ge=0, description="Input read per second over the window.")
    arrived_per_second: float = Field(
        ge=0, description="Input that arrived per second over the window (read plus growth)."
    )


class LoadReport(ApiModel):
    """What the driver's micro-batches cost over the autoscaler's metrics window."""

    window_seconds: float = Field(ge=0, description="The span measured.")
    batches: int = Field(ge=0, description="Micro-batches that ran in it.")
    busy: float = Field(
        ge=0,
        description=(
            "The share of the window spent in micro-batches (of every query: above 1 when "
            "queries run at once)."
        ),
    )
    rows_per_second: float = Field(ge=0, description="Rows read per second over the window.")
    sources: list[SourceLoad] = Field(default_factory=list, description="Per source.")


class RecommendationStatus(ApiModel):
    """The autoscaler's recommendation from ``since`` on (until the next one)."""

    since: datetime = Field(description="When it was first made.")
    executors: int = Field(ge=1, description="The executors recommended.")


class RescaleStatus(ApiModel):
    """A rescale the autoscaler started."""

    started_at: datetime = Field(description="When it was decided (the stop was asked for).")
    from_executors: int = Field(ge=1, description="The executors the job ran with.")
    to_executors: int = Field(ge=1, description="The executors it restarts with.")
    reason: str = Field(default="", description="Why.")


class AutoscalerStatus(ApiModel):
    """What the autoscaler (spec.autoscaler) measured, recommends and did."""

    executors: int = Field(
        ge=1, description="The executors it set: the next driver attempt starts with them."
    )
    recommended: int | None = Field(
        default=None, ge=1, description="The executors the newest load asks for."
    )
    reason: str = Field(default="", description="Why, from the load below.")
    load: LoadReport | None = Field(
        default=None, description="The newest load the driver reported (its metrics window)."
    )
    recommendations: list[RecommendationStatus] = Field(
        default_factory=list,
        description="The recommendations within the stabilization window, oldest first.",
    )
    rescales: int = Field(default=0, ge=0, description="Rescales started.")
    last_rescale: RescaleStatus | None = Field(default=None, description="The newest rescale.")


class TransitionStatus(ApiModel):
    """The lifecycle transition under way."""

    kind: Transition = Field(description="submission, resume, upgrade, suspend, drain or recovery.")
    started_at: datetime = Field(description="When it began.")


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


class DepartureStatus(ApiModel):
    """A driver Kubernetes asked to leave: a planned move, not charged to the restart budget."""

    attempt: int = Field(ge=1, description="The driver attempt that was asked to leave.")
    reason: DepartureReason = Field(
        description="Evicted, NodeDrain, Preempted, NodeLost, PodDeleted or Terminated."
    )
    since: datetime | None = Field(default=None, description="When the operator saw it leave.")
    node: str = Field(default="", description="The node it left.")
    savepoint: str = Field(
        default="",
        description="The savepoint it took on its way out; empty when it had no time to take "
        "one (the next attempt resumes from its newest checkpoint).",
    )


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
    trigger: SavepointTrigger | None = Field(
        default=None, description="Why: manual, periodic, stop, drain or upgrade."
    )


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


class UpgradeCheckStatus(ApiModel):
    """The check of an upgraded spec against the running job's state (spec.upgradeCheck)."""

    revision: str = Field(description="The spec revision checked.")
    generation: int = Field(default=0, ge=0, description="The spec generation it was made for.")
    state: UpgradeCheckState = Field(description="Checking, Passed or Refused.")
    started_at: datetime = Field(description="When the check pod was asked for.")
    message: str = Field(default="", description="Why it was refused.")


class FinishableSparkJobStatus(ApiModel):
    """The observed state of a FinishableSparkJob, written by the operator only."""

    phase: Phase = Field(default=Phase.PENDING, description="Where the job is in its life.")
    phase_since: datetime | None = Field(default=None, description="When the phase was entered.")
    expires_at: datetime | None = Field(
        default=None,
        description=(
            "Finished or Failed with a time to live (spec.ttlAfterFinished, spec.ttlAfterFailed "
            "or the operator's default): when the operator deletes the job (phaseSince plus it)."
        ),
    )
    message: str = Field(default="", description="Why the job is in its phase.")
    observed_generation: int = Field(
        default=0, ge=0, description="The spec generation this status reflects."
    )
    run: int = Field(
        default=0,
        ge=0,
        description=(
            "Run number, from 1: a restart from scratch (spec.restartFrom: Scratch) starts the "
            "next run. The job's uid and this number key every piece of its state."
        ),
    )
    attempt: int = Field(default=0, ge=0, description="Driver attempt number, from 1.")
    shuffle_replicas: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Batch: the shuffle pods of the current run (spec.shuffle.replicas when the run "
            "started). Partitions are placed by pod, so a change of the spec applies to the "
            "next run."
        ),
    )
    executors: int | None = Field(
        default=None,
        ge=1,
        description=(
            "The executor pods the current driver attempt was started with (spec.executor."
            "instances, or the autoscaler's count)."
        ),
    )
    autoscaler: AutoscalerStatus | None = Field(
        default=None, description="Streaming with spec.autoscaler: its measure and decisions."
    )
    restarts: int = Field(default=0, ge=0, description="Driver restarts after crashes.")
    departures: int = Field(
        default=0,
        ge=0,
        description=(
            "Driver attempts Kubernetes asked to leave (eviction, node drain, pod deletion) and "
            "that the next attempt replaced; not charged to the restart budget."
        ),
    )
    departure: DepartureStatus | None = Field(
        default=None,
        description="The driver's departure under way, else the last one.",
    )
    recent_losses: list[datetime] = Field(
        default_factory=list,
        description="When the driver losses that count against the restart budget happened.",
    )
    restarts_left: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Driver losses the job survives now: spec.recovery.maxAttempts minus the losses "
            "within spec.recovery.failureRateInterval."
        ),
    )
    restore_from: str = Field(
        default="",
        description=(
            "The savepoint the current run started from; a recovered attempt falls back to it "
            "when the run has no checkpoint yet."
        ),
    )
    periodic_savepoint_due: datetime | None = Field(
        default=None,
        description="When the next periodic savepoint (spec.savepoints.interval) is taken.",
    )
    spec_revision: str | None = Field(
        default=None,
        description=(
            "The revision (a hash of image, application, driver, executor, imagePullSecrets and "
            "workVolume) of the spec the current driver attempt was started with; a Running job "
            "whose spec has another one is upgraded as spec.upgradeMode says."
        ),
    )
    upgrade_check: UpgradeCheckStatus | None = Field(
        default=None,
        description="The check of the pending upgrade's spec revision, while one is pending.",
    )
    lifecycle: LifecycleStatus = Field(
        default_factory=LifecycleStatus, description="The FLIP-147 lifecycle state."
    )
    last_checkpoint: CheckpointStatus | None = Field(
        default=None, description="The newest completed checkpoint."
    )
    savepoint: SavepointStatus | None = Field(default=None, description="The newest savepoint.")
    cluster_partitions: list[ClusterPartitionStatus] = Field(
        default_factory=list, description="Batch: the cluster partitions the run promoted."
    )
    savepoint_trigger_nonce: int = Field(
        default=0, ge=0, description="The spec.savepointTriggerNonce last acted on."
    )
    restart_nonce: int = Field(default=0, ge=0, description="The spec.restartNonce last acted on.")
    pending_request: ControlRequest | None = Field(
        default=None, description="A stop or savepoint request in flight."
    )
    coordinator: CoordinatorStatus = Field(
        default_factory=CoordinatorStatus, description="Split progress."
    )
    queries: list[QueryStatus] = Field(
        default_factory=list,
        description=(
            "A Streaming job of several queries: each query's newest checkpoint and split "
            "progress (lastCheckpoint is the newest of any; the health check watches each)."
        ),
    )
    recovery: RecoveryStatus = Field(
        default_factory=RecoveryStatus, description="Crash recovery figures."
    )
    transition: TransitionStatus | None = Field(
        default=None, description="The lifecycle transition under way, if any."
    )
    conditions: list[Condition] = Field(
        default_factory=list, description="Ready, Progressing and Degraded."
    )
    failed_spec_hash: str | None = Field(
        default=None,
        description=(
            "Failed: a hash of the spec the status was decided on, ttlAfterFinished and "
            "ttlAfterFailed left out, so that an edit of those alone does not restart the job."
        ),
    )
