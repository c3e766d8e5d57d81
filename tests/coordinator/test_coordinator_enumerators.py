"""Split enumerators: lazy pull assignment, failover, snapshots and restore (range source)."""

from __future__ import annotations

import json

import pytest

from finishable.coordinator import (
    NO_CHECKPOINT,
    AddSplits,
    CoordinatorFailedError,
    CoordinatorHost,
    CoordinatorRejection,
    EnumeratorStateError,
    NoMoreSplits,
    RangeSplit,
    SplitFinished,
)
from finishable.coordinator.enumerator import AssignmentView, SplitEnumerator
from finishable.coordinator.ranges import RangeSplitEnumerator

from ._helpers import TIMEOUT, fail, finish, ready, request, take
from .conftest import HostFactory

pytestmark = pytest.mark.quick


def view(host: CoordinatorHost) -> AssignmentView:
    def probe(coordinator: object) -> AssignmentView:
        assert isinstance(coordinator, SplitEnumerator)
        return coordinator.assignment_view()

    return host.inspect(probe).result(TIMEOUT)


def r(k: int, size: int = 10) -> str:
    return f"r-{k * size}-{(k + 1) * size}"


@pytest.fixture
def bounded(make_host: HostFactory) -> CoordinatorHost:
    """Rows [0, 95) in splits of 10: r-0-10 ... r-80-90, r-90-95 (10 splits)."""
    return make_host(RangeSplitEnumerator.provider(end=95, split_size=10))


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_splits_are_assigned_lazily_lowest_first_then_no_more(bounded: CoordinatorHost) -> None:
    ready(bounded, 0, 0)
    ready(bounded, 1, 0)
    progress = bounded.progress().result(TIMEOUT)
    assert progress is not None and progress.splits_total == 10 and progress.splits_discovered == 0
    assert take(bounded, 0, 0) == [r(0)]
    assert take(bounded, 1, 0, 3) == [r(1), r(2), r(3)]
    assert take(bounded, 0, 0, 100) == [r(k) for k in range(4, 9)] + ["r-90-95"]
    assert request(bounded, 1, 0) == [NoMoreSplits()]
    finish(bounded, 0, 0, r(0))
    progress = bounded.progress().result(TIMEOUT)
    assert progress is not None
    assert (progress.splits_finished, progress.splits_assigned, progress.splits_pending) == (
        1,
        9,
        0,
    )
    assert not progress.fully_finished


def test_the_same_input_plans_the_same_splits_in_the_same_order(make_host: HostFactory) -> None:
    plans = []
    for name in ("a", "b"):
        host = make_host(RangeSplitEnumerator.provider(start=7, end=1000, split_size=33), name)
        ready(host, 0, 0)
        plans.append(take(host, 0, 0, 50))
    assert plans[0] == plans[1] and len(plans[0]) == 31 and plans[0][-1] == "r-997-1000"


def test_a_failed_attempt_returns_its_unfinished_splits_to_the_pool(
    bounded: CoordinatorHost,
) -> None:
    ready(bounded, 0, 0)
    ready(bounded, 1, 0)
    assert take(bounded, 0, 0, 3) == [r(0), r(1), r(2)]
    finish(bounded, 0, 0, r(1))
    fail(bounded, 0, 0)
    state = view(bounded)
    assert {r(0), r(2)} <= state.pending and state.finished == {r(1): 0}
    assert (0, 0) not in state.held
    # The returned splits come first again (lowest discovery order first).
    assert take(bounded, 1, 0, 2) == [r(0), r(2)]


def test_subtask_reset_returns_exactly_what_the_subtask_did_after_the_checkpoint(
    bounded: CoordinatorHost,
) -> None:
    ready(bounded, 0, 0)
    ready(bounded, 1, 0)
    assert take(bounded, 0, 0, 2) == [r(0), r(1)]  # before checkpoint 1
    finish(bounded, 0, 0, r(0))  # finished before checkpoint 1: stays finished
    assert take(bounded, 1, 0) == [r(2)]
    bounded.checkpoint_coordinator(1).result(TIMEOUT)
    assert take(bounded, 0, 0, 2) == [r(3), r(4)]  # after checkpoint 1
    finish(bounded, 0, 0, r(3), r(1))  # r(1) was assigned before 1, finished after
    fail(bounded, 0, 0)
    assert view(bounded).pending >= {r(4)}  # the unfinished split came back at once
    bounded.subtask_reset(0, 1).result(TIMEOUT)
    state = view(bounded)
    # r(3): assigned and finished after checkpoint 1 -> pending again.
    # r(1): checkpoint 1 recorded it as subtask 0's -> subtask 0 gets it back first.
    assert r(3) in state.pending and r(4) in state.pending
    assert state.orphaned == {0: frozenset({r(1)})}
    assert state.finished == {r(0): 0}
    assert state.held == {(1, 0): frozenset({r(2)})}
    ready(bounded, 0, 1)
    assert take(bounded, 0, 1, 5) == [r(1)]
    assert take(bounded, 0, 1, 2) == [r(3), r(4)]


