"""The restart budget of a job that runs for months: driver losses counted in a sliding window.

A budget over the whole life of a job ends a streaming job that crashed four times in a year,
and a backoff that only grows makes the ninth restart wait minutes for a crash that was the
first in weeks. As Flink's failure-rate restart strategy, a job is Failed only when more than
``spec.recovery.maxAttempts`` driver losses fall within ``spec.recovery.failureRateInterval``;
a loss older than the interval counts for nothing, for the budget and for the backoff alike,
so a crash after a calm week restarts after a second, while a crash loop still ends after
``maxAttempts`` quick restarts. An interval of zero counts every loss of the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from finishable.api.units import Duration

RESTART_BACKOFF_BASE = timedelta(seconds=1)
"""Short: a new attempt reuses what survived (shuffle partitions, checkpoints); the budget bounds
the loop of a driver that keeps crashing."""
RESTART_BACKOFF_MAX = timedelta(minutes=2)


def counted_losses(
    losses: Sequence[datetime], now: datetime, interval: timedelta
) -> tuple[datetime, ...]:
    """The driver losses that still count at ``now``, oldest first: those less than
    ``interval`` ago, or every one when ``interval`` is zero."""
    if interval <= timedelta(0):
        return tuple(sorted(losses))
    return tuple(sorted(loss for loss in losses if now - loss < interval))


def restarts_left(counted: Sequence[datetime], max_attempts: int) -> int:
    """How many more driver losses the job survives now."""
    return max(0, max_attempts - len(counted))


def restart_backoff(counted: int, *, standby: bool = False) -> timedelta:
    """The pause before the restart that follows the ``counted``-th loss in the window (from 1):
    doubling per loss in the window, so it shrinks again as old losses leave it. A warm standby
    takes over from the first loss in the window at once (the pause is what makes a takeover
    cost seconds); a second one backs off as the first would without a standby."""
    if standby:
        counted -= 1
        if counted < 1:
            return timedelta(0)
    delay: timedelta = RESTART_BACKOFF_BASE * 2 ** max(0, counted - 1)
    return min(delay, RESTART_BACKOFF_MAX)


def describe_interval(interval: timedelta) -> str:
    """How the budget's window reads in a message."""
    if interval <= timedelta(0):
        return "over the run's whole life (spec.recovery.failureRateInterval: 0s)"
    return f"within spec.recovery.failureRateInterval ({Duration.parse(interval)})"
