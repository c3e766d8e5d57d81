"""The task lifecycle machine: table walks, FLIP-147's final-checkpoint rules, refusals."""

import contextlib
import itertools
import json
from collections.abc import Callable

import hypothesis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from finishable.api.lifecycle import LifecycleMode, OperatorStatus, TaskKind, TaskStatus
from finishable.lifecycle.table import closing_row, lookup
from finishable.lifecycle.tablerows import Action, TaskEvent
from finishable.lifecycle.task import IllegalTransition, TaskLifecycle

pytestmark = pytest.mark.quick

FC = LifecycleMode.FINAL_CHECKPOINT
SWD = LifecycleMode.STOP_WITH_SAVEPOINT_DRAIN
SW = LifecycleMode.STOP_WITH_SAVEPOINT
SOURCE = TaskKind.SOURCE
NON_SOURCE = TaskKind.NON_SOURCE
A = Action
E = TaskEvent
RUN = TaskStatus.RUNNING
WAIT = TaskStatus.WAITING_FOR_FINAL_CP
CLOSED = TaskStatus.CLOSED
CLOSE_AND_EMIT = (A.CLOSE, A.EMIT_END_OF_PARTITION)
NON_SOURCE_WAITS = (
    A.EMIT_CHECKPOINT_BARRIER,
    A.WAIT_FOR_CHECKPOINT_COMPLETED,
    A.WAIT_FOR_END_OF_DATA_ACK,
    A.WAIT_FOR_END_OF_PARTITION,
)


def _statuses(task: TaskLifecycle) -> tuple[TaskStatus, OperatorStatus]:
    return task.task_status, task.operator_status


def finish(task: TaskLifecycle, savepoint_id: int = 100) -> tuple[Action, ...]:
    """Bring ``task`` to WAITING_FOR_FINAL_CP the way its kind and mode do it.

    A stop-mode source gets the savepoint ``savepoint_id`` with its trigger.
    """
    if task.kind is SOURCE:
        if task.mode is FC:
            return task.handle(E.NO_MORE_RECORDS)
        return task.handle(E.SAVEPOINT_TRIGGER, savepoint_id)
    actions: tuple[Action, ...] = ()
    if task.mode is not SW:
        actions += task.handle(E.MAX_WATERMARK_ALIGNED)
    return actions + task.handle(E.END_OF_USER_RECORDS_ALIGNED)


def trigger(task: TaskLifecycle, checkpoint_id: int, savepoint: bool = False) -> tuple[Action, ...]:
    """A checkpoint reaching ``task``: triggered at a source, aligned at a non-source."""
    event = E.CHECKPOINT_TRIGGERED if task.kind is SOURCE else E.CHECKPOINT_BARRIER_ALIGNED
    return task.handle(event, checkpoint_id, savepoint=savepoint)


def acknowledge(task: TaskLifecycle) -> tuple[Action, ...]:
    """Downstream acknowledged EndOfData and (non-sources) upstream sent EndOfPartition."""
    actions = task.handle(E.END_OF_DATA_ACKNOWLEDGED)
    if task.kind is NON_SOURCE:
        actions += task.handle(E.END_OF_PARTITION_RECEIVED)
    return actions


# ---------------------------------------------------------------------------------------------
# complete walks, one per kind and mode, with the exact actions of the FLIP's table


def test_source_final_checkpoint_walk() -> None:
    task = TaskLifecycle(SOURCE, FC)
    assert _statuses(task) == (RUN, OperatorStatus.RUNNING)
    assert task.handle(E.NO_MORE_RECORDS) == (
        A.ADVANCE_TO_MAX_WATERMARK,
        A.EMIT_MAX_WATERMARK,
        A.END_INPUT_AND_FINISH,
        A.EMIT_END_OF_DATA_FINISHED,
        A.WAIT_FOR_CHECKPOINT_COMPLETED,
        A.WAIT_FOR_END_OF_DATA_ACK,
    )
    assert _statuses(task) == (WAIT, OperatorStatus.FINISHED)
    assert task.handle(E.CHECKPOINT_TRIGGERED, 7) == (A.EMIT_CHECKPOINT_BARRIER,)
    assert task.handle(E.END_OF_DATA_ACKNOWLEDGED) == ()
    assert task.waiting_for() == (E.CHECKPOINT_COMPLETED,)
    assert task.handle(E.CHECKPOINT_COMPLETED, 7) == CLOSE_AND_EMIT
    assert _statuses(task) == (CLOSED, OperatorStatus.CLOSED)
    assert task.closed
    assert task.final_checkpoint == 7


