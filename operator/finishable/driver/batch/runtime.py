"""The Batch runtime in the driver: stages as result partitions, the job event log, recovery.

A program declares the job graph with ``job.read(source)`` (reader slots pulling splits),
``job.stage(name, df)`` (a dataset materialised on the shuffle servers, read back by the next
stages) and ``job.write(df, sink)`` (the two-phase sink); ``job.run()`` executes it here.

Start of an attempt (FLIP-383 "JobMaster failover"): register with every shuffle server and wait
up to ``previousWorkerRecoveryTimeout`` for them, ending early once every partition the event log
names is listed; list the partitions (checksums verified); replay the log; keep a task finished
when all its partitions survived (:func:`~finishable.driver.batch.plan.recover`); restore each
source's enumerator from its newest snapshot and ``subtask_reset`` every unfinished reader
subtask. ``run`` then walks up from the unfinished sink (:func:`~finishable.driver.batch.plan.
schedule`) and runs only those tasks, stage by stage, one Spark job per stage run ("round").

A round that fails is looked at, not blindly retried: partitions are listed again with their
checksums, and if a shuffle server went away or a partition is gone or corrupt, the lost tasks
are finished no more and the walk runs again; a failure that lost nothing (an unreadable input
file, a bug in the program) fails the job with its message.

Suspend: the sources stop handing out splits, running reader tasks finish with what they have,
the enumerators are snapshotted into the log and the driver exits SUSPENDED; resuming is a
recovery like any other.
"""

from __future__ import annotations

import base64
import logging
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from finishable.api.control import DriverReport, DriverState, RequestOutcome, RequestReport
from finishable.api.jobconfig import JobConfig
from finishable.api.models import (
    ControlRequest,
    CoordinatorStatus,
    RequestAction,
    SavepointStatus,
)
from finishable.connectors.batch.datasources import (
    ROUND_PROPERTY,
    SINK_BATCH_ID,
    SUMMARY_SCHEMA,
    Round,
    read_source_class,
    sink_writer,
    stage_source_class,
    stage_writer,
    staged_from_json,
)
from finishable.connectors.sinks import StagedMessage, TransactionalFiles, _output_schema
from finishable.connectors.sources import RestorePoint, Source, SourceCoordinator
from finishable.connectors.staging import SinkError, publish_files
from finishable.coordinator.contract import NO_CHECKPOINT
from finishable.coordinator.endpoint import CoordinatorEndpoint
from finishable.coordinator.events import SplitFinished
from finishable.driver.batch.plan import (
    CoordinatorSnapshot,
    JobLog,
    Listed,
    OutputCommitted,
    PartitionRef,
    Recovery,
    StageInitialized,
    StageKind,
    StageShape,
    TaskFinished,
    TaskReset,
    decode_event,
    recover,
    replay,
    schedule,
)
from finishable.driver.streaming.executor import JobFailed, Outcome
from finishable.lifecycle.graph import TaskId
from finishable.shuffle.client import ShuffleCluster
from finishable.state import open_backend
from finishable.state.control import ControlChannel
from finishable.state.events import JobEventStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

EVENT_PREFIX = "batch-events"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
MAX_FAILED_ROUNDS = 5
SUSPEND_POLL_SECONDS = 0.5
PROGRESS_SECONDS = 0.5


class JobSuspended(Exception):
    """A stop request arrived: the current round ends early and the driver suspends."""


@dataclass
class _Read:
    """A source read: its coordinator and the reader slots of its DataFrame."""

    name: str
    coordinator: SourceCoordinator
    slots: int
    quota: int


@dataclass
class _Stage:
    """A stage as the program declared it, with what this attempt knows of its tasks."""

    name: str
    kind: StageKind
    dataframe: DataFrame
    parallelism: int
    inputs: tuple[str, ...]
    narrow: bool
    read: _Read | None = None
    sink: TransactionalFiles | None = None
    promote: bool = False
    finished: dict[int, TaskFinished] = field(default_factory=dict)
    initialized: bool = False

    @property
    def shape(self) -> StageShape:
        return StageShape(self.name, self.kind, self.parallelism, self.inputs, self.narrow)


@dataclass
class Figures:
    """Recovery figures for the report: what the crash cost and saved."""

    tasks_skipped: int = 0
    tasks_rerun: int = 0
    splits_reread: int = 0


