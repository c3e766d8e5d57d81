"""``CoordinatorHost``: one named coordinator, callable from any thread, in the contract's order.

Every public method queues the call on the host's thread (``thread``) and returns a
``concurrent.futures.Future``; the calls of subtask attempts are checked and deduplicated in
``attempts``. This module holds the public API and the calls that concern the coordinator as a
whole: start, close, checkpoints and their notifications, and the global reset that recreates it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from queue import SimpleQueue
from typing import TypeVar

from finishable.coordinator.contract import (
    NO_CHECKPOINT,
    CoordinatorProgress,
    CoordinatorProvider,
    OperatorCoordinator,
    ReportsProgress,
)
from finishable.coordinator.errors import (
    CoordinatorClosedError,
    CoordinatorFailedError,
    CoordinatorOrderViolation,
    CoordinatorRejection,
    OrderRule,
)
from finishable.coordinator.events import OperatorEvent
from finishable.coordinator.host.attempts import AttemptCalls, RemoteAttemptFailure
from finishable.coordinator.host.gateway import HostContext

logger = logging.getLogger(__name__)

T = TypeVar("T")


class CoordinatorHost(AttemptCalls):
    """The single thread, the call-order checks and the reply cache of one named coordinator."""

    def __init__(
        self,
        name: str,
        provider: CoordinatorProvider,
        *,
        io_workers: int = 2,
        slow_call_warning: float = 0.1,
        replies_per_attempt: int = 64,
    ) -> None:
        if not name:
            raise ValueError("a coordinator needs a name")
        self._name = name
        self._provider = provider
        self._slow_call_warning = slow_call_warning
        self._replies_per_attempt = replies_per_attempt
        self._lock = threading.Lock()
        self._closing = False
        self._queue = SimpleQueue()
        self._io = ThreadPoolExecutor(
            max_workers=io_workers, thread_name_prefix=f"coordinator-{name}-io"
        )
        # State below is touched only on the coordinator thread.
        self._coordinator = None
        self._context = None
        self._started = False
        self._closed = False
        self._dropped_callbacks = 0
        self._failure = None
        self._subtasks = {}
        self._last_checkpoint_id = NO_CHECKPOINT
        self._thread = threading.Thread(target=self._run, name=f"coordinator-{name}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ public API (any thread)

    @property
    def name(self) -> str:
        """The coordinator's name, unique per endpoint (one per source)."""
        return self._name

    @property
    def failure(self) -> BaseException | None:
        """Why the coordinator failed, until a global reset clears it."""
        return self._failure

    def start(self) -> Future[None]:
        """Create the coordinator (unless an initial restore did) and start it."""
        return self._submit(self._do_start)

    def close(self, timeout: float | None = 30.0) -> None:
        """Close the coordinator and stop the thread; later calls raise ``CoordinatorClosedError``.

        Blocks the caller (never the coordinator thread) until the thread has finished.
        """
        with self._lock:
            first = not self._closing
            if first:
                self._closing = True
                self._queue.put((self._do_close, Future()))
                self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        if first:
            self._io.shutdown(wait=False, cancel_futures=True)

    def handle_event_from_operator(
        self, subtask: int, attempt: int, event: OperatorEvent, request_id: str | None = None
    ) -> Future[list[OperatorEvent]]:
        """Hand an attempt's event to the coordinator; the result is the events sent back to it."""
        return self._submit(lambda: self._do_event(subtask, attempt, event, request_id))

    def execution_attempt_ready(
        self, subtask: int, attempt: int, request_id: str | None = None
    ) -> Future[None]:
        """The attempt can receive events; the host makes its gateway."""
        return self._submit(lambda: self._do_ready(subtask, attempt, request_id))

    def execution_attempt_failed(
        self,
        subtask: int,
        attempt: int,
        reason: BaseException | str | None = None,
        request_id: str | None = None,
    ) -> Future[None]:
        """The attempt failed or was cancelled (it may never have become ready)."""
        cause = RemoteAttemptFailure(reason) if isinstance(reason, str) else reason
        return self._submit(lambda: self._do_failed(subtask, attempt, cause, request_id))

    def subtask_reset(self, subtask: int, checkpoint_id: int) -> Future[None]:
        """Partial failover of ``subtask`` to ``checkpoint_id``; all its attempts must be failed."""
        return self._submit(lambda: self._do_subtask_reset(subtask, checkpoint_id))

    def checkpoint_coordinator(self, checkpoint_id: int) -> Future[bytes]:
        """Snapshot the coordinator; ids increase, ``NO_CHECKPOINT`` takes a batch snapshot."""
        return self._submit(lambda: self._do_checkpoint(checkpoint_id))

    def notify_checkpoint_complete(self, checkpoint_id: int) -> Future[None]:
        """Tell the coordinator that a checkpoint completed."""
        return self._submit(lambda: self._do_notify(checkpoint_id, complete=True))

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> Future[None]:
        """Tell the coordinator that a checkpoint was aborted."""
        return self._submit(lambda: self._do_notify(checkpoint_id, complete=False))

    def reset_to_checkpoint(self, checkpoint_id: int, data: bytes | None) -> Future[None]:
        """Global failover (or the initial restore before ``start``): a fresh coordinator from the
        provider restores ``data``; every attempt of every subtask must have failed."""
        return self._submit(lambda: self._do_global_reset(checkpoint_id, data))

    def global_failover(
        self, checkpoint_id: int, data: bytes | None, reason: BaseException | str | None = None
    ) -> Future[None]:
        """Fail every live attempt, then ``reset_to_checkpoint``, as one step on the thread."""
        cause = RemoteAttemptFailure(reason) if isinstance(reason, str) else reason
        return self._submit(lambda: self._do_global_failover(checkpoint_id, data, cause))

    def supports_batch_snapshot(self) -> Future[bool]:
        """Whether the coordinator can snapshot with ``NO_CHECKPOINT``."""
        return self._submit(self._do_supports_batch_snapshot)

    def progress(self) -> Future[CoordinatorProgress | None]:
        """The coordinator's progress figures, or ``None`` if it reports none (or none exists)."""
        return self._submit(self._do_progress)

    def live_attempts(self) -> Future[dict[int, list[int]]]:
        """Live attempts by subtask, as the host sees them."""
        return self._submit(
            lambda: {s: st.live() for s, st in sorted(self._subtasks.items()) if st.live()}
        )

    def call(self, what: str, action: Callable[[OperatorCoordinator], T]) -> Future[T]:
        """Run a coordinator-specific operation (suspend, adopt, ...) on the coordinator thread.

        For controls beyond the contract that a driver needs (``SplitEnumerator.suspend`` and the
        like). The host's checks apply: the coordinator must be started, open and not failed. A
        ``CoordinatorRejection`` leaves it unchanged; any other exception fails it, as for every
        contract method.
        """

        def run() -> T:
            coordinator = self._check_usable()
            return self._invoke(what, lambda: action(coordinator))

        return self._submit(run)

    def inspect(self, probe: Callable[[OperatorCoordinator], T]) -> Future[T]:
        """Run ``probe`` on the coordinator thread (tests, diagnostics); it must not mutate."""

        def run() -> T:
            if self._coordinator is None:
                raise CoordinatorOrderViolation(
                    self._name, OrderRule.NOT_STARTED, "no coordinator created yet"
                )
            return probe(self._coordinator)

        return self._submit(run)

    # ------------------------------------------------------------------ calls (coordinator thread)

    def _new_coordinator(self) -> OperatorCoordinator:
        if self._context is not None:
            self._context.close()
        if self._coordinator is not None:
            old = self._coordinator
            self._coordinator = None
            try:
                old.close()
            except Exception:
                logger.warning(
                    "coordinator %r: closing the replaced instance failed",
                    self._name,
                    exc_info=True,
                )
        self._context = HostContext(self)
        context = self._context
        self._coordinator = self._invoke("create", lambda: self._provider(context))
        return self._coordinator

    def _do_start(self) -> None:
        if self._closed:
            raise CoordinatorClosedError(self._name, OrderRule.CLOSED, "the coordinator is closed")
        if self._started:
            raise CoordinatorOrderViolation(
                self._name, OrderRule.ALREADY_STARTED, "start() was already called"
            )
        if self._failure is not None:
            raise CoordinatorFailedError(self._name, self._failure)
        coordinator = self._coordinator or self._new_coordinator()
        self._started = True
        self._invoke("start", coordinator.start)
        logger.info("coordinator %r started", self._name)

    def _do_close(self) -> None:
        self._closed = True
        if self._context is not None:
            self._context.close()
        for state in self._subtasks.values():
            for attempt in state.attempts.values():
                self._fail_outbox(attempt, "the coordinator closed")
        if self._coordinator is not None:
            try:
                self._coordinator.close()
            except Exception:
                logger.warning("coordinator %r: close failed", self._name, exc_info=True)
        logger.info("coordinator %r closed", self._name)

    def _do_checkpoint(self, checkpoint_id: int) -> bytes:
        coordinator = self._check_usable()
        if checkpoint_id == NO_CHECKPOINT:
            if not coordinator.supports_batch_snapshot():
                raise CoordinatorRejection(
                    self._name, "this coordinator does not support batch snapshots (NO_CHECKPOINT)"
                )
        elif checkpoint_id < 0:
            raise CoordinatorRejection(
                self._name, f"checkpoint id {checkpoint_id} is negative (only NO_CHECKPOINT is)"
            )
        elif checkpoint_id <= self._last_checkpoint_id:
            raise CoordinatorOrderViolation(
                self._name,
                OrderRule.CHECKPOINT_ID_NOT_INCREASING,
                f"checkpoint {checkpoint_id} is not after checkpoint {self._last_checkpoint_id}",
            )
        data = self._invoke(
            "checkpoint_coordinator", lambda: coordinator.checkpoint_coordinator(checkpoint_id)
        )
        if checkpoint_id != NO_CHECKPOINT:
            self._last_checkpoint_id = checkpoint_id
        return data

    def _do_notify(self, checkpoint_id: int, *, complete: bool) -> None:
        coordinator = self._check_usable()
        if complete:
            self._invoke(
                "notify_checkpoint_complete",
                lambda: coordinator.notify_checkpoint_complete(checkpoint_id),
            )
        else:
            self._invoke(
                "notify_checkpoint_aborted",
                lambda: coordinator.notify_checkpoint_aborted(checkpoint_id),
            )

    def _do_global_reset(self, checkpoint_id: int, data: bytes | None) -> None:
        if self._closed:
            raise CoordinatorClosedError(self._name, OrderRule.CLOSED, "the coordinator is closed")
        for subtask, state in sorted(self._subtasks.items()):
            live = state.live()
            if live:
                raise CoordinatorOrderViolation(
                    self._name,
                    OrderRule.GLOBAL_RESET_WITH_LIVE_ATTEMPTS,
                    f"attempt(s) {live} have not failed; reset_to_checkpoint needs every attempt "
                    "of every subtask failed (global_failover does both)",
                    subtask=subtask,
                    attempt=live[0],
                )
        # Flink's RecreateOnResetOperatorCoordinator: a fresh instance, so no stale async work of
        # the old one (a discovery in flight) can touch the restored state.
        self._subtasks.clear()
        self._failure = None
        self._last_checkpoint_id = checkpoint_id
        coordinator = self._new_coordinator()
        self._invoke(
            "reset_to_checkpoint", lambda: coordinator.reset_to_checkpoint(checkpoint_id, data)
        )
        if self._started:
            self._invoke("start", coordinator.start)
        logger.info(
            "coordinator %r reset to checkpoint %d (%s)",
            self._name,
            checkpoint_id,
            "empty state" if data is None else f"{len(data)} bytes",
        )

    def _do_global_failover(
        self, checkpoint_id: int, data: bytes | None, reason: BaseException | None
    ) -> None:
        if self._started and not self._closed:
            for subtask, state in sorted(self._subtasks.items()):
                for attempt in state.live():
                    self._do_failed(subtask, attempt, reason, None)
        self._do_global_reset(checkpoint_id, data)

    def _do_supports_batch_snapshot(self) -> bool:
        coordinator = self._coordinator or self._new_coordinator()
        return coordinator.supports_batch_snapshot()

    def _do_progress(self) -> CoordinatorProgress | None:
        coordinator = self._coordinator
        if coordinator is None or not isinstance(coordinator, ReportsProgress):
            return None
        return coordinator.progress()
