"""Reading a batch job's event log the way the crash tests judge it (shared with e2e/)."""

from __future__ import annotations

from finishable.driver.batch.joblog import CoordinatorSnapshot, TaskFinished


def before_attempt_2(events: list[tuple[int, object]]) -> list[tuple[int, object]]:
    """The events logged before the first task of attempt 2 finished."""
    prefix = []
    for seq, event in events:
        if isinstance(event, TaskFinished) and event.attempt >= 2:
            break
        prefix.append((seq, event))
    return prefix


def read_after_the_newest_snapshot(events: list[tuple[int, object]]) -> set[tuple[str, int]]:
    """Read tasks attempt 1 finished after its newest coordinator snapshot."""
    prefix = before_attempt_2(events)
    newest = max((seq for seq, e in prefix if isinstance(e, CoordinatorSnapshot)), default=0)
    return {
        (event.stage, event.task)
        for seq, event in prefix
        if isinstance(event, TaskFinished) and event.splits and seq > newest
    }


def durable_at_crash(events: list[tuple[int, object]]) -> tuple[set[str], set[tuple[str, int]]]:
    """What attempt 1 had durably finished: the splits and tasks its successor may not redo.

    Computed from the log alone: the events before attempt 2's first one; a read task counts once
    its source has a snapshot, before or after it (the snapshot fixes the splits; a task that
    finished after it has its splits finished again from its TaskFinished).
    """
    prefix = before_attempt_2(events)
    snapshotted = any(isinstance(e, CoordinatorSnapshot) for _, e in prefix)
    splits: set[str] = set()
    tasks: set[tuple[str, int]] = set()
    for _, event in prefix:
        if not isinstance(event, TaskFinished):
            continue
        if event.splits and not snapshotted:
            continue
        splits.update(event.splits)
        tasks.add((event.stage, event.task))
    return splits, tasks