class BatchRuntime:
    """One driver attempt of a Batch job."""

    def __init__(
        self,
        *,
        config: JobConfig,
        attempt: int,
        spark: SparkSession,
        endpoint: CoordinatorEndpoint,
        token: str,
        control: ControlChannel,
    ) -> None:
        if not config.shuffle_urls:
            raise JobFailed(
                "a Batch job needs shuffle servers, but the job configuration lists none "
                "(shuffle_urls): start it with `finishable run` or through the operator"
            )
        self.config = config
        self.attempt = attempt
        self.spark = spark
        self.endpoint = endpoint
        self.token = token
        self.control = control
        recovery = config.spec.recovery
        self.snapshot_min_pause = recovery.snapshot_min_pause.total_seconds()
        self.events = JobEventStore(
            open_backend(config.state_url, job=config.name, namespace=config.namespace),
            prefix=EVENT_PREFIX,
            write_buffer_size=int(recovery.event_store.write_buffer_size),
            flush_interval=recovery.event_store.flush_interval.total_seconds(),
        )
        self.shuffle = ShuffleCluster(list(config.shuffle_urls), token)
        self.figures = Figures()
        self._lock = threading.RLock()
        self._reads: dict[str, _Read] = {}
        self._stages: list[_Stage] = []
        self._round = 0
        self._servers: list[str] = []
        self._last_snapshot: dict[str, float] = {}
        self._snapshot_due: dict[str, threading.Timer] = {}
        self._stop_request: ControlRequest | None = None
        self._drain_request: ControlRequest | None = None
        self._heartbeat_stop = threading.Event()
        self._last_progress = 0.0
        self._log = self._replay()
        self._recovery = self._reconnect()
        self._heartbeat = threading.Thread(target=self._heartbeats, daemon=True, name="shuffle-hb")
        self._heartbeat.start()
        endpoint.set_runtime_hook(self._hook)
        self._report(DriverState.RUNNING, self._recovery_message())

    # -- the attempt's start: replay and reconnect ------------------------------------------

    def _replay(self) -> JobLog:
        pairs = []
        for event in self.events.replay():
            typed = decode_event(event.type, event.data)
            if typed is not None:
                pairs.append((event.seq, typed))
        job = replay(pairs)
        if job.stages:
            log.info(
                "attempt %d: the event log holds %d stage(s), %d finished task(s)",
                self.attempt,
                len(job.stages),
                sum(len(s.finished) for s in job.stages.values()),
            )
        return job

    def _reconnect(self) -> Recovery:
        """Wait for the shuffle servers: all of them, or (recovering) every logged partition."""
        needed = {
            (p.dataset, p.partition)
            for record in self._log.stages.values()
            for _, event in record.finished.values()
            for p in event.partitions
        }
        timeout = self.config.spec.recovery.previous_worker_recovery_timeout.total_seconds()
        started = time.monotonic()
        self.shuffle.wait_for(None, timeout, needed or None)
        answered = self.shuffle.register_all(self.attempt)
        self._servers = sorted(answered)
        if not self._servers:
            raise JobFailed(
                f"no shuffle server answered within {timeout:.0f} s: {self.shuffle.urls}"
            )
        # Metadata only: a corrupt partition is caught by the checksum of the read that uses it,
        # and the failed round's listing verifies (a start stays O(partitions), not O(bytes)).
        listed = self._listing(verify=False)
        recovery = recover(self._log, listed, self._staged_exists)
        if self._log.stages:
            log.info(
                "attempt %d reconnected to %d/%d shuffle server(s) in %.1f s; %d partition(s) "
                "listed",
                self.attempt,
                len(self._servers),
                len(self.shuffle.urls),
                time.monotonic() - started,
                len(listed),
            )
        return recovery

    def _listing(self, *, verify: bool = True) -> dict[tuple[str, int], Listed]:
        listing = self.shuffle.list_all(verify=verify)
        for corrupt in listing.corrupt:
            log.warning(
                "partition %s/%s on %s failed its checksum and was dropped: %s",
                corrupt.dataset,
                corrupt.partition,
                corrupt.server,
                corrupt.error,
            )
        self._servers = sorted(listing.answered)
        return {
            (info.dataset, info.partition): Listed(info.server, info.sha256)
            for info in listing.partitions
        }

    @staticmethod
    def _staged_exists_in(sink: TransactionalFiles, staged: Mapping[str, Any]) -> bool:
        path = staged.get("path")
        if path is None:
            return True  # the task had no rows: nothing to lose
        try:
            return sink.store.size(str(path)) == int(staged.get("size", -1))
        except (SinkError, OSError):
            return False

    def _staged_exists(self, staged: Mapping[str, Any]) -> bool:
        sink = next((s.sink for s in self._stages if s.sink is not None), None)
        if sink is None:
            return True  # checked again when the program declares its sink
        return self._staged_exists_in(sink, staged)

    def _recovery_message(self) -> str:
        if not self._log.stages:
            return f"attempt {self.attempt} running"
        kept = sum(len(t) for t in self._recovery.finished.values())
        return f"attempt {self.attempt} recovered: {kept} finished task(s) survive"

    # -- declaring the graph ----------------------------------------------------------------

    @property
    def read_count(self) -> int:
        return len(self._reads)

    def read(self, source: Source, name: str) -> DataFrame:
        """Reader slots of ``source``; its enumerator restored from the log's newest snapshot."""
        _check_name("read name", name)
        if name in self._reads:
            raise ValueError(f"two reads are named {name!r}; pass distinct names")
        if not source.bounded:
            raise ValueError(
                f"read {name!r}: a Batch job reads bounded sources; {source!r} is unbounded "
                "(use read_stream in a Streaming job)"
            )
        coordinator = SourceCoordinator(name, source)
        snapshot = self._recovery.restore.get(name)
        restore = RestorePoint(NO_CHECKPOINT, base64.b64decode(snapshot.data)) if snapshot else None
        coordinator.start(restore)
        self.endpoint.add(coordinator.host)
        recorded = next((r.init for r in self._log.stages.values() if r.init.source == name), None)
        total = self._await_splits(coordinator)
        cores = max(1, int(self.spark.sparkContext.defaultParallelism))
        if recorded is not None:
            parallelism = recorded.parallelism
        else:
            parallelism = max(1, min(total, 4 * cores))
        quota = max(1, -(-total // parallelism))
        read = _Read(name, coordinator, parallelism, quota)
        self._reads[name] = read
        settings = source._settings(name, self.endpoint.url, source.schema, None, cores)
        cls = read_source_class(name, source.schema)
        self.spark.dataSource.register(cls)
        options = {**settings.to_options(self.token), "read": name, "slots": str(parallelism)}
        return self.spark.read.format(cls.name()).options(**options).load()

    def _await_splits(self, coordinator: SourceCoordinator, timeout: float = 120.0) -> int:
        """A bounded source's split count, once its discovery is complete."""
        deadline = time.monotonic() + timeout
        while True:
            progress = coordinator.host.progress().result(30)
            if progress is not None and progress.discovery_complete:
                return max(1, progress.splits_discovered)
            failure = coordinator.host.failure
            if failure is not None:
                raise JobFailed(f"read {coordinator.name!r}: listing failed: {failure}")
            if time.monotonic() >= deadline:
                raise JobFailed(
                    f"read {coordinator.name!r}: its input was not listed within {timeout:.0f} s"
                )
            time.sleep(0.05)

    def stage(self, name: str, dataframe: DataFrame, *, promote: bool = False) -> DataFrame:
        """Materialise ``dataframe`` as dataset ``name``; a DataFrame reading it back."""
        _check_name("stage name", name)
        if any(s.name == name for s in self._stages):
            raise ValueError(f"two stages are named {name!r}; pass distinct names")
        stage = self._declare(name, dataframe, StageKind.STAGE)
        stage.promote = promote
        cls = stage_source_class(name, dataframe.schema)
        self.spark.dataSource.register(cls)
        options = {
            "dataset": name,
            "slots": str(stage.parallelism),
            "endpoint": self.endpoint.url,
            "token": self.token,
        }
        return self.spark.read.format(cls.name()).options(**options).load()

    def write(self, dataframe: DataFrame, sink: TransactionalFiles) -> None:
        """The job's output: staged per task, published once on the final checkpoint."""
        if not isinstance(sink, TransactionalFiles):
            raise TypeError(
                f"a Batch job writes to sinks.TransactionalFiles, got {type(sink).__name__}"
            )
        if any(s.kind is StageKind.SINK for s in self._stages):
            raise ValueError("this job already writes to a sink: a Batch job has one output")
        sink = sink.with_defaults(name=self.config.name)
        sink.store.probe()
        if not self._log.stages and sink.store.read_manifest(SINK_BATCH_ID) is not None:
            raise ValueError(
                f"sink {sink.sink_name!r} at {sink.store.display} already holds the output of an "
                "earlier Batch run, which this new run would not replace: delete it, or write "
                "to another sink name"
            )
        stage = self._declare(f"sink-{sink.sink_name}", dataframe, StageKind.SINK)
        stage.sink = sink
        # The staged files of finished sink tasks are checked now that the sink is known.
        for task, event in list(stage.finished.items()):
            if event.staged is None or not self._staged_exists_in(sink, event.staged):
                del stage.finished[task]

    def _declare(self, name: str, dataframe: DataFrame, kind: StageKind) -> _Stage:
        """Inputs and shape from the plan; the log's record wins over a new decision."""
        analyzed = dataframe._jdf.queryExecution().analyzed().toString()
        physical = dataframe._jdf.queryExecution().executedPlan().toString()
        reads = [r for r in self._reads.values() if _mentions(analyzed, "read", r.name)]
        staged = [s.name for s in self._stages if _mentions(analyzed, "stage", s.name)]
        exchange = "Exchange" in physical
        read: _Read | None = None
        if reads:
            if len(reads) > 1 or staged or exchange or kind is StageKind.SINK:
                raise ValueError(
                    f"stage {name!r} reads source(s) {[r.name for r in reads]} with a shuffle, a "
                    "join, other inputs or straight into the sink: stage each source's rows "
                    "first with "
                    "job.stage(name, job.read(...).<narrow transformations>) and combine the "
                    "staged DataFrames in a later stage"
                )
            read = reads[0]
            if kind is StageKind.STAGE:
                kind = StageKind.READ
        inputs = (read.name,) if read is not None else tuple(staged)
        narrow = read is not None or (len(staged) == 1 and not exchange)
        parallelism = read.slots if read is not None else dataframe._jdf.rdd().getNumPartitions()
        record = self._log.stages.get(name)
        if record is not None and record.init.parallelism != parallelism:
            raise JobFailed(
                f"stage {name!r} ran with {record.init.parallelism} task(s) in an earlier "
                f"attempt but now plans {parallelism}: keep the program and "
                "spark.sql.shuffle.partitions unchanged while a job recovers"
            )
        stage = _Stage(
            name=name,
            kind=kind,
            dataframe=dataframe,
            parallelism=parallelism,
            inputs=tuple(inputs) if read is None else (),
            narrow=narrow,
            read=read,
            finished=dict(self._recovery.finished.get(name, {})),
            initialized=record is not None,
        )
        self._stages.append(stage)
        return stage

    # -- running ----------------------------------------------------------------------------

    def run(self) -> Outcome:
        sink = next((s for s in self._stages if s.kind is StageKind.SINK), None)
        if sink is None or sink.sink is None:
            raise JobFailed("the program called run() without job.write(): nothing to run")
        self._reset_unfinished_readers()
        self._count_recovery(resets=self._log_resets())
        self._report(DriverState.RUNNING, self._recovery_message())
        watcher = threading.Thread(target=self._watch_control, daemon=True, name="control")
        watcher.start()
        failures = 0
        try:
            while not self._log.committed:
                plan = schedule([s.shape for s in self._stages], self._finished_tasks())
                if not plan:
                    self._commit(sink)
                    break
                try:
                    for stage in self._stages:
                        if stage.name in plan:
                            self._run_stage(stage, plan[stage.name])
                except JobSuspended:
                    return self._suspend()
                except Exception as error:
                    if self._stop_request is not None:
                        return self._suspend()
                    failures += 1
                    if not self._lost_something() or failures > MAX_FAILED_ROUNDS:
                        raise JobFailed(f"stage run failed: {_first_error(error)}") from error
                    log.warning("a stage run lost output (%s); running what is missing", error)
        finally:
            self._heartbeat_stop.set()
            self._close()
        self._report(
            DriverState.FINISHED,
            "output committed",
            request=self._drain_request,
            outcome=RequestOutcome.COMPLETED,
        )
        return Outcome(DriverState.FINISHED, None, None)

    def _finished_tasks(self) -> set[TaskId]:
        return {TaskId(s.name, t) for s in self._stages for t in s.finished}

    def _run_stage(self, stage: _Stage, tasks: list[int]) -> None:
        if not stage.initialized:
            self.events.append(
                StageInitialized(
                    stage=stage.name,
                    kind=stage.kind.value,
                    parallelism=stage.parallelism,
                    inputs=stage.inputs,
                    narrow=stage.narrow,
                    source=stage.read.name if stage.read else None,
                    attempt=self.attempt,
                ),
                type="StageInitialized",
            )
            stage.initialized = True
        todo = [t for t in tasks if t not in stage.finished]
        slots = stage.read.slots if stage.read is not None else stage.parallelism
        while todo:
            if self._stop_request is not None:
                raise JobSuspended()
            batch, todo = todo[:slots], todo[slots:]
            self._round += 1
            plan = Round(
                stage=stage.name,
                round=self._round,
                attempt=self.attempt,
                tasks=batch,
                servers=self._servers,
                quota=stage.read.quota if stage.read is not None else 0,
                narrow=stage.narrow and stage.read is None,
            )
            log.info("stage %s: running %d task(s) %s", stage.name, len(batch), _ranges(batch))
            started = time.monotonic()
            self._execute(stage, plan)
            log.info(
                "stage %s: %d task(s) done in %.1f s (%d/%d finished)",
                stage.name,
                len(batch),
                time.monotonic() - started,
                len(stage.finished),
                stage.shape.parallelism,
            )
        self._report_progress(stage, force=True)
        if stage.read is not None:
            self._snapshot(stage.read, force=True)
            progress = stage.read.coordinator.host.progress().result(30)
            if progress is not None and not progress.fully_finished:
                raise JobFailed(
                    f"stage {stage.name}: every reader task finished but only "
                    f"{progress.splits_finished} of {progress.splits_discovered} splits are done"
                )

    def _execute(self, stage: _Stage, plan: Round) -> None:
        context = self.spark.sparkContext
        context.setLocalProperty(ROUND_PROPERTY, plan.to_property())
        context.setJobDescription(f"{self.config.name}: stage {stage.name} round {plan.round}")
        try:
            if stage.kind is StageKind.SINK:
                assert stage.sink is not None
                writer = sink_writer(
                    self.endpoint.url,
                    self.token,
                    stage.sink.url,
                    stage.sink.sink_name,
                    stage.sink.format,
                )
            else:
                from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415

                schema = to_arrow_schema(stage.dataframe.schema).serialize().to_pybytes()
                writer = stage_writer(
                    self.endpoint.url,
                    self.token,
                    stage.name,
                    schema,
                    slotted=stage.read is not None,
                )
            stage.dataframe.mapInArrow(writer, SUMMARY_SCHEMA).collect()
        finally:
            context.setLocalProperty(ROUND_PROPERTY, None)  # type: ignore[arg-type]
        missing = [t for t in plan.tasks if t not in stage.finished]
        if missing:
            raise JobFailed(f"stage {stage.name}: task(s) {missing} ended without output")

    def _lost_something(self) -> bool:
        """After a failed round: drop finished tasks whose output is gone; True if any was."""
        before = len(self._servers)
        try:
            listed = self._listing()
        except Exception as error:  # every server down is a loss too
            log.warning("cannot list partitions: %s", error)
            return True
        lost = before != len(self._servers) or len(self._servers) < len(self.shuffle.urls)
        for stage in self._stages:
            if stage.kind is StageKind.SINK:
                continue
            for task, event in list(stage.finished.items()):
                if not all(
                    (found := listed.get((p.dataset, p.partition))) is not None
                    and found.sha256 == p.sha256
                    for p in event.partitions
                ):
                    del stage.finished[task]
                    self.events.append(TaskReset(stage.name, task), type="TaskReset")
                    lost = True
                    if stage.read is not None:
                        self._reset_reader(stage.read, task)
        return lost

    def _commit(self, sink_stage: _Stage) -> None:
        """The final checkpoint: publish every sink task's staged file, once."""
        sink = sink_stage.sink
        assert sink is not None
        for read in self._reads.values():
            progress = read.coordinator.host.progress().result(30)
            if progress is None or not progress.fully_finished:
                raise JobFailed(
                    f"read {read.name!r} is not fully finished at the final checkpoint "
                    f"({progress}): refusing to publish output that misses input"
                )
        parts = [
            StagedMessage(staged_from_json(event.staged))
            for _, event in sorted(sink_stage.finished.items())
            if event.staged is not None
        ]
        manifest = publish_files(
            sink.store,
            SINK_BATCH_ID,
            parts,
            sink.format,
            _output_schema(sink_stage.dataframe.schema),
        )
        for stage in self._stages:
            if stage.promote:
                for url in self._servers:
                    self.shuffle.client(url).promote(stage.name)
        self.events.append(OutputCommitted(sink.sink_name, manifest.rows), type="OutputCommitted")
        self.events.flush(timeout=60)
        self._log.committed = OutputCommitted(sink.sink_name, manifest.rows)
        log.info("published %d row(s) to %s", manifest.rows, sink.store.display)

    # -- the runtime hook (tasks call it) ---------------------------------------------------

    def _hook(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        if action == "task-start":
            return self._task_start(body)
        if action == "task-finished":
            return self._task_finished(body)
        if action == "locations":
            return self._locations(body)
        raise ValueError(f"unknown runtime action {action!r}")

    def _stage_named(self, name: object) -> _Stage:
        stage = next((s for s in self._stages if s.name == name), None)
        if stage is None:
            raise ValueError(f"no stage named {name!r} in this job")
        return stage

    def _task_start(self, body: dict[str, Any]) -> dict[str, Any]:
        stage = self._stage_named(body.get("stage"))
        if stage.read is None:
            raise ValueError(f"stage {stage.name!r} reads no source")
        subtask, attempt = int(body["task"]), int(body["attempt"])
        host = stage.read.coordinator.host
        with self._lock:
            live = host.live_attempts().result(30).get(subtask, [])
            for old in live:
                host.execution_attempt_failed(subtask, old, None).result(30)
            if live:
                host.subtask_reset(subtask, NO_CHECKPOINT).result(30)
            host.execution_attempt_ready(subtask, attempt).result(30)
        return {"ok": True}

    def _task_finished(self, body: dict[str, Any]) -> dict[str, Any]:
        stage = self._stage_named(body.get("stage"))
        task, attempt = int(body["task"]), int(body["attempt"])
        splits: tuple[str, ...] = ()
        with self._lock:
            if stage.read is not None:
                host = stage.read.coordinator.host
                view = host.inspect(lambda c: c.assignment_view()).result(30)  # type: ignore[attr-defined]
                splits = tuple(sorted(view.held.get((task, attempt), ())))
                if splits:
                    host.handle_event_from_operator(task, attempt, SplitFinished(splits)).result(30)
            event = TaskFinished(
                stage=stage.name,
                task=task,
                attempt=self.attempt,
                task_attempt=int(body.get("task_attempt", 0)),
                rows=int(body.get("rows", 0)),
                bytes=int(body.get("bytes", 0)),
                partitions=tuple(PartitionRef(**p) for p in body.get("partitions", ())),
                staged=body.get("staged"),
                splits=splits,
            )
            self.events.append(event, type="TaskFinished")
            stage.finished[task] = event
            if stage.read is not None:
                self._snapshot(stage.read)
        self._report_progress(stage)
        return {"ok": True}

    def _report_progress(self, stage: _Stage, *, force: bool = False) -> None:
        """Stage and split progress in the report, at most every PROGRESS_SECONDS."""
        now = time.monotonic()
        due = force or now - self._last_progress >= PROGRESS_SECONDS
        if due and self._stop_request is None and self._drain_request is None:
            self._last_progress = now
            done = len(stage.finished)
            self._report(
                DriverState.RUNNING, f"stage {stage.name}: {done}/{stage.parallelism} tasks done"
            )

    def _locations(self, body: dict[str, Any]) -> dict[str, Any]:
        stage = self._stage_named(body.get("dataset"))
        event = stage.finished.get(int(body.get("partition", -1)))
        if event is None or not event.partitions:
            return {"server": None}
        return {"server": event.partitions[0].server, "sha256": event.partitions[0].sha256}

    # -- coordinator snapshots (NO_CHECKPOINT, throttled) ----------------------------------

    def _snapshot(self, read: _Read, *, force: bool = False) -> None:
        """Snapshot into the log no more often than snapshotMinPause; a trailing one later."""
        with self._lock:
            now = time.monotonic()
            wait = self._last_snapshot.get(read.name, -1e9) + self.snapshot_min_pause - now
            if wait > 0 and not force:
                if read.name not in self._snapshot_due:
                    timer = threading.Timer(wait, self._snapshot_later, args=(read,))
                    timer.daemon = True
                    self._snapshot_due[read.name] = timer
                    timer.start()
                return
            due = self._snapshot_due.pop(read.name, None)
            if due is not None:
                due.cancel()
            host = read.coordinator.host
            data = host.checkpoint_coordinator(NO_CHECKPOINT).result(30)
            progress = host.progress().result(30)
            self.events.append(
                CoordinatorSnapshot(
                    coordinator=read.name,
                    data=base64.b64encode(data).decode("ascii"),
                    splits_finished=progress.splits_finished if progress else 0,
                ),
                type="CoordinatorSnapshot",
            )
            self._last_snapshot[read.name] = now

    def _snapshot_later(self, read: _Read) -> None:
        with self._lock:
            self._snapshot_due.pop(read.name, None)
        try:
            self._snapshot(read, force=True)
        except Exception:
            log.warning("a deferred coordinator snapshot failed", exc_info=True)

    # -- recovery bookkeeping ---------------------------------------------------------------

    def _reset_unfinished_readers(self) -> None:
        """``subtask_reset`` every reader subtask without surviving output (FLIP-383 step 5)."""
        for stage in self._stages:
            if stage.read is None:
                continue
            host = stage.read.coordinator.host
            before = host.progress().result(30)
            view = host.inspect(lambda c: c.assignment_view()).result(30)  # type: ignore[attr-defined]
            subtasks = set(view.orphaned) | set(view.finished.values())
            subtasks |= set(range(stage.shape.parallelism))
            for subtask in sorted(subtasks - set(stage.finished)):
                host.subtask_reset(subtask, NO_CHECKPOINT).result(30)
            after = host.progress().result(30)
            if before is not None and after is not None:
                self.figures.splits_reread += max(0, before.splits_finished - after.splits_finished)

    def _log_resets(self) -> int:
        """``TaskReset`` for each logged finished task this attempt does not keep; how many."""
        count = 0
        for stage in self._stages:
            record = self._log.stages.get(stage.name)
            for task in sorted(set(record.finished) - set(stage.finished)) if record else ():
                self.events.append(TaskReset(stage.name, task), type="TaskReset")
                count += 1
        return count

    def _reset_reader(self, read: _Read, subtask: int) -> None:
        host = read.coordinator.host
        for old in host.live_attempts().result(30).get(subtask, []):
            host.execution_attempt_failed(subtask, old, None).result(30)
        host.subtask_reset(subtask, NO_CHECKPOINT).result(30)

    def _count_recovery(self, *, resets: int) -> None:
        if not self._log.stages:
            return
        self.figures.tasks_skipped = len(self._finished_tasks())
        self.figures.tasks_rerun = resets
        log.info(
            "recovery: %d task(s) skipped, %d re-run, %d finished split(s) to read again",
            self.figures.tasks_skipped,
            self.figures.tasks_rerun,
            self.figures.splits_reread,
        )

    # -- control ----------------------------------------------------------------------------

    def _watch_control(self) -> None:
        """Requests, Batch style: stop suspends, a drain runs to the end, savepoints are refused."""
        seen: set[str] = set()
        while not self._heartbeat_stop.is_set():
            try:
                request = self.control.read_request(self.attempt)
            except Exception:
                log.debug("cannot read the control channel", exc_info=True)
                request = None
            if request is not None and request.id not in seen:
                seen.add(request.id)
                self._on_request(request)
            self._heartbeat_stop.wait(SUSPEND_POLL_SECONDS)

    def _on_request(self, request: ControlRequest) -> None:
        if request.action is RequestAction.SAVEPOINT:
            self._report(
                DriverState.RUNNING,
                "a Batch job takes no savepoint while it runs: stop it to suspend it (its job "
                "event log and shuffle partitions are its state)",
                request=request,
                outcome=RequestOutcome.FAILED,
            )
        elif request.drain:
            # Bounded input: running to the end *is* the drain; answered when the output commits.
            log.info("drain request %s: the job runs to its end", request.id)
            self._drain_request = request
            self._report(DriverState.FINISHING, "draining: running to the end", request=request)
        elif self._stop_request is None:
            log.info("stop request %s: suspending after the running tasks", request.id)
            self._stop_request = request
            for read in self._reads.values():
                read.coordinator.suspend()
            self._report(DriverState.STOPPING, "suspending", request=request)

    def _suspend(self) -> Outcome:
        request: ControlRequest | None = self._stop_request
        for read in self._reads.values():
            try:
                self._snapshot(read, force=True)
            except Exception:
                log.warning("snapshot of %s at suspend failed", read.name, exc_info=True)
        self.events.flush(timeout=60)
        location = f"{self.config.state_url.rstrip('/')}/{EVENT_PREFIX}"
        savepoint = SavepointStatus(
            location=location, request_id=request.id if request is not None else None
        )
        self._report(
            DriverState.SUSPENDED,
            "suspended: resume recovers from the job event log",
            request=request,
            outcome=RequestOutcome.COMPLETED,
            savepoint=savepoint,
        )
        return Outcome(DriverState.SUSPENDED, savepoint, None)

    # -- heartbeats, reports, closing -------------------------------------------------------

    def _heartbeats(self) -> None:
        retain = self.config.spec.effective_shuffle.retain_timeout.total_seconds()
        interval = max(0.5, min(5.0, retain / 4))
        while not self._heartbeat_stop.wait(interval):
            try:
                self.shuffle.register_all(self.attempt)
            except Exception:
                log.warning("shuffle heartbeat failed", exc_info=True)

    def _progress(self) -> CoordinatorStatus | None:
        total = finished = 0
        for read in self._reads.values():
            progress = read.coordinator.host.progress().result(30)
            if progress is not None:
                total += progress.splits_discovered
                finished += progress.splits_finished
        return CoordinatorStatus(splits_total=total, splits_finished=finished) if total else None

    def _report(
        self,
        state: DriverState,
        message: str,
        *,
        request: ControlRequest | None = None,
        outcome: RequestOutcome = RequestOutcome.IN_PROGRESS,
        savepoint: SavepointStatus | None = None,
    ) -> None:
        try:
            progress = self._progress() if self._reads else None
        except Exception:
            progress = None
        report = DriverReport(
            attempt=self.attempt,
            state=state,
            message=message,
            coordinator=progress,
            tasks_skipped=self.figures.tasks_skipped,
            tasks_rerun=self.figures.tasks_rerun,
            splits_reread=self.figures.splits_reread,
            savepoint=savepoint,
            request=None
            if request is None
            else RequestReport(id=request.id, outcome=outcome, message=message),
        )
        try:
            self.control.write_report(report)
        except Exception:
            log.warning("cannot write the driver report", exc_info=True)

    def report_failure(self, message: str) -> None:
        self._report(DriverState.FAILED, message)

    def _close(self) -> None:
        for timer in self._snapshot_due.values():
            timer.cancel()
        self.endpoint.set_runtime_hook(None)
        for read in self._reads.values():
            self.endpoint.remove(read.name)
            read.coordinator.close()
        try:
            self.events.close(timeout=60)
        except Exception:
            log.warning("closing the job event store failed", exc_info=True)


def _check_name(what: str, name: str) -> None:
    if not NAME_PATTERN.match(name):
        raise ValueError(
            f"{what} {name!r} is not accepted: use 1-128 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )


def _mentions(plan: str, kind: str, name: str) -> bool:
    from finishable.connectors.batch.datasources import format_name  # noqa: PLC0415

    return re.search(rf"\b{re.escape(format_name(kind, name))}\b", plan) is not None


def _ranges(tasks: list[int]) -> str:
    if len(tasks) <= 6:
        return str(tasks)
    return f"[{tasks[0]}..{tasks[-1]}]"


def _first_error(error: BaseException) -> str:
    """The line of a Spark failure that names the Python error, not the JVM's wrapping."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    named = [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)]
    if named:
        return named[-1]
    return lines[0] if lines else repr(error)
