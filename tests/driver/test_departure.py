"""A driver asked to leave: SIGTERM turns into the stop it asks of itself, within its grace."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from finishable.api.control import is_departure
from finishable.api.models import RequestAction, SavepointTrigger
from finishable.driver.departure import Departure, exit_margin

pytestmark = pytest.mark.quick


@pytest.fixture
def sigterm_restored() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_the_driver_keeps_a_quarter_of_its_grace_to_exit_within_bounds() -> None:
    assert exit_margin(60) == 15
    assert exit_margin(8) == 5  # at least 5 s to report and stop Spark
    assert exit_margin(600) == 20  # at most 20 s


def test_sigterm_asks_the_driver_to_leave_within_its_grace(sigterm_restored: None) -> None:
    now = [100.0]
    departure = Departure(60, clock=lambda: now[0])
    departure.install_if_main_thread()
    assert not departure.asked
    os.kill(os.getpid(), signal.SIGTERM)  # handled in this (the main) thread
    assert departure.asked
    assert departure.time_left() == 45
    now[0] += 40
    assert departure.time_left() == 5
    now[0] += 100
    assert departure.time_left() == 1  # trying costs nothing: SIGKILL ends it
    request = departure.request(3)
    assert request.attempt == 3 and request.action is RequestAction.STOP and not request.drain
    assert request.trigger is SavepointTrigger.DEPARTURE and is_departure(request.id)
    os.kill(os.getpid(), signal.SIGTERM)  # a second one changes nothing
    assert departure.request(3).id == request.id and departure.time_left() == 1
