"""The FLIP-147 task lifecycle tables (source and non-source tasks) as data.

FLIP-147 ("Support checkpoints after tasks finished") describes how a stream task ends in three
termination modes with two tables: one for source tasks, one for non-source tasks. Each table row
is an event, the stream task status and operator status it leads to, and the actions a task runs in
each mode. Keeping the tables as data (not as branches) lets one machine
(:mod:`finishable.lifecycle.task`) walk any task through them, lets the tests compare them row by
row with a transcription of the FLIP, and lets the documentation be generated from them.

How the FLIP's tables were read (their text lost its cell alignment, so this is a reconstruction):

* a row with an empty event cell continues the event above it: its actions run on the same event;
* a blank status cell means "unchanged";
* "-" is an empty list of actions, "N/A" means the event cannot happen in that mode;
* the source row "No more records or Received Savepoint Trigger" is two events here:
  :attr:`TaskEvent.NO_MORE_RECORDS` (final checkpoint) and :attr:`TaskEvent.SAVEPOINT_TRIGGER`
  (the two stop modes); the savepoint trigger finishes the task *first* and then emits the
  savepoint's barrier ("adjust the process of savepoint to first finish the task and then trigger a
  savepoint"), while with a final checkpoint the barrier is emitted "when checkpoint triggered";
* the closing rows ("Checkpoint Completed && EndOfData acknowledged", and for non-sources also
  "EndOfPartition received") are a conjunction: each part is its own event, accepted in any order,
  and the row fires when the last part arrives (see :attr:`Row.all_of`);
* the operator status FINISHED means ``finish()`` was called. Without drain the FLIP's cell for
  ``endInput() & finish()`` is "-", so in STOP_WITH_SAVEPOINT the operator stays RUNNING while the
  task waits for the savepoint: its state is kept for the resume (:meth:`Row.operator_status_in`).

Rows the FLIP leaves implicit (normal checkpoints of a running task, aborted checkpoints, late
completions after close, failure) are marked :attr:`Origin.DERIVED` so documentation and tests can
tell them apart from the FLIP's own rows.

The row vocabulary (events, actions, N/A, :class:`~finishable.lifecycle.tablerows.Row`) is
:mod:`finishable.lifecycle.tablerows`; here are the two tables written in it, the lookups the task
machine makes in them, and their Markdown rendering (``finishable lifecycle``).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from finishable.api.lifecycle import LifecycleMode, OperatorStatus, TaskKind, TaskStatus
from finishable.lifecycle.tablerows import NA, Action, Cell, NotApplicable, Origin, Row, TaskEvent

# ---------------------------------------------------------------------------------------------
# the tables

_S = TaskKind.SOURCE
_N = TaskKind.NON_SOURCE
_RUN = TaskStatus.RUNNING
_WAIT = TaskStatus.WAITING_FOR_FINAL_CP
_CLOSED = TaskStatus.CLOSED

_DRAIN_TO_END_OF_DATA: Final[tuple[Action, ...]] = (
    Action.ADVANCE_TO_MAX_WATERMARK,
    Action.EMIT_MAX_WATERMARK,
    Action.END_INPUT_AND_FINISH,
    Action.EMIT_END_OF_DATA_FINISHED,
)
_SOURCE_WAITS: Final[tuple[Action, ...]] = (
    Action.WAIT_FOR_CHECKPOINT_COMPLETED,
    Action.WAIT_FOR_END_OF_DATA_ACK,
)
_NON_SOURCE_WAITS: Final[tuple[Action, ...]] = (
    Action.EMIT_CHECKPOINT_BARRIER,
    Action.WAIT_FOR_CHECKPOINT_COMPLETED,
    Action.WAIT_FOR_END_OF_DATA_ACK,
    Action.WAIT_FOR_END_OF_PARTITION,
)
_CLOSE_AND_EMIT: Final[tuple[Action, ...]] = (Action.CLOSE, Action.EMIT_END_OF_PARTITION)
_BARRIER: Final[tuple[Action, ...]] = (Action.EMIT_CHECKPOINT_BARRIER,)


def _same(
    kind: TaskKind,
    event: TaskEvent | None,
    cell: Cell,
    *,
    from_status: tuple[TaskStatus, ...],
    task_status: TaskStatus | None,
    operator_status: OperatorStatus | None,
    description: str,
    flip_event: str = "",
    origin: Origin = Origin.FLIP,
    all_of: tuple[TaskEvent, ...] = (),
    once: bool = False,
) -> Row:
    """A row with the same cell in all three modes."""
    return Row(
        kind=kind,
        event=event,
        from_status=from_status,
        task_status=task_status,
        operator_status=operator_status,
        final_checkpoint=cell,
        stop_with_savepoint_drain=cell,
        stop_with_savepoint=cell,
        description=description,
        flip_event=flip_event,
        origin=origin,
        all_of=all_of,
        once=once,
    )


def _common_rows(kind: TaskKind) -> tuple[Row, ...]:
    """Rows both tables share: the completion parts, normal checkpoints, aborts and failure."""
    return (
        _same(
            kind,
            TaskEvent.CHECKPOINT_COMPLETED,
            (),
            from_status=(_WAIT,),
            task_status=None,
            operator_status=None,
            description=(
                "a checkpoint completed while waiting: it satisfies the final checkpoint only if it"
                " was triggered after finish() (in the stop modes: only a savepoint)"
            ),
            flip_event="Checkpoint Completed",
        ),
        _same(
            kind,
            TaskEvent.END_OF_DATA_ACKNOWLEDGED,
            (),
            from_status=(_WAIT,),
            task_status=None,
            operator_status=None,
            description="downstream acknowledged EndOfData; part of the closing condition",
            flip_event="EndOfData acknowledged",
            once=True,
        ),
        _same(
            kind,
            TaskEvent.CHECKPOINT_COMPLETED,
            (),
            from_status=(_RUN, _CLOSED),
            task_status=None,
            operator_status=None,
            description=(
                "a checkpoint of a running task completed, or one completed after the task"
                " closed (checkpoint 44 in the FLIP's example): nothing to do"
            ),
            origin=Origin.DERIVED,
        ),
        _same(
            kind,
            TaskEvent.CHECKPOINT_ABORTED,
            (),
            from_status=(_RUN, _WAIT, _CLOSED),
            task_status=None,
            operator_status=None,
            description="a pending checkpoint was aborted: forget it, wait for another one",
            origin=Origin.DERIVED,
        ),
        _same(
            kind,
            TaskEvent.FAILED,
            (Action.CLOSE,),
            from_status=(_RUN, _WAIT),
            task_status=_CLOSED,
            operator_status=OperatorStatus.CLOSED,
            description=(
                "failure or cancellation: only close() runs (no finish(), nothing emitted)"
            ),
            origin=Origin.DERIVED,
        ),
    )


def _initial(kind: TaskKind) -> Row:
    """The FLIP's first row: a running task does nothing special."""
    return _same(
        kind,
        None,
        (),
        from_status=(),
        task_status=_RUN,
        operator_status=OperatorStatus.RUNNING,
        description="the task processes records",
    )


