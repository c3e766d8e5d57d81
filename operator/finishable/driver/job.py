"""``FinishableJob``: everything a user's PySpark program needs from the runtime.

::

    job = FinishableJob.from_env()
    clicks = job.read_stream(sources.Files("s3://bucket/clicks/", format="json", schema=SCHEMA))
    counts = clicks.withWatermark("ts", "1 minute").groupBy(window("ts", "1 minute")).count()
    job.write_stream(counts, sinks.TransactionalFiles("s3://bucket/counts/", format="parquet"))
    job.run()   # blocks; obeys stop, drain, savepoint and the final checkpoint

Each ``write_stream`` is one Spark query into its own sink (``driver/streaming/queries.py``);
stop, drain, savepoints and the final checkpoint apply to all of them together.

``from_env`` reads the configuration the operator (or ``finishable run``) handed over, opens the
control channel and the checkpoint store, decides where this attempt starts from (the newest
checkpoint of its run, else the savepoint it was told to start from, else nothing), starts the
driver endpoint and a Spark session. ``run`` hands everything to the streaming executor.

A ``spec.mode: Batch`` job is built with ``read`` / ``stage`` / ``write`` instead, and ``run``
hands it to the batch runtime (``driver/batch/``): stages as result partitions on shuffle
servers, recovered after a driver crash from the job event log.

It is the program's one handle on its attempt: what it starts (endpoint, session, state) and
times (``timings.py``, logged when ``run`` ends) it also closes.
"""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from finishable.api.control import DriverReport, DriverState
from finishable.api.jobconfig import (
    ENDPOINT_BIND_ENV,
    ENDPOINT_HOST_ENV,
    FENCE_GRACE_ENV,
    PREDECESSOR_EXITED_ENV,
    PREFLIGHT_ENV,
    STANDBY_ENV,
    TOKEN_ENV,
    ControlType,
    JobConfig,
    config_from_env,
)
from finishable.api.models import JobMode
from finishable.api.spec import FinishableSparkJobSpec
from finishable.connectors.sink_store import SinkError
from finishable.connectors.sinks import (
    Iceberg,
    Kafka,
    TransactionalCallback,
    TransactionalFiles,
    TransactionalSink,
)
from finishable.connectors.sources import Source
from finishable.coordinator.endpoint import DriverEndpoint
from finishable.driver.batch.runtime import BatchRuntime
from finishable.driver.departure import Departure
from finishable.driver.dependencies.plan import SUBMIT_ARGS_ENV, submitted_conf
from finishable.driver.failures import PermanentFailure, ProgramError, is_permanent
from finishable.driver.outcome import JobFailed, JobSuperseded, Outcome
from finishable.driver.placement import check_placement
from finishable.driver.runner_watch import watch_runner
from finishable.driver.sink_defaults import default_staging, prepared_iceberg, prepared_kafka
from finishable.driver.source_coordinator import SourceCoordinator
from finishable.driver.standby import await_takeover, warm_up
from finishable.driver.streaming import preflight
from finishable.driver.streaming.checkpoints import lineage_of
from finishable.driver.streaming.executor import StreamingExecutor
from finishable.driver.streaming.plan import QueryPlan
from finishable.driver.streaming.queries import Output, assign_sources
from finishable.driver.streaming.savepoints import SavepointError
from finishable.state import CheckpointStore, open_backend
from finishable.state.backends import ReadOnlyBackend
from finishable.state.control import (
    ConfigMapControlChannel,
    ControlChannel,
    LocalControlChannel,
)
from finishable.state.errors import Fenced, StateError
from finishable.state.fence import (
    DEFAULT_GRACE_SECONDS,
    Epoch,
    Fence,
    FencedBackend,
    fenced_cause,
)
from finishable.timings import PhaseTimings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


