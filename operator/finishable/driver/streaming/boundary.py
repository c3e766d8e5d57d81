"""Stopping a streaming query at a batch boundary, so ``query.stop()`` cancels nothing.

How Spark behaves here is in docs/architecture.md, *PySpark facts*.

The executor suspends every source (their coordinators answer requests with nothing), then waits
here until Spark has committed every batch it planned and every source was asked again twice in
vain; the snapshot of that last commit is the one a savepoint or a drain keeps.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from finishable.coordinator.contract import NO_CHECKPOINT
from finishable.driver.checkpoint_log import CheckpointLog
from finishable.driver.source_coordinator import SourceCoordinator


def await_batch_boundary(
    coordinators: Sequence[SourceCoordinator],
    log: CheckpointLog,
    *,
    timeout: float = 120.0,
    poll: float = 0.05,
) -> int:
    """Wait until a query whose sources are suspended rests at a batch boundary; returns the last
    committed batch id (``NO_CHECKPOINT`` if none).

    Every planned batch must be committed, and then every source must have answered two
    consecutive requests with nothing (a stateful query may plan one more no-data batch after
    the first, because the watermark moved; if it does, the wait starts over). The last commit is
    handed to ``on_batch_committed`` before returning, so the snapshot matches the boundary even
    if its progress event has not arrived. Then ``query.stop()`` cancels nothing.
    """
    for coordinator in coordinators:
        if not coordinator.state().suspended:
            raise RuntimeError(f"source {coordinator.name!r} is not suspended")
    deadline = time.monotonic() + timeout
    while True:
        planned = max(log.batch_ids("offsets"), default=NO_CHECKPOINT)
        committed = log.last_committed()
        if planned == committed:
            baseline = [c.state().held_requests for c in coordinators]
            while True:
                if max(log.batch_ids("offsets"), default=NO_CHECKPOINT) != planned:
                    break  # a batch (a no-data one, for the watermark) was planned: wait again
                held = [c.state().held_requests for c in coordinators]
                if all(now >= then + 2 for now, then in zip(held, baseline, strict=True)):
                    for coordinator in coordinators:
                        coordinator.on_batch_committed(committed)
                    return committed
                if time.monotonic() >= deadline:
                    break
                time.sleep(poll)
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"no batch boundary within {timeout:.0f} s (planned {planned}, committed "
                f"{committed}): is the query running and are its sources suspended?"
            )
        time.sleep(poll)