def test_subtask_reset_to_no_checkpoint_returns_everything_it_did(
    bounded: CoordinatorHost,
) -> None:
    # Batch: an unfinished task is re-run from scratch, so even its finished splits are re-read.
    ready(bounded, 0, 0)
    ready(bounded, 1, 0)
    assert take(bounded, 0, 0, 2) == [r(0), r(1)]
    assert take(bounded, 1, 0) == [r(2)]
    finish(bounded, 0, 0, r(0), r(1))
    finish(bounded, 1, 0, r(2))
    bounded.checkpoint_coordinator(NO_CHECKPOINT).result(TIMEOUT)
    fail(bounded, 0, 0)
    bounded.subtask_reset(0, NO_CHECKPOINT).result(TIMEOUT)
    state = view(bounded)
    assert {r(0), r(1)} <= state.pending
    assert state.finished == {r(2): 1}


def test_reset_to_checkpoint_restores_the_snapshot_with_orphans_for_their_subtask(
    bounded: CoordinatorHost,
) -> None:
    ready(bounded, 0, 0)
    ready(bounded, 1, 0)
    assert take(bounded, 0, 0, 2) == [r(0), r(1)]
    assert take(bounded, 1, 0, 2) == [r(2), r(3)]
    finish(bounded, 0, 0, r(0))
    snapshot = bounded.checkpoint_coordinator(4).result(TIMEOUT)
    expected = view(bounded)
    # Progress after the checkpoint is lost by the global failover.
    finish(bounded, 1, 0, r(2))
    assert take(bounded, 0, 0, 3) == [r(4), r(5), r(6)]
    bounded.global_failover(4, snapshot, "driver lost").result(TIMEOUT)
    state = view(bounded)
    assert state.pending == expected.pending
    assert state.finished == expected.finished == {r(0): 0}
    assert state.orphaned == {0: frozenset({r(1)}), 1: frozenset({r(2), r(3)})}
    assert state.held == {}
    ready(bounded, 1, 0)
    ready(bounded, 2, 0)
    assert take(bounded, 1, 0, 1) == [r(2), r(3)]  # its own, all at once
    assert take(bounded, 2, 0, 100) == [r(k) for k in range(4, 9)] + ["r-90-95"]
    # Nothing pending: another subtask takes the orphan (a restore with fewer subtasks).
    assert take(bounded, 2, 0) == [r(1)]
    assert request(bounded, 2, 0) == [NoMoreSplits()]


def test_finish_restored_takes_a_late_tasks_splits_from_whatever_the_snapshot_says(
    bounded: CoordinatorHost,
) -> None:
    """A Batch driver restores a snapshot taken before a task committed: the splits that task
    read (its logged output) are finished again, pending or orphaned in the snapshot."""
    ready(bounded, 0, 0)
    ready(bounded, 1, 0)
    assert take(bounded, 0, 0, 2) == [r(0), r(1)]
    assert take(bounded, 1, 0, 2) == [r(2), r(3)]
    snapshot = bounded.checkpoint_coordinator(NO_CHECKPOINT).result(TIMEOUT)
    # After the snapshot subtask 0 read r(4) too and committed r(0), r(1), r(4); then the crash.
    bounded.global_failover(NO_CHECKPOINT, snapshot, "driver lost").result(TIMEOUT)

    def finish_restored(subtask: int, *ids: str) -> bool:
        def run(coordinator: object) -> tuple[bool, list[str]]:
            assert isinstance(coordinator, SplitEnumerator)
            done = coordinator.finish_restored(subtask, ids)
            return done, coordinator.consistency_problems()

        done, problems = bounded.call("finish_restored", run).result(TIMEOUT)
        assert problems == []
        return done

    before = view(bounded)
    assert not finish_restored(0, r(0), "r-nowhere"), "an unknown split"
    assert view(bounded) == before, "a refusal changes nothing"
    # Subtask 1 lost r(2) to subtask 0 after the snapshot, which still has it as 1's orphan.
    assert finish_restored(0, r(2))
    # Subtask 0 committed r(0) and r(4); its r(1) went elsewhere: r(1) is pending again.
    assert finish_restored(0, r(0), r(4))
    state = view(bounded)
    assert state.finished == {r(0): 0, r(2): 0, r(4): 0}
    assert state.orphaned == {1: frozenset({r(3)})}, "subtask 1's other orphan stays its own"
    assert state.pending == (before.pending - {r(4)}) | {r(1)}
    assert finish_restored(0, r(0)), "finished by the same subtask: nothing to do"
    ready(bounded, 1, 1)
    assert take(bounded, 1, 1, 1) == [r(3)]
    assert not finish_restored(0, r(3)), "held by a live attempt"
    assert not finish_restored(1, r(0)), "finished by another subtask"
    ready(bounded, 2, 0)
    assert take(bounded, 2, 0, 100) == [r(1)] + [r(k) for k in range(5, 9)] + ["r-90-95"]


