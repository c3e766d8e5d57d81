"""What every part of a Batch driver attempt shares: the declared graph, reports, enumerator states.

``BatchRuntime`` (``runtime.py``) is put together from mixins that each own one responsibility:
the start of an attempt and the inspection of a failed round (``recovery.py``), running rounds and
the final commit (``rounds.py``), the calls tasks make (``hook.py``) and control requests
(``control.py``). They all work on the state ``RuntimeCore`` declares here (``BatchRuntime``'s
constructor sets it) and share its reports, the throttled saving of enumerator states and shuffle
heartbeats.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from finishable.api.control import DriverReport, DriverState, RequestOutcome, RequestReport
from finishable.api.jobconfig import JobConfig
from finishable.api.status import (
    ClusterPartitionStatus,
    ControlRequest,
    CoordinatorStatus,
    SavepointStatus,
)
from finishable.connectors.jvm import (
    DATA_PATH_CONF,
    JVM_SOURCE,
    DataPathError,
    chosen_path,
    jvm_source_loadable,
)
from finishable.connectors.sinks import Iceberg, TransactionalFiles
from finishable.coordinator.contract import NO_CHECKPOINT
from finishable.coordinator.endpoint import DriverEndpoint
from finishable.driver.batch.joblog import (
    CoordinatorSnapshot,
    JobLog,
    Recovery,
    StageKind,
    StageShape,
    TaskFinished,
)
from finishable.driver.batch.throttle import EnumeratorStateThrottle
from finishable.driver.departure import Departure
from finishable.driver.failures import PermanentFailure
from finishable.driver.source_coordinator import SourceCoordinator
from finishable.lifecycle.graph import TaskId
from finishable.shuffle.cluster import ShuffleCluster
from finishable.state.backends import ObjectBackend
from finishable.state.control import ControlChannel
from finishable.state.events import JobEventStore
from finishable.state.fence import Fence
from finishable.timings import PhaseTimings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from finishable.driver.batch.leases import ReaderLeases
    from finishable.driver.batch.promotion import Promotion

log = logging.getLogger(__name__)

BatchSink = TransactionalFiles | Iceberg
"""What a Batch job may write to: both stage per task and commit once at the end."""

EVENT_PREFIX = "batch-events"
PROGRESS_SECONDS = 0.5


def event_log_prefix(run_key: str) -> str:
    """Where the event log of one run lives: a new run (``JobConfig.run_key``) starts empty."""
    return f"{EVENT_PREFIX}/{run_key}"


def logged_runs(backend: ObjectBackend) -> list[str]:
    """The run keys whose event logs ``backend`` holds, sorted."""
    return sorted({name.split("/")[1] for name in backend.list(f"{EVENT_PREFIX}/")})


class JobSuspended(Exception):
    """A stop request arrived: the current round ends early and the driver suspends."""


@dataclass
class DeclaredRead:
    """A source read: its coordinator and the reader slots of its DataFrame."""

    name: str
    coordinator: SourceCoordinator
    slots: int
    quota: int


@dataclass
class DeclaredStage:
    """A stage as the program declared it, with what this attempt knows of its tasks."""

    name: str
    kind: StageKind
    dataframe: DataFrame
    parallelism: int
    inputs: tuple[str, ...]
    narrow: bool
    read: DeclaredRead | None = None
    sink: BatchSink | None = None
    output_batch: int = 0
    """For the sink stage: the sink batch this run publishes as (``OutputPlanned``)."""
    promote: bool = False
    finished: dict[int, TaskFinished] = field(default_factory=dict)
    initialized: bool = False

    @property
    def sink_name(self) -> str | None:
        return self.sink.sink_name if self.sink is not None else None

    @property
    def shape(self) -> StageShape:
        return StageShape(self.name, self.kind, self.parallelism, self.inputs, self.narrow)


@dataclass
class Figures:
    """Recovery figures for the report: what the crash cost and saved."""

    tasks_skipped: int = 0
    tasks_rerun: int = 0
    splits_reread: int = 0


class RuntimeCore:
    """The state of one driver attempt of a Batch job (``BatchRuntime.__init__`` sets it), and
    what every part of it uses."""

    config: JobConfig
    attempt: int
    spark: SparkSession
    endpoint: DriverEndpoint
    token: str
    control: ControlChannel
    state_throttle: EnumeratorStateThrottle
    events: JobEventStore
    fence: Fence
    shuffle: ShuffleCluster
    promotion: Promotion
    leases: ReaderLeases
    figures: Figures
    timings: PhaseTimings
    _lock: threading.RLock
    _reads: dict[str, DeclaredRead]
    _stages: list[DeclaredStage]
    _round: int
    _servers: list[str]
    _snapshot_due: dict[str, threading.Timer]
    departure: Departure | None
    """Set by the job when it runs: SIGTERM suspends this attempt (driver/departure.py)."""
    _stop_request: ControlRequest | None
    _drain_request: ControlRequest | None
    _heartbeat_stop: threading.Event
    _last_progress: float
    _accepted: dict[tuple[str, int], tuple[int, int]]
    """(stage, task) -> (round, attempt) whose output this driver attempt committed."""
    _read_to_the_end: set[tuple[str, int, int]]
    """(stage, task, attempt) of the reader tasks that read their whole share."""
    _writers_logged: set[str]
    """Stages whose writers (the JVM's or Python's) this attempt has logged."""
    _log: JobLog
    _recovery: Recovery
    _heartbeat: threading.Thread

    @cached_property
    def _jvm_refused(self) -> str | None:
        """Why this attempt's data path is Python rather than the JVM's (``connectors.jvm``);
        None: the JVM's, where a read or stage allows it. Decided once per attempt (every read,
        stage and round asks); a bad value fails the job."""
        try:
            path = chosen_path(self.spark.conf.get(DATA_PATH_CONF, None))
        except DataPathError as error:
            raise PermanentFailure(str(error)) from None
        if path == "python":
            return f"{DATA_PATH_CONF}=python"
        if not jvm_source_loadable(self.spark):
            return f"{JVM_SOURCE} is not on Spark's classpath (make jars; the image has it)"
        return None

    def _finished_tasks(self) -> set[TaskId]:
        return {TaskId(s.name, t) for s in self._stages for t in s.finished}

    def _report_progress(self, stage: DeclaredStage, *, force: bool = False) -> None:
        """Stage and split progress in the report, at most every PROGRESS_SECONDS."""
        now = time.monotonic()
        due = force or now - self._last_progress >= PROGRESS_SECONDS
        if due and self._stop_request is None and self._drain_request is None:
            self._last_progress = now
            done = len(stage.finished)
            self._report(
                DriverState.RUNNING, f"stage {stage.name}: {done}/{stage.parallelism} tasks done"
            )

    # -- enumerator states (NO_CHECKPOINT, throttled) --------------------------------------

    def _snapshot(self, read: DeclaredRead, *, force: bool = False) -> None:
        """Snapshot into the log no more often than snapshotMinPause; a trailing one later."""
        with self._lock:
            if not self.state_throttle.try_acquire(read.name, force=force):
                if read.name not in self._snapshot_due:
                    wait = self.state_throttle.remaining(read.name)
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

    def _snapshot_later(self, read: DeclaredRead) -> None:
        with self._lock:
            self._snapshot_due.pop(read.name, None)
        try:
            self._snapshot(read, force=True)
        except Exception:
            log.warning("a deferred enumerator state failed", exc_info=True)

    # -- heartbeats and reports -------------------------------------------------------------

    def _heartbeats(self) -> None:
        retain = self.config.spec.effective_shuffle.retain_timeout.total_seconds()
        interval = max(0.5, min(5.0, retain / 4))
        while not self._heartbeat_stop.wait(interval):
            try:
                self.shuffle.register_all(self.attempt, run=self.config.run)
            except Exception:
                log.warning("shuffle heartbeat failed", exc_info=True)
            self.leases.refresh()

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
        permanent: bool = False,
        promoted: list[ClusterPartitionStatus] | None = None,
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
            permanent=permanent,
            cluster_partitions=promoted or [],
            request=None
            if request is None
            else RequestReport(id=request.id, outcome=outcome, message=message),
        )
        try:
            self.control.write_report(report)
        except Exception:
            log.warning("cannot write the driver report", exc_info=True)

    def report_failure(self, message: str, *, permanent: bool = False) -> None:
        """Tell the steering side why this attempt failed, and whether a restart can help."""
        self._report(DriverState.FAILED, message, permanent=permanent)
