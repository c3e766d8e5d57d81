"""The coordinator host's thread: every call to the coordinator runs on it, one at a time.

Flink runs every coordinator call on the JobManager's main thread; here each coordinator gets a
thread of its own, fed by a queue, so its methods need no locks and a slow source cannot stall
another. A call is queued with a ``concurrent.futures.Future`` for its result (the aiohttp
endpoint awaits it with ``asyncio.wrap_future``, plain code calls ``.result()``). An unexpected
exception from the coordinator fails it (Flink: the job fails) until a global reset.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from queue import SimpleQueue
from typing import TYPE_CHECKING, Any, TypeVar

from finishable.coordinator.contract import CoordinatorProvider, OperatorCoordinator
from finishable.coordinator.errors import (
    CoordinatorClosedError,
    CoordinatorFailedError,
    CoordinatorOrderViolation,
    CoordinatorRejection,
    OrderRule,
)

if TYPE_CHECKING:
    from finishable.coordinator.host.attempts import SubtaskRecord
    from finishable.coordinator.host.gateway import HostContext

logger = logging.getLogger(__name__)

T = TypeVar("T")

_Task = tuple[Callable[[], Any], "Future[Any]"]


class HostThread:
    """The queue, the thread and the state of a host (``CoordinatorHost`` sets it up)."""

    _name: str
    _provider: CoordinatorProvider
    _slow_call_warning: float
    _replies_per_attempt: int
    _lock: threading.Lock
    _closing: bool
    _queue: SimpleQueue[_Task | None]
    _io: ThreadPoolExecutor
    # State below is touched only on the coordinator thread.
    _coordinator: OperatorCoordinator | None
    _context: HostContext | None
    _started: bool
    _closed: bool
    _failure: BaseException | None
    _dropped_callbacks: int
    _subtasks: dict[int, SubtaskRecord]
    _last_checkpoint_id: int
    _thread: threading.Thread

    # ------------------------------------------------------------------ thread machinery

    def _submit(self, call: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._closing:
                future.set_exception(
                    CoordinatorClosedError(
                        self._name, OrderRule.CLOSED, "the coordinator is closed"
                    )
                )
                return future
            self._queue.put((call, future))
        return future

    def _post(self, context: HostContext, action: Callable[[], None]) -> None:
        """Queue internal work of one coordinator instance; dropped if that instance is gone."""

        def run() -> None:
            if context is not self._context or context.closed or self._closed:
                self._dropped_callbacks += 1
                return
            if self._failure is not None:
                return
            with contextlib.suppress(CoordinatorFailedError):  # already recorded as the failure
                self._invoke("callback", action)

        self._submit(run)

    @property
    def dropped_callbacks(self) -> int:
        """Results of async work dropped because their coordinator instance was gone (a global
        reset replaced it, or it closed): what makes a reset safe, made observable."""
        return self._dropped_callbacks

    def _on_coordinator_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def _run(self) -> None:
        while True:
            task = self._queue.get()
            if task is None:
                break
            call, future = task
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = call()
            except BaseException as error:
                future.set_exception(error)
            else:
                future.set_result(result)
        logger.debug("coordinator %r: thread stopped", self._name)

    def _invoke(self, what: str, call: Callable[[], T]) -> T:
        """Call into the coordinator; an unexpected exception fails it (Flink: job failure)."""
        began = time.perf_counter()
        try:
            return call()
        except (CoordinatorRejection, CoordinatorOrderViolation):
            raise
        except Exception as error:
            self._fail(error, what)
            raise CoordinatorFailedError(self._name, error) from error
        finally:
            elapsed = time.perf_counter() - began
            if elapsed > self._slow_call_warning:
                logger.warning(
                    "coordinator %r: %s took %.0f ms; coordinator methods must not block",
                    self._name,
                    what,
                    elapsed * 1000,
                )

    def _fail(self, cause: BaseException, what: str) -> None:
        if self._failure is None:
            logger.error(
                "coordinator %r failed in %s; it refuses calls until a global reset",
                self._name,
                what,
                exc_info=cause,
            )
            self._failure = cause

    # ------------------------------------------------------------------ checks

    def _check_usable(
        self, *, subtask: int | None = None, attempt: int | None = None, allow_failed: bool = False
    ) -> OperatorCoordinator:
        if self._closed:
            raise CoordinatorClosedError(
                self._name,
                OrderRule.CLOSED,
                "the coordinator is closed",
                subtask=subtask,
                attempt=attempt,
            )
        if not self._started or self._coordinator is None:
            raise CoordinatorOrderViolation(
                self._name,
                OrderRule.NOT_STARTED,
                "the coordinator has not been started",
                subtask=subtask,
                attempt=attempt,
            )
        if self._failure is not None and not allow_failed:
            raise CoordinatorFailedError(self._name, self._failure)
        return self._coordinator
