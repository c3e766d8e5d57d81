"""The sinks under real Structured Streaming (local[2]): output equals a ground truth computed from
the input files, Spark's own replay of a batch publishes nothing twice, the callback survives a
crash of its commit, and errors name what is wrong.

The files sink's exactly-once tests run with both writers: the Python sink writer (its commit
publishes in a Python worker) and Spark's own parquet writer (``dev.finishable.spark.SinkWrite``,
whose commit asks the driver's runtime to publish: here an endpoint whose batch hook publishes as
the job runtime's does, ``connectors.streaming.sink.publish_jvm_batch``)."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from finishable.connectors.jvm import JVM_SINK_WRITE, sink_write_options
from finishable.connectors.sink_store import SinkStore
from finishable.connectors.sinks import (
    SENTINEL_COLUMN,
    SENTINEL_EVENT_TIME,
    Kafka,
    SinkError,
    TransactionalCallback,
    TransactionalFiles,
)
from finishable.connectors.streaming.sink import publish_jvm_batch
from finishable.coordinator.endpoint import DriverEndpoint
from tests.connectors.test_sinks_units import s3_url, staged_files, start_moto

pytestmark = pytest.mark.quick

SCHEMA = f"id long, ts timestamp, name string, {SENTINEL_COLUMN} boolean"
Truth = set[tuple[int, str, int]]


def put_input(directory: Path, index: int, ids: list[int], *, sentinel: bool = False) -> None:
    """One JSON input file; mtimes grow with ``index`` so the file source reads them in order."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"id": i, "ts": f"2024-05-01T00:{i // 60:02d}:{i % 60:02d}Z", "name": f"n{i}"})
        for i in ids
    ]
    if sentinel:
        lines.append(
            json.dumps(
                {
                    "id": -1,
                    "ts": SENTINEL_EVENT_TIME.isoformat(),
                    "name": "sentinel",
                    SENTINEL_COLUMN: True,
                }
            )
        )
    path = directory / f"part-{index:03d}.json"
    path.write_text("".join(line + "\n" for line in lines))
    stamp = time.time() - 1000 + index
    os.utime(path, (stamp, stamp))


def ground_truth(directory: Path) -> Truth:
    """Independently of Spark: every non-sentinel row of the input files."""
    rows: Truth = set()
    for path in sorted(directory.glob("*.json")):
        for line in path.read_text().splitlines():
            doc = json.loads(line)
            if doc.get(SENTINEL_COLUMN):
                continue
            ts = doc["ts"].replace("Z", "+00:00")
            micros = int(pa.scalar(ts).cast(pa.timestamp("us", tz="UTC")).value)
            rows.add((doc["id"], doc["name"], micros))
    return rows


def as_truth(table: pa.Table) -> list[tuple[int, str, int]]:
    """Rows as comparable tuples; a list, so a duplicate would show."""
    micros = table.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()
    return sorted(
        zip(table.column("id").to_pylist(), table.column("name").to_pylist(), micros, strict=True)
    )


def stream(spark: Any, source: Path) -> Any:
    return (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .repartition(2)
    )


class Writers:
    """The stream writers of a files sink: Python's, or Spark's own behind a driver endpoint."""

    def __init__(self, kind: str, endpoint: DriverEndpoint) -> None:
        self.kind = kind
        self.endpoint = endpoint
        self.sinks: dict[str, TransactionalFiles] = {}
        self.published: list[int] = []
        endpoint.set_batch_hook(self._hook)

    def _hook(self, stage: str, batch_id: int, body: dict[str, Any]) -> dict[str, Any]:
        assert stage == "publish", stage  # the JVM writer's one call
        sink = self.sinks[body["sink"]]
        publish_jvm_batch(sink.url, sink.sink_name, sink.format, batch_id, body)
        self.published.append(batch_id)
        return {}

    def of(self, sink: TransactionalFiles, frame: Any) -> Any:
        if self.kind == "python":
            return sink.write_stream(frame)
        self.sinks[sink.sink_name] = sink
        options = sink_write_options(
            sink, endpoint=self.endpoint.url, token=TOKEN, batch_id=None, environ={}
        )
        return frame.writeStream.format(JVM_SINK_WRITE).options(**options)


