"""The batch runtime: shuffle I/O, the cost of a driver crash, staged vs plain PySpark.

1. Shuffle I/O: a real ``finishable shuffle-server`` process on loopback; one Arrow partition of
   ``--mb`` MB is put (streamed, checksummed, committed) and got back (checksum verified), next to
   writing the same IPC bytes to a local file (with fsync, as a commit does) and reading them.
2. A driver crash at 50%: the batch example (``examples/batch/aggregate.py``, on ``--crash-files``
   files: on Spark's own readers 96 files end before a standby is warm) run by
   ``finishable run`` from the command line, uninterrupted, and again with the driver SIGKILLed
   when half the splits are finished. Both totals are divided by the uninterrupted run; "rerun from
   scratch" is what the crash would cost without recovery (the time until the crash plus a whole
   run). Then both again with a warm standby driver (``spec.recovery.standby``; the kill waits
   until the standby is warm): ``takeover_s`` is from the kill to the new attempt's first tasks
   running (``restart_to_tasks_s`` the same without a standby); and once more with
   ``maxAttempts: 1``, so that no new standby starts beside the promoted driver.
3. Staged vs plain: the same computation (parse and filter JSON orders, total by customer, parquet
   out) in one warm Spark session, as plain PySpark, as three floors (the same stages without the
   runtime: ``native_floor`` staged as parquet by Spark's own writers and readers, where no row
   passes through Python; ``jvm_read_floor`` read by Spark's JSON reader but staged by Python
   writers; ``floor`` through bare Python data sources and ``mapInArrow`` writers, staged as
   Arrow files on local disk: what any Python data source pipeline pays on Spark) and as a
   ``FinishableJob`` with two stages on two shuffle servers, its files read by Spark's own
   reader under the coordinator (``staged``) and by Python reader slots
   (``staged_python_path``); medians of alternating rounds after
   a warm-up of each; again on ``--larger`` times the input (``x10``), where fixed costs no
   longer hide per-row ones.

Prints one JSON line; its ``breakdown`` says where the time went: the phases each driver
attempt logs (``finishable.timings``: session start, replay, listing, planning, each stage's
rounds, commit; the tasks' input and output seconds), read back from the driver logs of the
``finishable run`` jobs (with the runner's part, the new attempt's spawn after the kill) and from
the job object in session; plain PySpark's planning and job.

    .venv/bin/python benchmarks/batch.py [--files 96] [--rows 40000] [--mb 128] [--rounds 3]
                                         [--larger 10] [--crash-files 384] [--staged-only]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute
import pyarrow.parquet
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "batch"
sys.path.insert(0, str(EXAMPLE))

from aggregate import SCHEMA, build, paid_orders, totals_by_customer  # noqa: E402 - the example
from orders import write_files  # noqa: E402

from finishable.api.jobconfig import JobConfig  # noqa: E402
from finishable.local.shuffle import LocalShuffle  # noqa: E402
from finishable.shuffle.client import ShuffleClient  # noqa: E402
from finishable.timings import attempt_breakdown, breakdown, parse_timings  # noqa: E402

# -- 1. shuffle server I/O -------------------------------------------------------------------------


def arrow_partition(megabytes: int) -> pa.Table:
    rows = megabytes * 1024 * 1024 // 48
    return pa.table(
        {
            "key": pa.array(range(rows), pa.int64()),
            "value": pa.array(range(rows), pa.float64()),
            "text": pa.compute.binary_join_element_wise(
                "row-", pa.array(range(rows), pa.int64()).cast(pa.string()), ""
            ),
        }
    )


def ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=65_536)
    return bytes(sink.getvalue().to_pybytes())


def _chunks(data: bytes, size: int = 1 << 20) -> Iterator[bytes]:
    view = memoryview(data)
    for start in range(0, len(data), size):
        yield bytes(view[start : start + size])


def shuffle_io(work: Path, megabytes: int, rounds: int) -> dict[str, float]:
    table = arrow_partition(megabytes)
    data = ipc_bytes(table)
    size_mb = len(data) / 1e6
    shuffle = LocalShuffle(work / "io", "bench", 1, "10m")
    urls = shuffle.ensure()
    client = ShuffleClient(urls[0], shuffle.token)
    put, get, disk_write, disk_read = [], [], [], []
    try:
        for attempt in range(rounds):
            started = time.perf_counter()
            client.put("io", attempt, "a1", _chunks(data))
            put.append(size_mb / (time.perf_counter() - started))
            started = time.perf_counter()
            rows = sum(batch.num_rows for batch in client.get("io", attempt))
            get.append(size_mb / (time.perf_counter() - started))
            assert rows == table.num_rows
            path = work / f"disk-{attempt}.arrow"
            started = time.perf_counter()
            with path.open("wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            disk_write.append(size_mb / (time.perf_counter() - started))
            started = time.perf_counter()
            with path.open("rb") as source:  # the bytes, read and decoded, as a get does
                rows = sum(b.num_rows for b in pa.ipc.open_stream(source.read()))
            disk_read.append(size_mb / (time.perf_counter() - started))
    finally:
        client.close()
        shuffle.stop()
    return {
        "partition_mb": round(size_mb, 1),
        "shuffle_put_mb_s": round(statistics.median(put), 1),
        "shuffle_get_mb_s": round(statistics.median(get), 1),
        "disk_write_mb_s": round(statistics.median(disk_write), 1),
        "disk_read_mb_s": round(statistics.median(disk_read), 1),
    }


# -- 2. a driver crash at 50% --------------------------------------------------------------------


def manifest(
    work: Path,
    name: str,
    inputs: Path,
    files: int,
    rows: int,
    *,
    standby: bool = False,
    max_attempts: int = 3,
) -> Path:
    """The example's own manifest (examples/batch/local.yaml), pointed at this run's files;
    ``standby``: with ``spec.recovery.standby``."""
    import yaml  # noqa: PLC0415

    document = yaml.safe_load((EXAMPLE / "local.yaml").read_text())
    document["metadata"]["name"] = name
    document["spec"]["recovery"].update(standby=standby, maxAttempts=max_attempts)
    application = document["spec"]["application"]
    application["file"] = str(EXAMPLE / "aggregate.py")
    application["args"] = [
        f"--input={inputs}",
        f"--output={work / name / 'output'}",
        f"--files={files}",
        f"--rows={rows}",
    ]
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def run_job(
    work: Path,
    name: str,
    inputs: Path,
    files: int,
    rows: int,
    *,
    crash: bool,
    standby: bool = False,
    max_attempts: int = 3,
) -> tuple[float, float, dict[str, Any]]:
    """Seconds from `finishable run` to its exit, when the driver was killed (0: never), and
    where the time went (:func:`timeline`). With ``standby`` the kill waits for the standby to
    be warm, and the timeline has ``takeover_s``: from the kill to the new attempt's first
    tasks running."""
    path = manifest(work, name, inputs, files, rows, standby=standby, max_attempts=max_attempts)
    state = work / "state"
    started = time.monotonic()
    started_epoch = time.time()
    spawned: dict[int, float] = {}
    killed_epoch = 0.0
    runner = subprocess.Popen(
        [sys.executable, "-m", "finishable.cli", "run", str(path), "--state-dir", str(state)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    crashed_at = 0.0
    if crash:
        status = state / name / "status.json"
        while True:
            try:
                progress = json.loads(status.read_text()).get("coordinator") or {}
            except (OSError, ValueError):
                progress = {}
            _note_spawn(state / name, spawned)
            warm = not standby or _logged(state / name / "driver-2.log", STANDBY_READY)
            if progress.get("splitsFinished", 0) >= files // 2 and warm:
                break
            if runner.poll() is not None:
                what = "half its splits and a warm standby" if standby else "half its splits"
                raise RuntimeError(
                    f"the job ended before {what} (give it more input: --files, --rows): "
                    f"see {state / name}"
                )
            time.sleep(0.05)
        crashed_at = time.monotonic() - started
        _attempt, pid = (state / name / "driver.pid").read_text().split()
        os.kill(int(pid), signal.SIGKILL)
        killed_epoch = time.time()
    while runner.poll() is None:
        _note_spawn(state / name, spawned)
        time.sleep(0.05)
    exited_epoch = time.time()
    if runner.wait(1800) != 0:
        raise RuntimeError(f"the job {name} failed: see {state / name}")
    _note_spawn(state / name, spawned)
    timeline = {"run_to_driver_spawn": round(spawned.get(1, started_epoch) - started_epoch, 3)}
    for attempt, spawned_at in sorted(spawned.items()):
        log_path = state / name / f"driver-{attempt}.log"
        document = parse_timings(log_path.read_text(errors="replace").splitlines())
        if attempt > 1 and crash and not standby:
            timeline["kill_to_driver_spawn"] = round(spawned_at - killed_epoch, 3)
        if attempt == 2 and crash:
            running = _first_tasks_running(log_path)
            if running is not None:
                timeline["takeover_s"] = round(running - killed_epoch, 3)
        if document is None:  # the killed attempt logs no timings
            timeline[f"attempt_{attempt}"] = {"killed_after": round(killed_epoch - spawned_at, 3)}
            continue
        ended = spawned.get(attempt + 1, exited_epoch)
        timeline[f"attempt_{attempt}"] = attempt_breakdown(
            document, spawned_at=spawned_at, exited_at=ended
        )
    return time.monotonic() - started, crashed_at, timeline


STANDBY_READY = "Spark is warm; waiting for the order to take over"
_RUNNING_TASKS = re.compile(
    r"^(\S+ \S+),(\d+) INFO finishable\.driver\.batch\.rounds: stage .*: running"
)


def _logged(path: Path, text: str) -> bool:
    try:
        return text in path.read_text(errors="replace")
    except OSError:
        return False


def _first_tasks_running(log_path: Path) -> float | None:
    """When a driver attempt first ran tasks (epoch seconds), from its log's local timestamps."""
    for line in log_path.read_text(errors="replace").splitlines():
        match = _RUNNING_TASKS.match(line)
        if match:
            stamp = time.mktime(time.strptime(match[1], "%Y-%m-%d %H:%M:%S"))
            return stamp + int(match[2]) / 1000
    return None


