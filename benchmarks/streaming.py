"""The streaming runtime against plain Structured Streaming, on the same input in the same session.

Throughput: the same pipeline (parse JSON clicks, filter, project; parquet out) over the same files,
three ways:

* *plain*: Spark's built-in file source and parquet sink;
* *floor*: the least any Python data source pipeline does on Spark: a bare Python stream reader
  handing each file's lines to Spark's JSON parser and a bare Python Arrow sink writing one parquet
  file per task, with no coordinator, checkpoint or two-phase commit. What separates it from plain
  is the price of Spark's Python data source API itself (a planner worker to start, rows crossing
  to and from Python workers);
* *runtime*: ``FinishableJob`` with ``sources.Files`` and ``sinks.TransactionalFiles``
  (coordinator requests, a stored checkpoint per batch, the sink's two-phase commit);
  *runtime_jvm* the same on the JVM data path: the source read by Spark's own reader
  (``SplitStream``) and the sink's files written by Spark's own parquet writer (``SinkWrite``).

All read the same number of files per micro-batch with the same trigger; rows/s is counted from the
query's own progress events until every row was read, over the whole run (``*_rows_per_s``: the
query's start included) and over its data batches alone (``steady_*``: from the first data batch's
start to the last one's end, which is what a job that runs for hours sees). Each runs once to warm
up (the first query of a session pays for the JIT and for starting Python workers), then the median
of alternating rounds is taken.

Latency: an unbounded windowed count is running in steady state when a stop with savepoint (and
then, on a second run, a stop with drain) is requested through the control channel; the time until
``run()`` returns is divided by the mean micro-batch duration of that run. Prints one JSON line;
its ``breakdown`` holds, for the median throughput run of each, the mean seconds per data batch of
each phase of Spark's progress (``durationMs``) and the runtime's own phases (its batch hooks and
checkpoints, ``finishable.timings``).

    .venv/bin/python benchmarks/streaming.py [--files 40] [--rows 20000] [--files-per-batch 4]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadLimit

from finishable import FinishableJob, sinks, sources
from finishable.api.jobconfig import JobConfig
from finishable.api.models import RequestAction
from finishable.api.status import ControlRequest
from finishable.connectors.jvm import STREAMING_DATA_PATH_CONF
from finishable.state.control import LocalControlChannel
from finishable.timings import breakdown, progress_breakdown

SCHEMA = "user STRING, page STRING, ts TIMESTAMP"
START = datetime(2026, 1, 1, tzinfo=UTC)
TRIGGER_MS = 200


def write_inputs(directory: Path, files: int, rows: int) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    for index in range(files):
        rng = random.Random(index)
        base = START + timedelta(seconds=60 * index)
        lines = [
            json.dumps(
                {
                    "user": f"u{rng.randrange(10_000)}",
                    "page": rng.choice(("home", "search", "cart", "checkout")),
                    "ts": (base + timedelta(milliseconds=rng.randrange(60_000))).isoformat(),
                }
            )
            for _ in range(rows)
        ]
        (directory / f"clicks-{index:05d}.json").write_text("\n".join(lines) + "\n")
    return files * rows


def pipeline(clicks: DataFrame) -> DataFrame:
    # length() is not pushed into Spark's JSON scan, so both queries count every input row.
    return clicks.where(F.length("page") > 4).select(
        "user", "page", "ts", F.hour("ts").alias("hour")
    )


def windowed(clicks: DataFrame) -> DataFrame:
    return (
        clicks.withWatermark("ts", "1 minute")
        .groupBy(F.window("ts", "1 minute"), "page")
        .count()
        .select(F.col("window.start").alias("window_start"), "page", "count")
    )


def data_batches(spark: SparkSession) -> list[Any]:
    """Progress events of the running query's batches that read rows."""
    return [p for q in spark.streams.active for p in q.recentProgress if p.numInputRows]


def wait_rows(spark: SparkSession, total: int, started: float) -> float:
    """Seconds from ``started`` until the running query has read ``total`` rows."""
    while (read := sum(p.numInputRows for p in data_batches(spark))) < total:
        if time.perf_counter() - started > 900:
            raise TimeoutError(f"only {read} of {total} rows were read")
        time.sleep(0.05)
    return time.perf_counter() - started