def test_source_stop_with_savepoint_drain_walk() -> None:
    task = TaskLifecycle(SOURCE, SWD)
    assert task.handle(E.SAVEPOINT_TRIGGER, 9) == (
        A.SUSPEND_SOURCE,
        A.ADVANCE_TO_MAX_WATERMARK,
        A.EMIT_MAX_WATERMARK,
        A.END_INPUT_AND_FINISH,
        A.EMIT_END_OF_DATA_FINISHED,
        A.EMIT_CHECKPOINT_BARRIER,
        A.WAIT_FOR_CHECKPOINT_COMPLETED,
        A.WAIT_FOR_END_OF_DATA_ACK,
    )
    assert _statuses(task) == (WAIT, OperatorStatus.FINISHED)
    assert task.finished_after_checkpoint == 9
    assert task.handle(E.CHECKPOINT_COMPLETED, 9) == ()
    assert task.handle(E.END_OF_DATA_ACKNOWLEDGED) == CLOSE_AND_EMIT
    assert _statuses(task) == (CLOSED, OperatorStatus.CLOSED)


def test_source_stop_with_savepoint_keeps_the_operator_running_while_waiting() -> None:
    task = TaskLifecycle(SOURCE, SW)
    assert task.handle(E.SAVEPOINT_TRIGGER, 9) == (
        A.SUSPEND_SOURCE,
        A.EMIT_END_OF_DATA_NOT_FINISHED,
        A.EMIT_CHECKPOINT_BARRIER,
        A.WAIT_FOR_CHECKPOINT_COMPLETED,
        A.WAIT_FOR_END_OF_DATA_ACK,
    )
    assert _statuses(task) == (WAIT, OperatorStatus.RUNNING)
    assert task.handle(E.END_OF_DATA_ACKNOWLEDGED) == ()
    assert task.handle(E.CHECKPOINT_COMPLETED, 9) == CLOSE_AND_EMIT
    assert _statuses(task) == (CLOSED, OperatorStatus.CLOSED)


@pytest.mark.parametrize("mode", [FC, SWD])
def test_non_source_drain_walk(mode: LifecycleMode) -> None:
    task = TaskLifecycle(NON_SOURCE, mode)
    assert task.handle(E.CHECKPOINT_BARRIER_ALIGNED, 1) == (A.EMIT_CHECKPOINT_BARRIER,)
    assert task.handle(E.CHECKPOINT_COMPLETED, 1) == ()
    assert task.handle(E.MAX_WATERMARK_ALIGNED) == (
        A.ADVANCE_TO_MAX_WATERMARK,
        A.EMIT_MAX_WATERMARK,
    )
    assert _statuses(task) == (RUN, OperatorStatus.RUNNING)
    assert task.handle(E.END_OF_USER_RECORDS_ALIGNED) == (
        A.END_INPUT_AND_FINISH,
        A.EMIT_END_OF_DATA_FINISHED,
    )
    assert _statuses(task) == (WAIT, OperatorStatus.FINISHED)
    assert task.handle(E.CHECKPOINT_BARRIER_ALIGNED, 2, savepoint=mode is SWD) == NON_SOURCE_WAITS
    assert task.handle(E.END_OF_DATA_ACKNOWLEDGED) == ()
    assert task.handle(E.CHECKPOINT_COMPLETED, 2) == ()
    assert task.waiting_for() == (E.END_OF_PARTITION_RECEIVED,)
    assert task.handle(E.END_OF_PARTITION_RECEIVED) == CLOSE_AND_EMIT
    assert _statuses(task) == (CLOSED, OperatorStatus.CLOSED)