def _note_spawn(job_dir: Path, spawned: dict[int, float]) -> None:
    """When each driver attempt was spawned: the runner writes ``driver.pid`` right after."""
    try:
        path = job_dir / "driver.pid"
        attempt = int(path.read_text().split()[0])
        if attempt not in spawned:
            spawned[attempt] = path.stat().st_mtime
    except (OSError, ValueError, IndexError):
        pass


def crash_figures(
    work: Path, inputs: Path, files: int, rows: int, phases: dict[str, Any]
) -> dict[str, float]:
    plain, _, uninterrupted = run_job(work, "uninterrupted", inputs, files, rows, crash=False)
    crashed, half, recovered = run_job(work, "crashed", inputs, files, rows, crash=True)
    warm, _, warm_phases = run_job(
        work, "standby-uninterrupted", inputs, files, rows, crash=False, standby=True
    )
    taken_over, _, takeover = run_job(
        work, "standby-crashed", inputs, files, rows, crash=True, standby=True
    )
    # The same with maxAttempts: 1, so that no new standby starts beside the promoted driver:
    # what the takeover costs without a second JVM warming up on the same cores.
    alone, _, takeover_alone = run_job(
        work, "standby-crashed-alone", inputs, files, rows, crash=True, standby=True, max_attempts=1
    )
    phases["uninterrupted"] = uninterrupted
    phases["crash_at_50pct"] = {"killed_at": round(half, 3), **recovered}
    phases["standby_uninterrupted"] = warm_phases
    phases["standby_crash_at_50pct"] = takeover
    phases["standby_crash_no_new_standby"] = takeover_alone
    status = json.loads((work / "state" / "crashed" / "status.json").read_text())
    return {
        "uninterrupted_s": round(plain, 1),
        "crash_at_50pct_s": round(crashed, 1),
        "crash_ratio": round(crashed / plain, 2),
        "restart_overhead_s": round(crashed - plain, 1),
        "rerun_from_scratch_ratio": round((half + plain) / plain, 2),
        "tasks_skipped": status["recovery"]["tasksSkipped"],
        "tasks_rerun": status["recovery"]["tasksRerun"],
        "restart_to_tasks_s": recovered.get("takeover_s"),
        "standby_uninterrupted_s": round(warm, 1),
        "standby_crash_at_50pct_s": round(taken_over, 1),
        "standby_crash_ratio": round(taken_over / plain, 2),
        "standby_crash_ratio_own": round(taken_over / warm, 2),
        "takeover_s": takeover.get("takeover_s"),
        "standby_crash_no_new_standby_ratio_own": round(alone / warm, 2),
        "takeover_no_new_standby_s": takeover_alone.get("takeover_s"),
    }


