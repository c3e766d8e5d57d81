"""The lifecycle tables as data, compared row by row with a transcription of FLIP-147.

The expected tables below are written by hand from the FLIP's two tables ("The detail life cycle
for the source stream tasks" and "Similarly, the status for the non-source tasks"), whose columns
are Event | Stream Task Status | Operator Status | Final Checkpoint | Stop with Savepoint with Drain
| Stop with Savepoint; a row without an event continues the event above it. Rows the FLIP only
implies are marked DERIVED. If the data in ``finishable.lifecycle.table`` drifts from this
transcription, these tests fail.
"""

import dataclasses
from enum import StrEnum
from typing import NamedTuple

import pytest

from finishable.api.lifecycle import LifecycleMode, OperatorStatus, TaskKind, TaskStatus
from finishable.lifecycle.table import (
    NON_SOURCE_TABLE,
    SOURCE_TABLE,
    TABLES,
    closing_row,
    events_in,
    initial_row,
    lookup,
    render_markdown,
)
from finishable.lifecycle.tablerows import NA, Action, Cell, NotApplicable, Origin, Row, TaskEvent

pytestmark = pytest.mark.quick

FC = LifecycleMode.FINAL_CHECKPOINT
SWD = LifecycleMode.STOP_WITH_SAVEPOINT_DRAIN
SW = LifecycleMode.STOP_WITH_SAVEPOINT

RUN = TaskStatus.RUNNING
WAIT = TaskStatus.WAITING_FOR_FINAL_CP
CLOSED = TaskStatus.CLOSED

A = Action
E = TaskEvent

# The FLIP's wording of each action cell, verbatim.
FLIP_WORDING: dict[Action, str] = {
    A.SUSPEND_SOURCE: (
        "finish task (cancel source thread for legacy source and suspend the mailbox for the new"
        " source)"
    ),
    A.ADVANCE_TO_MAX_WATERMARK: "Advanced To MAX_WATERMARK and trigger all the event timers",
    A.EMIT_MAX_WATERMARK: "Emit MAX_WATERMARK",
    A.END_INPUT_AND_FINISH: "call operator.endInput() & operator.finish()",
    A.EMIT_END_OF_DATA_FINISHED: "Emit EndOfData[finished = true]",
    A.EMIT_END_OF_DATA_NOT_FINISHED: "Emit EndOfData[finished = false]",
    A.EMIT_CHECKPOINT_BARRIER: "Emit Checkpoint Barrier",
    A.WAIT_FOR_CHECKPOINT_COMPLETED: "Wait for Checkpoint / Savepoint Completed",
    A.WAIT_FOR_END_OF_DATA_ACK: "Wait for downstream tasks acknowledge EndOfData",
    A.WAIT_FOR_END_OF_PARTITION: "Wait for EndOfPartitionEvent",
    A.CLOSE: "Call operator.close()",
    A.EMIT_END_OF_PARTITION: "Emit EndOfPartitionEvent",
}


class Expected(NamedTuple):
    """One hand-transcribed row. ``event`` None with ``all_of`` empty is the initial row."""

    event: TaskEvent | None
    from_status: tuple[TaskStatus, ...]
    task_status: TaskStatus | None
    operator_status: OperatorStatus | None
    fc: Cell
    swd: Cell
    sw: Cell
    origin: Origin = Origin.FLIP
    all_of: tuple[TaskEvent, ...] = ()
    flip_event: str = ""


def _everywhere(cell: Cell) -> tuple[Cell, Cell, Cell]:
    return cell, cell, cell


