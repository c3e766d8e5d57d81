"""The batch job event log and recovery decisions, without I/O (FLIP-383 steps 3 to 5)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from finishable.driver.batch.joblog import (
    CoordinatorSnapshot,
    Listed,
    OutputCommitted,
    OutputPlanned,
    PartitionRef,
    StageInitialized,
    StageKind,
    StageShape,
    TaskFinished,
    TaskReset,
    decode_event,
    live_events,
    read_shape,
    recover,
    replay,
    schedule,
)
from finishable.lifecycle.graph import TaskId
from finishable.state.eventlog import JobEvent

pytestmark = pytest.mark.quick

READ = StageInitialized("paid", StageKind.READ.value, 4, source="orders")
TOTALS = StageInitialized("totals", StageKind.STAGE.value, 2, inputs=("paid",))
SINK = StageInitialized("sink-out", StageKind.SINK.value, 2, inputs=("totals",))


def finished(stage: str, task: int, sha: str = "a", server: str = "s1") -> TaskFinished:
    return TaskFinished(
        stage=stage,
        task=task,
        attempt=1,
        partitions=(PartitionRef(server, stage, task, sha),),
    )


def listed(*keys: tuple[str, int], sha: str = "a") -> dict[tuple[str, int], Listed]:
    return {key: Listed("s1", sha) for key in keys}


def no_staged(_stage: str, _staged: Any) -> bool:
    return False


def test_events_round_trip_through_their_json() -> None:
    import json

    event = TaskFinished(
        "paid",
        3,
        2,
        task_attempt=1,
        rows=10,
        bytes=99,
        partitions=(PartitionRef("http://x", "paid", 3, "abc", 10, 99),),
        splits=("f1", "f2"),
    )
    data = json.loads(json.dumps(dataclasses.asdict(event)))
    assert decode_event("TaskFinished", data) == event
    init = StageInitialized("totals", "stage", 4, inputs=("paid",), narrow=False)
    assert decode_event("StageInitialized", dataclasses.asdict(init)) == init
    assert decode_event("SomethingNewer", {"x": 1}) is None


def test_read_tasks_survive_and_those_after_the_newest_snapshot_have_their_splits_again() -> None:
    late = dataclasses.replace(finished("paid", 2), splits=("f5", "f6"))
    log = replay(
        [
            (1, READ),
            (2, finished("paid", 0)),
            (3, finished("paid", 1)),
            (4, CoordinatorSnapshot("orders", "c25hcA==")),
            (5, late),  # after the snapshot: the restored enumerator does not know f5, f6 done
            (6, finished("paid", 3)),  # its partition is gone: it runs again
        ]
    )
    recovery = recover(log, listed(("paid", 0), ("paid", 1), ("paid", 2)), no_staged)
    assert set(recovery.finished["paid"]) == {0, 1, 2}
    assert recovery.reset["paid"] == {3}
    assert recovery.late == {"paid": {2: ("f5", "f6")}}, "only the surviving late task"
    assert recovery.restore["orders"] == CoordinatorSnapshot("orders", "c25hcA==")


def test_a_task_whose_partition_is_gone_or_different_is_not_finished() -> None:
    log = replay(
        [
            (1, TOTALS),
            (2, finished("totals", 0, sha="a")),
            (3, finished("totals", 1, sha="b")),
        ]
    )
    # partition 0 is gone; partition 1 is there but from another commit (checksum differs)
    recovery = recover(log, {("totals", 1): Listed("s1", "other")}, no_staged)
    assert recovery.finished["totals"] == {}
    assert recovery.reset["totals"] == {0, 1}


def test_the_last_task_finished_event_of_a_task_wins() -> None:
    log = replay([(1, TOTALS), (2, finished("totals", 0, sha="old")), (3, finished("totals", 0))])
    recovery = recover(log, listed(("totals", 0), sha="a"), no_staged)
    assert set(recovery.finished["totals"]) == {0}


def test_read_tasks_without_any_snapshot_all_run_again() -> None:
    # The enumerator lists its input anew: the log's split ids may not be what it finds.
    log = replay([(1, READ), (2, finished("paid", 0))])
    recovery = recover(log, listed(("paid", 0)), no_staged)
    assert recovery.finished["paid"] == {} and recovery.reset["paid"] == {0}
    assert recovery.restore == {} and recovery.late == {}


def test_sink_tasks_survive_when_their_staged_file_does() -> None:
    staged = {"path": "staging/x.parquet", "size": 10}
    event = TaskFinished("sink-out", 1, 1, staged=staged)
    log = replay([(1, SINK), (2, event)])
    kept = recover(log, {}, lambda stage, s: (stage, s["path"]) == ("sink-out", staged["path"]))
    assert set(kept.finished["sink-out"]) == {1}
    assert kept.committed == frozenset()
    lost = recover(log, {}, no_staged)
    assert lost.finished["sink-out"] == {}


def test_a_sink_that_published_keeps_its_tasks_and_the_other_sinks_run_on() -> None:
    # Two sinks; the driver was killed after publishing "out" and before publishing "counts".
    counts = StageInitialized("sink-counts", StageKind.SINK.value, 2, inputs=("totals",))
    staged = {"path": "staging/c.parquet", "size": 10}
    log = replay(
        [
            (1, TOTALS),
            (2, SINK),
            (3, counts),
            (4, OutputPlanned("out", 3)),
            (5, OutputPlanned("counts", 0)),
            (6, OutputPlanned("out", 9)),  # the first plan of a sink is the one it keeps
            (7, finished("totals", 0)),
            (8, finished("totals", 1)),
            *[(9 + t, TaskFinished("sink-out", t, 1, staged=staged)) for t in (0, 1)],
            *[(11 + t, TaskFinished("sink-counts", t, 1, staged=staged)) for t in (0, 1)],
            (13, OutputCommitted("out", 5)),
        ]
    )
    assert {name: plan.batch_id for name, plan in log.planned.items()} == {"out": 3, "counts": 0}
    # out's publish cleaned its staging up; counts' staged files are there; totals are gone
    recovery = recover(log, {}, lambda stage, _: stage == "sink-counts")
    assert recovery.committed == frozenset({"out"})
    assert set(recovery.finished["sink-out"]) == set(recovery.finished["sink-counts"]) == {0, 1}
    shapes = [
        StageShape("totals", StageKind.STAGE, 2),
        StageShape("sink-out", StageKind.SINK, 2, ("totals",), narrow=True),
        StageShape("sink-counts", StageKind.SINK, 2, ("totals",), narrow=True),
    ]
    assert schedule(shapes, recovery.finished_tasks()) == {}, "nothing runs again"
    # counts' staged files lost too: its tasks and what they read run again, out's do not
    lost = recover(log, {}, no_staged)
    assert schedule(shapes, lost.finished_tasks()) == {"totals": [0, 1], "sink-counts": [0, 1]}


def test_a_reset_task_is_not_revived_by_a_later_snapshot() -> None:
    # attempt 2 reset task 1 (finished after the snapshot it restored) and its new run failed;
    # attempt 2 then snapshotted after task 0: task 1's old partition is still listed.
    log = replay(
        [
            (1, READ),
            (2, finished("paid", 1)),
            (3, TaskReset("paid", 1)),
            (4, finished("paid", 0)),
            (5, CoordinatorSnapshot("orders", "c25hcA==")),
        ]
    )
    recovery = recover(log, listed(("paid", 0), ("paid", 1)), no_staged)
    assert set(recovery.finished["paid"]) == {0}


def test_task_finished_of_an_unknown_stage_is_ignored() -> None:
    log = replay([(1, finished("ghost", 0))])
    assert log.stages == {}


SHAPES = [
    StageShape("paid", StageKind.READ, 4),
    StageShape("totals", StageKind.STAGE, 2, inputs=("paid",)),
    StageShape("sink-out", StageKind.SINK, 2, inputs=("totals",)),
]


def tasks(stage: str, *subtasks: int) -> set[TaskId]:
    return {TaskId(stage, s) for s in subtasks}


def test_schedule_runs_everything_on_a_fresh_job() -> None:
    assert schedule(SHAPES, set()) == {
        "paid": [0, 1, 2, 3],
        "totals": [0, 1],
        "sink-out": [0, 1],
    }


def test_schedule_reuses_finished_output_and_walks_up_only_where_needed() -> None:
    done = tasks("paid", 0, 1, 2, 3) | tasks("totals", 0)
    assert schedule(SHAPES, done) == {"totals": [1], "sink-out": [0, 1]}
    # the aggregate finished: the reads it consumed are not needed even where they are lost
    assert schedule(SHAPES, tasks("totals", 0, 1) | tasks("sink-out", 0)) == {"sink-out": [1]}
    everything = tasks("paid", 0, 1) | tasks("totals", 0, 1) | tasks("sink-out", 0, 1)
    assert schedule(SHAPES, everything) == {}


def test_schedule_of_an_unfinished_all_to_all_stage_needs_all_of_its_input() -> None:
    done = tasks("paid", 0, 2) | tasks("sink-out", 1)
    assert schedule(SHAPES, done) == {"paid": [1, 3], "totals": [0, 1], "sink-out": [0]}


def test_schedule_narrow_stages_pointwise() -> None:
    shapes = [
        StageShape("paid", StageKind.READ, 4),
        StageShape("clean", StageKind.STAGE, 4, inputs=("paid",), narrow=True),
        StageShape("sink-out", StageKind.SINK, 4, inputs=("clean",), narrow=True),
    ]
    done = tasks("paid", 0, 1, 2, 3) | tasks("clean", 0, 1) | tasks("sink-out", 0, 2)
    # sink 1 reuses clean 1; sink 3 needs clean 3, which reuses paid 3
    assert schedule(shapes, done) == {"clean": [3], "sink-out": [1, 3]}


@pytest.mark.parametrize("bad", [-1, 7])
def test_schedule_ignores_finished_tasks_outside_a_stage(bad: int) -> None:
    assert schedule(SHAPES, tasks("totals", bad))["totals"] == [0, 1]


# -- compaction: the live events replay to the same log -----------------------------------------

_STAGES = [
    READ,
    TOTALS,
    SINK,
    StageInitialized("sink-counts", StageKind.SINK.value, 2, inputs=("totals",)),
    StageInitialized("paid", StageKind.READ.value, 9, source="x"),
]


def _an_event() -> st.SearchStrategy[object]:
    stage = st.sampled_from(["paid", "totals", "sink-out", "sink-counts", "other"])
    task = st.integers(0, 3)
    return st.one_of(
        st.sampled_from(_STAGES),
        st.builds(finished, stage, task, st.sampled_from(["a", "b"])),
        st.builds(TaskReset, stage, task),
        st.builds(CoordinatorSnapshot, st.sampled_from(["orders", "x"]), st.text("ab", max_size=3)),
        st.builds(OutputPlanned, st.sampled_from(["out", "counts"]), st.integers(0, 2)),
        st.builds(OutputCommitted, st.sampled_from(["out", "counts"]), st.integers(0, 9)),
    )


def _as_logged(events: list[object]) -> list[JobEvent]:
    return [
        JobEvent(seq, type(event).__name__, dataclasses.asdict(event), 0.0)  # type: ignore[arg-type]
        for seq, event in enumerate(events, start=1)
    ] + [JobEvent(len(events) + 1, "SomethingNewer", {"x": 1}, 0.0)]


def _replayed(events: list[JobEvent]) -> Any:
    typed = ((e.seq, decode_event(e.type, e.data)) for e in events)
    return replay((seq, event) for seq, event in typed if event is not None)


@settings(max_examples=300, deadline=None)
@given(st.lists(_an_event(), max_size=40))
def test_the_live_events_replay_to_the_same_log_and_recovery(events: list[object]) -> None:
    logged = _as_logged(events)
    kept = live_events(logged)
    assert [e.seq for e in kept] == sorted(e.seq for e in kept)
    assert kept[-1].type == "SomethingNewer", "unknown events are kept"
    whole, compacted = _replayed(logged), _replayed(kept)
    whole.last_seq = compacted.last_seq = 0
    assert compacted == whole
    survivors = listed(("paid", 0), ("paid", 1), ("totals", 0))
    assert recover(compacted, survivors, no_staged) == recover(whole, survivors, no_staged)
    assert live_events(kept) == kept, "compaction is idempotent"


@pytest.mark.parametrize(
    ("splits", "cores", "recorded", "shape"),
    [
        (150, 2, None, (32, 5)),  # 16 tasks per core: a crash loses at most 2 x 5 splits
        (24, 2, None, (24, 1)),  # never more tasks than splits
        (1, 8, None, (1, 1)),
        (0, 2, None, (1, 1)),  # an empty read still has its one task
        (10_000, 16, None, (256, 40)),
        (150, 8, 32, (32, 5)),  # an earlier attempt's tasks, on more cores now
    ],
)
def test_a_read_is_cut_into_many_small_tasks(
    splits: int, cores: int, recorded: int | None, shape: tuple[int, int]
) -> None:
    assert read_shape(splits, cores, recorded) == shape
    tasks, quota = shape
    assert tasks * quota >= splits, "every split is taken by some task"


MB = 1024**2


@pytest.mark.parametrize(
    ("splits", "cores", "input_bytes", "task_bytes", "shape"),
    [
        (96, 2, 450 * MB, 64 * MB, (8, 12)),  # the staged benchmark: 8 tasks of ~56 MB
        (150, 2, 345 * MB, 64 * MB, (6, 25)),
        (10, 4, 1 * MB, 64 * MB, (4, 3)),  # a small read still uses every core
        (3, 4, 1 * MB, 64 * MB, (3, 1)),  # but never more tasks than splits
        (150, 2, 345 * MB, 1, (32, 5)),  # tiny tasks asked for: 16 per core at most
        (1000, 2, 100_000 * MB, 64 * MB, (32, 32)),  # a large read: 16 per core, 1/16 each
        (96, 8, 450 * MB, 64 * MB, (8, 12)),
        (96, 2, 450 * MB, 16 * MB, (29, 4)),
    ],
)
def test_reader_tasks_get_at_least_the_task_size_of_input(
    splits: int, cores: int, input_bytes: int, task_bytes: int, shape: tuple[int, int]
) -> None:
    assert read_shape(splits, cores, input_bytes=input_bytes, task_bytes=task_bytes) == shape
    tasks, quota = shape
    assert tasks * quota >= splits, "every split is taken by some task"
    recorded = read_shape(splits, cores, 5, input_bytes=input_bytes, task_bytes=task_bytes)
    assert recorded[0] == 5, "recorded tasks stay"
