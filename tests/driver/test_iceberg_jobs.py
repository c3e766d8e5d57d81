"""The Iceberg sink end to end: the streaming and batch examples, with their sink line changed to
``sinks.Iceberg`` as the README says, run by `finishable run` with real drivers SIGKILLed.

Each program is the example's own file with exactly one line replaced (the test checks the README
shows that line). Drivers are killed between the batch's data files and the catalog commit (the
``FINISHABLE_ICEBERG_PAUSE`` fault point holds the commit there) and at random moments; the
table's rows, read back through pyiceberg, are compared with a ground truth computed from the
input files without Spark, and every batch id must be in exactly one snapshot.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from finishable.connectors.iceberg import PAUSE_ENV
from finishable.connectors.sinks import BATCH_KEY, RUN_KEY, SINK_KEY, Iceberg
from tests.driver.test_batch_job import BatchJob
from tests.driver.test_streaming_job import Job

pytestmark = pytest.mark.full

ROOT = Path(__file__).parents[2]
STREAMING = ROOT / "examples" / "streaming"
BATCH = ROOT / "examples" / "batch"
sys.path.insert(0, str(STREAMING))
sys.path.insert(0, str(BATCH))
from clicks import window_counts, write_file  # noqa: E402
from orders import ground_truth  # noqa: E402

STREAMING_FILES_LINE = (
    'job.write_stream(counts, sinks.TransactionalFiles(args.output, format="parquet", '
    'name="counts"))'
)
STREAMING_ICEBERG_LINE = (
    'job.write_stream(counts, sinks.Iceberg("clicks.counts", warehouse=args.output, name="counts"))'
)
BATCH_FILES_LINE = (
    'job.write(totals, sinks.TransactionalFiles(output_url, format="parquet", name="totals"))'
)
BATCH_ICEBERG_LINE = (
    'job.write(totals, sinks.Iceberg("orders.totals", warehouse=output_url, name="totals"))'
)
CLICK_FILES = 8
CLICK_ROWS = 400
ORDER_FILES = 12
ORDER_ROWS = 4000  # as test_batch_job's BatchJob generates them


def with_iceberg(example: Path, program: str, old: str, new: str, into: Path) -> Path:
    """A copy of the example's directory whose ``program`` has the one line replaced."""
    shutil.copytree(example, into, ignore=shutil.ignore_patterns("*.yaml", "__pycache__"))
    path = into / program
    source = path.read_text()
    assert source.count(old) == 1, f"{program} no longer has the line the README replaces"
    path.write_text(source.replace(old, new))
    return path


def test_the_readme_shows_the_one_line_changes() -> None:
    readme = (ROOT / "README.md").read_text()
    assert STREAMING_ICEBERG_LINE in readme
    assert BATCH_ICEBERG_LINE in readme


def per_batch_snapshots(sink: Iceberg) -> Counter[int]:
    """How many snapshots of the table's history carry each batch id of ``sink``."""
    table = sink.load_table()
    found: Counter[int] = Counter()
    for snapshot in table.snapshots():
        summary = snapshot.summary
        if summary is not None and summary.get(SINK_KEY) == sink.sink_name:
            found[int(summary[BATCH_KEY])] += 1
    return found


def table_files(warehouse: Path) -> set[str]:
    return {str(p) for p in warehouse.rglob("data/*.parquet")}


def referenced_files(sink: Iceberg) -> set[str]:
    """The data files the table's current snapshot references."""
    tasks = sink.load_table().scan().plan_files()
    return {task.file.file_path.removeprefix("file://") for task in tasks}


def wait_for(what: str, probe: Any, job: Job | BatchJob, timeout: float = 600) -> Any:
    """What ``probe`` returns once it is truthy; fails if the runner ended first."""
    assert job.runner is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        assert job.runner.poll() is None, f"the runner ended before {what}: {job.status()}"
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}: {job.status()}")