# Source tasks. FLIP rows, in the FLIP's order:
#   (no event)                    RUNNING  RUNNING   - | - | -
#   No more records | Received Savepoint Trigger:
#     finish task (suspend source)                   - | yes | yes
#     Advanced To MAX_WATERMARK ...                  yes | yes | -
#     Emit MAX_WATERMARK                             yes | yes | -
#     -> WAITING_FOR_FINAL_CP / FINISHED: endInput & finish   yes | yes | -
#     Emit EndOfData[finished = ...]                 true | true | false
#     when checkpoint triggered, emit barrier        (on trigger) | yes | yes
#     Wait for Checkpoint / Savepoint Completed      yes | yes | yes
#     Wait for downstream tasks acknowledge EndOfData yes | yes | yes
#   Checkpoint Completed && EndOfData acknowledged -> CLOSED / CLOSED:
#     Call operator.close(); Emit EndOfPartitionEvent  (all modes)
EXPECTED_SOURCE: tuple[Expected, ...] = (
    Expected(None, (), RUN, OperatorStatus.RUNNING, *_everywhere(())),
    Expected(
        E.NO_MORE_RECORDS,
        (RUN,),
        WAIT,
        OperatorStatus.FINISHED,
        (
            A.ADVANCE_TO_MAX_WATERMARK,
            A.EMIT_MAX_WATERMARK,
            A.END_INPUT_AND_FINISH,
            A.EMIT_END_OF_DATA_FINISHED,
            A.WAIT_FOR_CHECKPOINT_COMPLETED,
            A.WAIT_FOR_END_OF_DATA_ACK,
        ),
        NA,
        NA,
        flip_event="No more records",
    ),
    Expected(
        E.SAVEPOINT_TRIGGER,
        (RUN,),
        WAIT,
        OperatorStatus.FINISHED,
        NA,
        (
            A.SUSPEND_SOURCE,
            A.ADVANCE_TO_MAX_WATERMARK,
            A.EMIT_MAX_WATERMARK,
            A.END_INPUT_AND_FINISH,
            A.EMIT_END_OF_DATA_FINISHED,
            A.EMIT_CHECKPOINT_BARRIER,
            A.WAIT_FOR_CHECKPOINT_COMPLETED,
            A.WAIT_FOR_END_OF_DATA_ACK,
        ),
        (
            A.SUSPEND_SOURCE,
            A.EMIT_END_OF_DATA_NOT_FINISHED,
            A.EMIT_CHECKPOINT_BARRIER,
            A.WAIT_FOR_CHECKPOINT_COMPLETED,
            A.WAIT_FOR_END_OF_DATA_ACK,
        ),
        flip_event="Received Savepoint Trigger",
    ),
    Expected(
        E.CHECKPOINT_TRIGGERED,
        (WAIT,),
        None,
        None,
        *_everywhere((A.EMIT_CHECKPOINT_BARRIER,)),
        flip_event="when checkpoint triggered",
    ),
    Expected(
        None,
        (WAIT,),
        CLOSED,
        OperatorStatus.CLOSED,
        *_everywhere((A.CLOSE, A.EMIT_END_OF_PARTITION)),
        all_of=(E.CHECKPOINT_COMPLETED, E.END_OF_DATA_ACKNOWLEDGED),
        flip_event="Checkpoint Completed && EndOfData acknowledged",
    ),
    # derived: a running source takes part in ordinary checkpoints
    Expected(
        E.CHECKPOINT_TRIGGERED,
        (RUN,),
        None,
        None,
        *_everywhere((A.EMIT_CHECKPOINT_BARRIER,)),
        origin=Origin.DERIVED,
    ),
)

