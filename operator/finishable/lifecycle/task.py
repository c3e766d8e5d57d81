"""A machine that walks one task through the FLIP-147 lifecycle table for one termination mode.

The table (:mod:`finishable.lifecycle.table`) says which events a task accepts in which status and
what the runtime must do. This module adds the rules the table's cells cannot hold (they come
from the FLIP's text), which concern *which* checkpoint is the final one:

* after ``finish()`` (entering WAITING_FOR_FINAL_CP) the task closes on the first
  ``notifyCheckpointComplete(X)`` for any checkpoint X triggered after ``finish()``; checkpoints are
  concurrent and notifications arrive in any order or not at all, so a completion of a checkpoint
  triggered before ``finish()`` is accepted but closes nothing, and a completion arriving after the
  task closed (the FLIP's checkpoint 44) is accepted and ignored;
* in the two stop modes only a savepoint is the final one: a periodic checkpoint completing does not
  end a task that is being stopped with a savepoint;
* closing also needs EndOfData acknowledged by downstream (and, for non-sources, EndOfPartition from
  upstream), in any order relative to the checkpoint's completion.

Pure and synchronous: the runtime feeds events and performs the returned actions.
"""

from dataclasses import dataclass
from typing import TypedDict

from finishable.api.lifecycle import LifecycleMode, OperatorStatus, TaskKind, TaskStatus
from finishable.lifecycle.table import closing_row, events_in, initial_row, lookup
from finishable.lifecycle.tablerows import Action, Row, TaskEvent


class IllegalTransition(ValueError):
    """An event the table does not allow for this task now; the state is left unchanged.

    Carries the facts of the refusal as attributes so callers can report them without parsing.
    """

    def __init__(
        self,
        *,
        kind: TaskKind,
        mode: LifecycleMode,
        task_status: TaskStatus,
        operator_status: OperatorStatus,
        event: TaskEvent,
        reason: str,
        accepted: tuple[TaskEvent, ...],
    ) -> None:
        self.kind = kind
        self.mode = mode
        self.task_status = task_status
        self.operator_status = operator_status
        self.event = event
        self.reason = reason
        self.accepted = accepted
        accepted_text = ", ".join(e.value for e in accepted) if accepted else "none"
        super().__init__(
            f"{kind.value} task in {mode.value} (task status {task_status.value}, operator status"
            f" {operator_status.value}) refuses {event.value}: {reason}; accepted events:"
            f" {accepted_text}"
        )


class LifecycleSnapshot(TypedDict):
    """The JSON-ready view of one task for the custom resource's ``status.lifecycle``."""

    kind: str
    mode: str
    taskStatus: str
    operatorStatus: str
    finishedAfterCheckpoint: int | None
    finalCheckpoint: int | None
    pendingCheckpoints: list[int]
    waitingFor: list[str]


@dataclass(frozen=True)
class _Checkpoint:
    """What the machine remembers of a pending checkpoint."""

    savepoint: bool
    after_finish: bool


_REGISTERING_EVENTS = frozenset(
    {
        TaskEvent.SAVEPOINT_TRIGGER,
        TaskEvent.CHECKPOINT_TRIGGERED,
        TaskEvent.CHECKPOINT_BARRIER_ALIGNED,
    }
)
"""Events by which a checkpoint reaches this task (its barrier is emitted here)."""

_SETTLING_EVENTS = frozenset({TaskEvent.CHECKPOINT_COMPLETED, TaskEvent.CHECKPOINT_ABORTED})
"""Events that end a pending checkpoint."""