def test_non_source_stop_with_savepoint_walk() -> None:
    task = TaskLifecycle(NON_SOURCE, SW)
    assert task.handle(E.END_OF_USER_RECORDS_ALIGNED) == (A.EMIT_END_OF_DATA_NOT_FINISHED,)
    assert _statuses(task) == (WAIT, OperatorStatus.RUNNING)
    assert task.handle(E.CHECKPOINT_BARRIER_ALIGNED, 5, savepoint=True) == NON_SOURCE_WAITS
    assert task.handle(E.END_OF_PARTITION_RECEIVED) == ()
    assert task.handle(E.END_OF_DATA_ACKNOWLEDGED) == ()
    assert _statuses(task) == (WAIT, OperatorStatus.RUNNING)
    assert task.handle(E.CHECKPOINT_COMPLETED, 5) == CLOSE_AND_EMIT
    assert _statuses(task) == (CLOSED, OperatorStatus.CLOSED)


def test_non_source_triggered_directly_after_upstream_finished() -> None:
    """FLIP-147 appendix: a task without running predecessors is triggered, not sent barriers."""
    task = TaskLifecycle(NON_SOURCE, FC)
    finish(task)
    assert task.handle(E.CHECKPOINT_TRIGGERED, 3) == NON_SOURCE_WAITS
    acknowledge(task)
    assert task.handle(E.CHECKPOINT_COMPLETED, 3) == CLOSE_AND_EMIT


# ---------------------------------------------------------------------------------------------
# the FLIP's scenario: finish(); trigger 42, 43, 44; notifyCheckpointComplete(43)


@pytest.mark.parametrize("kind", list(TaskKind))
@pytest.mark.parametrize("mode", list(LifecycleMode))
def test_flip_scenario_42_43_44(kind: TaskKind, mode: LifecycleMode) -> None:
    task = TaskLifecycle(kind, mode)
    stop = mode is not FC
    finish(task, savepoint_id=41)
    if kind is SOURCE and stop:
        task.handle(E.CHECKPOINT_ABORTED, 41)  # the stop's own savepoint is not the story here
    acknowledge(task)
    for checkpoint_id in (42, 43, 44):
        actions = trigger(task, checkpoint_id, savepoint=stop)
        assert A.EMIT_CHECKPOINT_BARRIER in actions
    assert task.task_status is WAIT
    # a stop-mode source triggered its own savepoint 41 right after finishing
    first_after_finish = 41 if kind is SOURCE and stop else 42
    assert task.finished_after_checkpoint == first_after_finish
    assert task.pending_checkpoints == (42, 43, 44)

    assert task.handle(E.CHECKPOINT_COMPLETED, 43) == CLOSE_AND_EMIT
    assert _statuses(task) == (CLOSED, OperatorStatus.CLOSED)
    assert task.final_checkpoint == 43

    # "If checkpoint 44 completes afterwards, it will still be valid."
    assert task.handle(E.CHECKPOINT_COMPLETED, 44) == ()
    assert _statuses(task) == (CLOSED, OperatorStatus.CLOSED)
    assert task.final_checkpoint == 43
    # 42 never completes: it stays pending and the task stays closed.
    assert list(task.pending_checkpoints) == [42]
    assert task.snapshot()["finishedAfterCheckpoint"] == first_after_finish


def test_out_of_order_notifications_close_on_the_first_after_finish() -> None:
    task = TaskLifecycle(SOURCE, FC)
    finish(task)
    acknowledge(task)
    trigger(task, 10)
    trigger(task, 11)
    trigger(task, 12)
    assert task.handle(E.CHECKPOINT_COMPLETED, 12) == CLOSE_AND_EMIT
    assert task.final_checkpoint == 12
    assert task.handle(E.CHECKPOINT_COMPLETED, 10) == ()
    assert task.handle(E.CHECKPOINT_ABORTED, 11) == ()
    assert task.pending_checkpoints == ()