# Non-source tasks. FLIP rows, in the FLIP's order:
#   (no event)                        RUNNING  RUNNING   - | - | -
#   (two rows of "-": no finish-task step for non-sources)
#   Aligned on MAX_WATERMARK: Advanced To MAX_WATERMARK ...; Emit MAX_WATERMARK   yes | yes | N/A
#   Aligned On EndOfUserRecordsEvent -> WAITING_FOR_FINAL_CP / FINISHED:
#     endInput & finish          yes | yes | -
#     Emit EndOfData[...]        true | true | false
#   Aligned on Checkpoint Barrier: Emit CheckpointBarrier; Wait for Checkpoint / Savepoint
#     Completed; Wait for downstream acknowledge EndOfData; Wait for EndOfPartitionEvent  (all)
#   Checkpoint completed/EndOfData acknowledged/EndOfPartition received -> CLOSED / CLOSED:
#     Call operator.close(); Emit EndOfPartitionEvent  (all modes)
_NON_SOURCE_BARRIER_AFTER_FINISH = (
    A.EMIT_CHECKPOINT_BARRIER,
    A.WAIT_FOR_CHECKPOINT_COMPLETED,
    A.WAIT_FOR_END_OF_DATA_ACK,
    A.WAIT_FOR_END_OF_PARTITION,
)
EXPECTED_NON_SOURCE: tuple[Expected, ...] = (
    Expected(None, (), RUN, OperatorStatus.RUNNING, *_everywhere(())),
    Expected(
        E.MAX_WATERMARK_ALIGNED,
        (RUN,),
        None,
        None,
        (A.ADVANCE_TO_MAX_WATERMARK, A.EMIT_MAX_WATERMARK),
        (A.ADVANCE_TO_MAX_WATERMARK, A.EMIT_MAX_WATERMARK),
        NA,
        flip_event="Aligned on MAX_WATERMARK",
    ),
    Expected(
        E.END_OF_USER_RECORDS_ALIGNED,
        (RUN,),
        WAIT,
        OperatorStatus.FINISHED,
        (A.END_INPUT_AND_FINISH, A.EMIT_END_OF_DATA_FINISHED),
        (A.END_INPUT_AND_FINISH, A.EMIT_END_OF_DATA_FINISHED),
        (A.EMIT_END_OF_DATA_NOT_FINISHED,),
        flip_event="Aligned On EndOfUserRecordsEvent",
    ),
    Expected(
        E.CHECKPOINT_BARRIER_ALIGNED,
        (WAIT,),
        None,
        None,
        *_everywhere(_NON_SOURCE_BARRIER_AFTER_FINISH),
        flip_event="Aligned on Checkpoint Barrier",
    ),
    Expected(
        E.END_OF_PARTITION_RECEIVED,
        (WAIT,),
        None,
        None,
        *_everywhere(()),
        flip_event="EndOfPartition received",
    ),
    Expected(
        None,
        (WAIT,),
        CLOSED,
        OperatorStatus.CLOSED,
        *_everywhere((A.CLOSE, A.EMIT_END_OF_PARTITION)),
        all_of=(E.CHECKPOINT_COMPLETED, E.END_OF_DATA_ACKNOWLEDGED, E.END_OF_PARTITION_RECEIVED),
        flip_event="Checkpoint completed/EndOfData acknowledged/EndOfPartition received",
    ),
    # derived: ordinary checkpoints of a running task, and direct triggers once upstream finished
    Expected(
        E.CHECKPOINT_BARRIER_ALIGNED,
        (RUN,),
        None,
        None,
        *_everywhere((A.EMIT_CHECKPOINT_BARRIER,)),
        origin=Origin.DERIVED,
    ),
    Expected(
        E.CHECKPOINT_TRIGGERED,
        (RUN,),
        None,
        None,
        *_everywhere((A.EMIT_CHECKPOINT_BARRIER,)),
        origin=Origin.DERIVED,
    ),
    Expected(
        E.CHECKPOINT_TRIGGERED,
        (WAIT,),
        None,
        None,
        *_everywhere(_NON_SOURCE_BARRIER_AFTER_FINISH),
        origin=Origin.DERIVED,
    ),
)

# Rows both tables share: the parts of the closing conjunction, completions outside the wait,
# aborts and failure ("In case of failure, we will call the Operator#close").
EXPECTED_COMMON: tuple[Expected, ...] = (
    Expected(
        E.CHECKPOINT_COMPLETED,
        (WAIT,),
        None,
        None,
        *_everywhere(()),
        flip_event="Checkpoint Completed",
    ),
    Expected(
        E.END_OF_DATA_ACKNOWLEDGED,
        (WAIT,),
        None,
        None,
        *_everywhere(()),
        flip_event="EndOfData acknowledged",
    ),
    Expected(E.CHECKPOINT_COMPLETED, (RUN, CLOSED), None, None, *_everywhere(()), Origin.DERIVED),
    Expected(
        E.CHECKPOINT_ABORTED, (RUN, WAIT, CLOSED), None, None, *_everywhere(()), Origin.DERIVED
    ),
    Expected(
        E.FAILED,
        (RUN, WAIT),
        CLOSED,
        OperatorStatus.CLOSED,
        *_everywhere((A.CLOSE,)),
        origin=Origin.DERIVED,
    ),
)

EXPECTED: dict[TaskKind, tuple[Expected, ...]] = {
    TaskKind.SOURCE: EXPECTED_SOURCE + EXPECTED_COMMON,
    TaskKind.NON_SOURCE: EXPECTED_NON_SOURCE + EXPECTED_COMMON,
}

