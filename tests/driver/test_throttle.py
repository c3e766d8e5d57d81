"""The NO_CHECKPOINT snapshot throttle, with a stepped clock instead of sleeps."""

from __future__ import annotations

import threading

import pytest

from finishable.driver.batch.throttle import NO_CHECKPOINT, EnumeratorStateThrottle

pytestmark = pytest.mark.quick


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_at_most_one_snapshot_per_min_pause_and_coordinator() -> None:
    clock = Clock()
    throttle = EnumeratorStateThrottle(180.0, clock=clock)
    assert throttle.remaining("orders") == 0
    assert throttle.try_acquire("orders", NO_CHECKPOINT)  # the first one is always allowed
    assert not throttle.try_acquire("orders", NO_CHECKPOINT)
    assert throttle.try_acquire("customers")  # each coordinator has its own pause
    clock.now += 179.9
    assert not throttle.try_acquire("orders")
    assert throttle.remaining("orders") == pytest.approx(0.1)
    clock.now += 0.1
    assert throttle.try_acquire("orders")
    assert throttle.remaining("orders") == pytest.approx(180.0)
    assert throttle.remaining("customers") == 0


def test_a_forced_snapshot_is_allowed_and_restarts_the_pause() -> None:
    clock = Clock()
    throttle = EnumeratorStateThrottle(180.0, clock=clock)
    assert throttle.try_acquire("orders")
    clock.now += 60
    assert throttle.try_acquire("orders", force=True)
    assert throttle.remaining("orders") == pytest.approx(180.0)


def test_regular_checkpoints_are_not_throttled() -> None:
    clock = Clock()
    throttle = EnumeratorStateThrottle(180.0, clock=clock)
    assert throttle.try_acquire("orders", NO_CHECKPOINT)
    assert throttle.try_acquire("orders", 42)
    assert throttle.try_acquire("orders", 43)
    assert not throttle.try_acquire("orders", NO_CHECKPOINT)


def test_reset_and_zero_pause() -> None:
    clock = Clock()
    throttle = EnumeratorStateThrottle(10.0, clock=clock)
    assert throttle.try_acquire("orders")
    throttle.reset()
    assert throttle.try_acquire("orders")
    unthrottled = EnumeratorStateThrottle(0.0, clock=clock)
    assert all(unthrottled.try_acquire("orders") for _ in range(5))
    with pytest.raises(ValueError, match="min_pause"):
        EnumeratorStateThrottle(-1.0)


def test_threads_cannot_both_snapshot_within_one_pause() -> None:
    throttle = EnumeratorStateThrottle(3600.0, clock=Clock())
    granted: list[bool] = []
    barrier = threading.Barrier(8)

    def attempt() -> None:
        barrier.wait()
        granted.append(throttle.try_acquire("orders"))

    threads = [threading.Thread(target=attempt) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert granted.count(True) == 1