class FinishableJob:
    """One attempt of a finishable job inside its driver process."""

    def __init__(
        self,
        config: JobConfig,
        *,
        attempt: int = 1,
        restore_from: str = "",
        token: str | None = None,
        spark: SparkSession | None = None,
        control: ControlChannel | None = None,
        preflight: bool = False,
        standby: bool = False,
    ) -> None:
        self.timings = PhaseTimings()  # seconds per phase, logged when run() ends
        self.config = config
        self.attempt = attempt
        self.restore_from = restore_from
        self._token = token or secrets.token_urlsafe(24)
        self._attempt_dir = Path(config.work_dir) / f"attempt-{attempt}"
        # An upgrade check (driver/streaming/preflight.py) claims nothing and writes nothing:
        # the running driver's state stays its own, and its reports go to a scratch channel.
        self._preflight = preflight
        grace = config.spec.driver.termination_grace_period.total_seconds()
        self._departure = Departure(grace)  # SIGTERM, once run() handles it
        self._closed = False
        self._endpoint = DriverEndpoint(
            self._token,
            host=os.environ.get(ENDPOINT_BIND_ENV, "127.0.0.1"),
            advertised_host=os.environ.get(ENDPOINT_HOST_ENV) or None,
        )
        predecessor_exited = os.environ.get(PREDECESSOR_EXITED_ENV) == "1"
        if standby:  # Spark first, then the order; only then is the job's state touched
            self._control = control or open_control(config)
            self._spark = self._start_spark(spark)
            with self.timings.phase("standby_warm_up"):
                warm_up(self._spark)
            self.timings.log(log)
            self.timings = PhaseTimings()  # the attempt starts when it takes over
            order = await_takeover(self._control, attempt)
            predecessor_exited = order.predecessor_exited
            self._state = _claim_state(config, attempt)
        else:
            self._state = (
                _read_state(config, attempt) if preflight else _claim_state(config, attempt)
            )
            self._control = control or (
                LocalControlChannel(self._attempt_dir / "preflight")
                if preflight
                else open_control(config)
            )
            self._spark = self._start_spark(spark)
        self._control.write_guard = self._state.fence.check  # reports of a stale attempt: none
        self._store = CheckpointStore(self._state, retained=config.spec.checkpointing.retained)
        self._lineage = lineage_of(config.run_key, restore_from)
        self._checkpoint_dir = self._attempt_dir / "checkpoint"
        self._sources: list[SourceCoordinator] = []
        self._outputs: list[Output] = []
        with self.timings.phase("predecessor_wait"):
            if not preflight:
                self._state.fence.wait_out_predecessor(exited=predecessor_exited)
        self._report(DriverState.STARTING, f"attempt {attempt} starting")
        self._batch: BatchRuntime | None = None
        if config.spec.mode is JobMode.BATCH:
            try:
                self._batch = BatchRuntime(
                    config=config,
                    attempt=attempt,
                    spark=self._spark,
                    endpoint=self._endpoint,
                    token=self._token,
                    control=self._control,
                    state=self._state,
                    timings=self.timings,
                )
            except BaseException:
                self.close()  # the endpoint is serving already
                raise

    def _start_spark(self, spark: SparkSession | None) -> SparkSession:
        """The driver endpoint and the Spark session (the given one, in tests)."""
        self._endpoint.start()
        with self.timings.phase("session_start"):
            return spark or _spark_session(self.config, preflight=self._preflight)

    @classmethod
    def from_env(cls, spark: SparkSession | None = None) -> FinishableJob:
        """The job this driver process was started for (by the operator or `finishable run`)."""
        config, attempt, restore_from = config_from_env()
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        watch_runner()  # a driver of `finishable run` ends with its runner
        job = cls(
            config,
            attempt=attempt,
            restore_from=restore_from,
            token=os.environ.get(TOKEN_ENV) or None,
            spark=spark,
            preflight=os.environ.get(PREFLIGHT_ENV) == "1",
            standby=os.environ.get(STANDBY_ENV) == "1",
        )
        job._report_uncaught_errors()
        if spark is None:
            _stop_at_exit(job.spark)
        return job

    def _report_uncaught_errors(self) -> None:
        """A mistake in the program (an unknown source format, say) ends the driver with a
        report that names it, so the status shows the reason and not just an exit code."""
        previous = sys.excepthook

        def report(kind: type[BaseException], error: BaseException, trace: Any) -> None:
            # run() reports its own failures before it raises JobFailed; a PermanentFailure
            # raised while the graph is declared (job.read, job.stage) reaches here unreported.
            reported = isinstance(error, JobFailed) and not isinstance(error, PermanentFailure)
            if not reported and not isinstance(error, KeyboardInterrupt | Fenced):
                self._report(
                    DriverState.FAILED, f"{kind.__name__}: {error}", permanent=is_permanent(error)
                )
            previous(kind, error, trace)
            if self._preflight:  # the error is the check's verdict: nothing may log after it
                preflight.conclude(f"{kind.__name__}: {error}", 1)

        sys.excepthook = report

    @property
    def spark(self) -> SparkSession:
        """The Spark session the job runs in."""
        return self._spark

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def checking_upgrade(self) -> bool:
        """True in an upgrade check pod (docs/savepoints.md): the program should only declare
        its sources and sinks; ``run()`` ends the process with the verdict and runs nothing.
        Side effects of the program's own (writing input, calling services) belong behind it."""
        return self._preflight

    # -- building a Batch job ---------------------------------------------------------------

    def read(self, source: Source, *, name: str | None = None) -> DataFrame:
        """Batch: a DataFrame of ``source`` whose reader tasks pull splits from its coordinator.

        Stage it (``job.stage``) through narrow transformations only (filter, select, withColumn):
        a reader task's rows become exactly one result partition, so a finished task's splits
        are never read again after a driver crash.
        """
        runtime = self._batch_runtime("read")
        return runtime.read(source, name or f"source-{runtime.read_count}")

    def stage(self, name: str, dataframe: DataFrame, *, promote: bool = False) -> DataFrame:
        """Batch: materialise ``dataframe`` as dataset ``name`` on the shuffle servers.

        Returns a DataFrame reading the dataset back, for the next stages. ``promote`` keeps the
        dataset as a cluster partition in the partition storage once the job succeeds (read it
        later with ``sources.ClusterPartition``).
        """
        return self._batch_runtime("stage").stage(name, dataframe, promote=promote)

    def write(self, dataframe: DataFrame, sink: TransactionalSink) -> None:
        """Batch: the job's output, committed once on the final checkpoint."""
        runtime = self._batch_runtime("write")
        if isinstance(sink, Iceberg):
            sink = prepared_iceberg(self.config, sink, dataframe)
        elif not isinstance(sink, TransactionalFiles):
            raise ProgramError(
                "a Batch job writes to sinks.TransactionalFiles or sinks.Iceberg, got "
                f"{type(sink).__name__}"
            )
        runtime.write(dataframe, sink)

    def _batch_runtime(self, what: str) -> BatchRuntime:
        if self._batch is None:
            raise ProgramError(
                f"job.{what}() builds Batch jobs, but spec.mode is {self.config.spec.mode.value}: "
                "use read_stream/write_stream, or set spec.mode: Batch"
            )
        return self._batch

    # -- building a Streaming job -----------------------------------------------------------

    def read_stream(self, source: Source, *, name: str | None = None) -> DataFrame:
        """A streaming DataFrame of ``source``, read through its coordinator in this driver.

        ``name`` identifies the source in checkpoints and savepoints (default: ``source-<n>`` in
        the order of the calls); keep it stable across versions of the program.
        """
        if self._batch is not None:
            raise ProgramError(
                "read_stream builds Streaming jobs, but spec.mode is Batch: use job.read, "
                "job.stage and job.write"
            )
        if not isinstance(source, Source):
            raise ProgramError(
                "read_stream takes a finishable source (sources.Files, sources.Range or "
                f"sources.Kafka), got {type(source).__name__}"
            )
        coordinator_name = name or f"source-{len(self._sources)}"
        if any(c.name == coordinator_name for c in self._sources):
            raise ProgramError(f"two sources are named {coordinator_name!r}; pass distinct names")
        coordinator = SourceCoordinator(coordinator_name, source)
        self._sources.append(coordinator)
        return coordinator.stream(self._spark, self._endpoint.url, self._token)

    def write_stream(
        self,
        dataframe: DataFrame,
        sink: TransactionalSink,
        *,
        output_mode: str = "append",
        name: str | None = None,
    ) -> None:
        """Write ``dataframe`` exactly once into ``sink``: one streaming query.

        Call it once per output: each call is a query of its own, reading the sources its
        DataFrame reads (a source feeds one query). ``name`` identifies the query in checkpoints
        and savepoints (default: the sink's name); keep it stable across versions of the program.
        """
        if self._batch is not None:
            raise ProgramError(
                "write_stream builds Streaming jobs, but spec.mode is Batch: use job.write"
            )
        query = name or sink.sink_name
        if any(o.name == query for o in self._outputs):
            raise ProgramError(
                f"two queries are named {query!r}: pass write_stream(name=...) distinct names "
                "(a query is named after its sink unless named)"
            )
        if output_mode.lower() not in ("append", "complete"):
            raise ProgramError(
                f"write_stream(output_mode={output_mode!r}): a transactional sink publishes "
                "whole micro-batches, in 'append' or 'complete' mode; for a running aggregation "
                "use 'complete', or add a watermark and use 'append'"
            )
        if isinstance(sink, TransactionalCallback):
            sink = sink.with_defaults(staging_url=default_staging(self.config, sink))
        elif isinstance(sink, Iceberg):
            sink = prepared_iceberg(self.config, sink, dataframe)
        elif isinstance(sink, TransactionalFiles):
            sink = sink.with_defaults()
        elif isinstance(sink, Kafka):
            sink = prepared_kafka(self.config, sink, dataframe)
        outputs = [*self._outputs, Output(query, dataframe, sink, output_mode)]
        if len(outputs) > 1:
            assign_sources(outputs, self._sources, complete=False)  # a shared source: now
        self._outputs = outputs

    # -- running ------------------------------------------------------------------------------

    def run(self) -> Outcome:
        """Run until stopped, drained or finished; raise ``JobFailed`` if the job fails
        (``JobSuperseded`` if a newer attempt of the job took over its state)."""
        if self._preflight:
            self._run_preflight()
        self._departure.install_if_main_thread()
        try:
            if self._batch is not None:
                self._batch.departure = self._departure
                return self._run_batch(self._batch)
            return self._run_streaming()
        except Exception as error:
            fenced = fenced_cause(error) or self._state.fence.fenced()
            if fenced is None:
                raise
            log.error("%s", fenced)
            raise JobSuperseded(str(fenced)) from error
        finally:
            self.timings.log(log)

    def _run_streaming(self) -> Outcome:
        executor: StreamingExecutor | None = None
        try:
            with self.timings.phase("restore"):
                executor = self._prepare()
            with self.timings.phase("query"):
                outcome = executor.run()
        except (JobFailed, SavepointError, ValueError, OSError) as error:
            message = str(error)
            log.error("job %s attempt %d failed: %s", self.name, self.attempt, message)
            permanent = is_permanent(error)
            if executor is not None:
                executor.report_failure(message, permanent=permanent)
            else:
                self._report(DriverState.FAILED, message, permanent=permanent)
            raise JobFailed(message) from error
        finally:
            self.close()
        log.info("job %s ended %s", self.name, outcome.state.value)
        return outcome

    def _run_batch(self, runtime: BatchRuntime) -> Outcome:
        try:
            check_placement(self._spark, self.config)
            outcome = runtime.run()
        except (JobFailed, ValueError, OSError, SinkError) as error:  # a publish that failed too
            message = str(error)
            log.error("job %s attempt %d failed: %s", self.name, self.attempt, message)
            runtime.report_failure(message, permanent=is_permanent(error))
            raise JobFailed(message) from error
        finally:
            self.close()
        log.info("job %s ended %s", self.name, outcome.state.value)
        return outcome

    def _run_preflight(self) -> NoReturn:
        """An upgrade check pod: end with whether this program can restore the running job's
        state (driver/streaming/preflight.py); no query is started."""
        try:
            allow = self.config.spec.restore_from.allow_non_restored_state
            message, code = self._plan().check_upgrade(self._lineage, allow_non_restored=allow)
        except (ProgramError, StateError, OSError) as error:
            message, code = f"{type(error).__name__}: {error}", 1
        self.close()
        try:
            self._spark.stop()  # before the verdict, so that it is the log's last line
        except Exception:
            log.warning("stopping Spark failed", exc_info=True)
        preflight.conclude(message, code)

    def _plan(self) -> QueryPlan:
        """The program's queries: what each reads, where its state is (ProgramError if none)."""
        return QueryPlan(
            self._outputs,
            self._sources,
            job=self.name,
            store=self._store,
            checkpoint_dir=self._checkpoint_dir,
        )

    def _prepare(self) -> StreamingExecutor:
        plan = self._plan()
        for output in plan.outputs:
            check_placement(self._spark, self.config, output.dataframe)
        restore = self.config.spec.restore_from
        restored = plan.restores(
            lineage=self._lineage,
            restore_from=self.restore_from,
            allow_drained=restore.allow_drained,
            allow_sink_ahead=restore.allow_sink_ahead,
            allow_non_restored=restore.allow_non_restored_state,
            reach_like=self.config.state_url,
        )
        if plan.single:
            log.info(
                "attempt %d starts from %s", self.attempt, next(iter(restored.values())).origin
            )
        self._clear_work_dir()
        queries = plan.build(
            restored,
            lineage=self._lineage,
            hook_url=self._endpoint.url,
            token=self._token,
            interval_seconds=self.config.spec.checkpointing.interval.total_seconds(),
            timings=self.timings,
        )
        for coordinator in self._sources:
            self._endpoint.add(coordinator.host)
        self._endpoint.set_batch_hook(queries.hook)
        autoscaler = self.config.spec.autoscaler
        return StreamingExecutor(
            job=self.name,
            attempt=self.attempt,
            queries=queries,
            control=self._control,
            stop_timeout=self.config.spec.stop_timeout.total_seconds(),
            fence=self._state.fence,
            departure=self._departure,
            load_window=autoscaler.metrics_window.total_seconds() if autoscaler.enabled else None,
        )

    def _clear_work_dir(self) -> None:
        """Each attempt starts in an empty directory: never from a live checkpoint."""
        work = Path(self.config.work_dir)
        if work.is_dir():
            for child in work.iterdir():
                if child.name.startswith("attempt-"):
                    shutil.rmtree(child, ignore_errors=True)
        self._attempt_dir.mkdir(parents=True, exist_ok=True)

    def _report(self, state: DriverState, message: str, *, permanent: bool = False) -> None:
        try:
            self._control.write_report(
                DriverReport(
                    attempt=self.attempt, state=state, message=message, permanent=permanent
                )
            )
        except Exception:  # the report is best effort; the failure itself is logged by caller
            log.warning("cannot write the driver report", exc_info=True)

    def close(self) -> None:
        """Release the attempt without running it (``run`` ends with this): the coordinator
        endpoint and coordinators, and a Batch job's shuffle heartbeats. For a program that
        builds a job and then fails before ``run``, or a test that never runs it."""
        if self._closed:
            return
        self._closed = True
        if self._batch is not None:
            self._batch.close()
        self._endpoint.set_batch_hook(None)
        self._endpoint.stop()
        for coordinator in self._sources:
            coordinator.close()


