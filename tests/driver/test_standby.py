"""A standby driver's wait for its order: it takes over on its own order only, and a channel it
cannot read for a while does not end it."""

from __future__ import annotations

from pathlib import Path

import pytest

from finishable.driver.standby import await_takeover
from finishable.state.control import LocalControlChannel, TakeOver

pytestmark = pytest.mark.quick


class FlakyChannel(LocalControlChannel):
    """A local channel whose first reads fail, as an API server that is briefly away."""

    def __init__(self, directory: Path, failures: int) -> None:
        super().__init__(directory)
        self.failures = failures

    def _read_control(self) -> dict[str, str]:
        if self.failures > 0:
            self.failures -= 1
            raise OSError("connection refused")
        return super()._read_control()


def test_the_standby_waits_for_its_own_order_through_an_unreadable_channel(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    channel = FlakyChannel(tmp_path, failures=2)
    steering = LocalControlChannel(tmp_path)
    polls: list[float] = []

    def sleep(seconds: float) -> None:
        polls.append(seconds)
        if len(polls) == 3:
            steering.take_over(3, predecessor_exited=True)  # another attempt's order
        if len(polls) == 5:
            steering.take_over(2, predecessor_exited=False)

    order = await_takeover(channel, 2, sleep=sleep)
    assert order == TakeOver(2, predecessor_exited=False)
    assert len(polls) == 5, "it kept polling through the failures and the other order"
    assert set(polls) == {channel.takeover_poll_seconds}
    assert caplog.text.count("control channel unreadable") == 2