def test_checkpoint_triggered_before_finish_does_not_close() -> None:
    task = TaskLifecycle(SOURCE, FC)
    assert trigger(task, 41) == (A.EMIT_CHECKPOINT_BARRIER,)
    finish(task)
    acknowledge(task)
    assert task.finished_after_checkpoint is None
    assert task.handle(E.CHECKPOINT_COMPLETED, 41) == ()  # accepted, but it does not count
    assert task.task_status is WAIT
    assert task.waiting_for() == (E.CHECKPOINT_COMPLETED,)
    trigger(task, 42)
    assert task.finished_after_checkpoint == 42
    assert task.handle(E.CHECKPOINT_COMPLETED, 42) == CLOSE_AND_EMIT


def test_non_source_barrier_aligned_before_end_of_data_does_not_close() -> None:
    task = TaskLifecycle(NON_SOURCE, FC)
    task.handle(E.MAX_WATERMARK_ALIGNED)
    trigger(task, 1)
    task.handle(E.END_OF_USER_RECORDS_ALIGNED)
    acknowledge(task)
    assert task.handle(E.CHECKPOINT_COMPLETED, 1) == ()
    assert task.task_status is WAIT
    trigger(task, 2)
    assert task.handle(E.CHECKPOINT_COMPLETED, 2) == CLOSE_AND_EMIT


@pytest.mark.parametrize("mode", [SWD, SW])
@pytest.mark.parametrize("kind", list(TaskKind))
def test_stop_modes_need_a_savepoint(kind: TaskKind, mode: LifecycleMode) -> None:
    task = TaskLifecycle(kind, mode)
    finish(task, savepoint_id=20)
    acknowledge(task)
    trigger(task, 21)  # a periodic checkpoint after finish
    assert task.handle(E.CHECKPOINT_COMPLETED, 21) == ()
    assert task.task_status is WAIT
    if kind is SOURCE:
        final = 20  # the savepoint that stopped the source
    else:
        final = 22
        trigger(task, 22, savepoint=True)
    assert task.handle(E.CHECKPOINT_COMPLETED, final) == CLOSE_AND_EMIT
    assert task.final_checkpoint == final


def test_final_checkpoint_mode_also_closes_on_a_savepoint() -> None:
    task = TaskLifecycle(SOURCE, FC)
    finish(task)
    acknowledge(task)
    trigger(task, 3, savepoint=True)
    assert task.handle(E.CHECKPOINT_COMPLETED, 3, savepoint=True) == CLOSE_AND_EMIT


@pytest.mark.parametrize(
    "order",
    list(itertools.permutations(["completed", "ack", "partition"])),
    ids="-".join,
)
def test_closing_parts_in_any_order(order: tuple[str, ...]) -> None:
    task = TaskLifecycle(NON_SOURCE, FC)
    finish(task)
    trigger(task, 8)
    steps = {
        "completed": lambda: task.handle(E.CHECKPOINT_COMPLETED, 8),
        "ack": lambda: task.handle(E.END_OF_DATA_ACKNOWLEDGED),
        "partition": lambda: task.handle(E.END_OF_PARTITION_RECEIVED),
    }
    for index, step in enumerate(order):
        actions = steps[step]()
        if index < len(order) - 1:
            assert actions == ()
            assert task.task_status is WAIT
        else:
            assert actions == CLOSE_AND_EMIT
            assert task.closed


@pytest.mark.parametrize("first", ["completed", "ack"])
def test_source_closing_parts_in_either_order(first: str) -> None:
    task = TaskLifecycle(SOURCE, FC)
    finish(task)
    trigger(task, 1)
    if first == "completed":
        assert task.handle(E.CHECKPOINT_COMPLETED, 1) == ()
        assert task.handle(E.END_OF_DATA_ACKNOWLEDGED) == CLOSE_AND_EMIT
    else:
        assert task.handle(E.END_OF_DATA_ACKNOWLEDGED) == ()
        assert task.handle(E.CHECKPOINT_COMPLETED, 1) == CLOSE_AND_EMIT


def test_aborted_checkpoint_after_finish_waits_for_another() -> None:
    task = TaskLifecycle(SOURCE, FC)
    finish(task)
    acknowledge(task)
    trigger(task, 5)
    assert task.handle(E.CHECKPOINT_ABORTED, 5) == ()
    assert task.task_status is WAIT
    assert task.finished_after_checkpoint == 5
    trigger(task, 6)
    assert task.handle(E.CHECKPOINT_COMPLETED, 6) == CLOSE_AND_EMIT