Key = tuple[TaskKind, TaskEvent | None, tuple[TaskStatus, ...], tuple[TaskEvent, ...]]


def _key_of_row(row: Row) -> Key:
    return (row.kind, row.event, row.from_status, row.all_of)


def _key_of_expected(kind: TaskKind, expected: Expected) -> Key:
    return (kind, expected.event, expected.from_status, expected.all_of)


def _expected_cell(expected: Expected, mode: LifecycleMode) -> Cell:
    return {FC: expected.fc, SWD: expected.swd, SW: expected.sw}[mode]


def _id(kind: TaskKind, expected: Expected) -> str:
    name = expected.event.value if expected.event is not None else "+".join(expected.all_of)
    statuses = "|".join(s.value for s in expected.from_status) or "START"
    return f"{kind.value}-{name or 'INITIAL'}@{statuses}"


CASES = [
    pytest.param(kind, expected, mode, id=f"{_id(kind, expected)}-{mode.value}")
    for kind, rows in EXPECTED.items()
    for expected in rows
    for mode in LifecycleMode
]


@pytest.mark.parametrize(("kind", "expected", "mode"), CASES)
def test_every_row_matches_the_flip_in_every_mode(
    kind: TaskKind, expected: Expected, mode: LifecycleMode
) -> None:
    rows = {_key_of_row(row): row for row in TABLES[kind]}
    row = rows[_key_of_expected(kind, expected)]
    assert row.cell(mode) == _expected_cell(expected, mode)
    assert row.applies(mode) == (_expected_cell(expected, mode) is not NA)
    assert row.task_status is expected.task_status
    assert row.operator_status is expected.operator_status
    assert row.origin is expected.origin
    if expected.origin is Origin.FLIP:
        assert row.flip_event == expected.flip_event


@pytest.mark.parametrize("kind", list(TaskKind))
def test_tables_hold_exactly_the_transcribed_rows(kind: TaskKind) -> None:
    actual = [_key_of_row(row) for row in TABLES[kind]]
    expected = [_key_of_expected(kind, e) for e in EXPECTED[kind]]
    assert len(actual) == len(set(actual)), "duplicate rows"
    assert sorted(actual, key=repr) == sorted(expected, key=repr)
    assert all(row.kind is kind for row in TABLES[kind])


@pytest.mark.parametrize("kind", list(TaskKind))
def test_flip_rows_keep_the_flips_order(kind: TaskKind) -> None:
    """The first rows are the FLIP's own, in its order, so generated docs read like the FLIP."""
    flip_rows = [r for r in TABLES[kind] if r.origin is Origin.FLIP]
    expected_flip = [e for e in EXPECTED[kind] if e.origin is Origin.FLIP]
    assert [r.flip_event for r in flip_rows[: len(expected_flip) - 2]] == [
        e.flip_event for e in expected_flip[: len(expected_flip) - 2]
    ]
    assert TABLES[kind][0].is_initial


def test_tables_mapping_holds_both_tables() -> None:
    assert TABLES[TaskKind.SOURCE] is SOURCE_TABLE
    assert TABLES[TaskKind.NON_SOURCE] is NON_SOURCE_TABLE
    assert set(TABLES) == set(TaskKind)
    with pytest.raises(TypeError):
        TABLES[TaskKind.SOURCE] = ()  # type: ignore[index]


def test_rows_are_immutable() -> None:
    row = SOURCE_TABLE[1]
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.task_status = CLOSED  # type: ignore[misc]


@pytest.mark.parametrize("kind", list(TaskKind))
@pytest.mark.parametrize("status", list(TaskStatus))
@pytest.mark.parametrize("event", list(TaskEvent))
def test_lookup_finds_at_most_one_row(kind: TaskKind, status: TaskStatus, event: TaskEvent) -> None:
    matches = [r for r in TABLES[kind] if r.event is event and status in r.from_status]
    assert len(matches) <= 1
    assert lookup(kind, event, status) == (matches[0] if matches else None)


def test_closed_accepts_only_late_checkpoint_outcomes() -> None:
    for kind in TaskKind:
        for mode in LifecycleMode:
            assert events_in(kind, mode, CLOSED) == (E.CHECKPOINT_COMPLETED, E.CHECKPOINT_ABORTED)


