"""The control channel's wire format: the driver's report and its answers to requests.

The operator never calls into the driver. It writes a :class:`~finishable.api.status.ControlRequest`
to ``<job>-control``; the driver answers with a :class:`DriverReport` in ``<job>-state`` (locally:
two files in the job's directory). Both sides validate what they read with these models, so a
report written by a newer or broken driver is refused with a message instead of misread.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from finishable.api.models import ApiModel, RequestAction, SavepointTrigger
from finishable.api.status import (
    CheckpointStatus,
    ClusterPartitionStatus,
    ControlRequest,
    CoordinatorStatus,
    LifecycleStatus,
    LoadReport,
    QueryStatus,
    SavepointStatus,
)


class DriverState(StrEnum):
    """What the driver says it is doing."""

    STARTING = "STARTING"
    RUNNING = "RUNNING"
    FINISHING = "FINISHING"  # bounded input ended: waiting for the final checkpoint
    STOPPING = "STOPPING"  # a stop with savepoint (with or without drain) is in progress
    SUSPENDED = "SUSPENDED"  # stopped with a savepoint; resumable
    FINISHED = "FINISHED"  # drained or final checkpoint done; sinks committed
    FAILED = "FAILED"
    DEPARTED = "DEPARTED"  # asked to stop by its pod's termination (SIGTERM): left, resumable


class RequestOutcome(StrEnum):
    """The driver's answer to a control request."""

    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


class RequestReport(ApiModel):
    """The driver's answer to the request with this id."""

    id: str = Field(description="The request's id.")
    outcome: RequestOutcome = Field(description="IN_PROGRESS, COMPLETED or FAILED.")
    message: str = Field(default="", description="Why it failed, or what it produced.")


class DriverReport(ApiModel):
    """The driver's report; the operator acts only on a report of the current attempt."""

    attempt: int = Field(ge=0, description="The driver attempt that wrote this report.")
    state: DriverState = Field(description="What the driver is doing.")
    lifecycle: LifecycleStatus | None = Field(default=None, description="Lifecycle table state.")
    last_checkpoint: CheckpointStatus | None = Field(default=None, description="Newest checkpoint.")
    savepoint: SavepointStatus | None = Field(default=None, description="Newest savepoint.")
    request: RequestReport | None = Field(default=None, description="Answer to the last request.")
    coordinator: CoordinatorStatus | None = Field(default=None, description="Split progress.")
    queries: list[QueryStatus] = Field(
        default_factory=list, description="Per query, of a job of several."
    )
    tasks_skipped: int = Field(default=0, ge=0, description="Batch recovery: tasks not re-run.")
    tasks_rerun: int = Field(default=0, ge=0, description="Batch recovery: tasks re-run.")
    splits_reread: int = Field(default=0, ge=0, description="Finished splits read again.")
    cluster_partitions: list[ClusterPartitionStatus] = Field(
        default_factory=list, description="Batch, when finished: the cluster partitions promoted."
    )
    message: str = Field(default="", description="A sentence for people.")
    permanent: bool = Field(
        default=False,
        description=(
            "FAILED with an error a restart cannot cure (the program's, the configuration's, an "
            "unreadable savepoint): the job fails at once instead of using its restart budget."
        ),
    )
    updated_at: datetime | None = Field(default=None, description="When the report was written.")
    load: LoadReport | None = Field(
        default=None,
        description="Streaming with spec.autoscaler: the load over the metrics window, once full.",
    )


DEPARTURE_REQUEST_PREFIX = "departure-"
"""The id prefix of the stop a driver asks of itself when its pod is asked to stop."""


def departure_request(attempt: int, now: datetime) -> ControlRequest:
    """The stop with savepoint a driver takes on SIGTERM: no one sent it, so it is made here,
    and its id (echoed in the savepoint) tells the operator what the savepoint was for."""
    return ControlRequest(
        id=f"{DEPARTURE_REQUEST_PREFIX}a{attempt}-{int(now.timestamp())}",
        attempt=attempt,
        action=RequestAction.STOP,
        requested_at=now,
        trigger=SavepointTrigger.DEPARTURE,
    )


def is_departure(request_id: str | None) -> bool:
    """Whether a request (or the savepoint answering it) is a driver's departure stop."""
    return bool(request_id) and str(request_id).startswith(DEPARTURE_REQUEST_PREFIX)
