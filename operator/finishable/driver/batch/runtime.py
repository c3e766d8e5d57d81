"""The Batch runtime in the driver: stages as result partitions, the job event log, recovery.

A program declares the job graph with ``job.read(source)`` (reader slots pulling splits),
``job.stage(name, df)`` (a dataset materialised on the shuffle servers, read back by the next
stages) and ``job.write(df, sink)`` (a two-phase sink; a job may write to several, each under its
own name); ``job.run()`` executes it here.

``BatchRuntime`` is the program's side of one driver attempt: declaring the graph and the loop of
``run``. The rest lives next to it, one responsibility a module, all on the state of
``core.RuntimeCore``: the start of an attempt (replay, reconnect, keep what survived) and the
inspection of a failed round in ``recovery.py``; stage runs ("rounds") and the final commit in
``rounds.py``; the calls tasks make in ``hook.py``; stop, drain and suspend in ``control.py``.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import threading
import time
from typing import TYPE_CHECKING

from finishable.api.control import DriverState, RequestOutcome
from finishable.api.jobconfig import JobConfig
from finishable.api.status import ClusterPartitionStatus
from finishable.connectors.batch.datasources import read_source_class, stage_source_class
from finishable.connectors.jvm import (
    JVM_SOURCE,
    JVM_STAGE_READ,
    jvm_read_options,
    partition_columns,
    stage_read_options,
    typed,
    why_not_jvm,
)
from finishable.connectors.sinks import Iceberg, TransactionalFiles
from finishable.connectors.sources import ClusterPartition, Files, Source
from finishable.coordinator.contract import NO_CHECKPOINT
from finishable.coordinator.endpoint import DriverEndpoint
from finishable.driver.batch.control import ControlMixin
from finishable.driver.batch.core import (
    BatchSink,
    DeclaredRead,
    DeclaredStage,
    Figures,
    JobSuspended,
    event_log_prefix,
)
from finishable.driver.batch.hook import TaskHookMixin
from finishable.driver.batch.joblog import (
    OutputPlanned,
    StageKind,
    live_events,
    read_shape,
    schedule,
    sink_stage_name,
)
from finishable.driver.batch.leases import ReaderLeases
from finishable.driver.batch.promotion import Promotion, require_storage
from finishable.driver.batch.recovery import RecoveryMixin
from finishable.driver.batch.rounds import RoundsMixin
from finishable.driver.batch.throttle import EnumeratorStateThrottle
from finishable.driver.failures import PermanentFailure, ProgramError
from finishable.driver.outcome import JobFailed, Outcome
from finishable.driver.source_coordinator import RestorePoint, SourceCoordinator
from finishable.partitions.catalog import PartitionLost
from finishable.partitions.manifest import Manifest
from finishable.shuffle.cluster import ShuffleCluster
from finishable.state.control import ControlChannel
from finishable.state.events import JobEventStore
from finishable.state.fence import FencedBackend
from finishable.timings import PhaseTimings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
MAX_FAILED_ROUNDS = 5


class BatchRuntime(RecoveryMixin, RoundsMixin, TaskHookMixin, ControlMixin):
    """One driver attempt of a Batch job."""

    def __init__(
        self,
        *,
        config: JobConfig,
        attempt: int,
        spark: SparkSession,
        endpoint: DriverEndpoint,
        token: str,
        control: ControlChannel,
        state: FencedBackend,
        timings: PhaseTimings | None = None,
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
        self.state_throttle = EnumeratorStateThrottle(recovery.snapshot_min_pause.total_seconds())
        self.fence = state.fence
        self.events = JobEventStore(
            state,
            prefix=event_log_prefix(config.run_key),
            write_buffer_size=int(recovery.event_store.write_buffer_size),
            flush_interval=recovery.event_store.flush_interval.total_seconds(),
            compact=live_events,
        )
        self.shuffle = ShuffleCluster(list(config.shuffle_urls), token)
        self.promotion = Promotion(config, self.shuffle)
        self.leases = ReaderLeases(config.run_key)
        self.figures = Figures()
        self.timings = timings or PhaseTimings()
        self._lock = threading.RLock()
        self._reads = {}
        self._writers_logged = set()
        self._stages = []
        self._round = 0
        self._servers = []
        self._snapshot_due = {}
        self.departure = None
        self._stop_request = None
        self._drain_request = None
        self._heartbeat_stop = threading.Event()
        self._last_progress = 0.0
        self._accepted = {}
        self._read_to_the_end = set()
        with self.timings.phase("replay"):
            self._log = self._replay()
        with self.timings.phase("reconnect"):
            self._recovery = self._reconnect()
        self._heartbeat = threading.Thread(target=self._heartbeats, daemon=True, name="shuffle-hb")
        self._heartbeat.start()
        try:
            endpoint.set_runtime_hook(self._hook)
            self._report(DriverState.RUNNING, self._recovery_message())
        except BaseException:
            self.close()  # the heartbeats run already; the caller never gets this runtime
            raise

    # -- declaring the graph ----------------------------------------------------------------

    @property
    def read_count(self) -> int:
        return len(self._reads)

    def read(self, source: Source, name: str) -> DataFrame:
        """Reader slots of ``source``; its enumerator restored from the log's newest snapshot."""
        _check_name("read name", name)
        if name in self._reads:
            raise ProgramError(f"two reads are named {name!r}; pass distinct names")
        if not source.bounded:
            raise ProgramError(
                f"read {name!r}: a Batch job reads bounded sources; {source!r} is unbounded "
                "(use read_stream in a Streaming job)"
            )
        with self.timings.phase("listing"):
            return self._read(source, name)

    def _read(self, source: Source, name: str) -> DataFrame:
        source = self._resolve(source, name)
        coordinator = SourceCoordinator(name, source)
        snapshot = self._recovery.restore.get(name)
        restore = RestorePoint(NO_CHECKPOINT, base64.b64decode(snapshot.data)) if snapshot else None
        coordinator.start(restore)
        self.endpoint.add(coordinator.host)
        recorded = next((r.init for r in self._log.stages.values() if r.init.source == name), None)
        total = self._await_splits(coordinator)
        cores = max(1, int(self.spark.sparkContext.defaultParallelism))
        parallelism, quota = read_shape(
            total,
            cores,
            recorded.parallelism if recorded is not None else None,
            input_bytes=coordinator.input_bytes(),
            task_bytes=int(self.config.spec.recovery.read_task_size),
        )
        read = DeclaredRead(name, coordinator, parallelism, quota)
        self._reads[name] = read
        if isinstance(source, Files) and self._jvm_reads(source, name):
            partitions = partition_columns(source.schema, source.url, coordinator.file_urls())
            options = jvm_read_options(
                source,
                read=name,
                coordinator=name,
                endpoint=self.endpoint.url,
                token=self.token,
                slots=parallelism,
                partitions=partitions,
                environ=os.environ,
            )
            frame = self.spark.read.format(JVM_SOURCE).options(**options).load()
            return typed(frame, source.schema, partitions)
        read_schema = source.reader_schema(source.schema)
        settings = source._settings(name, self.endpoint.url, read_schema, None, cores)
        cls = read_source_class(name, read_schema)
        self.spark.dataSource.register(cls)
        options = {**settings.to_options(self.token), "read": name, "slots": str(parallelism)}
        frame = self.spark.read.format(cls.name()).options(**options).load()
        return source.decode(frame, source.schema)

    def _jvm_reads(self, source: Files, name: str) -> bool:
        """Whether read ``name`` goes through Spark's own file readers (connectors.jvm)."""
        reason = self._jvm_refused or why_not_jvm(source)
        if reason is not None:
            log.info("read %r: Python reader slots: %s", name, reason)
            return False
        log.info("read %r: Spark's %s reader under the coordinator", name, source.format)
        return True

    def _resolve(self, source: Source, name: str) -> Source:
        """The source bound to this job; one naming input that is not there fails the job at
        once (a restart would not make a missing or lost cluster partition appear)."""
        source = source.bound(self.config)
        try:
            source.describe()
        except (LookupError, PartitionLost) as error:
            raise PermanentFailure(f"read {name!r}: {error}") from error
        if isinstance(source, ClusterPartition) and source.catalog is not None:
            self.leases.hold(source.catalog, source.manifest.id)
        return source

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
            raise ProgramError(f"two stages are named {name!r}; pass distinct names")
        if promote:
            require_storage(self.config, name)
        stage = self._declare(name, dataframe, StageKind.STAGE)
        stage.promote = promote
        if self._jvm_refused is None:
            options = stage_read_options(
                dataset=name,
                slots=stage.parallelism,
                endpoint=self.endpoint.url,
                token=self.token,
                schema=dataframe.schema,
            )
            log.info("stage %r: written and read back in the JVM", name)
            return self.spark.read.format(JVM_STAGE_READ).options(**options).load()
        cls = stage_source_class(name, dataframe.schema)
        self.spark.dataSource.register(cls)
        options = {
            "dataset": name,
            "slots": str(stage.parallelism),
            "endpoint": self.endpoint.url,
            "token": self.token,
        }
        return self.spark.read.format(cls.name()).options(**options).load()

    def write(self, dataframe: DataFrame, sink: BatchSink) -> None:
        """An output of the job: staged per task, published once on the final checkpoint."""
        if not isinstance(sink, TransactionalFiles | Iceberg):
            raise ProgramError(
                "a Batch job writes to sinks.TransactionalFiles or sinks.Iceberg, got "
                f"{type(sink).__name__}"
            )
        sink = sink.with_defaults(name=self.config.name)
        name = sink_stage_name(sink.sink_name)
        if any(s.name == name for s in self._stages):
            raise ProgramError(
                f"two sinks are named {sink.sink_name!r}: a job that writes to several sinks "
                "names each (name=...)"
            )
        sink.store.probe()
        output_batch = self._plan_output(sink)
        stage = self._declare(name, dataframe, StageKind.SINK)
        stage.sink = sink
        stage.output_batch = output_batch
        if sink.sink_name in self._log.committed:
            return  # published: its staging is cleaned up, and it publishes nothing again
        # The staged files of finished sink tasks are checked now that the sink is known.
        for task, event in list(stage.finished.items()):
            if event.staged is None or not self._staged_exists_in(sink, event.staged):
                del stage.finished[task]

    def _plan_output(self, sink: BatchSink) -> int:
        """The batch this run publishes to ``sink`` as: the one its log names, else the next
        free one.

        A run's output replaces what earlier runs published in the sink (an overwrite batch),
        so a job deleted and applied again, or restarted from scratch, publishes again and a
        reader sees one run's output. The choice is logged before any task stages for it.
        """
        planned = self._log.planned.get(sink.sink_name)
        if planned is not None:
            return planned.batch_id
        last = sink.last_committed_batch()
        batch_id = last + 1 if last is not None else 0
        event = OutputPlanned(sink.sink_name, batch_id)
        self.events.append(event, type="OutputPlanned")
        self.events.flush(timeout=60)
        self._log.planned[sink.sink_name] = event
        if last is not None:
            replaces = isinstance(sink, TransactionalFiles) or sink.mode == "overwrite"
            log.info(
                "sink %s holds batches up to %d of earlier runs; run %s publishes batch %d, "
                "which %s them",
                sink.sink_name,
                last,
                self.config.run_key,
                batch_id,
                "replaces" if replaces else "adds to",
            )
        return batch_id

    def _declare(self, name: str, dataframe: DataFrame, kind: StageKind) -> DeclaredStage:
        """Inputs and shape from the plan; the log's record wins over a new decision."""
        with self.timings.phase("planning"):
            return self._declare_planned(name, dataframe, kind)

    def _declare_planned(self, name: str, dataframe: DataFrame, kind: StageKind) -> DeclaredStage:
        analyzed = dataframe._jdf.queryExecution().analyzed().toString()
        physical = dataframe._jdf.queryExecution().executedPlan().toString()
        reads = [r for r in self._reads.values() if _mentions(analyzed, "read", r.name)]
        staged = [s.name for s in self._stages if _mentions(analyzed, "stage", s.name)]
        exchange = "Exchange" in physical
        read: DeclaredRead | None = None
        if reads:
            if len(reads) > 1 or staged or exchange or kind is StageKind.SINK:
                raise ProgramError(
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
        parallelism = read.slots if read is not None else dataframe._jdf.rdd().getNumPartitions()
        # Pointwise only when each task can read its same-numbered input partition: one input,
        # no exchange and as many tasks as it has partitions (a sort with a limit or a coalesce
        # gathers partitions without an exchange).
        narrow = read is not None or (
            len(staged) == 1
            and not exchange
            and parallelism == next(s.parallelism for s in self._stages if s.name == staged[0])
        )
        record = self._log.stages.get(name)
        if record is not None and record.init.parallelism != parallelism:
            raise PermanentFailure(
                f"stage {name!r} ran with {record.init.parallelism} task(s) in an earlier "
                f"attempt but now plans {parallelism}: keep the program and "
                "spark.sql.shuffle.partitions unchanged while a job recovers"
            )
        stage = DeclaredStage(
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
        sinks = [s for s in self._stages if s.kind is StageKind.SINK]
        if not sinks:
            raise ProgramError("the program called run() without job.write(): nothing to run")
        with self.timings.phase("recovery_resets"):
            self._reset_unfinished_readers()
            self._count_recovery(resets=self._log_resets())
        self._report(DriverState.RUNNING, self._recovery_message())
        watcher = threading.Thread(target=self._watch_control, daemon=True, name="control")
        watcher.start()
        failures = 0
        promoted: list[Manifest] = []
        try:
            while True:
                plan = schedule([s.shape for s in self._stages], self._finished_tasks())
                if not plan:
                    with self.timings.phase("commit"):
                        self._commit(sinks)
                    break
                try:
                    for stage in self._stages:
                        if stage.name in plan:
                            with self.timings.phase(f"stage.{stage.name}"):
                                self._run_stage(stage, plan[stage.name])
                except JobSuspended:
                    return self._suspend()
                except Exception as error:
                    if self._stop_request is not None:
                        return self._suspend()
                    failures += 1
                    with self.timings.phase("failed_round_inspection"):
                        lost = self._lost_something()
                    if not lost or failures > MAX_FAILED_ROUNDS:
                        raise JobFailed(f"stage run failed: {_first_error(error)}") from error
                    log.warning("a stage run lost output (%s); running what is missing", error)
            with self.timings.phase("promotion"):
                promoted = self.promotion.commit([s.name for s in self._stages if s.promote])
        finally:
            with self.timings.phase("close"):
                self.close()
        self._report(
            DriverState.FINISHED,
            "output committed"
            + "".join(f"; {m.name} promoted as cluster partition {m.id}" for m in promoted),
            request=self._drain_request,
            outcome=RequestOutcome.COMPLETED,
            promoted=[
                ClusterPartitionStatus(
                    id=m.id, name=m.name, rows=m.rows, bytes=m.bytes, expires_at=m.expires_at
                )
                for m in promoted
            ],
        )
        return Outcome(DriverState.FINISHED, None, None)

    def close(self) -> None:
        """End the heartbeats and release what the attempt holds; ``run`` ends with it, and a
        program that never runs the job (it failed declaring it) gets it from the job's close.
        The shuffle servers then keep the attempt's partitions for their retain timeout."""
        if self._heartbeat_stop.is_set():
            return
        self._heartbeat_stop.set()
        for timer in self._snapshot_due.values():
            timer.cancel()
        self.endpoint.set_runtime_hook(None)
        self.promotion.close()
        self.leases.close()
        for read in self._reads.values():
            self.endpoint.remove(read.name)
            read.coordinator.close()
        try:
            self.events.close(timeout=60)
        except Exception:
            log.warning("closing the job event store failed", exc_info=True)


def _check_name(what: str, name: str) -> None:
    if not NAME_PATTERN.match(name):
        raise ProgramError(
            f"{what} {name!r} is not accepted: use 1-128 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )


def _mentions(plan: str, kind: str, name: str) -> bool:
    from finishable.connectors.batch.datasources import format_name  # noqa: PLC0415

    return re.search(rf"\b{re.escape(format_name(kind, name))}\b", plan) is not None


def _first_error(error: BaseException) -> str:
    """The line of a Spark failure that names the error, not the JVM's wrapping: the Python
    error's, or one of the project's JVM reader's (``jvm/``: its message is the whole reason)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in lines:
        ours = re.search(r"dev\.finishable\.spark\.(\w+(Error|Exception): .*)", line)
        if ours:
            return ours.group(1)
    named = [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)]
    if named:
        return named[-1]
    return lines[0] if lines else repr(error)
