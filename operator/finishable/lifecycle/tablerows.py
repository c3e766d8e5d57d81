"""The vocabulary FLIP-147's task tables are written in: events, actions, N/A, and the row.

A row of :mod:`finishable.lifecycle.table` is an event, the statuses it leads to and one cell of
actions per termination mode; here is what each of those words means (with the FLIP's own wording
of every action beside ours, for the documentation), and the questions a row answers in a mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Final

from finishable.api.lifecycle import LifecycleMode, OperatorStatus, TaskKind, TaskStatus


class TaskEvent(StrEnum):
    """What happens to a task: the FLIP's "Event" column, split into single events."""

    NO_MORE_RECORDS = "NO_MORE_RECORDS"
    SAVEPOINT_TRIGGER = "SAVEPOINT_TRIGGER"
    MAX_WATERMARK_ALIGNED = "MAX_WATERMARK_ALIGNED"
    END_OF_USER_RECORDS_ALIGNED = "END_OF_USER_RECORDS_ALIGNED"
    CHECKPOINT_BARRIER_ALIGNED = "CHECKPOINT_BARRIER_ALIGNED"
    END_OF_PARTITION_RECEIVED = "END_OF_PARTITION_RECEIVED"
    CHECKPOINT_TRIGGERED = "CHECKPOINT_TRIGGERED"
    CHECKPOINT_COMPLETED = "CHECKPOINT_COMPLETED"
    CHECKPOINT_ABORTED = "CHECKPOINT_ABORTED"
    END_OF_DATA_ACKNOWLEDGED = "END_OF_DATA_ACKNOWLEDGED"
    FAILED = "FAILED"

    @property
    def description(self) -> str:
        """One line for docs and status."""
        return _EVENT_DESCRIPTIONS[self]

    @property
    def carries_checkpoint(self) -> bool:
        """Whether the event names a checkpoint (``handle`` then needs ``checkpoint_id``)."""
        return self in _CHECKPOINT_EVENTS


_EVENT_DESCRIPTIONS: Final[Mapping[TaskEvent, str]] = {
    TaskEvent.NO_MORE_RECORDS: "source: its bounded input is exhausted (final checkpoint)",
    TaskEvent.SAVEPOINT_TRIGGER: "source: a stop-with-savepoint trigger arrived (stop modes)",
    TaskEvent.MAX_WATERMARK_ALIGNED: "non-source: MAX_WATERMARK arrived on every input",
    TaskEvent.END_OF_USER_RECORDS_ALIGNED: (
        "non-source: EndOfUserRecords (EndOfData) arrived on every input"
    ),
    TaskEvent.CHECKPOINT_BARRIER_ALIGNED: "non-source: a checkpoint barrier arrived on every input",
    TaskEvent.END_OF_PARTITION_RECEIVED: "non-source: every upstream task closed its partition",
    TaskEvent.CHECKPOINT_TRIGGERED: (
        "the coordinator triggered a checkpoint or savepoint on this task directly"
    ),
    TaskEvent.CHECKPOINT_COMPLETED: "notifyCheckpointComplete(X) for a checkpoint or savepoint",
    TaskEvent.CHECKPOINT_ABORTED: "a pending checkpoint or savepoint was aborted",
    TaskEvent.END_OF_DATA_ACKNOWLEDGED: "every downstream task acknowledged our EndOfData",
    TaskEvent.FAILED: "the task failed or was cancelled",
}

_CHECKPOINT_EVENTS: Final[frozenset[TaskEvent]] = frozenset(
    {
        TaskEvent.SAVEPOINT_TRIGGER,
        TaskEvent.CHECKPOINT_BARRIER_ALIGNED,
        TaskEvent.CHECKPOINT_TRIGGERED,
        TaskEvent.CHECKPOINT_COMPLETED,
        TaskEvent.CHECKPOINT_ABORTED,
    }
)


