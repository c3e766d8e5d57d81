"""The streaming executor: runs the job's queries and walks them through the FLIP-147 lifecycle.

Running, it stores a checkpoint per committed micro-batch of each query (``CheckpointKeeper``),
reports to the control channel and answers requests. Ending — a stop with savepoint, a stop with
drain, or the final checkpoint once every bounded source is exhausted — is driven by the
lifecycle table: one ``TaskLifecycle`` per source task and one per query's sink task, fed the
events as they happen, and every query takes part: the job ends when all of them have ended, and
its savepoint holds every query's cut (``QuerySet``); any query failing fails the job. Every
action the table returns is performed by the handler registered for it below. Nothing
about *what* happens when is decided here; only *how* each action is done on Spark
(docs/streaming-runtime.md has the mapping and why it is exactly-once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from finishable.api.control import (
    DriverState,
    RequestOutcome,
    RequestReport,
)
from finishable.api.lifecycle import LifecycleMode, TaskKind
from finishable.api.models import RequestAction
from finishable.api.status import (
    ControlRequest,
    SavepointStatus,
)
from finishable.driver.departure import Departure
from finishable.driver.outcome import JobFailed, Outcome
from finishable.driver.source_coordinator import SourceCoordinator
from finishable.driver.streaming.boundary import await_batch_boundary
from finishable.driver.streaming.cut import CutError
from finishable.driver.streaming.queries import (
    Query,
    QuerySet,
)
from finishable.driver.streaming.reporting import Reporter
from finishable.driver.streaming.termination import Termination, drains
from finishable.lifecycle.tablerows import Action, TaskEvent
from finishable.lifecycle.task import TaskLifecycle
from finishable.state import CheckpointInfo, CheckpointStore, open_backend
from finishable.state.control import ControlChannel
from finishable.state.fence import Fence, FencedBackend

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2


class StopFailed(RuntimeError):
    """A stop or savepoint did not complete; the job keeps running."""


class StreamingExecutor:
    """Runs the queries of a job until they are stopped, drained, finished or one fails."""

    def __init__(
        self,
        *,
        job: str,
        attempt: int,
        queries: QuerySet,
        control: ControlChannel,
        stop_timeout: float,
        fence: Fence | None = None,
        departure: Departure | None = None,
        load_window: float | None = None,
    ) -> None:
        self._job = job
        self._reporter = Reporter(control, attempt, queries, load_window)
        self._attempt = attempt
        self._queries = queries
        self._coordinators = queries.coordinators
        self._control = control
        self._stop_timeout = stop_timeout
        self._fence = fence
        self._departure = departure
        self._termination: Termination | None = None
        self._savepoint: SavepointStatus | None = None
        self._answer: RequestReport | None = None
        self._answered: set[str] = set()
        self._barriers = 0
        self._deadline = 0.0
        self._source_actions: dict[Action, Callable[[SourceCoordinator], None]] = {
            Action.SUSPEND_SOURCE: lambda c: c.suspend(drain=drains(self._termination)),
            Action.ADVANCE_TO_MAX_WATERMARK: self._emit_sentinel,
            Action.END_INPUT_AND_FINISH: lambda c: c.suspend(),
        }
        self._sink_actions: dict[Action, Callable[[Query], None]] = {
            Action.ADVANCE_TO_MAX_WATERMARK: self._await_sentinels,
            Action.END_INPUT_AND_FINISH: lambda q: q.sink.finish(),
            Action.EMIT_CHECKPOINT_BARRIER: self._checkpoint_at_boundary,
            Action.CLOSE: self._stop_query,
        }

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> Outcome:
        """Start the queries and obey the control channel until the job ends."""
        for query in self._queries.queries:
            for coordinator in query.coordinators:
                reconciliation = coordinator.begin_run(self._attempt, str(query.checkpoint_dir))
                if reconciliation.in_flight_batch is not None:
                    log.info(
                        "source %s: batch %d replays with %d adopted split(s)",
                        coordinator.name,
                        reconciliation.in_flight_batch,
                        len(reconciliation.in_flight_splits),
                    )
        try:
            for query in self._queries.queries:
                query.handle = query.writer.start()
                log.info("query %s started (attempt %d)", query.name, self._attempt)
            self._report(DriverState.RUNNING, force=True)
            return self._loop()
        finally:
            for query in self._queries.queries:
                self._stop_query(query)
            for coordinator in self._coordinators:
                coordinator.end_run("query ended")

    def _loop(self) -> Outcome:
        while True:
            self._check_query()
            self._queries.store_latest()
            if self._departure is not None and self._departure.asked:
                return self._depart(self._departure)
            request = self._control.read_request(self._attempt)
            if request is not None and request.id not in self._answered:
                outcome = self._handle(request)
                if outcome is not None:
                    return outcome
            if self._exhausted():
                log.info("every source is bounded and exhausted: taking the final checkpoint")
                self._terminate(LifecycleMode.FINAL_CHECKPOINT, None)
                return self._ended(DriverState.FINISHED)
            self._report(DriverState.RUNNING)
            time.sleep(POLL_SECONDS)

    def _check_query(self) -> None:
        """Any query failed or stopped by itself fails the job."""
        for query in self._queries.queries:
            handle = query.handle
            if handle is None:
                continue
            which = "the query" if self._queries.single else f"the query {query.name!r}"
            error = handle.exception()
            if error is not None:
                raise JobFailed(f"{which} failed: {_first_line(str(error))}")
            if not handle.isActive:
                raise JobFailed(f"{which} stopped by itself")

    def _exhausted(self) -> bool:
        return bool(self._coordinators) and all(
            c.source.bounded and c.exhausted() for c in self._coordinators
        )

    # -- requests ---------------------------------------------------------------------------

    def _handle(self, request: ControlRequest) -> Outcome | None:
        self._answered.add(request.id)
        self._answer = RequestReport(id=request.id, outcome=RequestOutcome.IN_PROGRESS)
        stopping = request.action is RequestAction.STOP
        self._report(DriverState.STOPPING if stopping else DriverState.RUNNING, force=True)
        target = self._target_store(request)
        try:
            if stopping:
                mode = (
                    LifecycleMode.STOP_WITH_SAVEPOINT_DRAIN
                    if request.drain
                    else LifecycleMode.STOP_WITH_SAVEPOINT
                )
                self._terminate(mode, request, target)
                self._answer = RequestReport(
                    id=request.id,
                    outcome=RequestOutcome.COMPLETED,
                    message=self._savepoint.location if self._savepoint else "nothing to save",
                )
                return self._ended(DriverState.FINISHED if request.drain else DriverState.SUSPENDED)
            self._savepoint_now(request, target)
        except (StopFailed, TimeoutError, CutError) as error:  # CutError: a savepoint cut torn
            log.warning("request %s failed: %s; the job keeps running", request.id, error)
            for coordinator in self._coordinators:
                coordinator.resume()
            self._termination = None
            self._answer = RequestReport(
                id=request.id, outcome=RequestOutcome.FAILED, message=str(error)
            )
            self._report(DriverState.RUNNING, force=True)
            return None
        self._answer = RequestReport(
            id=request.id,
            outcome=RequestOutcome.COMPLETED,
            message=self._savepoint.location if self._savepoint else "",
        )
        self._report(DriverState.RUNNING, force=True)
        return None

    def _depart(self, departure: Departure) -> Outcome:
        """Asked to leave (driver/departure.py): a stop with savepoint in the time the grace
        period leaves, else leave anyway with the checkpoints (the report then holds no
        savepoint of this request, and the next attempt resumes from the newest checkpoint)."""
        if self._control.released(self._attempt):
            log.info("the operator stops this driver itself: leaving without a savepoint")
            return self._ended(DriverState.DEPARTED)
        request = departure.request(self._attempt)
        self._report(DriverState.STOPPING, force=True)
        mode = LifecycleMode.STOP_WITH_SAVEPOINT
        try:
            self._terminate(mode, request, timeout=departure.time_left())
        except (StopFailed, TimeoutError, CutError) as error:
            log.warning("no savepoint before leaving: %s; leaving with the checkpoints", error)
        return self._ended(DriverState.DEPARTED)

    def _target_store(self, request: ControlRequest) -> CheckpointStore | None:
        if not request.target_directory:
            return None
        backend = open_backend(request.target_directory, job=self._job)
        if self._fence is not None:
            backend = FencedBackend(backend, self._fence)
        return CheckpointStore(backend)

    def _savepoint_now(self, request: ControlRequest, target: CheckpointStore | None) -> None:
        """A savepoint without stopping: each query's newest stored checkpoint, once every
        query that committed a batch has one (and one has)."""
        deadline = time.monotonic() + self._stop_timeout
        while True:
            self._check_query()
            batches: dict[str, int] = {}
            for query in self._queries.queries:
                latest = query.keeper.store_latest()
                committed = query.log.last_committed()
                batches[query.name] = -1 if latest is None else latest.batch_id
                if latest is None and committed >= 0:
                    batches.clear()  # its first checkpoint is on its way
                    break
            if batches and max(batches.values()) >= 0:
                info, batch = self._queries.savepoint(
                    batches, drained=False, request_id=request.id, target=target
                )
                self._record_savepoint(info, batch, drained=False, request_id=request.id)
                return
            if time.monotonic() >= deadline:
                raise StopFailed("no micro-batch completed, so there is nothing to save yet")
            time.sleep(POLL_SECONDS)

    def _record_savepoint(
        self, info: CheckpointInfo, batch_id: int, *, drained: bool, request_id: str | None
    ) -> None:
        self._savepoint = SavepointStatus(
            location=info.location,
            drained=drained,
            time=datetime.fromtimestamp(info.created_at, UTC),
            request_id=request_id,
            id=batch_id,
            size_bytes=info.size,
        )
        log.info("savepoint at batch %d: %s", batch_id, info.location)

    # -- ending, driven by the lifecycle table --------------------------------------------

    def _terminate(
        self,
        mode: LifecycleMode,
        request: ControlRequest | None,
        target: CheckpointStore | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        """Walk every task of every query through ``mode`` to CLOSED, performing the table's
        actions; one savepoint (or final checkpoint) holds every query's cut, within
        ``timeout`` seconds (spec.stopTimeout by default)."""
        stopping = mode is not LifecycleMode.FINAL_CHECKPOINT
        queries = self._queries.queries
        self._barriers += 1
        ending = Termination(
            mode=mode,
            barrier=self._barriers,
            sources={c.name: TaskLifecycle(TaskKind.SOURCE, mode) for c in self._coordinators},
            sinks={q.name: TaskLifecycle(TaskKind.NON_SOURCE, mode) for q in queries},
        )
        self._termination = ending
        self._deadline = time.monotonic() + (self._stop_timeout if timeout is None else timeout)
        for query in queries:
            query.rest = None

        # 1. Every source: a savepoint trigger (stop modes) or the end of its input.
        for coordinator in self._coordinators:
            task = ending.sources[coordinator.name]
            if stopping:
                actions = task.handle(TaskEvent.SAVEPOINT_TRIGGER, ending.barrier, savepoint=True)
            else:
                actions = task.handle(TaskEvent.NO_MORE_RECORDS)
            self._perform_source(coordinator, actions, ending)
        self._report_ending()

        # 2. Each sink task hears MAX_WATERMARK (drain and final checkpoint) and EndOfData.
        for query in queries:
            sink = ending.sinks[query.name]
            if Action.EMIT_MAX_WATERMARK in ending.emitted:
                self._perform_sink(query, sink.handle(TaskEvent.MAX_WATERMARK_ALIGNED))
            self._perform_sink(query, sink.handle(TaskEvent.END_OF_USER_RECORDS_ALIGNED))
        self._report_ending()

        # 3. The barrier is each query's batch boundary: nothing planned is uncommitted, nothing
        # new comes.
        for query in queries:
            ending.batches[query.name] = self._boundary(query)
        if not stopping:
            ending.barrier = max(0, *ending.batches.values())
            for coordinator in self._coordinators:
                self._perform_source(
                    coordinator,
                    ending.sources[coordinator.name].handle(
                        TaskEvent.CHECKPOINT_TRIGGERED, ending.barrier
                    ),
                    ending,
                )
        for query in queries:
            self._perform_sink(
                query,
                ending.sinks[query.name].handle(
                    TaskEvent.CHECKPOINT_BARRIER_ALIGNED, ending.barrier, savepoint=stopping
                ),
            )

        # 4. The final checkpoint or savepoint completes; every task may close.
        drained = mode is not LifecycleMode.STOP_WITH_SAVEPOINT
        if max(ending.batches.values()) >= 0:
            request_id = request.id if request is not None else None
            info, batch = self._queries.savepoint(
                ending.batches, drained=drained, request_id=request_id, target=target
            )
            self._record_savepoint(info, batch, drained=drained, request_id=request_id)
        for coordinator in self._coordinators:
            task = ending.sources[coordinator.name]
            self._perform_source(
                coordinator,
                task.handle(TaskEvent.CHECKPOINT_COMPLETED, ending.barrier, savepoint=stopping),
                ending,
            )
        for query in queries:
            sink = ending.sinks[query.name]
            self._perform_sink(
                query,
                sink.handle(TaskEvent.CHECKPOINT_COMPLETED, ending.barrier, savepoint=stopping),
            )
            # A sink has no downstream task to acknowledge its EndOfData: it acknowledges
            # itself; the sources' EndOfData is acknowledged by the sink, which received it.
            self._perform_sink(query, sink.handle(TaskEvent.END_OF_DATA_ACKNOWLEDGED))
        for coordinator in self._coordinators:
            task = ending.sources[coordinator.name]
            self._perform_source(
                coordinator, task.handle(TaskEvent.END_OF_DATA_ACKNOWLEDGED), ending
            )
        for query in queries:
            self._perform_sink(
                query, ending.sinks[query.name].handle(TaskEvent.END_OF_PARTITION_RECEIVED)
            )
        open_sinks = [t for t in ending.sinks.values() if not t.closed]
        if open_sinks or not all(t.closed for t in ending.sources.values()):
            raise JobFailed(f"the {mode.value} ended with tasks still open: {ending.status()}")

    def _perform_source(
        self, coordinator: SourceCoordinator, actions: Sequence[Action], ending: Termination
    ) -> None:
        for action in actions:
            handler = self._source_actions.get(action)
            if handler is not None:
                handler(coordinator)
            ending.emitted.add(action)

    def _perform_sink(self, query: Query, actions: Sequence[Action]) -> None:
        for action in actions:
            handler = self._sink_actions.get(action)
            if handler is not None:
                handler(query)

    def _emit_sentinel(self, coordinator: SourceCoordinator) -> None:
        """MAX_WATERMARK, Spark style: one far-future row that sinks never publish."""
        coordinator.emit_sentinel(f"drain-{self._job}")

    def _await_sentinels(self, query: Query) -> None:
        """Every sentinel of the query's sources was read, and the batches after it moved the
        watermark and fired."""
        while any(c.state().sentinel_pending for c in query.coordinators):
            self._check_query()
            if time.monotonic() >= self._deadline:
                raise StopFailed("the drain's sentinel batch did not complete in time")
            time.sleep(POLL_SECONDS / 2)
        self._boundary(query)

    def _boundary(self, query: Query) -> int:
        """The batch the suspended query rests at. A rest found before still holds if nothing
        was planned since (the sources stay suspended and the sentinels are consumed), which
        spares a drain a second wait for two held requests."""
        self._check_query()
        rest = query.rest
        planned = max(query.log.batch_ids("offsets"), default=-1)
        if rest is not None and planned == rest == query.log.last_committed():
            return rest
        remaining = max(1.0, self._deadline - time.monotonic())
        try:
            query.rest = await_batch_boundary(query.coordinators, query.log, timeout=remaining)
        except TimeoutError as error:
            raise StopFailed(str(error)) from None
        return query.rest

    def _checkpoint_at_boundary(self, query: Query) -> None:
        ending = self._termination
        batch = ending.batches.get(query.name, -1) if ending is not None else -1
        if batch >= 0:
            query.keeper.checkpoint(batch)

    def _stop_query(self, query: Query) -> None:
        handle = query.handle
        if handle is not None and handle.isActive:
            handle.stop()

    # -- reports ----------------------------------------------------------------------------

    def _ended(self, state: DriverState) -> Outcome:
        self._report(state, force=True)
        return Outcome(state, self._savepoint, self._queries.latest)

    def _report_ending(self) -> None:
        ending = self._termination
        if ending is not None:
            state = {
                LifecycleMode.FINAL_CHECKPOINT: DriverState.FINISHING,
                LifecycleMode.STOP_WITH_SAVEPOINT_DRAIN: DriverState.STOPPING,
                LifecycleMode.STOP_WITH_SAVEPOINT: DriverState.STOPPING,
            }[ending.mode]
            self._report(state, force=True)

    def report_failure(self, message: str, *, permanent: bool = False) -> None:
        """Tell the steering side why this attempt failed, and whether a restart can help."""
        if self._answer is not None and self._answer.outcome is RequestOutcome.IN_PROGRESS:
            self._answer = RequestReport(
                id=self._answer.id, outcome=RequestOutcome.FAILED, message=message
            )
        self._report(DriverState.FAILED, force=True, message=message, permanent=permanent)

    def _report(
        self, state: DriverState, *, force: bool = False, message: str = "", permanent: bool = False
    ) -> None:
        ending = self._termination
        self._reporter.write(
            state,
            lifecycle=ending.status() if ending is not None else None,
            savepoint=self._savepoint,
            request=self._answer,
            force=force,
            message=message,
            permanent=permanent,
        )


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "Error:" in line or "Exception:" in line:
            return line
    return lines[0] if lines else text