TOKEN = "sink-token"


@pytest.fixture(params=["python", "jvm"])
def writers(request: pytest.FixtureRequest) -> Iterator[Writers]:
    with DriverEndpoint(TOKEN) as endpoint:
        yield Writers(str(request.param), endpoint)


def run_available_now(writer: Any, checkpoint: Path) -> Any:
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    query.awaitTermination()
    return query


def forget_commit(checkpoint: Path, batch_id: int) -> None:
    """What a crash between the sink's publish and Spark's commit log leaves behind."""
    for name in (str(batch_id), f".{batch_id}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)


def test_files_sink_is_exactly_once_across_replay_and_restart(
    spark: Any, tmp_path: Path, writers: Writers
) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "cp"
    put_input(source, 0, list(range(7)))
    put_input(source, 1, [])  # a batch with zero rows
    put_input(source, 2, [], sentinel=True)  # a batch with only a drain sentinel
    put_input(source, 3, list(range(7, 13)), sentinel=True)
    sink = TransactionalFiles(str(tmp_path / "out"), format="parquet", name="clicks")

    run_available_now(writers.of(sink, stream(spark, source)), checkpoint)
    assert sink.committed_batches() == [0, 1, 2, 3]
    assert as_truth(sink.read_committed()) == sorted(ground_truth(source))
    assert sink.read_committed().column_names == ["id", "ts", "name"]
    rows_per_batch = [m.rows for m in map(sink.manifest, range(4)) if m is not None]
    assert rows_per_batch == [7, 0, 0, 6]
    published = sink.manifest(3)
    assert staged_files(sink.store) == []

    # Spark lost the commit-log entry of batch 3 after the sink published it: on restart it
    # re-runs batch 3, whose commit must publish nothing and clean what the replay staged.
    forget_commit(checkpoint, 3)
    query = run_available_now(writers.of(sink, stream(spark, source)), checkpoint)
    assert query.lastProgress["batchId"] == 3
    assert query.lastProgress["numInputRows"] == 7  # six rows and the sentinel, re-read
    assert (checkpoint / "commits" / "3").exists()
    assert sink.manifest(3) == published
    assert staged_files(sink.store) == []
    assert as_truth(sink.read_committed()) == sorted(ground_truth(source))

    # A later run on the same checkpoint adds only the new file.
    put_input(source, 4, list(range(13, 20)))
    run_available_now(writers.of(sink, stream(spark, source)), checkpoint)
    assert sink.committed_batches() == [0, 1, 2, 3, 4]
    assert as_truth(sink.read_committed()) == sorted(ground_truth(source))
    files = sink.committed_files()
    assert spark.read.parquet(*files).count() == len(ground_truth(source))
    assert writers.published == ([] if writers.kind == "python" else [0, 1, 2, 3, 3, 4])


def test_stop_mid_stream_then_restart_publishes_everything_once(
    spark: Any, tmp_path: Path, writers: Writers
) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "cp"
    for index in range(8):
        put_input(source, index, list(range(index * 10, index * 10 + 10)), sentinel=index == 5)
    sink = TransactionalFiles(str(tmp_path / "out"), name="stopped")
    query = (
        writers.of(sink, stream(spark, source))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="0 seconds")
        .start()
    )
    deadline = time.monotonic() + 300
    while len(sink.committed_batches()) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    query.stop()  # cancels whatever micro-batch is running
    assert 2 <= len(sink.committed_batches()) < 8

    run_available_now(writers.of(sink, stream(spark, source)), checkpoint)
    assert sink.committed_batches() == list(range(8))
    assert as_truth(sink.read_committed()) == sorted(ground_truth(source))
    assert staged_files(sink.store) == []


