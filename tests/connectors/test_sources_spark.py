"""The finishable sources in real Structured Streaming queries (local[2]); the test is the driver.

Each test serves the sources' coordinators on an endpoint, reports commits from a query listener
(as the runtime will), writes with an idempotent ``foreachBatch`` (rows kept per batch id, a
replayed batch overwrites its own) and compares with a ground truth computed in plain Python.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.functions import col, window
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from finishable.connectors.sinks import SENTINEL_EVENT_TIME
from finishable.connectors.sources import Files, Range, Source
from finishable.connectors.streaming.source import data_source_name
from finishable.coordinator.endpoint import DriverEndpoint
from finishable.driver.checkpoint_log import CheckpointLog
from finishable.driver.source_coordinator import RestorePoint, SourceCoordinator
from finishable.driver.streaming.boundary import await_batch_boundary

pytestmark = pytest.mark.quick

TOKEN = "spark-test-token"
TRIGGER = "0.2 seconds"
SCHEMA = StructType(
    [
        StructField("id", LongType(), True),
        StructField("page", StringType(), True),
        StructField("ts", TimestampType(), True),
    ]
)
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def local(moment: datetime) -> datetime:
    """A UTC instant as PySpark's collect() shows a TimestampType: naive, in local time."""
    return moment.astimezone().replace(tzinfo=None)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


class Driver(StreamingQueryListener):
    """Plays the runtime: coordinators on an endpoint, commits reported from the listener."""

    def __init__(self, spark: SparkSession, endpoint: DriverEndpoint) -> None:
        self.spark = spark
        self.endpoint = endpoint
        self.coordinators: dict[str, SourceCoordinator] = {}
        self.errors: list[BaseException] = []
        self.progress_batches: list[int] = []
        self.lock = threading.Lock()

    def add(
        self, name: str, source: Source, restore: RestorePoint | None = None
    ) -> SourceCoordinator:
        old = self.coordinators.pop(name, None)
        if old is not None:  # a driver restart: the old coordinator is gone
            self.endpoint.remove(name)
            old.close()
        coordinator = SourceCoordinator(name, source)
        coordinator.start(restore)
        self.endpoint.add(coordinator.host)
        self.coordinators[name] = coordinator
        return coordinator

    def stream(self, name: str) -> DataFrame:
        return self.coordinators[name].stream(self.spark, self.endpoint.url, TOKEN)

    def begin(self, attempt: int, checkpoint: Path) -> None:
        for coordinator in self.coordinators.values():
            coordinator.begin_run(attempt, str(checkpoint))

    # StreamingQueryListener: runs in the driver process (a py4j callback thread)
    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's name
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802 - Spark's name
        batch = int(event.progress.batchId)
        with self.lock:
            self.progress_batches.append(batch)
            for coordinator in self.coordinators.values():
                if coordinator.attempt is None:
                    continue
                try:
                    coordinator.on_batch_committed(batch)
                except BaseException as error:  # surfaced by the test, not lost in py4j
                    self.errors.append(error)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802 - Spark's name
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802 - Spark's name
        pass

    def stop_at_boundary(self, query: StreamingQuery, checkpoint: Path) -> int:
        coordinators = list(self.coordinators.values())
        for coordinator in coordinators:
            coordinator.suspend()
        last = await_batch_boundary(coordinators, CheckpointLog(str(checkpoint)), timeout=300)
        query.stop()
        return last


@pytest.fixture
def driver(spark: SparkSession) -> Iterator[Driver]:
    endpoint = DriverEndpoint(TOKEN)
    endpoint.start()
    played = Driver(spark, endpoint)
    spark.streams.addListener(played)
    try:
        yield played
    finally:
        spark.streams.removeListener(played)
        for query in spark.streams.active:
            query.stop()
        endpoint.stop()
        for coordinator in played.coordinators.values():
            coordinator.close()
    assert played.errors == []