# -- 3. staged vs plain PySpark ------------------------------------------------------------------


def plain_pyspark(spark: Any, inputs: Path, output: Path) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    orders = spark.read.schema(SCHEMA).json(str(inputs))
    totals = totals_by_customer(paid_orders(orders))
    planned = time.perf_counter()
    totals.write.mode("overwrite").parquet(str(output))
    ended = time.perf_counter()
    phases = {"planning": planned - started, "job": ended - planned}
    return ended - started, breakdown(phases, wall=ended - started)


# -- the floor: the same stages through bare Python data sources, nothing of the runtime -----------


class BareReader(DataSourceReader):
    """Lines of JSON files (``slots`` partitions of whole files) or rows of Arrow IPC files (one
    partition a file)."""

    def __init__(self, directory: str, pattern: str, slots: int) -> None:
        self.files = sorted(str(path) for path in Path(directory).glob(pattern))
        self.slots = slots

    def partitions(self) -> list[InputPartition]:
        if self.slots <= 0:
            return [InputPartition([path]) for path in self.files]
        return [InputPartition(self.files[slot :: self.slots]) for slot in range(self.slots)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        for path in partition.value:
            if path.endswith(".arrow"):
                with pa.ipc.open_file(path) as reader:
                    yield from (reader.get_batch(i) for i in range(reader.num_record_batches))
                continue
            text = pa.scalar(Path(path).read_bytes(), type=pa.large_string())
            lines = pa.compute.split_pattern(pa.array([text]), "\n").flatten()
            lines = lines.filter(pa.compute.greater(pa.compute.utf8_length(lines), 0))
            yield pa.RecordBatch.from_arrays([lines.cast(pa.string())], names=["value"])


class BareFiles(DataSource):
    """``bare_files``: JSON lines as ``value`` (``schema`` unset) or staged Arrow IPC files."""

    @classmethod
    def name(cls) -> str:
        return "bare_files"

    def schema(self) -> str:
        return self.options.get("schema", "value STRING")

    def reader(self, schema: Any) -> BareReader:
        del schema
        arrow = "schema" in self.options
        slots = 0 if arrow else int(self.options["slots"])
        return BareReader(self.options["path"], "*.arrow" if arrow else "*.json", slots)


def bare_write(frame: Any, directory: Path, file_format: str) -> None:
    """Each task's rows as one file in ``directory``, written by a Python worker (as stage
    writers and the sink's writers are)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = str(directory)

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        table = pa.Table.from_batches(list(batches))
        context = TaskContext.get()
        part = f"{target}/part-{context.partitionId() if context else 0:05d}.{file_format}"
        if file_format == "arrow":
            with pa.ipc.new_file(part, table.schema) as writer:
                writer.write_table(table)
        else:
            pa.parquet.write_table(table, part)
        yield pa.RecordBatch.from_pydict({"rows": [table.num_rows]})

    frame.mapInArrow(write, "rows long").collect()


def bare_pipeline(spark: Any, inputs: Path, output: Path) -> tuple[float, dict[str, Any]]:
    """The staged job's work without the runtime: read, ``paid`` and ``totals`` staged as Arrow
    files on local disk and read back, the totals written as parquet; all through Python."""
    started = time.perf_counter()
    spark.dataSource.register(BareFiles)
    slots = str(2 * spark.sparkContext.defaultParallelism)
    lines = spark.read.format(BareFiles.name()).options(path=str(inputs), slots=slots).load()
    # The runtime's optimizer barrier, so that each record is parsed once (fileformats.py).
    parsed = F.when(F.spark_partition_id() >= 0, F.from_json("value", SCHEMA))
    paid = paid_orders(lines.select(parsed.alias("order")).select("order.*"))
    bare_write(paid, output / "paid", "arrow")
    staged_paid = (
        spark.read.format(BareFiles.name())
        .options(path=str(output / "paid"), schema="customer STRING, amount_cents LONG")
        .load()
    )
    bare_write(totals_by_customer(staged_paid), output / "totals", "arrow")
    totals = (
        spark.read.format(BareFiles.name())
        .options(
            path=str(output / "totals"),
            schema="customer STRING, orders LONG NOT NULL, amount_cents LONG",
        )
        .load()
    )
    bare_write(totals, output / "published", "parquet")
    elapsed = time.perf_counter() - started
    return elapsed, {"seconds": round(elapsed, 3)}


def jvm_read_floor(spark: Any, inputs: Path, output: Path) -> tuple[float, dict[str, Any]]:
    """The floor with Spark's own readers (issue 44, item 1 alone): JSON read by Spark, each stage
    written by Python writers (parquet files on local disk, as ``bare_write``) and read back by
    Spark's parquet reader."""
    started = time.perf_counter()
    orders = spark.read.schema(SCHEMA).json(str(inputs))
    bare_write(paid_orders(orders), output / "paid", "parquet")
    paid = spark.read.parquet(str(output / "paid"))
    bare_write(totals_by_customer(paid), output / "totals", "parquet")
    bare_write(spark.read.parquet(str(output / "totals")), output / "published", "parquet")
    elapsed = time.perf_counter() - started
    return elapsed, {"seconds": round(elapsed, 3)}


def native_floor(spark: Any, inputs: Path, output: Path) -> tuple[float, dict[str, Any]]:
    """The floor of a runtime whose rows never pass through Python (issue 44, items 1 and 2): the
    same stages, each written by Spark's own parquet writer on local disk and read back by its
    reader, then published; plain PySpark plus the cost of staging."""
    started = time.perf_counter()
    orders = spark.read.schema(SCHEMA).json(str(inputs))
    paid_orders(orders).write.parquet(str(output / "paid"))
    paid = spark.read.parquet(str(output / "paid"))
    totals_by_customer(paid).write.parquet(str(output / "totals"))
    spark.read.parquet(str(output / "totals")).write.parquet(str(output / "published"))
    elapsed = time.perf_counter() - started
    return elapsed, {"seconds": round(elapsed, 3)}


def staged(
    spark: Any,
    work: Path,
    name: str,
    inputs: Path,
    *,
    urls: list[str],
    token: str,
    reader: str = "jvm",
) -> tuple[float, dict[str, Any]]:
    """The batch example as a FinishableJob; ``reader``: its data path (spark.finishable.dataPath:
    ``jvm``, Spark's own reader under the coordinator and JVM stage writers, or ``python``)."""
    from finishable import FinishableJob  # noqa: PLC0415
    from finishable.connectors.jvm import DATA_PATH_CONF  # noqa: PLC0415

    spark.conf.set(DATA_PATH_CONF, reader)

    config = JobConfig.model_validate(
        {
            "name": name,
            "spec": {
                "mode": "Batch",
                "application": {"file": "benchmarks/batch.py"},
                "recovery": {"snapshotMinPause": "1s"},
            },
            "stateUrl": str(work / name / "state"),
            "workDir": str(work / name / "work"),
            "control": "Local",
            "controlDir": str(work / name / "control"),
            "shuffleUrls": urls,
        }
    )
    started = time.perf_counter()
    job = FinishableJob(config, spark=spark, token=token)
    build(job, str(inputs), str(work / name / "output"))
    job.run()
    elapsed = time.perf_counter() - started
    return elapsed, breakdown(job.timings.seconds(), wall=elapsed)


FLOORS = {"native_floor": native_floor, "jvm_read_floor": jvm_read_floor, "floor": bare_pipeline}
"""The staged job's work without the runtime, from rows that never pass through Python to rows
that pass through Python readers and writers at every stage."""


def staged_figures(
    work: Path, inputs: Path, rounds: int, phases: dict[str, Any]
) -> dict[str, float]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session_started = time.perf_counter()
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session_s = time.perf_counter() - session_started
    shuffle = LocalShuffle(work / "servers", "bench", 2, "10m")
    urls = shuffle.ensure()
    size = inputs.name
    runs: dict[str, list[tuple[float, dict[str, Any]]]] = {
        "plain_pyspark": [],
        "staged": [],
        "staged_python_path": [],
    }
    runs.update({floor: [] for floor in FLOORS})
    warm: dict[str, Any] = {}

    def once(index: str) -> dict[str, tuple[float, dict[str, Any]]]:
        """Every way of doing the job, one after the other (alternating, so that a slow spell of
        the machine does not fall on one of them only)."""
        done = {"plain_pyspark": plain_pyspark(spark, inputs, work / f"plain-{size}-{index}")}
        for floor, pipeline in FLOORS.items():
            done[floor] = pipeline(spark, inputs, work / f"{floor}-{size}-{index}")
        done["staged"] = staged(
            spark, work, f"staged-{size}-{index}", inputs, urls=urls, token=shuffle.token
        )
        done["staged_python_path"] = staged(
            spark,
            work,
            f"staged-python-{size}-{index}",
            inputs,
            urls=urls,
            token=shuffle.token,
            reader="python",
        )
        return done

    try:
        warm = {name: run[1] for name, run in once("warm").items()}
        for index in range(rounds):
            for name, run in once(str(index)).items():
                runs[name].append(run)
    finally:
        shuffle.stop()
        spark.stop()
    seconds = {name: _median_run(done) for name, done in runs.items()}
    plain_s = seconds["plain_pyspark"][0]
    staged_s = seconds["staged"][0]
    phases["session_start"] = round(session_s, 3)
    phases["plain_pyspark"] = seconds["plain_pyspark"][1]
    phases["staged"] = seconds["staged"][1]
    phases["staged_python_path"] = seconds["staged_python_path"][1]
    phases["warm_up"] = warm
    figures = {f"{name}_s": round(run[0], 2) for name, run in seconds.items()}
    figures.update({f"{floor}_ratio": round(seconds[floor][0] / plain_s, 2) for floor in FLOORS})
    figures["staged_ratio"] = round(staged_s / plain_s, 2)
    figures["staged_python_path_ratio"] = round(seconds["staged_python_path"][0] / plain_s, 2)
    figures["staged_over_floor"] = round(staged_s / seconds["floor"][0], 2)
    return figures


def _median_run(runs: list[tuple[float, dict[str, Any]]]) -> tuple[float, dict[str, Any]]:
    """The median seconds of ``runs`` and the breakdown of the run that took them (the upper
    middle one of an even count)."""
    ordered = sorted(runs, key=lambda run: run[0])
    seconds = statistics.median(run[0] for run in ordered)
    return seconds, ordered[len(ordered) // 2][1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=96)
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--mb", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--larger",
        type=int,
        default=10,
        help="also compare staged, floors and plain on this many times the input (0: not)",
    )
    parser.add_argument(
        "--crash-files",
        type=int,
        default=384,
        help="input files of the crash runs (part 2): a run must outlast a standby's warm-up",
    )
    parser.add_argument(
        "--staged-only",
        action="store_true",
        help="only part 3, staged vs plain (minutes instead of most of an hour)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="finishable-batch-bench-"))
    try:
        inputs = work / "input"
        write_files(inputs, args.files, args.rows)
        result: dict[str, Any] = {"benchmark": "batch", "files": args.files, "rows": args.rows}
        phases: dict[str, Any] = {}
        if not args.staged_only:
            result.update(shuffle_io(work, args.mb, args.rounds))
            # The standby runs kill the driver once half the input is read and the standby is
            # warm (a JVM and a Spark session, ~10-20 s here): the job must outlast that.
            crash_inputs = work / "input-crash"
            write_files(crash_inputs, args.crash_files, args.rows)
            result["crash_files"] = args.crash_files
            result.update(crash_figures(work, crash_inputs, args.crash_files, args.rows, phases))
        result.update(staged_figures(work, inputs, args.rounds, phases))
        if args.larger > 1:  # fixed costs hide per-row costs at the default size
            larger = work / f"input-x{args.larger}"
            write_files(larger, args.files * args.larger, args.rows)
            at_scale: dict[str, Any] = {}
            result[f"x{args.larger}"] = staged_figures(work, larger, args.rounds, at_scale)
            phases[f"x{args.larger}"] = at_scale
        result["aims"] = {
            "standby_crash_ratio": 1.25,
            "takeover_s": 3.0,
            "staged_ratio": 1.2,
        }
        result["breakdown"] = phases
        sys.stdout.write(json.dumps(result) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