# ---------------------------------------------------------------------------------------------
# failure


@pytest.mark.parametrize("mode", list(LifecycleMode))
@pytest.mark.parametrize("kind", list(TaskKind))
@pytest.mark.parametrize("when", ["running", "waiting"])
def test_failure_runs_only_close(kind: TaskKind, mode: LifecycleMode, when: str) -> None:
    task = TaskLifecycle(kind, mode)
    trigger(task, 1)
    if when == "waiting":
        finish(task)
        trigger(task, 2, savepoint=True)
    assert task.handle(E.FAILED) == (A.CLOSE,)
    assert _statuses(task) == (CLOSED, OperatorStatus.CLOSED)
    assert task.final_checkpoint is None
    # a late notification is still accepted and does nothing
    assert task.handle(E.CHECKPOINT_COMPLETED, 1) == ()
    with pytest.raises(IllegalTransition):
        task.handle(E.FAILED)


# ---------------------------------------------------------------------------------------------
# refusals


def test_refusal_message_names_kind_mode_statuses_event_and_accepted_events() -> None:
    task = TaskLifecycle(SOURCE, FC)
    with pytest.raises(IllegalTransition) as info:
        task.handle(E.END_OF_DATA_ACKNOWLEDGED)
    message = str(info.value)
    assert message == (
        "SOURCE task in FINAL_CHECKPOINT (task status RUNNING, operator status RUNNING) refuses"
        " END_OF_DATA_ACKNOWLEDGED: the table has no row for it in RUNNING; accepted events:"
        " NO_MORE_RECORDS, CHECKPOINT_TRIGGERED, FAILED"
    )
    error = info.value
    assert isinstance(error, ValueError)
    assert (error.kind, error.mode, error.event) == (SOURCE, FC, E.END_OF_DATA_ACKNOWLEDGED)
    assert (error.task_status, error.operator_status) == (RUN, OperatorStatus.RUNNING)
    assert error.accepted == (E.NO_MORE_RECORDS, E.CHECKPOINT_TRIGGERED, E.FAILED)


def test_not_applicable_event_is_refused() -> None:
    task = TaskLifecycle(NON_SOURCE, SW)
    with pytest.raises(IllegalTransition, match="MAX_WATERMARK_ALIGNED: it is N/A in STOP_WITH"):
        task.handle(E.MAX_WATERMARK_ALIGNED)
    source = TaskLifecycle(SOURCE, FC)
    with pytest.raises(IllegalTransition, match="N/A in FINAL_CHECKPOINT"):
        source.handle(E.SAVEPOINT_TRIGGER, 1)
    stopping = TaskLifecycle(SOURCE, SWD)
    with pytest.raises(IllegalTransition, match="NO_MORE_RECORDS: it is N/A"):
        stopping.handle(E.NO_MORE_RECORDS)


def test_events_of_the_other_kind_are_refused() -> None:
    with pytest.raises(IllegalTransition, match=r"NON_SOURCE task .* refuses NO_MORE_RECORDS"):
        TaskLifecycle(NON_SOURCE, FC).handle(E.NO_MORE_RECORDS)
    with pytest.raises(IllegalTransition, match=r"^SOURCE task .* refuses END_OF_PARTITION"):
        TaskLifecycle(SOURCE, FC).handle(E.END_OF_PARTITION_RECEIVED)


@pytest.mark.parametrize("mode", [FC, SWD])
def test_end_of_data_before_max_watermark_is_refused_when_draining(mode: LifecycleMode) -> None:
    task = TaskLifecycle(NON_SOURCE, mode)
    with pytest.raises(IllegalTransition) as info:
        task.handle(E.END_OF_USER_RECORDS_ALIGNED)
    assert "MAX_WATERMARK_ALIGNED must come first" in str(info.value)
    assert E.MAX_WATERMARK_ALIGNED in info.value.accepted
    assert E.END_OF_USER_RECORDS_ALIGNED not in info.value.accepted


