"""The restart budget: driver losses counted in a sliding window, and a backoff that shrinks."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from finishable.lifecycle.budget import (
    RESTART_BACKOFF_BASE,
    RESTART_BACKOFF_MAX,
    counted_losses,
    describe_interval,
    restart_backoff,
    restarts_left,
)

pytestmark = pytest.mark.quick

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def test_only_losses_within_the_interval_count() -> None:
    losses = [NOW - timedelta(minutes=m) for m in (90, 59, 10, 0)]
    assert counted_losses(losses, NOW, timedelta(hours=1)) == tuple(sorted(losses[1:]))
    assert counted_losses(losses, NOW, timedelta(0)) == tuple(sorted(losses))
    # A loss exactly one interval old has left the window.
    assert counted_losses([NOW - timedelta(hours=1)], NOW, timedelta(hours=1)) == ()


def test_restarts_left_never_goes_negative() -> None:
    assert restarts_left([NOW], 3) == 2
    assert restarts_left([NOW] * 5, 3) == 0


def test_the_backoff_doubles_per_counted_loss_up_to_its_maximum() -> None:
    assert restart_backoff(0) == restart_backoff(1) == RESTART_BACKOFF_BASE
    assert restart_backoff(3) == 4 * RESTART_BACKOFF_BASE
    assert restart_backoff(40) == RESTART_BACKOFF_MAX


def test_the_window_reads_in_the_spec_s_words() -> None:
    assert describe_interval(timedelta(minutes=90)) == (
        "within spec.recovery.failureRateInterval (1h30m)"
    )
    assert "whole life" in describe_interval(timedelta(0))


@given(
    st.lists(st.integers(min_value=0, max_value=10_000), max_size=30),
    st.integers(min_value=1, max_value=5_000),
)
def test_counted_losses_are_the_recent_ones_in_order(ages: list[int], window: int) -> None:
    losses = [NOW - timedelta(seconds=age) for age in ages]
    counted = counted_losses(losses, NOW, timedelta(seconds=window))
    assert list(counted) == sorted(counted)
    assert len(counted) == sum(1 for age in ages if age < window)


def test_a_standby_takes_over_the_first_loss_at_once_and_backs_off_after() -> None:
    assert restart_backoff(1, standby=True) == timedelta(0)
    assert restart_backoff(2, standby=True) == restart_backoff(1)
    assert restart_backoff(3, standby=True) == restart_backoff(2)
    assert restart_backoff(30, standby=True) == restart_backoff(30)  # both at the maximum