def test_complete_mode_publishes_each_batch_as_the_whole_result(
    spark: Any, tmp_path: Path, writers: Writers
) -> None:
    source = tmp_path / "in"
    for index in range(3):
        put_input(source, index, list(range(index * 5, index * 5 + 12)))
    counts = stream(spark, source).groupBy("name").count()
    sink = TransactionalFiles(str(tmp_path / "out"), name="counts")
    writer = writers.of(sink, counts).outputMode("complete")
    run_available_now(writer, tmp_path / "cp")
    assert sink.committed_batches() == [0, 1, 2]
    assert all(m is not None and m.overwrite for m in map(sink.manifest, range(3)))
    rows = sink.read_committed().to_pylist()  # the last batch's rows alone
    assert sorted((r["name"], r["count"]) for r in rows) == sorted(_count_names(source).items())


def _count_names(directory: Path) -> dict[str, int]:
    """Rows per name in the input files (ids repeat across files: every row counts)."""
    counted: dict[str, int] = {}
    for path in directory.glob("*.json"):
        for line in path.read_text().splitlines():
            name = json.loads(line)["name"]
            counted[name] = counted.get(name, 0) + 1
    return counted


def test_json_sink_keeps_every_type(spark: Any, tmp_path: Path) -> None:
    from decimal import Decimal

    from pyspark.sql import functions as sf

    source = tmp_path / "in"
    put_input(source, 0, [1, 2, 3], sentinel=True)
    put_input(source, 1, [4, 5])
    frame = stream(spark, source).select(
        "id",
        "ts",
        SENTINEL_COLUMN,
        sf.to_date("ts").alias("day"),
        (sf.col("id") / 4).cast("decimal(10,2)").alias("price"),
        sf.array(sf.col("id"), sf.col("id") * 2).alias("pair"),
        sf.create_map(sf.col("name"), sf.col("id")).alias("lookup"),
        sf.struct(sf.col("name"), sf.col("ts").alias("at")).alias("info"),
    )
    sink = TransactionalFiles(str(tmp_path / "out"), format="json", name="typed")
    run_available_now(sink.write_stream(frame), tmp_path / "cp")

    got = sorted(sink.read_committed().to_pylist(), key=lambda r: r["id"])
    expected = []
    for ident, name, micros in sorted(ground_truth(source)):
        ts = pa.scalar(micros, pa.timestamp("us", tz="UTC")).as_py()
        expected.append(
            {
                "id": ident,
                "ts": ts,
                "day": ts.date(),
                "price": Decimal(ident) / 4,
                "pair": [ident, ident * 2],
                "lookup": [(name, ident)],
                "info": {"name": name, "at": ts},
            }
        )
    assert got == expected
    assert spark.read.json(sink.committed_files()).count() == 5


