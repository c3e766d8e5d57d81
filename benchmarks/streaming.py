"""The streaming runtime against plain Structured Streaming, on the same input in the same session.

Throughput: the same pipeline (parse JSON clicks, filter, project; parquet out) over the same files,
once with Spark's built-in file source and parquet sink and once through ``FinishableJob`` with
``sources.Files`` and ``sinks.TransactionalFiles`` (coordinator requests, a stored checkpoint per
batch, the sink's two-phase commit). Both read the same number of files per micro-batch with the
same trigger; rows/s is counted from the query's own progress events until every row was read.
Each runs once to warm up (the first query of a session pays for the JIT and for starting Python
workers), then the median of alternating rounds is taken.

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
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

from finishable import FinishableJob, sinks, sources
from finishable.api.jobconfig import JobConfig
from finishable.api.models import RequestAction
from finishable.api.status import ControlRequest
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
    (batches without rows, waiting for the trigger); and the mean seconds per data batch of each
    phase of Spark's progress."""
    batches = data_batches(spark)
    started_epoch = time.time() - (time.perf_counter() - started)
    first = min(
        (datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp() for p in batches),
        default=started_epoch,
    )
    inside = sum(p.durationMs.get("triggerExecution", 0) for p in batches) / 1000
    to_first = max(0.0, first - started_epoch)
    return {
        "until_first_data_batch": round(to_first, 3),
        "in_data_batches": round(inside, 3),
        "between_data_batches": round(max(0.0, elapsed - to_first - inside), 3),
        "per_batch": progress_breakdown(dict(p.durationMs) for p in batches),
    }


def plain(
    spark: SparkSession, inputs: Path, work: Path, total: int, per_batch: int
) -> tuple[float, dict[str, Any]]:
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
    elapsed = wait_rows(spark, total, started)
    phases = {"seconds": round(elapsed, 3), **batch_phases(spark, started, elapsed)}
    query.stop()
    return total / elapsed, phases


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


class RuntimeRun:
    """One FinishableJob run on a thread of this process: unbounded files through ``transform``."""

    def __init__(
        self,
        spark: SparkSession,
        work: Path,
        name: str,
        inputs: Path,
        *,
        per_batch: int,
        transform: Callable[[DataFrame], DataFrame],
    ) -> None:
        self.config = job_config(work, name)
        self.job = FinishableJob(self.config, spark=spark, token="benchmark-token")
        self.channel = LocalControlChannel(Path(str(self.config.control_dir)))
        self.error: BaseException | None = None
        frame = self.job.read_stream(
            sources.Files(
                str(inputs),
                format="json",
                schema=SCHEMA,
                bounded=False,
                max_splits_per_batch=per_batch,
                discovery_interval="1s",
            ),
            name="clicks",
        )
        self.job.write_stream(
            transform(frame),
            sinks.TransactionalFiles(str(work / f"{name}-out"), format="parquet", name="out"),
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


def runtime(
    spark: SparkSession, inputs: Path, work: Path, total: int, per_batch: int
) -> tuple[float, dict[str, Any]]:
    created = time.perf_counter()
    run = RuntimeRun(spark, work, "throughput", inputs, per_batch=per_batch, transform=pipeline)
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
    run = RuntimeRun(spark, work, name, inputs, per_batch=per_batch, transform=windowed)
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


def median_run(runs: list[tuple[float, dict[str, Any]]]) -> tuple[float, dict[str, Any]]:
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
        # Both warm up first: the JVM's JIT, and the Python workers (and their imports) that
        # the finishable source and sink run in, which the first query pays for.
        plain(spark, inputs, work / "warm-plain", total, args.files_per_batch)
        runtime(spark, inputs, work / "warm-runtime", total, args.files_per_batch)
        plain_runs: list[tuple[float, dict[str, Any]]] = []
        runtime_runs: list[tuple[float, dict[str, Any]]] = []
        for round_ in range(args.rounds):  # alternating, so drift on a shared machine evens out
            plain_runs.append(
                plain(spark, inputs, work / f"plain-{round_}", total, args.files_per_batch)
            )
            runtime_runs.append(
                runtime(spark, inputs, work / f"runtime-{round_}", total, args.files_per_batch)
            )
        plain_rate, plain_phases = median_run(plain_runs)
        runtime_rate, runtime_phases = median_run(runtime_runs)
        stop_s, stop_batch = stop_latency(spark, inputs, work, 2, drain=False)
        drain_s, drain_batch = stop_latency(spark, inputs, work, 2, drain=True)
    result: dict[str, Any] = {
        "benchmark": "streaming",
        "rows": total,
        "files_per_batch": args.files_per_batch,
        "trigger_ms": TRIGGER_MS,
        "plain_rows_per_s": round(plain_rate),
        "runtime_rows_per_s": round(runtime_rate),
        "overhead_ratio": round(plain_rate / runtime_rate, 3),
        "overhead_aim": 1.15,
        "stop_with_savepoint_s": round(stop_s, 2),
        "stop_with_savepoint_batches": round(stop_s / stop_batch, 2),
        "drain_s": round(drain_s, 2),
        "drain_batches": round(drain_s / drain_batch, 2),
        "batch_duration_s": round(statistics.mean([stop_batch, drain_batch]), 3),
        "latency_aim_batches": 2,
        "breakdown": {
            "session_start": round(session_s, 3),
            "plain": plain_phases,
            "runtime": runtime_phases,
        },
    }
    sys.stdout.write(json.dumps(result) + "\n")
    spark.stop()


if __name__ == "__main__":
    main()
