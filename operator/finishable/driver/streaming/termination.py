"""The tasks of one ending (stop, drain, final checkpoint) as the FLIP-147 table sees them.

The streaming executor feeds these tasks the events of the ending and performs the actions the
table returns; what they report is the ``lifecycle`` part of the driver's report.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from finishable.api.lifecycle import LifecycleMode, TaskKind
from finishable.api.status import LifecycleStatus, LifecycleTaskStatus
from finishable.lifecycle.table import Action
from finishable.lifecycle.task import TaskLifecycle

SINK_TASK = "sink"
"""The name the sink task is reported under."""


@dataclass
class Termination:
    """The tasks of one ending, as the lifecycle table sees them."""

    mode: LifecycleMode
    barrier: int
    """The checkpoint id the tasks know the final checkpoint or savepoint by."""
    sources: dict[str, TaskLifecycle]
    sink: TaskLifecycle
    batch: int = -1
    """The committed batch the final checkpoint is cut at, once the boundary is reached."""
    emitted: set[Action] = field(default_factory=set)

    def status(self) -> LifecycleStatus:
        tasks = [
            LifecycleTaskStatus(
                name=f"source {name}",
                kind=TaskKind.SOURCE,
                task_status=task.task_status,
                operator_status=task.operator_status,
            )
            for name, task in self.sources.items()
        ]
        tasks.append(
            LifecycleTaskStatus(
                name=SINK_TASK,
                kind=TaskKind.NON_SOURCE,
                task_status=self.sink.task_status,
                operator_status=self.sink.operator_status,
            )
        )
        return LifecycleStatus(mode=self.mode, tasks=tasks)
