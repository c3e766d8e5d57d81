"""A driver asked to leave: SIGTERM from its kubelet (an eviction, a node drain, a deleted pod).

Kubernetes sends the container's main process SIGTERM, waits the pod's
``terminationGracePeriodSeconds`` (``spec.driver.terminationGracePeriod``), then kills it.
Unhandled, SIGTERM ends Python at once and the operator sees a crash: the in-flight work is
redone and the restart budget is charged for routine maintenance. Here SIGTERM becomes a stop
the driver asks of itself (:func:`~finishable.api.control.departure_request`): a savepoint at the
next batch boundary (Streaming) or a suspension after the running tasks (Batch), within the grace
period less a margin to report and exit. The driver then reports ``DEPARTED`` and the operator
starts the next attempt from it at once, without charging the restart budget.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from types import FrameType

from finishable.api.control import departure_request
from finishable.api.status import ControlRequest

log = logging.getLogger(__name__)


def exit_margin(grace_seconds: float) -> float:
    """What a leaving driver keeps of its grace period to write its report and stop Spark
    (which deletes the executor pods): a quarter, between 5 and 20 seconds."""
    return max(5.0, min(20.0, grace_seconds / 4))


class Departure:
    """Whether this driver was asked to leave, and until when it may take its savepoint."""

    def __init__(
        self, grace_seconds: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._budget = max(1.0, grace_seconds - exit_margin(grace_seconds))
        self._clock = clock
        self._asked = threading.Event()
        self._deadline = 0.0
        self._asked_at: datetime | None = None

    def install_if_main_thread(self) -> None:
        """Handle SIGTERM from now on. Python runs signal handlers in the main thread only: a
        job run from another thread (a test's) keeps the default, and leaves as a crash."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.ask()

    def ask(self) -> None:
        """The driver is asked to leave (the first time counts; SIGKILL follows the grace)."""
        if self._asked.is_set():
            return
        self._deadline = self._clock() + self._budget
        self._asked_at = datetime.now(UTC)
        self._asked.set()
        log.warning(
            "SIGTERM: this driver was asked to leave; it stops with a savepoint within %.0f s",
            self._budget,
        )

    @property
    def asked(self) -> bool:
        return self._asked.is_set()

    def time_left(self) -> float:
        """Seconds left for the savepoint (at least one: trying costs nothing, SIGKILL ends it)."""
        return max(1.0, self._deadline - self._clock())

    def request(self, attempt: int) -> ControlRequest:
        """The stop this driver asks of itself."""
        return departure_request(attempt, self._asked_at or datetime.now(UTC))