def test_reset_to_none_starts_from_an_empty_state(bounded: CoordinatorHost) -> None:
    ready(bounded, 0, 0)
    take(bounded, 0, 0, 3)
    finish(bounded, 0, 0, r(0))
    bounded.global_failover(NO_CHECKPOINT, None).result(TIMEOUT)
    state = view(bounded)
    assert state.discovered == () and state.finished == {} and state.held == {}
    ready(bounded, 0, 0)
    assert take(bounded, 0, 0) == [r(0)]


def test_fully_finished_is_part_of_the_snapshot_and_survives_a_restore(
    bounded: CoordinatorHost,
) -> None:
    ready(bounded, 0, 0)
    ids = take(bounded, 0, 0, 100)
    finish(bounded, 0, 0, *ids[:-1])
    assert not json.loads(bounded.checkpoint_coordinator(1).result(TIMEOUT))["fully_finished"]
    finish(bounded, 0, 0, ids[-1])
    progress = bounded.progress().result(TIMEOUT)
    assert progress is not None and progress.fully_finished
    snapshot = bounded.checkpoint_coordinator(2).result(TIMEOUT)
    document = json.loads(snapshot)
    assert document["fully_finished"] is True and document["pending"] == []
    bounded.global_failover(2, snapshot).result(TIMEOUT)
    progress = bounded.progress().result(TIMEOUT)
    assert progress is not None and progress.fully_finished and progress.splits_finished == 10
    ready(bounded, 5, 0)
    assert request(bounded, 5, 0) == [NoMoreSplits()]


def test_batch_snapshots_work_and_restore(bounded: CoordinatorHost) -> None:
    assert bounded.supports_batch_snapshot().result(TIMEOUT)
    ready(bounded, 0, 0)
    take(bounded, 0, 0, 2)
    finish(bounded, 0, 0, r(0))
    snapshot = bounded.checkpoint_coordinator(NO_CHECKPOINT).result(TIMEOUT)
    assert json.loads(snapshot)["checkpoint_id"] == NO_CHECKPOINT
    bounded.global_failover(NO_CHECKPOINT, snapshot).result(TIMEOUT)
    state = view(bounded)
    assert state.finished == {r(0): 0} and state.orphaned == {0: frozenset({r(1)})}
    # The new driver re-runs unfinished subtask 0 from scratch: all it did is pending again.
    bounded.subtask_reset(0, NO_CHECKPOINT).result(TIMEOUT)
    state = view(bounded)
    assert {r(0), r(1)} <= state.pending and state.finished == {} and state.orphaned == {}


def test_the_snapshot_format_is_versioned_json(bounded: CoordinatorHost) -> None:
    ready(bounded, 3, 0)
    take(bounded, 3, 0, 2)
    finish(bounded, 3, 0, r(0))
    document = json.loads(bounded.checkpoint_coordinator(7).result(TIMEOUT))
    assert document["format"] == "finishable.split-enumerator" and document["version"] == 1
    assert document["source"] == {"kind": "ranges", "start": 0, "end": 95, "split_size": 10}
    assert document["cursor"] == {"next_start": 95}
    assert document["splits"][0] == {"kind": "range", "id": r(0), "start": 0, "end": 10}
    assert document["assigned"] == {"3": [[r(1), NO_CHECKPOINT]]}
    assert document["finished"] == [[r(0), 3, NO_CHECKPOINT, NO_CHECKPOINT]]
    assert document["pending"] == [r(k) for k in range(2, 9)] + ["r-90-95"]
    assert document["discovery_complete"] is True and document["bounded"] is True


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda d: b"not json", "not JSON"),
        (lambda d: {**d, "version": 99}, "version 99"),
        (lambda d: {**d, "source": {**d["source"], "split_size": 5}}, "belongs to source"),
        (lambda d: {**d, "pending": [*d["pending"], d["pending"][0]]}, "in two states"),
        (lambda d: {**d, "pending": d["pending"][1:]}, "in no state"),
        (lambda d: {**d, "finished": [["r-x", 0, 0, 0]]}, "unknown split id"),
        (lambda d: {**d, "cursor": {"next_start": 500}}, "outside the source"),
        (lambda d: {**d, "splits": [{"kind": "range", "start": 1}]}, "snapshot.splits[0].end"),
    ],
)
def test_a_bad_snapshot_is_refused_with_a_clear_error(
    bounded: CoordinatorHost, mutate: object, fragment: str
) -> None:
    ready(bounded, 0, 0)
    take(bounded, 0, 0)
    document = json.loads(bounded.checkpoint_coordinator(1).result(TIMEOUT))
    changed = mutate(document)  # type: ignore[operator]
    data = changed if isinstance(changed, bytes) else json.dumps(changed).encode()
    with pytest.raises(CoordinatorFailedError) as caught:
        bounded.global_failover(1, data).result(TIMEOUT)
    assert isinstance(caught.value.cause, EnumeratorStateError)
    assert fragment in str(caught.value)
    # A good snapshot revives it.
    bounded.reset_to_checkpoint(1, json.dumps(document).encode()).result(TIMEOUT)
    assert bounded.failure is None