def _stop_at_exit(spark: SparkSession) -> None:
    """Stop the session the job made when the program exits, as spark-submit stops it after a
    Python program: Spark then deletes its executor pods and closes its event log. Nothing else
    would: the JVM is this process's child, and in a pod the container ends with this process
    (tini exits with its child), killing the JVM before its own shutdown hook has run."""

    def stop() -> None:
        try:
            spark.stop()
        except Exception:
            log.warning("stopping Spark at exit failed", exc_info=True)

    atexit.register(stop)


def _read_state(config: JobConfig, attempt: int) -> FencedBackend:
    """The job's state backend for an upgrade check: read-only, and not claimed."""
    backend = open_backend(config.state_url, job=config.name, namespace=config.namespace)
    fence = Fence(backend, config.job_key, Epoch(config.run, attempt))
    return FencedBackend(ReadOnlyBackend(backend), fence)


def _claim_state(config: JobConfig, attempt: int) -> FencedBackend:
    """The job's state backend, claimed for this attempt (``Fenced`` if a newer one did)."""
    text = os.environ.get(FENCE_GRACE_ENV, str(DEFAULT_GRACE_SECONDS))
    try:
        grace = float(text)
    except ValueError:
        raise JobFailed(f"{FENCE_GRACE_ENV}={text!r} is not a number of seconds") from None
    backend = open_backend(
        config.state_url,
        job=config.name,
        namespace=config.namespace,
        owner_references=_owned_by_the_job(config),
    )
    fence = Fence(backend, config.job_key, Epoch(config.run, attempt), grace=grace)
    fence.claim()
    return FencedBackend(backend, fence)


