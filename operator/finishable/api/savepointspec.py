"""Savepoints the operator takes by itself, how long it keeps them, and the check an upgrade
passes before the running job is stopped: parts of a FinishableSparkJob's ``spec``."""

from __future__ import annotations

from pydantic import Field, field_validator

from finishable.api.models import ApiModel
from finishable.api.units import Duration, positive


class SavepointHistorySpec(ApiModel):
    """How many of the savepoints the operator took by itself it keeps, and for how long."""

    max_count: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Keep at most this many of the job's periodic, stop, drain, upgrade and rescale "
            "snapshots; unset: no limit. Manual ones (savepointTriggerNonce, created by hand) "
            "are the user's to delete."
        ),
    )
    max_age: Duration | None = Field(
        default=None,
        description="Delete those snapshots once older than this (e.g. 7d); unset: no limit.",
    )

    @field_validator("max_age")
    @classmethod
    def _positive_age(cls, value: Duration | None) -> Duration | None:
        return None if value is None else positive(value)


class SavepointsSpec(ApiModel):
    """Savepoints the operator takes by itself while a Streaming job runs, and how long they
    and their FinishableSparkSnapshots are kept."""

    interval: Duration | None = Field(
        default=None,
        description=(
            "Take a savepoint this often while the job is Running (the first one an interval "
            "after it starts running); unset: only on request, on a stop and before an upgrade."
        ),
    )

    history: SavepointHistorySpec = Field(
        default_factory=SavepointHistorySpec,
        description=(
            "Trim the job's snapshots as each new one is recorded. The newest snapshot a job "
            "can resume from and any a job is restoring from are never deleted."
        ),
    )
    dispose_on_delete: bool = Field(
        default=False,
        description=(
            "Record the job's snapshots with spec.disposeOnDelete: deleting one (by hand or by "
            "the history) deletes its savepoint's files too. Unset, the files stay."
        ),
    )

    @field_validator("interval")
    @classmethod
    def _positive_interval(cls, value: Duration | None) -> Duration | None:
        return None if value is None else positive(value)


class UpgradeCheckSpec(ApiModel):
    """The check that an upgraded Streaming job can restore the running job's state, made
    before the running job is stopped (upgradeMode savepoint or last-state)."""

    enabled: bool = Field(
        default=True,
        description=(
            "Run the new spec's program in a check pod first (its image, Spark in local mode, "
            "no query started) and compare its sources and sinks with the running job's newest "
            "checkpoint: a mismatch, or a program that fails to start, refuses the upgrade and "
            "the running job goes on."
        ),
    )
    timeout: Duration = Field(
        default=Duration(minutes=10),
        description="A check pod that gives no verdict within this refuses the upgrade.",
    )

    @field_validator("timeout")
    @classmethod
    def _positive_timeout(cls, value: Duration) -> Duration:
        return positive(value)