SOURCE_TABLE: Final[tuple[Row, ...]] = (
    _initial(_S),
    Row(
        kind=_S,
        event=TaskEvent.NO_MORE_RECORDS,
        from_status=(_RUN,),
        task_status=_WAIT,
        operator_status=OperatorStatus.FINISHED,
        final_checkpoint=(*_DRAIN_TO_END_OF_DATA, *_SOURCE_WAITS),
        stop_with_savepoint_drain=NA,
        stop_with_savepoint=NA,
        description=(
            "bounded input ended: fire all timers, flush, emit EndOfData and wait for a checkpoint"
        ),
        flip_event="No more records",
    ),
    Row(
        kind=_S,
        event=TaskEvent.SAVEPOINT_TRIGGER,
        from_status=(_RUN,),
        task_status=_WAIT,
        operator_status=OperatorStatus.FINISHED,
        final_checkpoint=NA,
        stop_with_savepoint_drain=(
            Action.SUSPEND_SOURCE,
            *_DRAIN_TO_END_OF_DATA,
            Action.EMIT_CHECKPOINT_BARRIER,
            *_SOURCE_WAITS,
        ),
        stop_with_savepoint=(
            Action.SUSPEND_SOURCE,
            Action.EMIT_END_OF_DATA_NOT_FINISHED,
            Action.EMIT_CHECKPOINT_BARRIER,
            *_SOURCE_WAITS,
        ),
        description=(
            "stop requested: suspend the source, finish (drain) or not, then emit the savepoint's"
            " barrier and wait for it"
        ),
        flip_event="Received Savepoint Trigger",
    ),
    _same(
        _S,
        TaskEvent.CHECKPOINT_TRIGGERED,
        _BARRIER,
        from_status=(_WAIT,),
        task_status=None,
        operator_status=None,
        description=(
            "a checkpoint triggered after finish(): emit its barrier; its completion may close"
            " the task (in the stop modes only if it is a savepoint)"
        ),
        flip_event="when checkpoint triggered",
    ),
    _same(
        _S,
        None,
        _CLOSE_AND_EMIT,
        from_status=(_WAIT,),
        task_status=_CLOSED,
        operator_status=OperatorStatus.CLOSED,
        description="the final checkpoint completed and downstream acknowledged EndOfData: close",
        flip_event="Checkpoint Completed && EndOfData acknowledged",
        all_of=(TaskEvent.CHECKPOINT_COMPLETED, TaskEvent.END_OF_DATA_ACKNOWLEDGED),
    ),
    _same(
        _S,
        TaskEvent.CHECKPOINT_TRIGGERED,
        _BARRIER,
        from_status=(_RUN,),
        task_status=None,
        operator_status=None,
        description="a checkpoint of a running source: emit its barrier",
        origin=Origin.DERIVED,
    ),
    *_common_rows(_S),
)
"""The FLIP's table for source tasks, then the rows it implies."""