def open_control(config: JobConfig) -> ControlChannel:
    """The job's control channel as the configuration names it (a directory or a ConfigMap)."""
    if config.control is ControlType.LOCAL:
        if not config.control_dir:
            raise JobFailed("the job configuration has control: Local but no control_dir")
        return LocalControlChannel(Path(config.control_dir))
    from finishable.kube.api import KubeApi  # noqa: PLC0415 - cluster only

    api = KubeApi.from_environment(namespace=config.namespace)
    namespace = config.namespace or api.namespace
    return ConfigMapControlChannel(
        api, config.name, namespace=namespace, owner_references=_owned_by_the_job(config)
    )


def _owned_by_the_job(config: JobConfig) -> list[dict[str, Any]]:
    """Owner references for the ConfigMaps a driver writes (its report, the job's state), so
    they go when the job goes; without blockOwnerDeletion, which the driver may not set (see
    ``owner_reference``). Which state outlives the job is ``retainOnDelete``'s to say: the
    operator orphans those objects when the job is deleted."""
    if not config.uid:
        return []
    from finishable.kube.objects import JobRef, owner_reference  # noqa: PLC0415 - cluster only

    job = JobRef(config.name, config.namespace or "", config.uid)
    return [owner_reference(job, block_owner_deletion=False)]