def batch_seconds(spark: SparkSession) -> float:
    """Mean duration of the running query's data batches."""
    durations = [p.durationMs.get("triggerExecution", 0) / 1000 for p in data_batches(spark)]
    return max(statistics.mean(durations) if durations else 0.0, TRIGGER_MS / 1000)


def batch_phases(spark: SparkSession, started: float, elapsed: float) -> dict[str, Any]:
    """Where the ``elapsed`` seconds since ``started`` (``perf_counter``) went: until the first
    batch that read rows started, inside the batches that read rows, the rest between them
    (batches without rows, waiting for the trigger); ``steady``, from the first data batch's start
    to the last one's end; and the mean seconds per data batch of each phase of Spark's
    progress."""
    batches = data_batches(spark)
    started_epoch = time.time() - (time.perf_counter() - started)
    starts = [
        datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp() for p in batches
    ]
    ends = [
        start + p.durationMs.get("triggerExecution", 0) / 1000
        for start, p in zip(starts, batches, strict=True)
    ]
    first = min(starts, default=started_epoch)
    inside = sum(p.durationMs.get("triggerExecution", 0) for p in batches) / 1000
    to_first = max(0.0, first - started_epoch)
    return {
        "until_first_data_batch": round(to_first, 3),
        "in_data_batches": round(inside, 3),
        "between_data_batches": round(max(0.0, elapsed - to_first - inside), 3),
        "steady": round(max(ends, default=first) - first, 3),
        "per_batch": progress_breakdown(dict(p.durationMs) for p in batches),
    }


Run = tuple[float, dict[str, Any]]
"""One throughput run: rows/s over the whole run, and where its time went (``batch_phases``)."""


def steady_rate(run: Run, total: int) -> float:
    """Rows/s over the run's data batches alone (its query's start left out)."""
    return total / max(float(run[1]["steady"]), 1e-9)


def plain(spark: SparkSession, inputs: Path, work: Path, total: int, per_batch: int) -> Run:
    frame = (
        spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", per_batch).json(str(inputs))
    )
    started = time.perf_counter()
    query = (
        pipeline(frame)
        .writeStream.format("parquet")
        .option("path", str(work / "plain-out"))
        .option("checkpointLocation", str(work / "plain-checkpoint"))
        .trigger(processingTime=f"{TRIGGER_MS} milliseconds")
        .start()
    )
    return watched(spark, query, total, started)


def watched(spark: SparkSession, query: Any, total: int, started: float) -> Run:
    """Waits until ``query`` (started at ``started``) read ``total`` rows, stops it: the run."""
    elapsed = wait_rows(spark, total, started)
    phases = {"seconds": round(elapsed, 3), **batch_phases(spark, started, elapsed)}
    query.stop()
    return total / elapsed, phases


# -- the floor: bare Python data sources, nothing of the runtime -----------------------------------


class BareFilesReader(DataSourceStreamReader):
    """``per_batch`` files a batch, in name order; offsets are file counts. One partition per
    core, as Spark's file source packs these small files."""

    def __init__(self, directory: str, per_batch: int, cores: int) -> None:
        self.directory = directory
        self.per_batch = per_batch
        self.cores = cores

    def _files(self) -> list[str]:
        return sorted(str(path) for path in Path(self.directory).glob("*.json"))

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        return {"files": 0}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        del limit
        return {"files": min(len(self._files()), int(start["files"]) + self.per_batch)}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        files = self._files()[int(start["files"]) : int(end["files"])]
        groups = [files[core :: self.cores] for core in range(self.cores)]
        return [InputPartition(group) for group in groups if group]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        for path in partition.value:
            text = pa.scalar(Path(path).read_bytes(), type=pa.large_string())
            lines = pc.split_pattern(pa.array([text]), "\n").flatten()
            lines = lines.filter(pc.greater(pc.utf8_length(lines), 0)).cast(pa.string())
            yield pa.RecordBatch.from_arrays([lines], names=["value"])

    def commit(self, end: dict[str, Any]) -> None:
        del end