class Action(StrEnum):
    """What the runtime must do; the cells of the FLIP's three mode columns."""

    SUSPEND_SOURCE = "SUSPEND_SOURCE"
    ADVANCE_TO_MAX_WATERMARK = "ADVANCE_TO_MAX_WATERMARK"
    EMIT_MAX_WATERMARK = "EMIT_MAX_WATERMARK"
    END_INPUT_AND_FINISH = "END_INPUT_AND_FINISH"
    EMIT_END_OF_DATA_FINISHED = "EMIT_END_OF_DATA_FINISHED"
    EMIT_END_OF_DATA_NOT_FINISHED = "EMIT_END_OF_DATA_NOT_FINISHED"
    EMIT_CHECKPOINT_BARRIER = "EMIT_CHECKPOINT_BARRIER"
    WAIT_FOR_CHECKPOINT_COMPLETED = "WAIT_FOR_CHECKPOINT_COMPLETED"
    WAIT_FOR_END_OF_DATA_ACK = "WAIT_FOR_END_OF_DATA_ACK"
    WAIT_FOR_END_OF_PARTITION = "WAIT_FOR_END_OF_PARTITION"
    CLOSE = "CLOSE"
    EMIT_END_OF_PARTITION = "EMIT_END_OF_PARTITION"

    @property
    def description(self) -> str:
        """One line for docs and status."""
        return _ACTION_DESCRIPTIONS[self]

    @property
    def flip_text(self) -> str:
        """The FLIP's own wording of the action, for documentation next to ours."""
        return _ACTION_FLIP_TEXT[self]

    @property
    def emits(self) -> bool:
        """Whether the action sends something downstream or produces records.

        A closed task must never do any of these: ``close()`` "should not emit any records".
        """
        return self in _EMITTING_ACTIONS


_ACTION_DESCRIPTIONS: Final[Mapping[Action, str]] = {
    Action.SUSPEND_SOURCE: "finish task: suspend the source, stop assigning splits",
    Action.ADVANCE_TO_MAX_WATERMARK: "advance event time to MAX_WATERMARK and fire all timers",
    Action.EMIT_MAX_WATERMARK: "send MAX_WATERMARK downstream",
    Action.END_INPUT_AND_FINISH: "call endInput() and finish(): flush all buffered records",
    Action.EMIT_END_OF_DATA_FINISHED: "send EndOfData[finished=true]: no more records, drained",
    Action.EMIT_END_OF_DATA_NOT_FINISHED: (
        "send EndOfData[finished=false]: no more records, state kept for a resume"
    ),
    Action.EMIT_CHECKPOINT_BARRIER: "snapshot state and send the checkpoint barrier downstream",
    Action.WAIT_FOR_CHECKPOINT_COMPLETED: (
        "wait until a checkpoint (savepoint when stopping) triggered after finish completes"
    ),
    Action.WAIT_FOR_END_OF_DATA_ACK: "wait until every downstream task acknowledged EndOfData",
    Action.WAIT_FOR_END_OF_PARTITION: "wait until every upstream task sent EndOfPartition",
    Action.CLOSE: "call close(): release resources, emit nothing",
    Action.EMIT_END_OF_PARTITION: "send EndOfPartition downstream: this task's output is complete",
}

_ACTION_FLIP_TEXT: Final[Mapping[Action, str]] = {
    Action.SUSPEND_SOURCE: (
        "finish task (cancel source thread for legacy source and suspend the mailbox for the"
        " new source)"
    ),
    Action.ADVANCE_TO_MAX_WATERMARK: "Advanced To MAX_WATERMARK and trigger all the event timers",
    Action.EMIT_MAX_WATERMARK: "Emit MAX_WATERMARK",
    Action.END_INPUT_AND_FINISH: "call operator.endInput() & operator.finish()",
    Action.EMIT_END_OF_DATA_FINISHED: "Emit EndOfData[finished = true]",
    Action.EMIT_END_OF_DATA_NOT_FINISHED: "Emit EndOfData[finished = false]",
    Action.EMIT_CHECKPOINT_BARRIER: "Emit Checkpoint Barrier",
    Action.WAIT_FOR_CHECKPOINT_COMPLETED: "Wait for Checkpoint / Savepoint Completed",
    Action.WAIT_FOR_END_OF_DATA_ACK: "Wait for downstream tasks acknowledge EndOfData",
    Action.WAIT_FOR_END_OF_PARTITION: "Wait for EndOfPartitionEvent",
    Action.CLOSE: "Call operator.close()",
    Action.EMIT_END_OF_PARTITION: "Emit EndOfPartitionEvent",
}

