"""Runs one coordinator on a dedicated thread and guarantees the contract's call order.

Flink runs every coordinator call on the JobManager's main thread; here each coordinator gets a
thread of its own, fed by a queue, so its methods need no locks and a slow source cannot stall
another. Every public method of the host may be called from any thread: it queues the call and
returns a ``concurrent.futures.Future`` (the aiohttp endpoint awaits it with
``asyncio.wrap_future``, plain code calls ``.result()``).

Before a call reaches the coordinator, the host checks it against the order the contract
documents and refuses it with a ``CoordinatorOrderViolation`` naming the rule, subtask and attempt.
The coordinator never sees a refused call, so a violation changes nothing.

The host also makes retried requests idempotent: a call that carries a ``request_id`` already
answered for that attempt gets the recorded answer instead of being handled again, so a
``RequestSplit`` whose reply was lost on the wire cannot assign a second split.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from queue import SimpleQueue
from typing import Any, TypeVar

from finishable.coordinator.contract import (
    NO_CHECKPOINT,
    AttemptGoneError,
    CoordinatorContext,
    CoordinatorProgress,
    CoordinatorProvider,
    OperatorCoordinator,
    ReportsProgress,
    SubtaskGateway,
)
from finishable.coordinator.errors import (
    CoordinatorClosedError,
    CoordinatorFailedError,
    CoordinatorOrderViolation,
    CoordinatorRejection,
    OrderRule,
    RequestIdConflict,
)
from finishable.coordinator.events import OperatorEvent, RequestSplit

logger = logging.getLogger(__name__)

T = TypeVar("T")

_Task = tuple[Callable[[], Any], "Future[Any]"]


class RemoteAttemptFailure(RuntimeError):
    """The failure reason of an attempt, as text reported over the endpoint."""


@dataclass
class _Attempt:
    number: int
    live: bool
    gateway: _Gateway | None = None
    ready_request_id: str | None = None
    failed_request_id: str | None = None
    outbox: list[tuple[OperatorEvent, Future[None]]] = field(default_factory=list)
    replies: OrderedDict[str, tuple[OperatorEvent, tuple[OperatorEvent, ...]]] = field(
        default_factory=OrderedDict
    )


@dataclass
class _Subtask:
    attempts: dict[int, _Attempt] = field(default_factory=dict)
    awaiting_reset: bool = False
    """Every attempt failed and no reset came yet: a new attempt must wait for the reset."""

    def live(self) -> list[int]:
        return [number for number, attempt in self.attempts.items() if attempt.live]


class CoordinatorHost:
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
        self._queue: SimpleQueue[_Task | None] = SimpleQueue()
        self._io = ThreadPoolExecutor(
            max_workers=io_workers, thread_name_prefix=f"coordinator-{name}-io"
        )
        # State below is touched only on the coordinator thread.
        self._coordinator: OperatorCoordinator | None = None
        self._context: _Context | None = None
        self._started = False
        self._closed = False
        self._failure: BaseException | None = None
        self._subtasks: dict[int, _Subtask] = {}
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

    def _post(self, context: _Context, action: Callable[[], None]) -> None:
        """Queue internal work of one coordinator instance; dropped if that instance is gone."""

        def run() -> None:
            if context is not self._context or context.closed or self._closed:
                return
            if self._failure is not None:
                return
            with contextlib.suppress(CoordinatorFailedError):  # already recorded as the failure
                self._invoke("callback", action)

        self._submit(run)

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

    def _subtask(self, subtask: int) -> _Subtask:
        state = self._subtasks.get(subtask)
        if state is None:
            if subtask < 0:
                raise CoordinatorRejection(self._name, f"subtask index {subtask} is negative")
            state = self._subtasks[subtask] = _Subtask()
        return state

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
        self._context = _Context(self)
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

    def _do_ready(self, subtask: int, attempt: int, request_id: str | None) -> None:
        coordinator = self._check_usable(subtask=subtask, attempt=attempt)
        state = self._subtask(subtask)
        known = state.attempts.get(attempt)
        if known is not None:
            if request_id is not None and known.ready_request_id == request_id:
                return  # a retried notification that was already applied
            if known.live:
                raise CoordinatorOrderViolation(
                    self._name,
                    OrderRule.READY_TWICE,
                    "the attempt is already ready",
                    subtask=subtask,
                    attempt=attempt,
                )
            raise CoordinatorOrderViolation(
                self._name,
                OrderRule.READY_AFTER_FAILED,
                "the attempt has failed; a recovered subtask runs under a new attempt number",
                subtask=subtask,
                attempt=attempt,
            )
        if state.awaiting_reset:
            raise CoordinatorOrderViolation(
                self._name,
                OrderRule.READY_BEFORE_RESET,
                "every earlier attempt of the subtask failed; call subtask_reset (or "
                "reset_to_checkpoint) before a new attempt becomes ready",
                subtask=subtask,
                attempt=attempt,
            )
        record = _Attempt(number=attempt, live=True, ready_request_id=request_id)
        record.gateway = _Gateway(self, subtask, attempt)
        state.attempts[attempt] = record
        gateway = record.gateway
        self._invoke(
            "execution_attempt_ready",
            lambda: coordinator.execution_attempt_ready(subtask, attempt, gateway),
        )

    def _do_failed(
        self, subtask: int, attempt: int, reason: BaseException | None, request_id: str | None
    ) -> None:
        # A failed coordinator still learns of failures: a global reset needs every attempt gone.
        coordinator = self._check_usable(subtask=subtask, attempt=attempt, allow_failed=True)
        state = self._subtask(subtask)
        record = state.attempts.get(attempt)
        if record is not None and not record.live:
            if request_id is not None and record.failed_request_id == request_id:
                return
            raise CoordinatorOrderViolation(
                self._name,
                OrderRule.FAILED_TWICE,
                "the attempt has already failed",
                subtask=subtask,
                attempt=attempt,
            )
        if record is None:
            # Flink reports attempts that fail while deploying, before they were ever ready.
            record = state.attempts[attempt] = _Attempt(number=attempt, live=False)
        record.live = False
        record.failed_request_id = request_id
        record.gateway = None
        record.replies.clear()
        self._fail_outbox(record, "the attempt failed")
        if not state.live():
            state.awaiting_reset = True
        logger.info(
            "coordinator %r: subtask %d attempt %d failed: %s", self._name, subtask, attempt, reason
        )
        if self._failure is None:
            self._invoke(
                "execution_attempt_failed",
                lambda: coordinator.execution_attempt_failed(subtask, attempt, reason),
            )

    def _do_subtask_reset(self, subtask: int, checkpoint_id: int) -> None:
        coordinator = self._check_usable(subtask=subtask)
        state = self._subtask(subtask)
        live = state.live()
        if live:
            raise CoordinatorOrderViolation(
                self._name,
                OrderRule.RESET_WITH_LIVE_ATTEMPT,
                f"attempt(s) {live} have not failed; a subtask is reset only after every one of "
                "its attempts failed",
                subtask=subtask,
                attempt=live[0],
            )
        state.awaiting_reset = False
        self._invoke("subtask_reset", lambda: coordinator.subtask_reset(subtask, checkpoint_id))

    def _do_event(
        self, subtask: int, attempt: int, event: OperatorEvent, request_id: str | None
    ) -> list[OperatorEvent]:
        coordinator = self._check_usable(subtask=subtask, attempt=attempt)
        state = self._subtasks.get(subtask)
        record = state.attempts.get(attempt) if state is not None else None
        if record is None:
            raise CoordinatorOrderViolation(
                self._name,
                OrderRule.EVENT_FROM_UNREADY_ATTEMPT,
                f"{event.type_name} from an attempt that never became ready",
                subtask=subtask,
                attempt=attempt,
            )
        if not record.live:
            raise CoordinatorOrderViolation(
                self._name,
                OrderRule.EVENT_FROM_FAILED_ATTEMPT,
                f"{event.type_name} from an attempt that has failed",
                subtask=subtask,
                attempt=attempt,
            )
        if isinstance(event, RequestSplit) and (
            event.subtask != subtask or event.attempt != attempt
        ):
            raise CoordinatorRejection(
                self._name,
                f"RequestSplit names subtask {event.subtask} attempt {event.attempt} but was sent "
                "for another",
                subtask=subtask,
                attempt=attempt,
            )
        if request_id is not None:
            cached = record.replies.get(request_id)
            if cached is not None:
                original, recorded = cached
                if original != event:
                    raise RequestIdConflict(
                        self._name,
                        f"request id {request_id!r} was already used for a different "
                        f"{original.type_name}; a retry must resend the same event",
                        subtask=subtask,
                        attempt=attempt,
                    )
                record.replies.move_to_end(request_id)
                logger.debug(
                    "coordinator %r: replayed the reply to request %s", self._name, request_id
                )
                return list(recorded)
        self._invoke(
            "handle_event_from_operator",
            lambda: coordinator.handle_event_from_operator(subtask, attempt, event),
        )
        reply = self._drain_outbox(record)
        if request_id is not None:
            record.replies[request_id] = (event, tuple(reply))
            while len(record.replies) > self._replies_per_attempt:
                record.replies.popitem(last=False)
        return reply

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

    # ------------------------------------------------------------------ gateways

    def _queue_event(self, gateway: _Gateway, event: OperatorEvent, future: Future[None]) -> None:
        state = self._subtasks.get(gateway.subtask)
        record = state.attempts.get(gateway.attempt) if state is not None else None
        if record is None or not record.live or record.gateway is not gateway or self._closed:
            future.set_exception(
                AttemptGoneError(
                    f"coordinator {self._name!r}: subtask {gateway.subtask} attempt "
                    f"{gateway.attempt} is no longer running; {event.type_name} not delivered"
                )
            )
            return
        record.outbox.append((event, future))

    @staticmethod
    def _drain_outbox(record: _Attempt) -> list[OperatorEvent]:
        if not record.outbox:
            return []
        events = [event for event, _ in record.outbox]
        for _, future in record.outbox:
            future.set_result(None)
        record.outbox.clear()
        return events

    def _fail_outbox(self, record: _Attempt, why: str) -> None:
        for event, future in record.outbox:
            if not future.done():
                future.set_exception(
                    AttemptGoneError(
                        f"coordinator {self._name!r}: {event.type_name} to attempt "
                        f"{record.number} not delivered: {why}"
                    )
                )
        record.outbox.clear()


class _Gateway(SubtaskGateway):
    """Bound to one attempt record: after a reset, a new record means a new gateway."""

    def __init__(self, host: CoordinatorHost, subtask: int, attempt: int) -> None:
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


class _Context(CoordinatorContext):
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