class TaskLifecycle:
    """One task's walk through the lifecycle table of its ``kind`` in one termination ``mode``.

    ``handle`` returns the actions the runtime must perform, in order, or raises
    :class:`IllegalTransition` and changes nothing.

    STOP_WITH_SAVEPOINT (no drain) reads the FLIP's table as follows: its cells for MAX_WATERMARK
    are "-" or N/A and its cell for ``endInput() & finish()`` is "-", so no timers fire, nothing is
    flushed, EndOfData carries ``finished=false`` and the operator status stays RUNNING while the
    task is WAITING_FOR_FINAL_CP (the table's FINISHED means ``finish()`` ran, which it did not):
    the operator's state goes into the savepoint unflushed, to be resumed from. The operator only
    becomes CLOSED when the savepoint completed and the task closes.

    A task without downstream tasks (a sink) has nobody to acknowledge EndOfData: the runtime
    reports END_OF_DATA_ACKNOWLEDGED itself once it emitted EndOfData.
    """

    def __init__(self, kind: TaskKind, mode: LifecycleMode) -> None:
        start = initial_row(kind)
        assert start.task_status is not None and start.operator_status is not None
        self._kind = kind
        self._mode = mode
        self._task_status: TaskStatus = start.task_status
        self._operator_status: OperatorStatus = start.operator_status
        self._handled: set[TaskEvent] = set()
        self._satisfied: set[TaskEvent] = set()
        self._pending: dict[int, _Checkpoint] = {}
        self._finished_after: int | None = None
        self._final: int | None = None

    # -- state ---------------------------------------------------------------------------------

    @property
    def kind(self) -> TaskKind:
        """Which table this task follows."""
        return self._kind

    @property
    def mode(self) -> LifecycleMode:
        """Which column of the table this task follows."""
        return self._mode

    @property
    def task_status(self) -> TaskStatus:
        """The stream task status now."""
        return self._task_status

    @property
    def operator_status(self) -> OperatorStatus:
        """The operator status now."""
        return self._operator_status

    @property
    def closed(self) -> bool:
        """Whether the task has ended (successfully or by failure)."""
        return self._task_status is TaskStatus.CLOSED

    @property
    def pending_checkpoints(self) -> tuple[int, ...]:
        """Checkpoints this task took part in that neither completed nor aborted, ascending.

        Notifications may never arrive, so nothing is dropped as subsumed (a late completion of an
        older checkpoint stays acceptable); the runtime reports CHECKPOINT_ABORTED for checkpoints
        it gave up on.
        """
        return tuple(sorted(self._pending))

    @property
    def finished_after_checkpoint(self) -> int | None:
        """The first checkpoint triggered on this task after ``finish()``, if any."""
        return self._finished_after

    @property
    def final_checkpoint(self) -> int | None:
        """The checkpoint whose completion satisfied the final checkpoint, if any yet."""
        return self._final

    def waiting_for(self) -> tuple[TaskEvent, ...]:
        """The parts of the closing condition still missing (empty unless waiting)."""
        if self._task_status is not TaskStatus.WAITING_FOR_FINAL_CP:
            return ()
        return tuple(e for e in closing_row(self._kind).all_of if e not in self._satisfied)

    def accepted_events(self) -> tuple[TaskEvent, ...]:
        """Events ``handle`` would accept now (given a valid checkpoint id where one is needed)."""
        accepted: list[TaskEvent] = []
        for event in events_in(self._kind, self._mode, self._task_status):
            row = lookup(self._kind, event, self._task_status)
            assert row is not None
            if self._guard(row) is None and (event not in _SETTLING_EVENTS or self._pending):
                accepted.append(event)
        return tuple(accepted)

    def snapshot(self) -> LifecycleSnapshot:
        """A JSON-ready view for ``status.lifecycle.tasks``."""
        return LifecycleSnapshot(
            kind=self._kind.value,
            mode=self._mode.value,
            taskStatus=self._task_status.value,
            operatorStatus=self._operator_status.value,
            finishedAfterCheckpoint=self._finished_after,
            finalCheckpoint=self._final,
            pendingCheckpoints=list(self.pending_checkpoints),
            waitingFor=[e.value for e in self.waiting_for()],
        )

    # -- transitions ---------------------------------------------------------------------------

    def handle(
        self, event: TaskEvent, checkpoint_id: int | None = None, savepoint: bool = False
    ) -> tuple[Action, ...]:
        """Apply ``event`` and return the actions to perform, in order.

        ``checkpoint_id`` is required for events that name a checkpoint
        (:attr:`TaskEvent.carries_checkpoint`) and refused for the others; ``savepoint`` marks a
        triggered or aligned checkpoint as a savepoint (SAVEPOINT_TRIGGER always is one) and, on a
        completion or abort, must agree with how the checkpoint was triggered.
        """
        self._check_arguments(event, checkpoint_id, savepoint)
        row = lookup(self._kind, event, self._task_status)
        if row is None:
            raise self._refuse(event, f"the table has no row for it in {self._task_status.value}")
        guard = self._guard(row)
        if guard is not None:
            raise self._refuse(event, guard)
        if checkpoint_id is not None:
            checkpoint_problem = self._checkpoint_problem(event, checkpoint_id, savepoint)
            if checkpoint_problem is not None:
                raise self._refuse(event, checkpoint_problem)

        actions = self._apply(row)
        self._handled.add(event)
        if checkpoint_id is not None:
            self._track_checkpoint(event, checkpoint_id, savepoint)
        elif event in closing_row(self._kind).all_of:
            self._satisfy(event)
        return actions + self._close_if_done()

    def _apply(self, row: Row) -> tuple[Action, ...]:
        """Move to the row's statuses and return its actions in this mode."""
        if row.task_status is not None:
            self._task_status = row.task_status
        operator_status = row.operator_status_in(self._mode)
        if operator_status is not None:
            self._operator_status = operator_status
        return row.actions(self._mode)

    def _close_if_done(self) -> tuple[Action, ...]:
        """Fire the closing row once every part of its conjunction has happened."""
        closing = closing_row(self._kind)
        if self._task_status in closing.from_status and all(
            e in self._satisfied for e in closing.all_of
        ):
            return self._apply(closing)
        return ()

    def _satisfy(self, event: TaskEvent) -> None:
        """Record a part of the closing condition (only meaningful while waiting)."""
        if self._task_status is TaskStatus.WAITING_FOR_FINAL_CP:
            self._satisfied.add(event)

    def _track_checkpoint(self, event: TaskEvent, checkpoint_id: int, savepoint: bool) -> None:
        """Register a triggered checkpoint or settle a pending one."""
        if event in _REGISTERING_EVENTS:
            after_finish = self._task_status is TaskStatus.WAITING_FOR_FINAL_CP
            self._pending[checkpoint_id] = _Checkpoint(
                savepoint=savepoint or event is TaskEvent.SAVEPOINT_TRIGGER,
                after_finish=after_finish,
            )
            if after_finish and self._finished_after is None:
                self._finished_after = checkpoint_id
            return
        checkpoint = self._pending.pop(checkpoint_id)
        if (
            event is TaskEvent.CHECKPOINT_COMPLETED
            and self._task_status is TaskStatus.WAITING_FOR_FINAL_CP
            and self._is_final(checkpoint)
            and self._final is None
        ):
            self._final = checkpoint_id
            self._satisfy(TaskEvent.CHECKPOINT_COMPLETED)

    def _is_final(self, checkpoint: _Checkpoint) -> bool:
        """Whether completing ``checkpoint`` satisfies the final checkpoint in this mode."""
        if not checkpoint.after_finish:
            return False
        return self._mode is LifecycleMode.FINAL_CHECKPOINT or checkpoint.savepoint

    # -- refusals ------------------------------------------------------------------------------

    def _guard(self, row: Row) -> str | None:
        """Why ``row`` cannot fire now (N/A, once, requires), or None if it can."""
        assert row.event is not None
        if not row.applies(self._mode):
            return f"it is N/A in {self._mode.value}"
        if row.once and row.event in self._handled:
            return "it already happened"
        for required in row.requires:
            if required in self._handled:
                continue
            required_row = lookup(self._kind, required, self._task_status)
            if required_row is not None and required_row.applies(self._mode):
                return f"{required.value} must come first"
        return None

    def _checkpoint_problem(
        self, event: TaskEvent, checkpoint_id: int, savepoint: bool
    ) -> str | None:
        """Why ``checkpoint_id`` does not fit ``event`` for this task, or None if it does."""
        if event in _REGISTERING_EVENTS:
            if checkpoint_id in self._pending:
                return f"checkpoint {checkpoint_id} is already pending on this task"
            return None
        checkpoint = self._pending.get(checkpoint_id)
        if checkpoint is None:
            return f"checkpoint {checkpoint_id} is not pending on this task"
        if savepoint and not checkpoint.savepoint:
            return f"checkpoint {checkpoint_id} was triggered as a checkpoint, not a savepoint"
        return None

    def _check_arguments(
        self, event: TaskEvent, checkpoint_id: int | None, savepoint: bool
    ) -> None:
        """Refuse a call that does not match the event's signature (a caller's bug, not a state)."""
        if event.carries_checkpoint and checkpoint_id is None:
            raise ValueError(f"{event.value} needs a checkpoint_id")
        if not event.carries_checkpoint and checkpoint_id is not None:
            raise ValueError(f"{event.value} takes no checkpoint_id")
        if not event.carries_checkpoint and savepoint:
            raise ValueError(f"{event.value} cannot be a savepoint")
        if checkpoint_id is not None and checkpoint_id < 0:
            raise ValueError(f"checkpoint_id must not be negative, got {checkpoint_id}")

    def _refuse(self, event: TaskEvent, reason: str) -> IllegalTransition:
        return IllegalTransition(
            kind=self._kind,
            mode=self._mode,
            task_status=self._task_status,
            operator_status=self._operator_status,
            event=event,
            reason=reason,
            accepted=self.accepted_events(),
        )

    def __repr__(self) -> str:
        return (
            f"TaskLifecycle({self._kind.value}, {self._mode.value}, task={self._task_status.value},"
            f" operator={self._operator_status.value})"
        )
