"""Reading a batch job's event log the way the crash tests judge it (shared with e2e/)."""

from __future__ import annotations

from finishable.driver.batch.plan import CoordinatorSnapshot, TaskFinished


def durable_at_crash(events: list[tuple[int, object]]) -> tuple[set[str], set[tuple[str, int]]]:
    """What attempt 1 had durably finished: the splits and tasks its successor may not redo.

    Computed from the log alone: the events before attempt 2's first one; a read task counts only
    if a snapshot of its source follows its TaskFinished (FLIP-383: later ones are reset).
    """
    prefix = []
    for seq, event in events:
        if isinstance(event, TaskFinished) and event.attempt >= 2:
            break
        prefix.append((seq, event))
    last_snapshot = max((seq for seq, e in prefix if isinstance(e, CoordinatorSnapshot)), default=0)
    splits: set[str] = set()
    tasks: set[tuple[str, int]] = set()
    for seq, event in prefix:
        if not isinstance(event, TaskFinished):
            continue
        if event.splits and seq > last_snapshot:
            continue
        splits.update(event.splits)
        tasks.add((event.stage, event.task))
    return splits, tasks