class BareParquetWriter(DataSourceStreamArrowWriter):
    """Each task's rows as one parquet file, straight into the output; nothing to commit."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        batches = list(iterator)
        context = TaskContext.get()
        if batches and context is not None:
            name = f"part-{context.stageId()}-{context.partitionId()}-{context.attemptNumber()}"
            path = Path(self.directory) / f"{name}.parquet"
            pq.write_table(pa.Table.from_batches(batches), str(path))
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        del messages, batch_id

    def abort(self, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        del messages, batch_id


class BareFiles(DataSource):
    """``bare_files``: reads lines of ``path`` with ``BareFilesReader``, writes with
    ``BareParquetWriter``."""

    @classmethod
    def name(cls) -> str:
        return "bare_files"

    def schema(self) -> str:
        return "value STRING"

    def streamReader(self, schema: Any) -> BareFilesReader:  # noqa: N802 - Spark's name
        del schema
        return BareFilesReader(
            self.options["path"], int(self.options["perBatch"]), int(self.options["cores"])
        )

    def streamWriter(self, schema: Any, overwrite: bool) -> BareParquetWriter:  # noqa: N802
        del schema, overwrite
        Path(self.options["path"]).mkdir(parents=True, exist_ok=True)
        return BareParquetWriter(self.options["path"])


def floor(spark: SparkSession, inputs: Path, work: Path, total: int, per_batch: int) -> Run:
    """The pipeline through bare Python data sources (Spark's JSON parser behind the same
    optimizer barrier as the runtime's, so that each record is parsed once)."""
    spark.dataSource.register(BareFiles)
    cores = str(spark.sparkContext.defaultParallelism)
    lines = (
        spark.readStream.format(BareFiles.name())
        .options(path=str(inputs), perBatch=str(per_batch), cores=cores)
        .load()
    )
    parsed = F.when(F.spark_partition_id() >= 0, F.from_json("value", SCHEMA))
    clicks = lines.select(parsed.alias("click")).select("click.*")
    started = time.perf_counter()
    query = (
        pipeline(clicks)
        .writeStream.format(BareFiles.name())
        .option("path", str(work / "floor-out"))
        .option("checkpointLocation", str(work / "floor-checkpoint"))
        .trigger(processingTime=f"{TRIGGER_MS} milliseconds")
        .start()
    )
    return watched(spark, query, total, started)


def job_config(work: Path, name: str) -> JobConfig:
    return JobConfig.model_validate(
        {
            "name": name,
            "spec": {
                "application": {"file": "benchmarks/streaming.py"},
                "checkpointing": {"interval": f"{TRIGGER_MS}ms", "retained": 3},
                "stopTimeout": "5m",
            },
            "stateUrl": str(work / name / "state"),
            "workDir": str(work / name / "work"),
            "control": "Local",
            "controlDir": str(work / name / "control"),
        }
    )


def clicks_files(inputs: Path, per_batch: int) -> sources.Source:
    """The unbounded JSON clicks under ``inputs``, ``per_batch`` files a micro-batch."""
    return sources.Files(
        str(inputs),
        format="json",
        schema=SCHEMA,
        bounded=False,
        max_splits_per_batch=per_batch,
        discovery_interval="1s",
    )


class RuntimeRun:
    """One FinishableJob run on a thread of this process: ``source`` through ``transform`` into
    ``sink`` (default: parquet files)."""

    def __init__(
        self,
        spark: SparkSession,
        work: Path,
        name: str,
        *,
        source: sources.Source,
        transform: Callable[[DataFrame], DataFrame],
        sink: sinks.TransactionalSink | None = None,
    ) -> None:
        self.config = job_config(work, name)
        self.job = FinishableJob(self.config, spark=spark, token="benchmark-token")
        self.channel = LocalControlChannel(Path(str(self.config.control_dir)))
        self.error: BaseException | None = None
        frame = self.job.read_stream(source, name="clicks")
        self.job.write_stream(
            transform(frame),
            sink
            or sinks.TransactionalFiles(str(work / f"{name}-out"), format="parquet", name="out"),
        )

    def run(self, monitor: Callable[[float], None]) -> float:
        """``job.run()`` on this (the main) thread, as a driver runs it, with ``monitor(started)``
        watching from another; returns when the job ended: the time it did."""
        started = time.perf_counter()
        watcher = threading.Thread(target=self._watch, args=(monitor, started), daemon=True)
        watcher.start()
        self.job.run()
        ended = time.perf_counter()
        watcher.join(60)
        if self.error is not None:
            raise self.error
        return ended

    def _watch(self, monitor: Callable[[float], None], started: float) -> None:
        try:
            monitor(started)
        except BaseException as error:
            self.error = error
            self.request_stop(drain=False)

    def request_stop(self, *, drain: bool) -> float:
        self.channel.send(
            ControlRequest(id=f"stop-{drain}", attempt=1, action=RequestAction.STOP, drain=drain)
        )
        return time.perf_counter()


def runtime(spark: SparkSession, inputs: Path, work: Path, total: int, per_batch: int) -> Run:
    """The runtime on the Python data path (``spark.finishable.dataPath.streaming: python``):
    the source's rows read in Python workers, the sink's files written by Python writers."""
    return on_path(spark, "python", runtime_run, inputs, work, total, per_batch)


def runtime_jvm(spark: SparkSession, inputs: Path, work: Path, total: int, per_batch: int) -> Run:
    """The runtime on the JVM data path (the default): the source read by Spark's own JSON
    reader (``SplitStream``), the sink's files written by Spark's own parquet writer."""
    return on_path(spark, "jvm", runtime_run, inputs, work, total, per_batch)


def on_path(
    spark: SparkSession,
    path: str,
    measured: Callable[[SparkSession, Path, Path, int, int], Run],
    *args: Any,
) -> Run:
    spark.conf.set(STREAMING_DATA_PATH_CONF, path)
    try:
        return measured(spark, *args)
    finally:
        spark.conf.unset(STREAMING_DATA_PATH_CONF)


def runtime_run(spark: SparkSession, inputs: Path, work: Path, total: int, per_batch: int) -> Run:
    created = time.perf_counter()
    source = clicks_files(inputs, per_batch)
    run = RuntimeRun(spark, work, "throughput", source=source, transform=pipeline)
    elapsed: list[float] = []
    per_batch_phases: list[dict[str, Any]] = []

    def measure(started: float) -> None:
        elapsed.append(wait_rows(spark, total, started))
        per_batch_phases.append(batch_phases(spark, started, elapsed[0]))
        run.request_stop(drain=False)

    start = time.perf_counter()
    ended = run.run(measure)
    # The runtime's own phases over the whole run (start, the batches, the stop): the sink's
    # batch hook (``prepare``: the previous checkpoint and this batch's offsets stored;
    # ``published``: splits finished, coordinators snapshotted), checkpoints stored meanwhile.
    own = breakdown(run.job.timings.seconds(), wall=ended - created)
    batches = max(1, int(per_batch_phases[0]["per_batch"].get("batches", 0)))
    phases = {
        "seconds": round(elapsed[0], 3),
        "job_setup": round(start - created, 3),
        "stop": round(ended - start - elapsed[0], 3),
        **per_batch_phases[0],
        "runtime": own,
        "runtime_per_batch": {
            name: round(seconds / batches, 4) for name, seconds in own.get("hooks", {}).items()
        },
    }
    return total / elapsed[0], phases


def stop_latency(
    spark: SparkSession, inputs: Path, work: Path, per_batch: int, *, drain: bool
) -> tuple[float, float]:
    """A windowed count running over unbounded input; seconds to stop and the batch duration."""
    name = "drain" if drain else "stop"
    run = RuntimeRun(spark, work, name, source=clicks_files(inputs, per_batch), transform=windowed)
    seen: list[float] = []

    def steady_then_stop(started: float) -> None:
        # Steady state: a third of the input read (the first batches pay Spark's start-up).
        files = sum(1 for _ in inputs.glob("*.json"))
        while len(data_batches(spark)) < max(3, files // per_batch // 3):
            if time.perf_counter() - started > 900:
                raise TimeoutError(f"the {name} run made no progress")
            time.sleep(0.05)
        seen.append(batch_seconds(spark))
        seen.append(run.request_stop(drain=drain))

    ended = run.run(steady_then_stop)
    batch, requested = seen
    return ended - requested, batch


def median_run(runs: list[Run]) -> Run:
    """The median rate of ``runs`` and the breakdown of the run that had it (the upper middle
    one of an even count)."""
    ordered = sorted(runs, key=lambda run: run[0])
    return statistics.median(run[0] for run in ordered), ordered[len(ordered) // 2][1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--files-per-batch", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="measured runs of each (median)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session_started = time.perf_counter()
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("finishable-benchmark")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    session_s = time.perf_counter() - session_started
    with tempfile.TemporaryDirectory(prefix="finishable-bench-") as scratch:
        work = Path(scratch)
        inputs = work / "input"
        total = write_inputs(inputs, args.files, args.rows)
        # Each warms up first: the JVM's JIT, and the Python workers (and their imports) that
        # the Python sources and sinks run in, which the first query pays for.
        kinds = {"plain": plain, "floor": floor, "runtime": runtime, "runtime_jvm": runtime_jvm}
        runs: dict[str, list[Run]] = {kind: [] for kind in kinds}
        for kind, measure in kinds.items():
            measure(spark, inputs, work / f"warm-{kind}", total, args.files_per_batch)
        for round_ in range(args.rounds):  # alternating, so drift on a shared machine evens out
            for kind, measure in kinds.items():
                runs[kind].append(
                    measure(spark, inputs, work / f"{kind}-{round_}", total, args.files_per_batch)
                )
        stop_s, stop_batch = stop_latency(spark, inputs, work, 2, drain=False)
        drain_s, drain_batch = stop_latency(spark, inputs, work, 2, drain=True)
    rate = {kind: median_run(kind_runs)[0] for kind, kind_runs in runs.items()}
    steady = {
        kind: statistics.median(steady_rate(run, total) for run in kind_runs)
        for kind, kind_runs in runs.items()
    }
    result: dict[str, Any] = {
        "benchmark": "streaming",
        "rows": total,
        "files_per_batch": args.files_per_batch,
        "trigger_ms": TRIGGER_MS,
        "plain_rows_per_s": round(rate["plain"]),
        "floor_rows_per_s": round(rate["floor"]),
        "runtime_rows_per_s": round(rate["runtime"]),
        "overhead_ratio": round(rate["plain"] / rate["runtime"], 3),
        "steady_plain_rows_per_s": round(steady["plain"]),
        "steady_floor_rows_per_s": round(steady["floor"]),
        "steady_runtime_rows_per_s": round(steady["runtime"]),
        "steady_overhead_ratio": round(steady["plain"] / steady["runtime"], 3),
        "steady_floor_ratio": round(steady["plain"] / steady["floor"], 3),
        "steady_runtime_over_floor": round(steady["floor"] / steady["runtime"], 3),
        "runtime_jvm_rows_per_s": round(rate["runtime_jvm"]),
        "jvm_overhead_ratio": round(rate["plain"] / rate["runtime_jvm"], 3),
        "steady_runtime_jvm_rows_per_s": round(steady["runtime_jvm"]),
        "steady_jvm_overhead_ratio": round(steady["plain"] / steady["runtime_jvm"], 3),
        "overhead_aim": 1.10,
        "stop_with_savepoint_s": round(stop_s, 2),
        "stop_with_savepoint_batches": round(stop_s / stop_batch, 2),
        "drain_s": round(drain_s, 2),
        "drain_batches": round(drain_s / drain_batch, 2),
        "batch_duration_s": round(statistics.mean([stop_batch, drain_batch]), 3),
        "latency_aim_batches": 2,
        "breakdown": {
            "session_start": round(session_s, 3),
            **{kind: median_run(kind_runs)[1] for kind, kind_runs in runs.items()},
        },
    }
    sys.stdout.write(json.dumps(result) + "\n")
    spark.stop()


if __name__ == "__main__":
    main()
