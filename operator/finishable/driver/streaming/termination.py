"""The tasks of one ending (stop, drain, final checkpoint) as the FLIP-147 table sees them.

The streaming executor feeds these tasks the events of the ending and performs the actions the
table returns; what they report is the ``lifecycle`` part of the driver's report.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from finishable.api.lifecycle import LifecycleMode, TaskKind
from finishable.api.status import LifecycleStatus, LifecycleTaskStatus
from finishable.lifecycle.tablerows import Action
from finishable.lifecycle.task import TaskLifecycle

SINK_TASK = "sink"
"""The name the sink task is reported under (followed by the query's, for several)."""


@dataclass
class Termination:
    """The tasks of one ending, as the lifecycle table sees them."""

    mode: LifecycleMode
    barrier: int
    """The checkpoint id the tasks know the final checkpoint or savepoint by."""
    sources: dict[str, TaskLifecycle]
    sinks: dict[str, TaskLifecycle]
    """Each query's sink task, by query name."""
    batches: dict[str, int] = field(default_factory=dict)
    """Each query's committed batch its final checkpoint is cut at, once its boundary is
    reached (-1: it committed none)."""
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
        tasks.extend(
            LifecycleTaskStatus(
                name=SINK_TASK if len(self.sinks) == 1 else f"{SINK_TASK} {name}",
                kind=TaskKind.NON_SOURCE,
                task_status=task.task_status,
                operator_status=task.operator_status,
            )
            for name, task in self.sinks.items()
        )
        return LifecycleStatus(mode=self.mode, tasks=tasks)


def drains(termination: Termination | None) -> bool:
    """Whether ``termination`` is a stop with drain (its sources read to their end of now)."""
    return termination is not None and termination.mode is LifecycleMode.STOP_WITH_SAVEPOINT_DRAIN