def test_finishing_a_split_the_attempt_does_not_hold_is_rejected_without_change(
    bounded: CoordinatorHost,
) -> None:
    ready(bounded, 0, 0)
    ready(bounded, 1, 0)
    take(bounded, 0, 0)
    take(bounded, 1, 0)
    before = view(bounded)
    for split_ids, why in [
        ((r(1),), "held by subtask 1 attempt 0"),
        ((r(0), r(5)), "is pending"),
        (("r-bogus",), "is unknown"),
    ]:
        with pytest.raises(CoordinatorRejection, match=why):
            finish(bounded, 0, 0, *split_ids)
        assert view(bounded) == before
    finish(bounded, 0, 0, r(0))
    finish(bounded, 0, 0, r(0))  # a repeated report is harmless
    with pytest.raises(CoordinatorRejection, match="finished by subtask 0"):
        finish(bounded, 1, 0, r(0))


def test_unbounded_ranges_appear_at_the_rate_of_the_clock(make_host: HostFactory) -> None:
    clock = FakeClock()
    host = make_host(
        RangeSplitEnumerator.provider(split_size=100, rows_per_second=50.0, clock=clock)
    )
    ready(host, 0, 0)
    assert request(host, 0, 0) == [AddSplits(())]  # nothing produced yet: ask again later
    clock.now += 3.9  # 195 rows: one full range
    assert take(host, 0, 0, 10) == ["r-0-100"]
    assert request(host, 0, 0) == [AddSplits(())]
    clock.now += 10  # 695 rows in all
    assert take(host, 0, 0, 10) == [f"r-{k}-{k + 100}" for k in range(100, 600, 100)]
    progress = host.progress().result(TIMEOUT)
    assert progress is not None and progress.splits_total is None and not progress.bounded
    snapshot = host.checkpoint_coordinator(1).result(TIMEOUT)
    assert json.loads(snapshot)["cursor"] == {"next_start": 600}
    host.global_failover(1, snapshot).result(TIMEOUT)
    ready(host, 1, 0)
    clock.now += 2  # 100 more rows after the restore, from the restored cursor
    assert take(host, 1, 0, 10) == ["r-600-700"]


def test_a_huge_bounded_range_is_cheap_because_it_is_cut_on_demand(
    make_host: HostFactory,
) -> None:
    host = make_host(RangeSplitEnumerator.provider(end=10**15, split_size=1000))
    ready(host, 0, 0)
    reply = request(host, 0, 0, 3)
    assert reply == [AddSplits(tuple(RangeSplit(k, k + 1000) for k in (0, 1000, 2000)))]
    progress = host.progress().result(TIMEOUT)
    assert progress is not None and progress.splits_total == 10**12
    assert progress.splits_discovered < 1000


def test_unknown_events_are_rejected(bounded: CoordinatorHost) -> None:
    ready(bounded, 0, 0)
    with pytest.raises(CoordinatorRejection, match="does not handle NoMoreSplits"):
        bounded.handle_event_from_operator(0, 0, NoMoreSplits()).result(TIMEOUT)
    assert bounded.failure is None
    bounded.handle_event_from_operator(0, 0, SplitFinished(())).result(TIMEOUT)


def test_a_restored_share_keeps_the_epoch_of_its_original_assignment(
    bounded: CoordinatorHost,
) -> None:
    # Assigned before checkpoint 1, restored, handed back and finished after checkpoint 1: a
    # reset to checkpoint 1 gives it back to subtask 0 (checkpoint 1 recorded it as its share),
    # rather than to the pool.
    ready(bounded, 0, 0)
    assert take(bounded, 0, 0) == [r(0)]
    snapshot = bounded.checkpoint_coordinator(1).result(TIMEOUT)
    bounded.global_failover(1, snapshot).result(TIMEOUT)
    ready(bounded, 0, 0)
    assert take(bounded, 0, 0) == [r(0)]
    finish(bounded, 0, 0, r(0))
    fail(bounded, 0, 0)
    bounded.subtask_reset(0, 1).result(TIMEOUT)
    state = view(bounded)
    assert state.orphaned == {0: frozenset({r(0)})} and r(0) not in state.pending
