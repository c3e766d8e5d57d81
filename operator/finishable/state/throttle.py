"""At most one batch-mode coordinator snapshot per ``snapshotMinPause`` (FLIP-383).

In a batch job the driver records a TaskFinished event per task, and may attach a coordinator
snapshot taken with ``NO_CHECKPOINT`` (-1). Snapshotting on every task would cost a full
enumerator state per task, so snapshots are spaced by a minimum pause; on recovery, the splits
of tasks that finished after the last snapshot are finished again from their TaskFinished
events (driver/batch/recovery.py). Regular checkpoints
(positive ids) are never throttled here: their cadence is the checkpoint interval.

Pure and clock-injected, so tests step time instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from finishable.coordinator.contract import NO_CHECKPOINT

__all__ = ["NO_CHECKPOINT", "SnapshotThrottle"]


class SnapshotThrottle:
    """Decides whether a ``NO_CHECKPOINT`` coordinator snapshot may be taken now."""

    def __init__(self, min_pause: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        if min_pause < 0:
            raise ValueError(f"min_pause={min_pause} must not be negative")
        self.min_pause = min_pause
        self._clock = clock
        self._last: float | None = None
        self._lock = threading.Lock()

    def remaining(self) -> float:
        """Seconds until the next snapshot is allowed (0 when allowed now)."""
        with self._lock:
            if self._last is None:
                return 0.0
            return max(0.0, self._last + self.min_pause - self._clock())

    def try_acquire(self, checkpoint_id: int = NO_CHECKPOINT) -> bool:
        """True if a snapshot for ``checkpoint_id`` should be taken now, and record it as taken.

        Check and record are one step so two threads cannot both snapshot inside one pause.
        """
        if checkpoint_id != NO_CHECKPOINT:
            return True
        with self._lock:
            now = self._clock()
            if self._last is not None and now - self._last < self.min_pause:
                return False
            self._last = now
            return True

    def reset(self) -> None:
        """Forget the last snapshot, e.g. after a recovery restored from one."""
        with self._lock:
            self._last = None