def kill_group(pid: int) -> None:
    """SIGKILL a driver with its JVM and Python workers (a driver pod dying)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


# -- streaming ------------------------------------------------------------------------------------


class ClickJob(Job):
    """The streaming example, writing to Iceberg, on CLICK_FILES files one per micro-batch."""

    def __init__(self, tmp: Path, name: str) -> None:
        super().__init__(tmp, name)
        program = with_iceberg(
            STREAMING,
            "clickstream.py",
            STREAMING_FILES_LINE,
            STREAMING_ICEBERG_LINE,
            tmp / "program",
        )
        document = yaml.safe_load(self.manifest.read_text())
        application = document["spec"]["application"]
        application["file"] = str(program)
        application["args"] = [
            f"--input={self.input}",
            f"--output={self.output}",
            "--files-per-batch=1",
        ]
        self.manifest.write_text(yaml.safe_dump(document))
        for index in range(CLICK_FILES):
            write_file(self.input, index, CLICK_ROWS)
        self.sink = Iceberg("clicks.counts", warehouse=str(self.output), name="counts")

    def rows(self) -> Counter[tuple[datetime, str]]:
        """Every (window, page) count in the table; a window seen twice is a duplicate."""
        seen: Counter[tuple[datetime, str]] = Counter()
        values: Counter[tuple[datetime, str]] = Counter()
        for row in self.sink.read().to_pylist():
            key = (row["window_start"].astimezone(UTC), row["page"])
            seen[key] += 1
            values[key] = row["count"]
        duplicates = [key for key, n in seen.items() if n > 1]
        assert not duplicates, f"windows committed twice: {duplicates[:5]}"
        return values

    def kill_driver_group(self) -> int:
        """SIGKILL the driver's whole process group; the attempt that was killed."""
        attempt = int(self.status().get("attempt", 0))
        kill_group(self.driver_pid())
        return attempt

    def snapshot_count(self) -> int:
        if not (self.output / "catalog.db").exists():
            return 0
        table = self.sink.target.load()
        return 0 if table is None else len(table.snapshots())


@pytest.fixture
def click_jobs() -> Iterator[list[ClickJob]]:
    started: list[ClickJob] = []
    yield started
    for job in started:
        job.cleanup()


def test_streaming_to_iceberg_uninterrupted_equals_the_ground_truth(
    tmp_path: Path, click_jobs: list[ClickJob]
) -> None:
    job = ClickJob(tmp_path, "ice-plain")
    click_jobs.append(job)
    job.run()
    output = job.finish(timeout=600)
    assert "Finished" in output
    assert job.rows() == window_counts(range(CLICK_FILES), CLICK_ROWS)
    batches = per_batch_snapshots(job.sink)
    assert set(batches.values()) == {1}, f"a batch in several snapshots: {batches}"
    assert sorted(batches) == list(range(len(batches)))
    current = job.sink.load_table().current_snapshot()
    assert current is not None and current.summary is not None
    assert str(current.summary.get(RUN_KEY)).endswith("-r1")  # the job's first run
    assert job.status()["phase"] == "Finished"