def _local_slots(spec: FinishableSparkJobSpec) -> int:
    """Task slots of a local run: 2, or with the autoscaler on its executors' cores (a rescale
    changes them there too)."""
    if not spec.autoscaler.enabled:
        return 2
    return spec.executor.instances * spec.executor.cores


def _spark_session(config: JobConfig, *, preflight: bool = False) -> SparkSession:
    """A session configured from the spec; local mode unless the spec or environment says not
    (an upgrade check runs no query: one local core, whatever the spec says)."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 - heavy, and only for drivers

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf: dict[str, Any] = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stopTimeout": "60s",
    }
    if config.spec.mode is JobMode.BATCH:
        # A stage's tasks must be the same in every driver attempt: no adaptive re-planning.
        conf["spark.sql.adaptive.enabled"] = "false"
    conf.update(config.spec.application.spark_conf)
    builder = SparkSession.builder.appName(config.name)
    if preflight:
        conf["spark.master"] = "local[1]"
    elif "spark.master" not in conf and "SPARK_MASTER" not in os.environ:
        builder = builder.master(f"local[{_local_slots(config.spec)}]")
    submitted = submitted_conf(os.environ.get(SUBMIT_ARGS_ENV))  # the dependencies' settings
    for key, value in conf.items():
        if key not in submitted:  # set at the JVM's start already, merged with sparkConf's
            builder = builder.config(key, value)
    return builder.getOrCreate()