def test_repeated_events_are_refused() -> None:
    task = TaskLifecycle(NON_SOURCE, FC)
    task.handle(E.MAX_WATERMARK_ALIGNED)
    with pytest.raises(IllegalTransition, match="it already happened"):
        task.handle(E.MAX_WATERMARK_ALIGNED)
    task.handle(E.END_OF_USER_RECORDS_ALIGNED)
    with pytest.raises(IllegalTransition, match="no row for it in WAITING_FOR_FINAL_CP"):
        task.handle(E.END_OF_USER_RECORDS_ALIGNED)
    task.handle(E.END_OF_DATA_ACKNOWLEDGED)
    with pytest.raises(IllegalTransition, match="END_OF_DATA_ACKNOWLEDGED: it already happened"):
        task.handle(E.END_OF_DATA_ACKNOWLEDGED)
    source = TaskLifecycle(SOURCE, FC)
    finish(source)
    with pytest.raises(IllegalTransition, match="operator status FINISHED"):
        source.handle(E.NO_MORE_RECORDS)


def test_checkpoint_bookkeeping_refusals() -> None:
    task = TaskLifecycle(SOURCE, FC)
    with pytest.raises(IllegalTransition, match="checkpoint 3 is not pending"):
        task.handle(E.CHECKPOINT_COMPLETED, 3)
    trigger(task, 3)
    with pytest.raises(IllegalTransition, match="checkpoint 3 is already pending"):
        trigger(task, 3)
    with pytest.raises(IllegalTransition, match="triggered as a checkpoint, not a savepoint"):
        task.handle(E.CHECKPOINT_COMPLETED, 3, savepoint=True)
    task.handle(E.CHECKPOINT_COMPLETED, 3)
    with pytest.raises(IllegalTransition, match="checkpoint 3 is not pending"):
        task.handle(E.CHECKPOINT_ABORTED, 3)


def test_closed_task_refuses_all_but_late_checkpoint_outcomes() -> None:
    task = TaskLifecycle(NON_SOURCE, FC)
    finish(task)
    trigger(task, 1)
    trigger(task, 2)
    acknowledge(task)
    task.handle(E.CHECKPOINT_COMPLETED, 1)
    assert task.closed
    assert task.accepted_events() == (E.CHECKPOINT_COMPLETED, E.CHECKPOINT_ABORTED)
    for event, checkpoint_id in (
        (E.CHECKPOINT_BARRIER_ALIGNED, 3),
        (E.CHECKPOINT_TRIGGERED, 3),
        (E.END_OF_PARTITION_RECEIVED, None),
        (E.FAILED, None),
    ):
        with pytest.raises(IllegalTransition, match="task status CLOSED, operator status CLOSED"):
            task.handle(event, checkpoint_id)
    task.handle(E.CHECKPOINT_ABORTED, 2)
    assert task.accepted_events() == ()


def test_refusal_leaves_the_state_unchanged() -> None:
    task = TaskLifecycle(SOURCE, SW)
    task.handle(E.SAVEPOINT_TRIGGER, 4)
    before = task.snapshot()
    for event, checkpoint_id in ((E.SAVEPOINT_TRIGGER, 5), (E.CHECKPOINT_COMPLETED, 99)):
        with pytest.raises(IllegalTransition):
            task.handle(event, checkpoint_id)
    assert task.snapshot() == before


def test_wrong_arguments_are_plain_value_errors() -> None:
    task = TaskLifecycle(SOURCE, FC)
    calls: list[Callable[[], object]] = [
        lambda: task.handle(E.CHECKPOINT_TRIGGERED),
        lambda: task.handle(E.NO_MORE_RECORDS, 3),
        lambda: task.handle(E.FAILED, savepoint=True),
        lambda: task.handle(E.CHECKPOINT_TRIGGERED, -1),
    ]
    for call in calls:
        with pytest.raises(ValueError) as info:
            call()
        assert not isinstance(info.value, IllegalTransition)
    assert task.snapshot()["pendingCheckpoints"] == []


# ---------------------------------------------------------------------------------------------
# status view


