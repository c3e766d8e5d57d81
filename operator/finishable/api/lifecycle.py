"""The FLIP-147 lifecycle's vocabulary: termination modes, task kinds, task and operator statuses.

The status a driver reports (``api.status.LifecycleStatus``) speaks it, and the lifecycle table
(``finishable.lifecycle.table``) is written in it; it lives here, with the API, so the models need
nothing from the decisions above them.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final


class LifecycleMode(StrEnum):
    """How a task terminates; chosen by what ends the job."""

    FINAL_CHECKPOINT = "FINAL_CHECKPOINT"
    STOP_WITH_SAVEPOINT_DRAIN = "STOP_WITH_SAVEPOINT_DRAIN"
    STOP_WITH_SAVEPOINT = "STOP_WITH_SAVEPOINT"

    @property
    def description(self) -> str:
        """One line for docs and status."""
        return _MODE_DESCRIPTIONS[self]

    @property
    def flip_title(self) -> str:
        """The FLIP's column heading for this mode."""
        return _MODE_TITLES[self]


_MODE_DESCRIPTIONS: Final[Mapping[LifecycleMode, str]] = {
    LifecycleMode.FINAL_CHECKPOINT: (
        "bounded input ended: flush everything, take one more checkpoint, commit, finish"
    ),
    LifecycleMode.STOP_WITH_SAVEPOINT_DRAIN: (
        "stop for good: fire all event-time timers, flush, take a final savepoint, finish"
    ),
    LifecycleMode.STOP_WITH_SAVEPOINT: (
        "suspend: stop without flushing, keep the state in a savepoint for a resume"
    ),
}

_MODE_TITLES: Final[Mapping[LifecycleMode, str]] = {
    LifecycleMode.FINAL_CHECKPOINT: "Final Checkpoint",
    LifecycleMode.STOP_WITH_SAVEPOINT_DRAIN: "Stop with Savepoint with Drain",
    LifecycleMode.STOP_WITH_SAVEPOINT: "Stop with Savepoint",
}


class TaskKind(StrEnum):
    """Which of the FLIP's two tables a task follows."""

    SOURCE = "SOURCE"
    NON_SOURCE = "NON_SOURCE"

    @property
    def description(self) -> str:
        """One line for docs and status."""
        return _KIND_DESCRIPTIONS[self]


_KIND_DESCRIPTIONS: Final[Mapping[TaskKind, str]] = {
    TaskKind.SOURCE: "a task that reads external input and has no upstream tasks",
    TaskKind.NON_SOURCE: "a task fed by upstream tasks (transformations and sinks)",
}


class TaskStatus(StrEnum):
    """The FLIP's "Stream Task Status" column."""

    RUNNING = "RUNNING"
    WAITING_FOR_FINAL_CP = "WAITING_FOR_FINAL_CP"
    CLOSED = "CLOSED"

    @property
    def description(self) -> str:
        """One line for docs and status."""
        return _TASK_STATUS_DESCRIPTIONS[self]


_TASK_STATUS_DESCRIPTIONS: Final[Mapping[TaskStatus, str]] = {
    TaskStatus.RUNNING: "processing records",
    TaskStatus.WAITING_FOR_FINAL_CP: (
        "no more records; waiting for the final checkpoint or savepoint and the acknowledgements"
    ),
    TaskStatus.CLOSED: "resources released; the task has ended",
}


class OperatorStatus(StrEnum):
    """The FLIP's "Operator Status" column."""

    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    CLOSED = "CLOSED"

    @property
    def description(self) -> str:
        """One line for docs and status."""
        return _OPERATOR_STATUS_DESCRIPTIONS[self]


_OPERATOR_STATUS_DESCRIPTIONS: Final[Mapping[OperatorStatus, str]] = {
    OperatorStatus.RUNNING: "open; may hold buffered records and state",
    OperatorStatus.FINISHED: "finish() flushed all buffered records; emits nothing more",
    OperatorStatus.CLOSED: "close() released all resources",
}