_EMITTING_ACTIONS: Final[frozenset[Action]] = frozenset(
    {
        Action.ADVANCE_TO_MAX_WATERMARK,
        Action.EMIT_MAX_WATERMARK,
        Action.END_INPUT_AND_FINISH,
        Action.EMIT_END_OF_DATA_FINISHED,
        Action.EMIT_END_OF_DATA_NOT_FINISHED,
        Action.EMIT_CHECKPOINT_BARRIER,
        Action.EMIT_END_OF_PARTITION,
    }
)


class NotApplicable(Enum):
    """The FLIP's "N/A": the event cannot happen in that mode (distinct from "-", no actions)."""

    NA = "N/A"


NA: Final = NotApplicable.NA
"""Shorthand for :attr:`NotApplicable.NA` in the tables."""

Cell = tuple[Action, ...] | NotApplicable
"""One mode's cell of a row: the actions to run in order, or N/A."""


class Origin(StrEnum):
    """Where a row comes from: the FLIP's table itself, or what the FLIP implies around it."""

    FLIP = "FLIP"
    DERIVED = "DERIVED"


@dataclass(frozen=True)
class Row:
    """One row of a lifecycle table.

    ``event`` is None for the two rows not fired by a single event: the initial row (``all_of``
    empty, the state a task starts in) and the closing row, which fires once every event in
    ``all_of`` has happened, in any order. ``from_status`` lists the task statuses in which the row
    may fire; ``task_status``/``operator_status`` are the statuses it leads to (None: unchanged, a
    blank cell in the FLIP). ``requires`` names events that must have been handled before, where
    their own row applies in the mode (so drain modes see MAX_WATERMARK before EndOfData).
    ``once`` refuses the event a second time.
    """

    kind: TaskKind
    event: TaskEvent | None
    from_status: tuple[TaskStatus, ...]
    task_status: TaskStatus | None
    operator_status: OperatorStatus | None
    final_checkpoint: Cell
    stop_with_savepoint_drain: Cell
    stop_with_savepoint: Cell
    description: str
    flip_event: str = ""
    origin: Origin = Origin.FLIP
    all_of: tuple[TaskEvent, ...] = ()
    requires: tuple[TaskEvent, ...] = ()
    once: bool = False

    def cell(self, mode: LifecycleMode) -> Cell:
        """This row's cell in ``mode``'s column."""
        if mode is LifecycleMode.FINAL_CHECKPOINT:
            return self.final_checkpoint
        if mode is LifecycleMode.STOP_WITH_SAVEPOINT_DRAIN:
            return self.stop_with_savepoint_drain
        return self.stop_with_savepoint

    def applies(self, mode: LifecycleMode) -> bool:
        """False where the FLIP says N/A."""
        return self.cell(mode) is not NA

    def actions(self, mode: LifecycleMode) -> tuple[Action, ...]:
        """The actions to run in ``mode``; ValueError where the row is N/A."""
        cell = self.cell(mode)
        if isinstance(cell, NotApplicable):
            raise ValueError(f"{self.label} is N/A in {mode.value}")
        return cell

    def operator_status_in(self, mode: LifecycleMode) -> OperatorStatus | None:
        """The operator status this row leads to in ``mode`` (None: unchanged).

        The FLIP has one operator-status column, but FINISHED means ``finish()`` ran; where the
        mode's cell does not call it (STOP_WITH_SAVEPOINT: "-") the operator stays as it was,
        RUNNING, its state kept for the resume.
        """
        if self.operator_status is OperatorStatus.FINISHED:
            cell = self.cell(mode)
            if isinstance(cell, NotApplicable) or Action.END_INPUT_AND_FINISH not in cell:
                return None
        return self.operator_status

    @property
    def is_initial(self) -> bool:
        """The row a task starts in."""
        return self.event is None and not self.all_of

    @property
    def is_conjunction(self) -> bool:
        """The closing row fired by the last of ``all_of``."""
        return self.event is None and bool(self.all_of)

    @property
    def label(self) -> str:
        """A short name: the FLIP's event text, else the event name."""
        if self.flip_event:
            return self.flip_event
        if self.event is not None:
            return self.event.value
        if self.is_initial:
            return "(start)"
        return " && ".join(e.value for e in self.all_of)
