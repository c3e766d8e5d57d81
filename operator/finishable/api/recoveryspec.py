"""``spec.recovery``: what happens when a FinishableSparkJob's driver is lost (the restart
budget, a warm standby, and a Batch job's reconnect and event-log settings)."""

from __future__ import annotations

from pydantic import Field, field_validator

from finishable.api.models import ApiModel
from finishable.api.units import Duration, Quantity


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
        description=(
            "Driver restarts allowed within failureRateInterval; one more driver loss in that "
            "window fails the job."
        ),
    )
    failure_rate_interval: Duration = Field(
        default=Duration(hours=1),
        description=(
            "The sliding window in which driver losses count against maxAttempts (Flink's "
            "failure-rate strategy): older losses count for nothing, for the budget and the "
            "restart backoff alike. 0s counts every loss of the run."
        ),
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
        description=(
            "Batch: minimum pause between enumerator states in the job event log (the "
            "listing a recovery restores; tasks finished after the newest are kept all the same)."
        ),
    )
    read_task_size: Quantity = Field(
        default=Quantity(64 * 1024**2),
        description=(
            "Batch: the least input a reader task is given when the source's size is known "
            "(files), such as 64Mi; a read gets at most 16 tasks per core and at least one per "
            "core. A crash re-reads only the running tasks' input, so smaller tasks lose less, "
            "but each task costs ~0.1 s of its own."
        ),
    )
    event_store: EventStoreSpec = Field(
        default_factory=EventStoreSpec, description="Batch: buffering of the job event log."
    )
    standby: bool = Field(
        default=False,
        description=(
            "Keep a warm standby driver: a second driver with its Spark session (and, on a "
            "cluster, its executors) started, which takes over at once when the active driver "
            "is lost, fenced by the next attempt's epoch. Costs one idle driver and its "
            "executors; a new standby is started after each takeover."
        ),
    )

    @field_validator("read_task_size")
    @classmethod
    def _positive_task_size(cls, value: Quantity) -> Quantity:
        if value <= 0:
            raise ValueError(f"must be larger than zero, got {int(value)}")
        return value