class BatchSink:
    """foreachBatch target, idempotent per batch id like a two-phase-commit sink."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.batches: dict[int, list[tuple[Any, ...]]] = {}
        self.fail_on = fail_on
        self.lock = threading.Lock()

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        rows = [tuple(row) for row in frame.collect()]
        if self.fail_on is not None and batch_id == self.fail_on:
            self.fail_on = None
            raise RuntimeError(f"injected failure in batch {batch_id}")
        with self.lock:
            self.batches[batch_id] = rows

    def rows(self) -> list[tuple[Any, ...]]:
        with self.lock:
            return [row for batch in sorted(self.batches) for row in self.batches[batch]]


def start(frame: DataFrame, sink: BatchSink, checkpoint: Path) -> StreamingQuery:
    return (
        frame.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=TRIGGER)
        .start()
    )


def assert_exactly_once(values: list[Any], expected: set[Any]) -> None:
    counts = Counter(values)
    duplicates = {value: n for value, n in counts.items() if n > 1}
    assert not duplicates, f"duplicates: {sorted(duplicates)[:10]}"
    missing = expected - set(counts)
    assert not missing, f"lost: {sorted(missing)[:10]} ({len(missing)} in all)"
    assert set(counts) == expected


# ---------------------------------------------------------------------- tests


@pytest.mark.full
def test_stop_at_a_batch_boundary_and_resume_after_a_driver_restart(
    driver: Driver, tmp_path: Path
) -> None:
    source = Range(0, 3000, split_size=100, max_splits_per_batch=3)
    checkpoint = tmp_path / "checkpoint"
    sink = BatchSink()
    first = driver.add("numbers", source)
    frame = driver.stream("numbers")
    driver.begin(1, checkpoint)
    query = start(frame, sink, checkpoint)
    wait_for(lambda: len(sink.batches) >= 3, "three batches")
    last = driver.stop_at_boundary(query, checkpoint)
    before = len(sink.rows())
    assert 0 < before < 3000
    assert first.last_snapshot.checkpoint_id == last
    # Every batch read exactly the rows of the splits its offset names.
    log = CheckpointLog(str(checkpoint))
    for batch, rows in sink.batches.items():
        offset = log.source_offset(batch, "numbers")
        assert offset is not None
        named = {v for split in offset.splits for v in range(split.start, split.end)}  # type: ignore[attr-defined]
        assert {row[0] for row in rows} == named

    # The driver restarts: a new coordinator from the snapshot of the boundary batch.
    second = driver.add("numbers", source, restore=first.last_snapshot)
    driver.begin(2, checkpoint)
    query = start(frame, sink, checkpoint)  # the same DataFrame: the attempt is found at run time
    wait_for(second.exhausted, "the range to be read")
    driver.stop_at_boundary(query, checkpoint)
    rows = sink.rows()
    assert_exactly_once([row[0] for row in rows], set(range(3000)))
    assert all(row[1] == local(source.event_time(row[0])) for row in rows[:50])


def _write_inputs(root: Path) -> set[int]:
    """JSON, CSV and parquet files with distinct ids, big enough to be cut into byte ranges."""
    ids: set[int] = set()
    (root / "json").mkdir()
    (root / "csv").mkdir()
    (root / "parquet").mkdir()
    for index in range(3):
        base = index * 200
        lines = [
            json.dumps(
                {
                    "id": base + i,
                    "page": f"p{i % 7}",
                    "ts": (T0 + timedelta(seconds=base + i)).isoformat(),
                }
            )
            for i in range(200)
        ]
        (root / "json" / f"part-{index}.json").write_text("\n".join(lines) + "\n")
        ids.update(range(base, base + 200))
    for index in range(2):
        base = 1000 + index * 200
        body = "".join(
            f"{base + i},p{i % 5},{(T0 + timedelta(seconds=i)).strftime('%Y-%m-%d %H:%M:%S')}\n"
            for i in range(200)
        )
        (root / "csv" / f"part-{index}.csv").write_text("id,page,ts\n" + body)
        ids.update(range(base, base + 200))
    for index in range(2):
        base = 2000 + index * 300
        table = pa.table(
            {
                "id": pa.array(range(base, base + 300), pa.int64()),
                "page": [f"q{i % 3}" for i in range(300)],
                "ts": pa.array(
                    [T0 + timedelta(minutes=i) for i in range(300)], pa.timestamp("ms", tz="UTC")
                ),
            }
        )
        pq.write_table(table, root / "parquet" / f"part-{index}.parquet", row_group_size=50)
        ids.update(range(base, base + 300))
    return ids


@pytest.mark.full
def test_json_csv_and_parquet_files_survive_a_failed_batch_exactly_once(
    driver: Driver, tmp_path: Path
) -> None:
    expected = _write_inputs(tmp_path)
    checkpoint = tmp_path / "checkpoint"
    sources = {
        "json": Files(
            str(tmp_path / "json"), "json", SCHEMA, split_size=4096, max_splits_per_batch=3
        ),
        "csv": Files(
            str(tmp_path / "csv"),
            "csv",
            SCHEMA,
            split_size=3000,
            max_splits_per_batch=2,
            options={"header": True},
        ),
        "parquet": Files(
            str(tmp_path / "parquet"), "parquet", SCHEMA, split_size=1500, max_splits_per_batch=2
        ),
    }
    for name, source in sources.items():
        driver.add(name, source)
    frame = (
        driver.stream("json")
        .unionByName(driver.stream("csv"))
        .unionByName(driver.stream("parquet"))
    )
    sink = BatchSink(fail_on=1)
    driver.begin(1, checkpoint)
    query = start(frame, sink, checkpoint)
    with pytest.raises(Exception, match="injected failure in batch 1"):
        query.awaitTermination(120)
    log = CheckpointLog(str(checkpoint))
    assert log.last_committed() == 0 and max(log.batch_ids("offsets")) == 1  # batch 1 in flight

    # In-process restart: each coordinator goes back to its last snapshot and adopts batch 1.
    in_flight: list[str] = []
    for coordinator in driver.coordinators.values():
        coordinator.end_run("query failed")
        reconciliation = coordinator.begin_run(2, str(checkpoint))
        assert reconciliation.in_flight_batch in (1, None)
        in_flight.extend(reconciliation.in_flight_splits)
    assert in_flight, "batch 1 read splits that the restart had to adopt"
    query = start(frame, sink, checkpoint)
    wait_for(
        lambda: all(c.exhausted() for c in driver.coordinators.values()), "every file to be read"
    )
    driver.stop_at_boundary(query, checkpoint)
    rows = sink.rows()
    assert_exactly_once([row[0] for row in rows], expected)
    by_id = {row[0]: row for row in rows}
    assert by_id[5] == (5, "p5", local(T0 + timedelta(seconds=5)))
    assert by_id[1003] == (1003, "p3", local(T0 + timedelta(seconds=3)))
    assert by_id[2301] == (2301, "q1", local(T0 + timedelta(minutes=1)))
    progress = driver.coordinators["json"].host.progress().result(10)
    assert progress is not None and progress.splits_total == progress.splits_finished > 3


def test_drain_with_a_sentinel_fires_every_pending_window(driver: Driver, tmp_path: Path) -> None:
    source = Range(0, 6000, split_size=500, max_splits_per_batch=4, event_time_step="100ms")
    checkpoint = tmp_path / "checkpoint"
    coordinator = driver.add("clicks", source)
    counts = (
        driver.stream("clicks")
        .withWatermark("ts", "30 seconds")
        .groupBy(window("ts", "1 minute"))
        .count()
        .select(col("window.start").alias("start"), "count")
    )
    sink = BatchSink()
    driver.begin(1, checkpoint)
    query = start(counts, sink, checkpoint)
    wait_for(coordinator.exhausted, "the input to be read")
    coordinator.suspend()
    await_batch_boundary([coordinator], CheckpointLog(str(checkpoint)))
    before = dict(sink.rows())
    expected = Counter(
        local(source.event_time(v).replace(second=0, microsecond=0)) for v in range(6000)
    )
    pending = set(expected) - set(before)
    assert pending, "the last windows wait for a watermark that never comes without a drain"

    sentinel = coordinator.emit_sentinel("drain-1")
    wait_for(lambda: not coordinator.state().sentinel_pending, "the sentinel's batch")
    await_batch_boundary([coordinator], CheckpointLog(str(checkpoint)))
    query.stop()
    windows = sink.rows()
    assert Counter(start for start, _ in windows) == Counter(set(expected))  # each fired once
    assert dict(windows) == dict(expected)
    assert all(start < local(SENTINEL_EVENT_TIME) for start, _ in windows)
    log = CheckpointLog(str(checkpoint))
    carrying = [
        batch
        for batch in log.batch_ids("offsets")
        if (offset := log.source_offset(batch, "clicks")) is not None
        and sentinel in offset.splits
        and (previous := log.source_offset(batch - 1, "clicks")) is not None
        and previous.seq != offset.seq
    ]
    assert len(carrying) == 1 and carrying[0] < log.last_committed()  # and a no-data batch after


def test_unbounded_files_discover_new_files_and_skip_unreadable_ones(
    driver: Driver, tmp_path: Path
) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(100)))
    (inbox / "broken.json.gz").write_text('{"id": 1000}\n')  # not gzip: cannot be read
    source = Files(
        str(inbox), "json", SCHEMA, bounded=False, discovery_interval=0.3, on_error="skip"
    )
    checkpoint = tmp_path / "checkpoint"
    coordinator = driver.add("inbox", source)
    sink = BatchSink()
    driver.begin(1, checkpoint)
    query = start(driver.stream("inbox"), sink, checkpoint)
    wait_for(lambda: len(sink.rows()) >= 100, "the first file")
    skipped = coordinator.state().skipped
    assert len(skipped) == 1 and "broken.json.gz as json" in next(iter(skipped.values()))
    staging = tmp_path / ".b.json.tmp"
    staging.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(100, 150)))
    os.replace(staging, inbox / "b.json")  # appear complete
    wait_for(lambda: len(sink.rows()) >= 150, "the new file")
    driver.stop_at_boundary(query, checkpoint)
    assert_exactly_once([row[0] for row in sink.rows()], set(range(150)))


def test_an_unreadable_file_fails_the_query_with_its_name(driver: Driver, tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "zz-corrupt.parquet").write_bytes(b"PAR1 not really parquet PAR1")
    driver.add("bad", Files(str(inbox), "parquet", SCHEMA))
    sink = BatchSink()
    checkpoint = tmp_path / "checkpoint"
    driver.begin(1, checkpoint)
    query = start(driver.stream("bad"), sink, checkpoint)
    with pytest.raises(Exception, match=r"cannot read file://\S*zz-corrupt\.parquet as parquet"):
        query.awaitTermination(120)
    assert sink.batches == {}


def test_an_available_now_run_reads_a_bounded_source_and_ends_by_itself(
    driver: Driver, tmp_path: Path
) -> None:
    source = Range(0, 1000, split_size=100, max_splits_per_batch=4)
    coordinator = driver.add("once", source)
    frame = driver.stream("once")
    plan = frame._jdf.queryExecution().analyzed().toString()
    assert TOKEN not in plan  # Spark redacts the 'token' option in plans
    checkpoint = tmp_path / "checkpoint"
    sink = BatchSink()
    driver.begin(1, checkpoint)
    query = (
        frame.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    coordinator.on_batch_committed(CheckpointLog(str(checkpoint)).last_committed())
    assert coordinator.exhausted()
    assert len(sink.batches) == 3  # the read limit held: 4 + 4 + 2 splits
    assert_exactly_once([row[0] for row in sink.rows()], set(range(1000)))


def test_two_queries_start_together_each_on_a_registration_of_its_own(
    driver: Driver, spark: SparkSession, tmp_path: Path
) -> None:
    # Spark 4's stream-source runner adds keys to its registration's environment map as its query
    # starts, while the other query's tasks serialize their function with theirs: the two maps
    # must be different objects, or a task can ship a torn map (java.io.OptionalDataException).
    ranges = {"left": (0, 1000), "right": (1000, 2000)}
    sinks: dict[str, BatchSink] = {}
    for name, (first, end) in ranges.items():
        coordinator = driver.add(name, Range(first, end, split_size=100, max_splits_per_batch=5))
        coordinator.begin_run(1, str(tmp_path / name))
        sinks[name] = BatchSink()
    frames = {name: driver.stream(name) for name in ranges}
    for name, frame in frames.items():
        start(frame, sinks[name], tmp_path / name)
    wait_for(lambda: all(len(sinks[name].rows()) >= 1000 for name in ranges), "both ranges written")
    for name, (first, end) in ranges.items():
        assert_exactly_once([row[0] for row in sinks[name].rows()], set(range(first, end)))
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    identity = spark._jvm.java.lang.System.identityHashCode
    maps = {
        identity(manager.lookupDataSource(data_source_name(name)).dataSourceCls().envVars())
        for name in ranges
    }
    assert len(maps) == len(ranges)