def test_callback_sink_survives_a_crash_in_its_commit(spark: Any, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    source, checkpoint = tmp_path / "in", tmp_path / "cp"
    put_input(source, 0, [1, 2, 3])
    put_input(source, 1, [4, 5], sentinel=True)
    put_input(source, 2, [6])
    database, calls, crash_once = tmp_path / "user.db", tmp_path / "calls.jsonl", tmp_path / "crash"
    crash_once.write_text("1")  # the batch whose first commit "crashes" after it took effect
    with sqlite3.connect(database) as db:
        db.execute("CREATE TABLE rows (batch INTEGER, id INTEGER, name TEXT, PRIMARY KEY (id))")
    db_path, calls_path, crash_path = str(database), str(calls), str(crash_once)

    def commit(batch_id: int, table: pa.Table) -> None:
        """The user's idempotent commit: an upsert keyed by row, then (maybe) a crash."""
        import json as json_module
        import os as os_module
        import sqlite3 as sqlite

        with sqlite.connect(db_path) as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO rows VALUES (?, ?, ?)",
                [(batch_id, r["id"], r["name"]) for r in table.to_pylist()],
            )
        with open(calls_path, "a") as log:
            log.write(json_module.dumps([batch_id, table.num_rows, os_module.getpid()]) + "\n")
        if os_module.path.exists(crash_path):
            with open(crash_path) as marker:
                if int(marker.read()) == batch_id:
                    os_module.unlink(crash_path)
                    raise ConnectionError("driver lost right after the user's commit")

    sink = TransactionalCallback(commit, name="users", staging_url=str(tmp_path / "staging"))
    with pytest.raises(StreamingQueryException, match="failed for batch 1"):
        run_available_now(sink.write_stream(stream(spark, source)), checkpoint)
    assert sink.last_committed_batch() == 0

    run_available_now(sink.write_stream(stream(spark, source)), checkpoint)
    forget_commit(checkpoint, 2)  # the crash after the marker: the user is not called again
    replay = run_available_now(sink.write_stream(stream(spark, source)), checkpoint)
    assert replay.lastProgress["batchId"] == 2

    logged = [json.loads(line) for line in calls.read_text().splitlines()]
    assert [(batch, rows) for batch, rows, _ in logged] == [(0, 3), (1, 2), (1, 2), (2, 1)]
    assert all(pid != os.getpid() for _, _, pid in logged)  # it ran in a Spark Python worker
    with sqlite3.connect(database) as db:
        stored = sorted(db.execute("SELECT id, name FROM rows").fetchall())
    assert stored == sorted((i, n) for i, n, _ in ground_truth(source))
    assert sink.last_committed_batch() == 2
    assert staged_files(sink.store) == []


def test_files_sink_on_s3(spark: Any, tmp_path: Path) -> None:
    server, port = start_moto()
    try:
        source = tmp_path / "in"
        put_input(source, 0, list(range(10)), sentinel=True)
        put_input(source, 1, list(range(10, 15)))
        sink = TransactionalFiles(s3_url(port, "spark"), format="parquet", name="s3q")
        run_available_now(sink.write_stream(stream(spark, source)), tmp_path / "cp")
        assert sink.committed_batches() == [0, 1]
        assert as_truth(sink.read_committed()) == sorted(ground_truth(source))
        assert staged_files(sink.store) == []
    finally:
        server.stop()


def test_bad_sink_settings_fail_with_the_value_named(spark: Any, tmp_path: Path) -> None:
    from finishable.connectors.streaming.sink import FilesDataSource

    source = tmp_path / "in"
    put_input(source, 0, [1])
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a directory")
    with pytest.raises(SinkError, match=f"{blocker}/out/default is not writable"):
        TransactionalFiles(str(blocker / "out")).write_stream(stream(spark, source))

    # Options set by hand reach the planning worker, whose error surfaces from the query.
    spark.dataSource.register(FilesDataSource)
    writer = (
        stream(spark, source)
        .writeStream.format(FilesDataSource.name())
        .options(url=str(tmp_path / "out"), format="xml", sink="raw")
    )
    with pytest.raises(Exception, match="unknown format 'xml'"):
        run_available_now(writer, tmp_path / "cp")
    assert SinkStore(str(tmp_path / "out"), "raw").committed_batches() == []


@pytest.mark.parametrize(
    ("columns", "topic", "message"),
    [
        ("id AS key", "t", r"writes a 'value' column \(binary or string\); the DataFrame has key"),
        ("id AS value", "t", r"'value' column must be string or binary, got bigint"),
        ("'v' AS value; id AS partition", "t", r"'partition' column must be integer, got bigint"),
        (
            "'v' AS value; array(named_struct('k', 'a')) AS headers",
            "t",
            r"'headers' column must be array<struct<key: string, value: binary>>",
        ),
        ("'v' AS value", None, r"needs topic=\.\.\. or a 'topic' column"),
    ],
)
def test_a_kafka_sink_names_the_column_it_cannot_write(
    spark: Any, columns: str, topic: str | None, message: str
) -> None:
    frame = spark.range(1).selectExpr(*(c.strip() for c in columns.split(";")))
    sink = Kafka(topic, "127.0.0.1:9092", transactional_id_prefix="p", staging_url="/tmp/x")
    with pytest.raises(SinkError, match=message):
        sink.check(frame)