def test_snapshot_is_json_ready() -> None:
    task = TaskLifecycle(NON_SOURCE, SWD)
    assert task.snapshot() == {
        "kind": "NON_SOURCE",
        "mode": "STOP_WITH_SAVEPOINT_DRAIN",
        "taskStatus": "RUNNING",
        "operatorStatus": "RUNNING",
        "finishedAfterCheckpoint": None,
        "finalCheckpoint": None,
        "pendingCheckpoints": [],
        "waitingFor": [],
    }
    finish(task)
    trigger(task, 12, savepoint=True)
    trigger(task, 11)
    snapshot = task.snapshot()
    assert json.loads(json.dumps(snapshot)) == snapshot
    assert snapshot["taskStatus"] == "WAITING_FOR_FINAL_CP"
    assert snapshot["operatorStatus"] == "FINISHED"
    assert snapshot["finishedAfterCheckpoint"] == 12
    assert snapshot["pendingCheckpoints"] == [11, 12]
    assert snapshot["waitingFor"] == [
        "CHECKPOINT_COMPLETED",
        "END_OF_DATA_ACKNOWLEDGED",
        "END_OF_PARTITION_RECEIVED",
    ]
    assert TaskStatus(snapshot["taskStatus"]) is WAIT
    assert "NON_SOURCE" in repr(task)


# ---------------------------------------------------------------------------------------------
# properties over random event sequences

Step = tuple[TaskEvent, int | None, bool]


_NOT_FAILED = [e for e in TaskEvent if e is not E.FAILED]


@st.composite
def steps(draw: st.DrawFn) -> Step:
    """Any event, with a small checkpoint id where one is needed; FAILED kept rare."""
    event = E.FAILED if draw(st.integers(0, 30)) == 0 else draw(st.sampled_from(_NOT_FAILED))
    if event.carries_checkpoint:
        return event, draw(st.integers(min_value=0, max_value=5)), draw(st.booleans())
    return event, None, False


def _allowed_pairs(mode: LifecycleMode) -> set[tuple[TaskStatus, OperatorStatus]]:
    """Every (task, operator) status pair the table can produce in ``mode``."""
    waiting = OperatorStatus.RUNNING if mode is SW else OperatorStatus.FINISHED
    return {
        (RUN, OperatorStatus.RUNNING),
        (WAIT, waiting),
        (CLOSED, OperatorStatus.CLOSED),
    }


ORDER = {RUN: 0, WAIT: 1, CLOSED: 2}


def _apply_and_check(task: TaskLifecycle, step: Step) -> bool:
    """Handle one step and check the invariants; returns whether it was accepted."""
    event, checkpoint_id, savepoint = step
    before_status = task.task_status
    before = task.snapshot()
    accepted = task.accepted_events()
    was_closed = task.closed
    try:
        actions = task.handle(event, checkpoint_id, savepoint=savepoint)
    except IllegalTransition as error:
        assert task.snapshot() == before
        assert error.accepted == accepted
        assert f"refuses {event.value}" in str(error)
        if not event.carries_checkpoint:
            assert event not in accepted
        return False
    assert event in accepted
    assert (task.task_status, task.operator_status) in _allowed_pairs(task.mode)
    assert ORDER[task.task_status] >= ORDER[before_status]
    if was_closed:
        assert actions == ()
        assert task.closed
        return True
    # the actions are the row's cell, followed by the closing row's when it fired
    row = lookup(task.kind, event, before_status)
    assert row is not None
    assert row.applies(task.mode)
    cell = row.actions(task.mode)
    assert actions[: len(cell)] == cell
    rest = actions[len(cell) :]
    assert rest in ((), closing_row(task.kind).actions(task.mode))
    if event is E.FAILED:
        assert actions == (A.CLOSE,)
    elif task.closed:
        # a successful close: every part of the conjunction, a final checkpoint after finish()
        assert rest == closing_row(task.kind).actions(task.mode)
        assert task.final_checkpoint is not None
        assert task.finished_after_checkpoint is not None
        assert task.waiting_for() == ()
    else:
        assert rest == ()
    return True


