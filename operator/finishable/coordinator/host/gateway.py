"""What the coordinator is handed by its host: a gateway per attempt, and its context.

A gateway is bound to one attempt record, so after a reset a new record means a new gateway and
events to a gone attempt fail. The context runs the coordinator's async I/O on the host's pool and
hands the results back on the coordinator thread; closing it (a new coordinator instance) drops
that instance's pending work.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, TypeVar

from finishable.coordinator.contract import CoordinatorContext, SubtaskGateway
from finishable.coordinator.events import OperatorEvent

if TYPE_CHECKING:
    from finishable.coordinator.host.attempts import AttemptCalls
    from finishable.coordinator.host.host import CoordinatorHost

T = TypeVar("T")


class HostGateway(SubtaskGateway):
    """Bound to one attempt record: after a reset, a new record means a new gateway."""

    def __init__(self, host: AttemptCalls, subtask: int, attempt: int) -> None:
        self._host = host
        self._subtask = subtask
        self._attempt = attempt

    @property
    def subtask(self) -> int:
        return self._subtask

    @property
    def attempt(self) -> int:
        return self._attempt

    def send_event(self, event: OperatorEvent) -> Future[None]:
        future: Future[None] = Future()
        if self._host._on_coordinator_thread():
            self._host._queue_event(self, event, future)
        else:
            queued = self._host._submit(lambda: self._host._queue_event(self, event, future))

            def refused(done: Future[None]) -> None:
                error = done.exception()
                if error is not None and not future.done():
                    future.set_exception(error)

            queued.add_done_callback(refused)
        return future

    def __repr__(self) -> str:
        return f"SubtaskGateway(subtask={self._subtask}, attempt={self._attempt})"


class HostContext(CoordinatorContext):
    """The context of one coordinator instance; closing it drops that instance's async work."""

    def __init__(self, host: CoordinatorHost) -> None:
        self._host = host
        self._closed = threading.Event()
        self._timers_lock = threading.Lock()
        self._timers: set[threading.Timer] = set()

    @property
    def name(self) -> str:
        return self._host.name

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def pending_timers(self) -> int:
        """Periodic or delayed work waiting for its timer (none once closed)."""
        with self._timers_lock:
            return len(self._timers)

    def close(self) -> None:
        self._closed.set()
        with self._timers_lock:
            timers, self._timers = self._timers, set()
        for timer in timers:
            timer.cancel()

    def call_async(
        self,
        work: Callable[[], T],
        handler: Callable[[T | None, BaseException | None], None],
        *,
        initial_delay: float = 0.0,
        period: float | None = None,
    ) -> None:
        if period is not None and period <= 0:
            raise ValueError(f"period must be positive, got {period}")

        def fire() -> None:
            if self.closed:
                return
            try:
                future = self._host._io.submit(work)
            except RuntimeError:  # the host is shutting down
                return
            future.add_done_callback(done)

        def done(future: Future[T]) -> None:
            if future.cancelled():
                return
            error = future.exception()
            result = None if error is not None else future.result()
            self._host._post(self, lambda: handler(result, error))
            if period is not None:
                schedule(period)

        def schedule(delay: float) -> None:
            if self.closed:
                return
            if delay <= 0:
                fire()
                return
            timer = threading.Timer(delay, lambda: fired(timer))
            timer.daemon = True
            timer.name = f"coordinator-{self._host.name}-timer"
            with self._timers_lock:
                if self.closed:
                    return
                self._timers.add(timer)
            timer.start()

        def fired(timer: threading.Timer) -> None:
            with self._timers_lock:
                self._timers.discard(timer)
            fire()

        schedule(initial_delay)

    def run_in_coordinator_thread(self, action: Callable[[], None]) -> None:
        self._host._post(self, action)

    def fail_job(self, cause: BaseException) -> None:
        if self._host._on_coordinator_thread():
            if not self.closed:
                self._host._fail(cause, "fail_job")
            return
        self._host._post(self, lambda: self._host._fail(cause, "fail_job"))
