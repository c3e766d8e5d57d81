"""At most one batch-mode enumerator state per coordinator per ``snapshotMinPause`` (FLIP-383).

In a batch job the driver records a TaskFinished event per task, and may attach a coordinator's
enumerator state taken with ``NO_CHECKPOINT`` (-1). Snapshotting on every task would cost a full
enumerator state per task, so each coordinator's saves are spaced by a minimum pause; on
recovery, the splits of tasks that finished after the last saved state are finished again from
their TaskFinished events (driver/batch/recovery.py). A save the pause refused is made later
(the batch driver schedules it for when :meth:`EnumeratorStateThrottle.remaining`
says), so the last
task's progress is never left out. Regular checkpoints (positive ids) are never throttled here:
their cadence is the checkpoint interval.

The decision is clock-injected, so tests step time instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from finishable.coordinator.contract import NO_CHECKPOINT

__all__ = ["NO_CHECKPOINT", "EnumeratorStateThrottle"]


class EnumeratorStateThrottle:
    """Decides whether a coordinator's ``NO_CHECKPOINT`` enumerator state may be taken now."""

    def __init__(self, min_pause: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        if min_pause < 0:
            raise ValueError(f"min_pause={min_pause} must not be negative")
        self.min_pause = min_pause
        self._clock = clock
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def remaining(self, coordinator: str) -> float:
        """Seconds until ``coordinator``'s next snapshot is allowed (0 when allowed now)."""
        with self._lock:
            last = self._last.get(coordinator)
            if last is None:
                return 0.0
            return max(0.0, last + self.min_pause - self._clock())

    def try_acquire(
        self, coordinator: str, checkpoint_id: int = NO_CHECKPOINT, *, force: bool = False
    ) -> bool:
        """True if ``coordinator`` should snapshot for ``checkpoint_id`` now; if so, record it.

        ``force`` (a stop, the end of a stage, a deferred snapshot now due) is always allowed and
        restarts the pause. Check and record are one step so two threads cannot both snapshot
        inside one pause.
        """
        if checkpoint_id != NO_CHECKPOINT:
            return True
        with self._lock:
            now = self._clock()
            last = self._last.get(coordinator)
            if not force and last is not None and now - last < self.min_pause:
                return False
            self._last[coordinator] = now
            return True

    def reset(self) -> None:
        """Forget every snapshot, e.g. after a recovery restored from one."""
        with self._lock:
            self._last.clear()