def test_streaming_driver_killed_before_the_catalog_commit_and_at_random_moments(
    tmp_path: Path, click_jobs: list[ClickJob], monkeypatch: pytest.MonkeyPatch
) -> None:
    seed = int(os.environ.get("FINISHABLE_CRASH_SEED", time.time_ns() % 100_000))
    rng = random.Random(seed)
    pause = tmp_path / "pause"
    pause.mkdir()
    monkeypatch.setenv(PAUSE_ENV, str(pause))  # the runner and its drivers inherit it
    held = 2
    hold = pause / f"counts-{held}.hold"
    hold.touch()
    job = ClickJob(tmp_path, "ice-crash")
    click_jobs.append(job)
    job.run()
    assert job.runner is not None

    # 1. Batch 2's data and manifest files are written, the catalog commit is held: kill.
    wait_for("the held commit", (pause / f"counts-{held}.paused").exists, job)
    orphans = table_files(job.output) - referenced_files(job.sink)
    assert orphans, "the held batch's data files are in the warehouse"
    assert held not in per_batch_snapshots(job.sink)
    killed = job.kill_driver_group()
    hold.unlink()
    job.wait("the next attempt", lambda s: s.get("attempt", 0) > killed, timeout=600)

    # 2. Two kills at random moments, once the table has moved on.
    for _ in range(2):
        before = job.snapshot_count()
        wait_for(
            "a new snapshot or the end",
            lambda b=before: job.snapshot_count() > b or job.runner.poll() is not None,
            job,
        )
        time.sleep(rng.uniform(0.0, 2.0))  # mid-batch, mid-commit or between batches
        if job.runner.poll() is not None:
            break  # finished before this kill: the input is small
        killed = job.kill_driver_group()
        job.wait(
            "the next attempt",
            lambda s, k=killed: s.get("attempt", 0) > k or s.get("phase") == "Finished",
            timeout=600,
        )

    output = job.finish(timeout=600)
    assert "Finished" in output, f"seed {seed}"
    assert job.rows() == window_counts(range(CLICK_FILES), CLICK_ROWS), f"seed {seed}"
    batches = per_batch_snapshots(job.sink)
    assert set(batches.values()) == {1}, f"seed {seed}: a batch in several snapshots: {batches}"
    assert sorted(batches) == list(range(len(batches))), f"seed {seed}"
    assert held in batches
    assert job.status()["restarts"] >= 1


# -- batch ----------------------------------------------------------------------------------------


class OrdersJob(BatchJob):
    """The batch example, writing to Iceberg."""

    def __init__(self, tmp: Path, name: str) -> None:
        super().__init__(tmp, name, files=ORDER_FILES)
        program = with_iceberg(
            BATCH, "aggregate.py", BATCH_FILES_LINE, BATCH_ICEBERG_LINE, tmp / "program"
        )
        document = yaml.safe_load(self.manifest.read_text())
        document["spec"]["application"]["file"] = str(program)
        self.manifest.write_text(yaml.safe_dump(document))
        self.sink = Iceberg("orders.totals", warehouse=str(self.output), name="totals")

    def totals(self) -> dict[str, tuple[int, int]]:
        rows = self.sink.read().to_pylist()
        customers = [row["customer"] for row in rows]
        assert len(customers) == len(set(customers)), "a customer was committed twice"
        return {row["customer"]: (row["orders"], row["amount_cents"]) for row in rows}


@pytest.fixture
def order_jobs() -> Iterator[list[OrdersJob]]:
    started: list[OrdersJob] = []
    yield started
    for job in started:
        job.cleanup()


def test_batch_to_iceberg_survives_driver_kills_mid_run_and_before_the_commit(
    tmp_path: Path, order_jobs: list[OrdersJob], monkeypatch: pytest.MonkeyPatch
) -> None:
    pause = tmp_path / "pause"
    pause.mkdir()
    monkeypatch.setenv(PAUSE_ENV, str(pause))
    hold = pause / "totals-0.hold"
    hold.touch()
    job = OrdersJob(tmp_path / "job", "ice-orders")
    order_jobs.append(job)
    job.run()
    assert job.runner is not None

    job.wait_splits(ORDER_FILES // 2)  # half the input read: kill mid-run
    job.kill_driver()
    job.wait("the second attempt", lambda s: s.get("attempt", 0) >= 2)

    # Every stage done, the output's data files written, the catalog commit held: kill.
    wait_for("the held commit", (pause / "totals-0.paused").exists, job)
    assert table_files(job.output), "the output's data files are in the warehouse"
    assert job.sink.target.load() is None or not per_batch_snapshots(job.sink)
    _attempt, pid = (job.home / "driver.pid").read_text().split()
    kill_group(int(pid))
    hold.unlink()
    output = job.finish(timeout=600)
    assert "Finished" in output

    assert job.totals() == ground_truth(ORDER_FILES, ORDER_ROWS)
    assert per_batch_snapshots(job.sink) == Counter({0: 1}), "one snapshot for the run"
    snapshot = job.sink.load_table().current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert str(snapshot.summary.get(RUN_KEY)).endswith("-r1")  # the job's first run
    assert job.cli_status()["restarts"] == 2