def test_events_by_kind() -> None:
    source_events = {r.event for r in SOURCE_TABLE if r.event is not None}
    non_source_events = {r.event for r in NON_SOURCE_TABLE if r.event is not None}
    assert source_events - non_source_events == {E.NO_MORE_RECORDS, E.SAVEPOINT_TRIGGER}
    assert non_source_events - source_events == {
        E.MAX_WATERMARK_ALIGNED,
        E.END_OF_USER_RECORDS_ALIGNED,
        E.CHECKPOINT_BARRIER_ALIGNED,
        E.END_OF_PARTITION_RECEIVED,
    }
    assert source_events | non_source_events == set(TaskEvent)


def test_events_in_respects_not_applicable() -> None:
    assert events_in(TaskKind.SOURCE, FC, RUN) == (
        E.NO_MORE_RECORDS,
        E.CHECKPOINT_TRIGGERED,
        E.CHECKPOINT_COMPLETED,
        E.CHECKPOINT_ABORTED,
        E.FAILED,
    )
    assert E.SAVEPOINT_TRIGGER in events_in(TaskKind.SOURCE, SW, RUN)
    assert E.NO_MORE_RECORDS not in events_in(TaskKind.SOURCE, SW, RUN)
    assert E.MAX_WATERMARK_ALIGNED not in events_in(TaskKind.NON_SOURCE, SW, RUN)
    assert E.MAX_WATERMARK_ALIGNED in events_in(TaskKind.NON_SOURCE, SWD, RUN)


def test_initial_and_closing_rows() -> None:
    for kind in TaskKind:
        start = initial_row(kind)
        assert (start.task_status, start.operator_status) == (RUN, OperatorStatus.RUNNING)
        assert closing_row(kind).task_status is CLOSED
        assert closing_row(kind).is_conjunction and not start.is_conjunction
    assert closing_row(TaskKind.NON_SOURCE).all_of[-1] is E.END_OF_PARTITION_RECEIVED


def test_not_applicable_differs_from_no_action() -> None:
    max_watermark = lookup(TaskKind.NON_SOURCE, E.MAX_WATERMARK_ALIGNED, RUN)
    assert max_watermark is not None
    assert max_watermark.cell(SW) is NA
    assert isinstance(NA, NotApplicable)
    with pytest.raises(ValueError, match="N/A in STOP_WITH_SAVEPOINT"):
        max_watermark.actions(SW)
    start = initial_row(TaskKind.NON_SOURCE)
    assert start.cell(SW) == ()
    assert start.applies(SW)


def test_without_drain_the_operator_is_not_finished() -> None:
    """The FLIP's FINISHED means finish() ran; without drain its cell is '-'."""
    for kind, event in (
        (TaskKind.SOURCE, E.SAVEPOINT_TRIGGER),
        (TaskKind.NON_SOURCE, E.END_OF_USER_RECORDS_ALIGNED),
    ):
        row = lookup(kind, event, RUN)
        assert row is not None
        assert row.operator_status is OperatorStatus.FINISHED  # the FLIP's column
        assert row.operator_status_in(SW) is None  # unchanged: RUNNING
        assert row.operator_status_in(SWD) is OperatorStatus.FINISHED
        assert A.END_INPUT_AND_FINISH not in row.actions(SW)
    source_finish = lookup(TaskKind.SOURCE, E.NO_MORE_RECORDS, RUN)
    assert source_finish is not None
    assert source_finish.operator_status_in(FC) is OperatorStatus.FINISHED
    assert closing_row(TaskKind.SOURCE).operator_status_in(SW) is OperatorStatus.CLOSED


def test_no_max_watermark_without_drain() -> None:
    for kind in TaskKind:
        for row in TABLES[kind]:
            cell = row.cell(SW)
            if isinstance(cell, tuple):
                assert A.ADVANCE_TO_MAX_WATERMARK not in cell
                assert A.EMIT_MAX_WATERMARK not in cell
                assert A.END_INPUT_AND_FINISH not in cell
                assert A.EMIT_END_OF_DATA_FINISHED not in cell