@settings(max_examples=400, deadline=None)
@given(
    kind=st.sampled_from(list(TaskKind)),
    mode=st.sampled_from(list(LifecycleMode)),
    sequence=st.lists(steps(), max_size=40),
)
def test_random_sequences_stay_in_the_table(
    kind: TaskKind, mode: LifecycleMode, sequence: list[Step]
) -> None:
    task = TaskLifecycle(kind, mode)
    for step in sequence:
        _apply_and_check(task, step)
    if task.closed:
        assert task.accepted_events() in ((), (E.CHECKPOINT_COMPLETED, E.CHECKPOINT_ABORTED))


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(list(TaskKind)),
    mode=st.sampled_from(list(LifecycleMode)),
    data=st.data(),
)
def test_walks_along_accepted_events_stay_in_the_table(
    kind: TaskKind, mode: LifecycleMode, data: st.DataObject
) -> None:
    """Random walks that pick only accepted events reach deep states (and CLOSED) often."""
    task = TaskLifecycle(kind, mode)
    for next_id in range(data.draw(st.integers(0, 25), label="length")):
        accepted = [e for e in task.accepted_events() if e is not E.FAILED or next_id % 7 == 6]
        if not accepted:
            break
        event = data.draw(st.sampled_from(accepted), label="event")
        checkpoint_id: int | None = None
        savepoint = False
        if event in (E.CHECKPOINT_COMPLETED, E.CHECKPOINT_ABORTED):
            checkpoint_id = data.draw(st.sampled_from(task.pending_checkpoints), label="id")
        elif event.carries_checkpoint:
            checkpoint_id = next_id
            savepoint = data.draw(st.booleans(), label="savepoint")
        assert _apply_and_check(task, (event, checkpoint_id, savepoint))
    hypothesis.event("final status", task.task_status.value)


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(list(TaskKind)),
    mode=st.sampled_from(list(LifecycleMode)),
    sequence=st.lists(steps(), max_size=40),
    after=st.lists(steps(), max_size=20),
)
def test_closed_tasks_never_emit(
    kind: TaskKind, mode: LifecycleMode, sequence: list[Step], after: list[Step]
) -> None:
    task = TaskLifecycle(kind, mode)
    # drive the task to CLOSED along the happy path, after some random noise
    for event, checkpoint_id, savepoint in sequence:
        with contextlib.suppress(IllegalTransition):
            task.handle(event, checkpoint_id, savepoint=savepoint)
    if not task.closed:
        task.handle(E.FAILED)
    assert task.closed
    for event, checkpoint_id, savepoint in after:
        try:
            actions = task.handle(event, checkpoint_id, savepoint=savepoint)
        except IllegalTransition:
            continue
        assert not any(a.emits for a in actions)
        assert actions == ()
        assert (task.task_status, task.operator_status) == (CLOSED, OperatorStatus.CLOSED)


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(list(TaskKind)),
    mode=st.sampled_from(list(LifecycleMode)),
    before=st.lists(st.integers(min_value=0, max_value=50), unique=True, max_size=4),
    after=st.lists(st.integers(min_value=100, max_value=150), unique=True, min_size=1, max_size=5),
    data=st.data(),
)
def test_first_completion_after_finish_closes(
    kind: TaskKind,
    mode: LifecycleMode,
    before: list[int],
    after: list[int],
    data: st.DataObject,
) -> None:
    """Whatever the interleaving, the task closes on the first completion after finish()."""
    task = TaskLifecycle(kind, mode)
    stop = mode is not FC
    for checkpoint_id in before:
        trigger(task, checkpoint_id)
    finish(task, savepoint_id=99)
    if kind is SOURCE and stop:
        task.handle(E.CHECKPOINT_ABORTED, 99)
    acknowledge(task)
    for checkpoint_id in after:
        trigger(task, checkpoint_id, savepoint=stop)
    completions = data.draw(st.permutations(before + after))
    closed_on: int | None = None
    for checkpoint_id in completions:
        actions = task.handle(E.CHECKPOINT_COMPLETED, checkpoint_id)
        if closed_on is None and checkpoint_id in after:
            closed_on = checkpoint_id
            assert actions == CLOSE_AND_EMIT
        else:
            assert actions == ()
    assert task.final_checkpoint == closed_on
    assert task.finished_after_checkpoint == (99 if kind is SOURCE and stop else after[0])
    assert task.closed