NON_SOURCE_TABLE: Final[tuple[Row, ...]] = (
    _initial(_N),
    Row(
        kind=_N,
        event=TaskEvent.MAX_WATERMARK_ALIGNED,
        from_status=(_RUN,),
        task_status=None,
        operator_status=None,
        final_checkpoint=(Action.ADVANCE_TO_MAX_WATERMARK, Action.EMIT_MAX_WATERMARK),
        stop_with_savepoint_drain=(Action.ADVANCE_TO_MAX_WATERMARK, Action.EMIT_MAX_WATERMARK),
        stop_with_savepoint=NA,
        description="MAX_WATERMARK on every input: fire all event-time timers and pass it on",
        flip_event="Aligned on MAX_WATERMARK",
        once=True,
    ),
    Row(
        kind=_N,
        event=TaskEvent.END_OF_USER_RECORDS_ALIGNED,
        from_status=(_RUN,),
        task_status=_WAIT,
        operator_status=OperatorStatus.FINISHED,
        final_checkpoint=(Action.END_INPUT_AND_FINISH, Action.EMIT_END_OF_DATA_FINISHED),
        stop_with_savepoint_drain=(Action.END_INPUT_AND_FINISH, Action.EMIT_END_OF_DATA_FINISHED),
        stop_with_savepoint=(Action.EMIT_END_OF_DATA_NOT_FINISHED,),
        description="EndOfData on every input: finish (unless suspending) and pass EndOfData on",
        flip_event="Aligned On EndOfUserRecordsEvent",
        requires=(TaskEvent.MAX_WATERMARK_ALIGNED,),
    ),
    _same(
        _N,
        TaskEvent.CHECKPOINT_BARRIER_ALIGNED,
        _NON_SOURCE_WAITS,
        from_status=(_WAIT,),
        task_status=None,
        operator_status=None,
        description=(
            "a barrier after finish(): snapshot, pass it on and wait for its completion,"
            " the acknowledgement of EndOfData and EndOfPartition"
        ),
        flip_event="Aligned on Checkpoint Barrier",
    ),
    _same(
        _N,
        TaskEvent.END_OF_PARTITION_RECEIVED,
        (),
        from_status=(_WAIT,),
        task_status=None,
        operator_status=None,
        description="every upstream task closed; part of the closing condition",
        flip_event="EndOfPartition received",
        once=True,
    ),
    _same(
        _N,
        None,
        _CLOSE_AND_EMIT,
        from_status=(_WAIT,),
        task_status=_CLOSED,
        operator_status=OperatorStatus.CLOSED,
        description=(
            "the final checkpoint completed, downstream acknowledged EndOfData and upstream sent"
            " EndOfPartition: close"
        ),
        flip_event="Checkpoint completed/EndOfData acknowledged/EndOfPartition received",
        all_of=(
            TaskEvent.CHECKPOINT_COMPLETED,
            TaskEvent.END_OF_DATA_ACKNOWLEDGED,
            TaskEvent.END_OF_PARTITION_RECEIVED,
        ),
    ),
    _same(
        _N,
        TaskEvent.CHECKPOINT_BARRIER_ALIGNED,
        _BARRIER,
        from_status=(_RUN,),
        task_status=None,
        operator_status=None,
        description="a barrier of a running task: snapshot and pass it on",
        origin=Origin.DERIVED,
    ),
    _same(
        _N,
        TaskEvent.CHECKPOINT_TRIGGERED,
        _BARRIER,
        from_status=(_RUN,),
        task_status=None,
        operator_status=None,
        description=(
            "triggered directly by the coordinator (no running upstream task, FLIP-147 appendix):"
            " snapshot and emit the barrier"
        ),
        origin=Origin.DERIVED,
    ),
    _same(
        _N,
        TaskEvent.CHECKPOINT_TRIGGERED,
        _NON_SOURCE_WAITS,
        from_status=(_WAIT,),
        task_status=None,
        operator_status=None,
        description=(
            "triggered directly after finish() because every upstream task has finished:"
            " the same as an aligned barrier"
        ),
        origin=Origin.DERIVED,
    ),
    *_common_rows(_N),
)
"""The FLIP's table for non-source tasks, then the rows it implies."""