def test_failure_only_closes_and_close_emits_nothing_but_end_of_partition() -> None:
    for kind in TaskKind:
        failed = lookup(kind, E.FAILED, WAIT)
        assert failed is not None
        for mode in LifecycleMode:
            assert failed.actions(mode) == (A.CLOSE,)
            assert not any(a.emits for a in failed.actions(mode))
    assert not A.CLOSE.emits
    assert A.EMIT_END_OF_PARTITION.emits


def test_action_wording_is_the_flips() -> None:
    assert {a: a.flip_text for a in Action} == FLIP_WORDING


ENUMS: tuple[type[StrEnum], ...] = (
    LifecycleMode,
    TaskKind,
    TaskStatus,
    OperatorStatus,
    TaskEvent,
    Action,
    Origin,
)


@pytest.mark.parametrize("enum", ENUMS, ids=lambda e: e.__name__)
def test_enum_values_equal_names(enum: type[StrEnum]) -> None:
    for member in enum:
        assert member.value == member.name
        assert str(member) == member.name


@pytest.mark.parametrize(
    "enum", [LifecycleMode, TaskKind, TaskStatus, OperatorStatus, TaskEvent, Action]
)
def test_every_member_has_a_description(
    enum: type[LifecycleMode | TaskKind | TaskStatus | OperatorStatus | TaskEvent | Action],
) -> None:
    for member in enum:
        assert member.description.strip()
        assert len(member.description) <= 100


def test_enum_members_as_the_brief_lists_them() -> None:
    assert [m.value for m in LifecycleMode] == [
        "FINAL_CHECKPOINT",
        "STOP_WITH_SAVEPOINT_DRAIN",
        "STOP_WITH_SAVEPOINT",
    ]
    assert [m.value for m in TaskStatus] == ["RUNNING", "WAITING_FOR_FINAL_CP", "CLOSED"]
    assert [m.value for m in OperatorStatus] == ["RUNNING", "FINISHED", "CLOSED"]
    assert Action.SUSPEND_SOURCE.description == (
        "finish task: suspend the source, stop assigning splits"
    )


def test_every_row_has_a_description_and_label() -> None:
    for kind in TaskKind:
        for row in TABLES[kind]:
            assert row.description.strip()
            assert row.label.strip()
            if row.origin is Origin.FLIP and not row.is_initial:
                assert row.flip_event


def test_checkpoint_events() -> None:
    assert {e for e in TaskEvent if e.carries_checkpoint} == {
        E.SAVEPOINT_TRIGGER,
        E.CHECKPOINT_BARRIER_ALIGNED,
        E.CHECKPOINT_TRIGGERED,
        E.CHECKPOINT_COMPLETED,
        E.CHECKPOINT_ABORTED,
    }


@pytest.mark.parametrize("kind", list(TaskKind))
def test_render_markdown_all_modes(kind: TaskKind) -> None:
    text = render_markdown(kind)
    assert text.startswith(f"### {kind.value} tasks\n")
    for mode in LifecycleMode:
        assert mode.flip_title in text
    for row in TABLES[kind]:
        assert row.label in text
        assert row.description in text
    table_lines = [line for line in text.splitlines() if line.startswith("| ")]
    header, *body = table_lines[: 1 + len(TABLES[kind])]
    assert header.count("|") == 9
    assert all(line.count("|") == 9 for line in body)
    assert "(derived)" in text


def test_render_markdown_one_mode_leaves_out_not_applicable_rows() -> None:
    text = render_markdown(TaskKind.NON_SOURCE, SW)
    assert "Aligned on MAX_WATERMARK" not in text
    assert "N/A" not in text.split("A blank status")[0]
    assert "STOP_WITH_SAVEPOINT" in text.splitlines()[0]
    eour = next(line for line in text.splitlines() if "EndOfUserRecordsEvent" in line)
    assert eour.split(" | ")[3] == ""  # operator status unchanged (RUNNING): no finish()
    assert "`EMIT_END_OF_DATA_NOT_FINISHED`" in eour
    assert "| `ADVANCE_TO_MAX_WATERMARK` |" not in text  # legend lists only used actions
    full = render_markdown(TaskKind.NON_SOURCE)
    assert "| `ADVANCE_TO_MAX_WATERMARK` |" in full
    assert "N/A" in full
