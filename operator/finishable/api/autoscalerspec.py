"""``spec.autoscaler``: a job's executor count follows its load (docs/autoscaler.md).

Streaming: the driver measures how busy its micro-batches keep the executors and how far its
sources are behind; the operator turns that into a recommended executor count
(:mod:`finishable.lifecycle.autoscaling`) and applies a lasting change as a rescale: stop with
savepoint, then the next attempt with the new count, resumed from it. Batch: Spark's dynamic
allocation within the same bounds, safe because stage outputs live on the shuffle pods.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from finishable.api.models import ApiModel
from finishable.api.rules import Rule, field
from finishable.api.units import Duration, positive


class AutoscalerSpec(ApiModel):
    """Bounds, target and pacing of a job's executor autoscaler."""

    RULES = (
        Rule(
            field("minExecutors").le(field("maxExecutors")),
            (
                "minExecutors (",
                field("minExecutors"),
                ") is above maxExecutors (",
                field("maxExecutors"),
                "); set minExecutors <= maxExecutors",
            ),
            field=".minExecutors",
        ),
    )

    enabled: bool = Field(
        default=False,
        description=(
            "Size the executors from the load. Streaming: a lasting change is applied by a stop "
            "with savepoint and a restart with the new count (nothing lost, nothing twice). "
            "Batch: Spark's dynamic allocation adds executors while tasks wait and releases "
            "idle ones (idleTimeout)."
        ),
    )
    min_executors: int = Field(
        default=1, ge=1, le=1000, description="The fewest executor pods the job runs with."
    )
    max_executors: int = Field(
        default=4, ge=1, le=1000, description="The most executor pods the job runs with."
    )
    target_utilization: float = Field(
        default=0.5,
        ge=0.05,
        le=1.0,
        description=(
            "Streaming: the share of the time the executors should spend in micro-batches: "
            "0.5 means a batch takes at most half of the trigger interval, which leaves room "
            "for bursts."
        ),
    )
    tolerance: float = Field(
        default=0.2,
        ge=0.0,
        le=0.9,
        description=(
            "Streaming: no rescale while the executors needed are within this fraction of the "
            "current count (0.2: between 80% and 120%)."
        ),
    )
    catch_up_time: Duration = Field(
        default=Duration(minutes=5),
        description=(
            "Streaming: a source's backlog must be readable within this time at the target "
            "utilization (the sources report it: unread files, Kafka offsets behind)."
        ),
    )
    metrics_window: Duration = Field(
        default=Duration(minutes=1),
        description=(
            "Streaming: the driver averages its micro-batches over this window; no decision is "
            "made before a driver has run this long."
        ),
    )
    stabilization_window: Duration = Field(
        default=Duration(minutes=1),
        description=(
            "Streaming: a recommendation must hold this long before it is applied: a scale-up "
            "goes to the lowest count recommended within the window, a scale-down to the "
            "highest."
        ),
    )
    cooldown: Duration = Field(
        default=Duration(minutes=3),
        description="Streaming: the least time between the starts of two rescales.",
    )
    idle_timeout: Duration = Field(
        default=Duration(seconds=60),
        description=(
            "Batch: an executor that ran no task for this long is released (twice this when it "
            "holds Spark shuffle files of a stage still running)."
        ),
    )

    @field_validator("catch_up_time", "metrics_window", "idle_timeout")
    @classmethod
    def _positive(cls, value: Duration) -> Duration:
        return positive(value)

    def bounded(self, executors: int) -> int:
        """``executors`` within the bounds."""
        return max(self.min_executors, min(self.max_executors, executors))