TABLES: Final[Mapping[TaskKind, tuple[Row, ...]]] = MappingProxyType(
    {TaskKind.SOURCE: SOURCE_TABLE, TaskKind.NON_SOURCE: NON_SOURCE_TABLE}
)
"""Both tables by task kind."""


def lookup(kind: TaskKind, event: TaskEvent, status: TaskStatus) -> Row | None:
    """The row ``event`` fires in ``status`` for a ``kind`` task, or None if the table has none.

    Whether the row applies in a mode (N/A) is the caller's question: :meth:`Row.applies`.
    """
    for row in TABLES[kind]:
        if row.event is event and status in row.from_status:
            return row
    return None


def initial_row(kind: TaskKind) -> Row:
    """The row a ``kind`` task starts in."""
    return next(row for row in TABLES[kind] if row.is_initial)


def closing_row(kind: TaskKind) -> Row:
    """The conjunction row that closes a ``kind`` task after a successful termination."""
    return next(row for row in TABLES[kind] if row.is_conjunction)


def events_in(kind: TaskKind, mode: LifecycleMode, status: TaskStatus) -> tuple[TaskEvent, ...]:
    """Events with an applicable row in ``status``, before per-task guards such as ``once``."""
    events: list[TaskEvent] = []
    for row in TABLES[kind]:
        if (
            row.event is not None
            and status in row.from_status
            and row.applies(mode)
            and row.event not in events
        ):
            events.append(row.event)
    return tuple(events)


# ---------------------------------------------------------------------------------------------
# documentation


def _status_cell(value: StrEnum | None) -> str:
    return value.value if value is not None else ""


def _actions_cell(row: Row, mode: LifecycleMode) -> str:
    cell = row.cell(mode)
    if isinstance(cell, NotApplicable):
        return cell.value
    if not cell:
        return "-"
    return "<br>".join(f"`{a.value}`" for a in cell)


def render_markdown(kind: TaskKind, mode: LifecycleMode | None = None) -> str:
    """A Markdown table of ``kind``'s rows, for all three modes or just ``mode``, with a legend.

    With a single mode the operator status is the one the task really reaches in that mode
    (:meth:`Row.operator_status_in`), and N/A rows are left out.
    """
    modes = tuple(LifecycleMode) if mode is None else (mode,)
    header = [
        "Event",
        "From",
        "Task status",
        "Operator status",
        *(m.flip_title for m in modes),
        "Meaning",
    ]
    title = f"### {kind.value} tasks" + (f": {mode.value}" if mode is not None else "")
    intro = kind.description + (f"; {mode.description}" if mode is not None else "")
    lines = [
        title,
        "",
        intro[0].upper() + intro[1:] + ".",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    used: list[Action] = []
    for row in TABLES[kind]:
        if mode is not None and not row.applies(mode):
            continue
        operator_status = row.operator_status if mode is None else row.operator_status_in(mode)
        event = row.label + (" (derived)" if row.origin is Origin.DERIVED else "")
        cells = [
            event,
            ", ".join(s.value for s in row.from_status),
            _status_cell(row.task_status),
            _status_cell(operator_status),
            *(_actions_cell(row, m) for m in modes),
            row.description,
        ]
        lines.append("| " + " | ".join(cells) + " |")
        for m in modes:
            cell = row.cell(m)
            if not isinstance(cell, NotApplicable):
                used.extend(a for a in cell if a not in used)
    lines += [
        "",
        "A blank status means unchanged; `-` means no action; N/A: the event cannot happen.",
        "",
        "| Action | Meaning | FLIP-147 wording |",
        "|---|---|---|",
    ]
    lines += [f"| `{a.value}` | {a.description} | {a.flip_text} |" for a in Action if a in used]
    return "\n".join(lines) + "\n"
