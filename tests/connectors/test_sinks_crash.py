"""A driver writing to ``TransactionalFiles`` is killed with SIGKILL at random moments and
restarted on the same checkpoint: the published output has every input row exactly once.

The child is this file run as a script: a real PySpark driver (its own JVM and Python workers in
one process group, which is killed as a whole, as when a driver pod dies).
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from finishable.connectors.sink_store import STAGING_DIR
from finishable.connectors.sinks import SENTINEL_COLUMN, SENTINEL_EVENT_TIME, TransactionalFiles

pytestmark = pytest.mark.full
log = logging.getLogger(__name__)

SCHEMA = f"id long, ts timestamp, name string, {SENTINEL_COLUMN} boolean"
FILES = 24
ROWS_PER_FILE = 25
SINK_NAME = "crashy"


def _child(source: str, output: str, checkpoint: str) -> int:
    """The driver program: what a user's job does, minus the lifecycle around it."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("sink-crash-child")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    sink = TransactionalFiles(output, format="parquet", name=SINK_NAME)
    sink.clean_staging()  # what the job runtime does before each run
    frame = (
        spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(source).repartition(2)
    )
    query = (
        sink.write_stream(frame)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()
    return 0


def _make_input(directory: Path) -> set[tuple[int, str]]:
    directory.mkdir(parents=True)
    truth: set[tuple[int, str]] = set()
    for index in range(FILES):
        lines = []
        for offset in range(ROWS_PER_FILE):
            ident = index * ROWS_PER_FILE + offset
            lines.append(
                json.dumps({"id": ident, "ts": "2024-05-01T00:00:00Z", "name": f"n{ident}"})
            )
            truth.add((ident, f"n{ident}"))
        if index % 5 == 4:  # now and then a drain sentinel, which must never be published
            sentinel = {"id": -index, "ts": SENTINEL_EVENT_TIME.isoformat(), SENTINEL_COLUMN: True}
            lines.append(json.dumps(sentinel))
        path = directory / f"part-{index:03d}.json"
        path.write_text("\n".join(lines) + "\n")
        stamp = time.time() - 1000 + index
        os.utime(path, (stamp, stamp))
    return truth


class Driver:
    """One run of the child in its own process group."""

    def __init__(self, tmp: Path, run: int) -> None:
        self.log_path = tmp / f"child-{run}.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                __file__,
                str(tmp / "in"),
                str(tmp / "out"),
                str(tmp / "cp"),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")},
                "PYSPARK_PYTHON": sys.executable,
            },
        )

    def kill(self) -> None:
        """SIGKILL the whole group: the Python driver, its JVM and the Python workers."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)
        self._log.close()

    def wait(self, timeout: float) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        finally:
            self.kill()
        return code

    def tail(self) -> str:
        lines = self.log_path.read_text(errors="replace").replace("\r", "\n").splitlines()
        return "\n".join(line for line in lines if line.strip() and "[Stage" not in line)[-6000:]


def test_sigkill_at_random_moments_then_restart_is_exactly_once(tmp_path: Path) -> None:
    seed = int(os.environ.get("FINISHABLE_CRASH_SEED", time.time_ns() % 100_000))
    rng = random.Random(seed)
    log.info("crash test seed %d (set FINISHABLE_CRASH_SEED to replay it)", seed)
    truth = _make_input(tmp_path / "in")
    sink = TransactionalFiles(str(tmp_path / "out"), format="parquet", name=SINK_NAME)

    kills = 0
    for run in range(2):
        driver = Driver(tmp_path, run)
        try:
            before = len(sink.committed_batches()) if (tmp_path / "out").exists() else 0
            target = before + rng.randint(1, 5)
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and driver.process.poll() is None:
                if len(sink.committed_batches()) >= target:
                    break
                time.sleep(0.05)
            assert driver.process.poll() is None, f"seed {seed}: child ended early\n{driver.tail()}"
            assert time.monotonic() < deadline, f"seed {seed}: no progress\n{driver.tail()}"
            time.sleep(rng.uniform(0.0, 0.6))  # land anywhere in a batch, not just after a publish
        finally:
            driver.kill()
        kills += 1
        committed = sink.committed_batches()
        dirs = {n for n in sink.store.list_names("") if n.startswith("batch=")}
        log.info(
            "kill %d: %d batches committed, staged leftovers for batches %s, unpublished batch "
            "directories %s",
            kills,
            len(committed),
            sink.store.staged_batches(),
            sorted(dirs - {f"batch={b:020d}" for b in committed}),
        )
        assert len(sink.committed_batches()) < FILES, f"seed {seed}: finished before the kill"

    final = Driver(tmp_path, 99)
    code = final.wait(timeout=600)
    assert code == 0, f"seed {seed}: the restarted driver failed\n{final.tail()}"

    assert kills == 2
    # Batch ids are contiguous; there may be fewer batches than files: a kill between the file
    # source's seen-files log and Spark's offsets log makes the restart plan two files in one.
    batches = sink.committed_batches()
    assert batches == list(range(len(batches)))
    assert FILES - 2 <= len(batches) <= FILES
    table = sink.read_committed()
    got = sorted(zip(table.column("id").to_pylist(), table.column("name").to_pylist(), strict=True))
    assert got == sorted(truth), f"seed {seed}: loss or duplicates"
    assert table.column_names == ["id", "ts", "name"]
    assert pa.compute.min(table.column("id")).as_py() >= 0  # no sentinel published
    # Nothing but published files under batch directories, nothing left staged.
    manifests = [sink.manifest(b) for b in sink.committed_batches()]
    listed = {f.path for m in manifests if m is not None for f in m.files}
    on_disk = {
        name
        for name in sink.store.list_names("", recursive=True)
        if name.startswith("batch=") and not name.endswith("/") and "." in name.rsplit("/", 1)[-1]
    }
    assert on_disk == listed
    staged = [n for n in sink.store.list_names(STAGING_DIR, recursive=True) if "part-" in n]
    assert staged == []


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    sys.exit(_child(*sys.argv[1:4]))
