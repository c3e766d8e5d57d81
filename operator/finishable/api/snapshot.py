"""The FinishableSparkSnapshot custom resource: one completed savepoint of a job, as an object.

A job's status holds only its newest savepoint (``status.savepoint``). The operator records every
savepoint it sees complete as a FinishableSparkSnapshot in the job's namespace, owned by the job,
so ``kubectl get fsjsnap`` lists them and a new job can start from one by name
(``spec.restoreFrom.snapshotRef``). The CRD's schema is generated from these models
(:mod:`finishable.api.crd`), like the job's.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from finishable.api.models import ApiModel, SavepointTrigger

SNAPSHOT_KIND = "FinishableSparkSnapshot"
SNAPSHOT_PLURAL = "finishablesparksnapshots"
SNAPSHOT_SINGULAR = "finishablesparksnapshot"
SNAPSHOT_SHORT_NAME = "fsjsnap"


class SnapshotState(StrEnum):
    """Where a snapshot is in its life."""

    PENDING = "Pending"
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    FAILED = "Failed"
    ABANDONED = "Abandoned"


class SnapshotKind(StrEnum):
    """A savepoint, or the drained savepoint a stop with drain ends with."""

    SAVEPOINT = "savepoint"
    DRAIN = "drain"


class FinishableSparkSnapshotSpec(ApiModel):
    """What the snapshot is of. Created by hand with only jobName (no status), it asks the
    operator for a savepoint of that running job, recorded here when it completes."""

    job_name: str | None = Field(
        default=None, description="The FinishableSparkJob (same namespace) it is a snapshot of."
    )
    dispose_on_delete: bool = Field(
        default=False,
        description=(
            "Deleting this snapshot deletes its savepoint's files too (the operator's finalizer "
            "does it before the snapshot goes). Set from the job's "
            "spec.savepoints.disposeOnDelete when the operator records it."
        ),
    )


class FinishableSparkSnapshotStatus(ApiModel):
    """The snapshot as the operator recorded it, written by the operator only."""

    state: SnapshotState = Field(
        default=SnapshotState.PENDING,
        description="Pending, InProgress, Completed, Failed or Abandoned.",
    )
    message: str = Field(default="", description="Why the snapshot is in its state.")
    location: str = Field(
        default="", description="Where the savepoint is stored (what restoreFrom.savepoint takes)."
    )
    kind: SnapshotKind = Field(
        default=SnapshotKind.SAVEPOINT, description="savepoint, or drain (a drained savepoint)."
    )
    trigger: SavepointTrigger = Field(
        default=SavepointTrigger.MANUAL,
        description="What asked for it: manual, stop, drain, periodic or upgrade.",
    )
    checkpoint_id: int | None = Field(
        default=None, ge=0, description="The micro-batch (checkpoint) id it holds, when known."
    )
    drained: bool = Field(
        default=False, description="Taken by a stop with drain: event time is at its maximum."
    )
    size_bytes: int | None = Field(default=None, ge=0, description="Its size, when known.")
    job_uid: str = Field(default="", description="The uid of the job that took it.")
    run: int | None = Field(default=None, ge=0, description="The job's run it belongs to.")
    request_id: str | None = Field(default=None, description="The request that produced it.")
    trigger_nonce: int | None = Field(
        default=None,
        ge=0,
        description=(
            "A snapshot created by hand: the job's spec.savepointTriggerNonce the operator set to "
            "take it."
        ),
    )
    time: datetime | None = Field(default=None, description="When it completed.")
