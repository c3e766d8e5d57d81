"""Batch programs in-process (one Spark session, two real shuffle servers): results and mistakes.

The crash tests run through `finishable run` (test_batch_job.py); here a program runs inside the
test process so that each mistake a user can make is shown to end in a clear error.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

from finishable import FinishableJob, sinks, sources
from finishable.api.jobconfig import JobConfig
from finishable.driver.batch.core import event_log_prefix, logged_runs
from finishable.driver.batch.joblog import OutputCommitted, TaskFinished, decode_event
from finishable.driver.batch.runtime import BatchRuntime
from finishable.driver.failures import ProgramError
from finishable.driver.outcome import JobFailed
from finishable.local.shuffle import LocalShuffle
from finishable.shuffle import ShuffleClient
from finishable.shuffle.streams import ipc_chunks
from finishable.state import LocalDirBackend
from finishable.state.eventlog import read_events

pytestmark = pytest.mark.quick

SCHEMA = "customer STRING, status STRING, cents LONG"


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "3")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    yield session
    session.stop()


@pytest.fixture(scope="module")
def shuffle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalShuffle]:
    servers = LocalShuffle(tmp_path_factory.mktemp("shuffle"), "program", 2, "5m")
    servers.ensure()
    yield servers
    servers.stop()


@pytest.fixture(scope="module")
def orders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("orders")
    for index in range(6):
        lines = [
            json.dumps(
                {
                    "customer": f"c{(index * 7 + n) % 5}",
                    "status": ("paid", "open")[n % 2],
                    "cents": n,
                }
            )
            for n in range(50)
        ]
        (directory / f"orders-{index}.json").write_text("\n".join(lines) + "\n")
    return directory


MADE: list[FinishableJob] = []
"""The jobs a test made: closed after it, run or not, so no heartbeat or endpoint outlives it."""


@pytest.fixture(autouse=True)
def close_jobs() -> Iterator[None]:
    yield
    while MADE:
        MADE.pop().close()
    for thread in threading.enumerate():
        if thread.name == "shuffle-hb":  # a closed job's heartbeats end
            thread.join(60)
            assert not thread.is_alive(), "a closed job still sends shuffle heartbeats"


def make_job(
    spark: SparkSession,
    tmp: Path,
    shuffle: LocalShuffle,
    *,
    mode: str = "Batch",
    urls: bool = True,
    attempt: int = 1,
) -> FinishableJob:
    config = JobConfig.model_validate(
        {
            "name": "program",
            "spec": {
                "mode": mode,
                "application": {"file": "job.py"},
                "recovery": {"snapshotMinPause": "1s"},
            },
            "stateUrl": str(tmp / "state"),
            "workDir": str(tmp / "work"),
            "control": "Local",
            "controlDir": str(tmp / "control"),
            "shuffleUrls": shuffle.urls() if urls and mode == "Batch" else [],
        }
    )
    job = FinishableJob(config, spark=spark, token=shuffle.token, attempt=attempt)
    MADE.append(job)
    return job


def two_stage_job(
    spark: SparkSession, tmp: Path, shuffle: LocalShuffle, orders: Path, *, attempt: int = 1
) -> tuple[FinishableJob, sinks.TransactionalFiles]:
    """Paid orders staged, summed per customer in a second stage, written to a sink."""
    job = make_job(spark, tmp, shuffle, attempt=attempt)
    rows = job.read(sources.Files(str(orders), format="json", schema=SCHEMA), name="orders")
    paid = job.stage("paid", rows.where(F.col("status") == "paid").select("customer", "cents"))
    totals = job.stage("totals", paid.groupBy("customer").agg(F.sum("cents").alias("cents")))
    sink = sinks.TransactionalFiles(str(tmp / "out"), name="totals")
    job.write(totals, sink)
    return job, sink


def paid_cents_per_customer(orders: Path) -> dict[str, int]:
    """The ground truth, by pandas."""
    frame = pd.concat(pd.read_json(p, lines=True) for p in sorted(orders.glob("*.json")))
    return dict(frame[frame["status"] == "paid"].groupby("customer")["cents"].sum().to_dict())


def published(sink: sinks.TransactionalFiles) -> dict[str, int]:
    return {r["customer"]: r["cents"] for r in sink.read_committed().to_pylist()}


def manifests(sink_root: Path) -> list[bytes]:
    """A sink's commit markers, byte for byte: a second publish would rewrite or add one."""
    return [path.read_bytes() for path in sorted((sink_root / "_manifests").iterdir())]


def test_a_two_stage_job_publishes_what_pandas_computes(
    spark: SparkSession, shuffle: LocalShuffle, orders: Path, tmp_path: Path
) -> None:
    job, sink = two_stage_job(spark, tmp_path, shuffle, orders)
    job.run()

    assert published(sink) == paid_cents_per_customer(orders)
    listed = shuffle.servers[0]  # the staged datasets are on the servers, split between them
    assert listed.alive()


def test_headerless_csv_files_in_a_three_stage_job_give_what_plain_spark_gives(
    spark: SparkSession, shuffle: LocalShuffle, tmp_path: Path
) -> None:
    """The issue's case: 60 headerless CSV files, some rows malformed, each file cut in ranges.

    The job's read, staged twice and aggregated, must publish what the same query on
    ``spark.read.csv`` computes: no header line lost per file, bad rows null as Spark has them.
    """
    directory = tmp_path / "csv"
    directory.mkdir()
    for index in range(60):
        lines = [f"c{(index + n) % 7},{('paid', 'open')[n % 2]},{n * 3}" for n in range(12)]
        lines.insert(5, f"c{index % 7},paid,not-a-number")
        (directory / f"part-{index:02d}.csv").write_text("\n".join(lines) + "\n")

    def query(rows: Any) -> Any:
        paid = rows.where(F.col("status") == "paid")
        return paid.groupBy("customer").agg(F.count("*").alias("n"), F.sum("cents").alias("c"))

    plain = query(spark.read.schema(SCHEMA).csv(str(directory)))
    expected = {r["customer"]: (r["n"], r["c"]) for r in plain.collect()}
    job = make_job(spark, tmp_path, shuffle)
    source = sources.Files(str(directory), format="csv", schema=SCHEMA, split_size=100)
    rows = job.stage("rows", job.read(source, name="orders"))
    totals = job.stage("totals", query(job.stage("kept", rows.where(F.col("customer") != "none"))))
    sink = sinks.TransactionalFiles(str(tmp_path / "out"), name="totals")
    job.write(totals, sink)
    job.run()

    got = {r["customer"]: (r["n"], r["c"]) for r in sink.read_committed().to_pylist()}
    assert got == expected
    assert sum(n for n, _ in got.values()) == 60 * 7  # 6 paid rows and the malformed one per file


def test_late_and_duplicate_task_attempts_are_refused_and_the_output_is_exact(
    spark: SparkSession, shuffle: LocalShuffle, orders: Path, tmp_path: Path
) -> None:
    job, sink = two_stage_job(spark, tmp_path, shuffle, orders)
    runtime = job._batch
    assert runtime is not None
    genuine = runtime._hook
    answers: dict[str, list[dict[str, Any]]] = {"late": [], "duplicate": [], "again": []}
    forged = pa.table({"customer": ["zz"], "cents": pa.array([10**6], pa.int64())})

    def twin(body: dict[str, Any], attempt: int) -> dict[str, Any]:
        """Another attempt of the same task, which uploaded rows of its own for the partition."""
        upload = body["upload"]
        uploaded = ShuffleClient(upload["server"], shuffle.token).upload(
            upload["dataset"],
            upload["partition"],
            "twin",
            ipc_chunks(forged.schema, forged.to_batches()),
        )
        return {**body, "attempt": attempt, "upload": {**upload, "id": uploaded.id}}

    def racing(action: str, body: dict[str, Any]) -> dict[str, Any]:
        if action == "task-finished" and body["task"] == 0 and "upload" in body:
            if body["stage"] == "paid":  # an attempt whose splits went to a later one
                answers["late"].append(genuine(action, twin(body, body["attempt"] + 1)))
            answer = genuine(action, body)
            # a speculative copy reporting after the first one committed
            answers["duplicate"].append(genuine(action, twin(body, body["attempt"] + 2)))
            if body["stage"] == "paid":
                # Spark runs the committed task again (its executor went away before Spark had
                # its result): the new attempt reads nothing and the task's splits stay finished.
                again = {"stage": "paid", "task": 0, "attempt": body["attempt"] + 3}
                answers["again"].append(genuine("task-start", again))
            return answer
        return genuine(action, body)

    runtime.endpoint.set_runtime_hook(racing)
    job.run()

    assert [a["ok"] for a in answers["late"]] == [False]
    assert "no longer live" in answers["late"][0]["refused"]
    assert [a["ok"] for a in answers["duplicate"]] == [False, False]
    assert all("is a duplicate" in a["refused"] for a in answers["duplicate"])
    assert answers["again"] == [{"ok": True, "committed": True}]
    assert published(sink) == paid_cents_per_customer(orders)


def logged_events(tmp: Path) -> list[Any]:
    """The job's event log (of its one run), decoded."""
    backend = LocalDirBackend(tmp / "state")
    (run,) = logged_runs(backend)
    logged = read_events(backend, prefix=event_log_prefix(run))
    return [decode_event(e.type, e.data) for e in logged]


def test_a_reader_that_stopped_short_commits_nothing_and_the_next_attempt_reads_its_share(
    spark: SparkSession, orders: Path, tmp_path: Path
) -> None:
    """When Spark cancels a task mid-read (a sibling failed, its executor went), its writer sees
    a plain end of input and reports the rows it got. Without its reader's word that it read its
    whole share (``task-read``), the driver refuses that output; the next attempt reads the
    share again and the result is exact."""
    servers = LocalShuffle(tmp_path / "shuffle", "program", 2, "5m")
    servers.ensure()
    try:
        job, sink = two_stage_job(spark, tmp_path, servers, orders)
        runtime = job._batch
        assert runtime is not None
        genuine = runtime._hook
        answers: list[dict[str, Any]] = []

        def cut_short(action: str, body: dict[str, Any]) -> dict[str, Any]:
            if action == "task-read" and body["task"] == 0:
                return {"ok": True}  # the reader of task 0 never got to the end of its share
            answer = genuine(action, body)
            if action == "task-finished" and body["stage"] == "paid" and body["task"] == 0:
                answers.append(answer)
            return answer

        runtime.endpoint.set_runtime_hook(cut_short)
        with pytest.raises(JobFailed, match=r"task\(s\) \[0\] ended without output"):
            job.run()
        assert [a["ok"] for a in answers] == [False]
        assert "did not read its share to the end" in answers[0]["refused"]
        logged = [e for e in logged_events(tmp_path) if isinstance(e, TaskFinished)]
        assert logged and all((e.stage, e.task) != ("paid", 0) for e in logged)
        assert not (tmp_path / "out" / "totals" / "_manifests").exists()

        again, sink = two_stage_job(spark, tmp_path, servers, orders, attempt=2)
        again.run()
        assert published(sink) == paid_cents_per_customer(orders)
        redone = [
            e for e in logged_events(tmp_path) if isinstance(e, TaskFinished) and e.attempt == 2
        ]
        assert ("paid", 0) in {(e.stage, e.task) for e in redone}
    finally:
        servers.stop()


def test_two_sinks_publish_once_each_and_a_failed_publish_publishes_only_the_missing_one(
    spark: SparkSession, orders: Path, tmp_path: Path
) -> None:
    """One job writes per-customer totals and order counts to two sinks. Publishing the second
    fails (a stray file lies where its batch's directory goes) after the first published: the
    next attempt runs no task, leaves the first sink alone and publishes the second."""
    servers = LocalShuffle(tmp_path / "shuffle", "program", 2, "5m")  # attempt 2 fences them
    servers.ensure()
    output = tmp_path / "out"
    totals_sink = sinks.TransactionalFiles(str(output), name="totals")
    counts_sink = sinks.TransactionalFiles(str(output), name="counts")
    stray = output / "counts" / "batch=00000000000000000000"

    def declare(attempt: int) -> FinishableJob:
        job = make_job(spark, tmp_path, servers, attempt=attempt)
        rows = job.read(sources.Files(str(orders), format="json", schema=SCHEMA), name="orders")
        paid = job.stage("paid", rows.where(F.col("status") == "paid").select("customer", "cents"))
        job.write(paid.groupBy("customer").agg(F.sum("cents").alias("cents")), totals_sink)
        job.write(paid.groupBy("customer").agg(F.count("*").alias("orders")), counts_sink)
        return job

    frame = pd.concat(pd.read_json(p, lines=True) for p in sorted(orders.glob("*.json")))
    paid_orders = frame[frame["status"] == "paid"].groupby("customer")["cents"].count()
    try:
        first = declare(1)
        with pytest.raises(ValueError, match="two sinks are named 'totals'"):
            first.write(spark.range(1), sinks.TransactionalFiles(str(tmp_path), name="totals"))
        stray.parent.mkdir(parents=True, exist_ok=True)
        stray.write_text("in the way")
        with pytest.raises(JobFailed, match="batch=00000000000000000000"):
            first.run()
        assert published(totals_sink) == paid_cents_per_customer(orders)
        assert counts_sink.store.committed_batches() == [], "nothing of counts is visible"
        published_once = manifests(output / "totals")

        stray.unlink()
        declare(2).run()
        counted = {r["customer"]: r["orders"] for r in counts_sink.read_committed().to_pylist()}
        assert counted == paid_orders.to_dict()
        assert published(totals_sink) == paid_cents_per_customer(orders)
        assert manifests(output / "totals") == published_once, "totals is not published again"
        events = logged_events(tmp_path)
        rerun = [e for e in events if isinstance(e, TaskFinished) and e.attempt == 2]
        assert rerun == [], "the second attempt ran no task"
        committed = [e.sink for e in events if isinstance(e, OutputCommitted)]
        assert committed == ["totals", "counts"]
    finally:
        servers.stop()


def test_a_shuffle_over_a_source_is_refused_with_what_to_do(
    spark: SparkSession, shuffle: LocalShuffle, orders: Path, tmp_path: Path
) -> None:
    job = make_job(spark, tmp_path, shuffle)
    rows = job.read(sources.Files(str(orders), format="json", schema=SCHEMA), name="orders")
    with pytest.raises(ValueError, match="stage each source's rows first"):
        job.stage("totals", rows.groupBy("customer").count())
    with pytest.raises(ValueError, match="straight into the sink"):
        job.write(rows, sinks.TransactionalFiles(str(tmp_path / "out"), name="rows"))


def test_names_sinks_and_sources_are_checked(
    spark: SparkSession, shuffle: LocalShuffle, orders: Path, tmp_path: Path
) -> None:
    job = make_job(spark, tmp_path, shuffle)
    rows = job.read(sources.Files(str(orders), format="json", schema=SCHEMA), name="orders")
    with pytest.raises(ValueError, match=r"stage name 'paid orders' is not accepted: use"):
        job.stage("paid orders", rows)
    with pytest.raises(ValueError, match="two reads are named 'orders'"):
        job.read(sources.Files(str(orders), format="json", schema=SCHEMA), name="orders")
    with pytest.raises(ValueError, match="reads bounded sources"):
        job.read(sources.Range(0, rows_per_second=10), name="endless")
    staged = job.stage("paid", rows)
    with pytest.raises(ValueError, match="two stages are named 'paid'"):
        job.stage("paid", rows)
    with pytest.raises(TypeError, match="TransactionalFiles"):
        job.write(staged, sinks.TransactionalCallback(lambda batch, table: None, name="cb"))
    with pytest.raises(ValueError, match="read_stream builds Streaming jobs"):
        job.read_stream(sources.Files(str(orders), format="json", schema=SCHEMA))


def test_run_without_a_sink_fails_naming_what_is_missing(
    spark: SparkSession, shuffle: LocalShuffle, tmp_path: Path
) -> None:
    job = make_job(spark, tmp_path, shuffle)
    with pytest.raises(JobFailed, match=r"without job.write\(\)"):
        job.run()


def test_batch_calls_in_a_streaming_job_and_a_batch_job_without_servers(
    spark: SparkSession, shuffle: LocalShuffle, orders: Path, tmp_path: Path
) -> None:
    streaming = make_job(spark, tmp_path / "s", shuffle, mode="Streaming")
    with pytest.raises(ValueError, match=r"job.read\(\) builds Batch jobs"):
        streaming.read(sources.Files(str(orders), format="json", schema=SCHEMA))
    with pytest.raises(JobFailed, match="needs shuffle servers"):
        make_job(spark, tmp_path / "b", shuffle, urls=False)


def test_a_batch_job_whose_start_fails_leaves_no_heartbeat_or_endpoint(
    spark: SparkSession, shuffle: LocalShuffle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime fails after its heartbeats started: it stops them (the autouse fixture checks
    that no ``shuffle-hb`` thread survives) and the job stops its endpoint."""

    def interrupted(self: BatchRuntime) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(BatchRuntime, "_recovery_message", interrupted)
    endpoints = [t for t in threading.enumerate() if t.name.startswith("coordinator-endpoint")]
    with pytest.raises(KeyboardInterrupt):
        make_job(spark, tmp_path, shuffle)
    after = [t for t in threading.enumerate() if t.name.startswith("coordinator-endpoint")]
    assert set(after) <= set(endpoints)


def test_a_streaming_output_mode_the_sinks_cannot_publish_is_refused_before_anything_runs(
    spark: SparkSession, shuffle: LocalShuffle, tmp_path: Path
) -> None:
    job = make_job(spark, tmp_path, shuffle, mode="Streaming")
    sink = sinks.TransactionalFiles(str(tmp_path / "out"), name="counts")
    with pytest.raises(ProgramError, match=r"output_mode='update'.*'append' or 'complete'"):
        job.write_stream(spark.range(1), sink, output_mode="update")


def test_a_batch_job_writes_to_iceberg_in_the_jobs_directory_and_checks_the_schema(
    spark: SparkSession, shuffle: LocalShuffle, orders: Path, tmp_path: Path
) -> None:
    job = make_job(spark, tmp_path, shuffle)
    rows = job.read(sources.Files(str(orders), format="json", schema=SCHEMA), name="orders")
    paid = job.stage("paid", rows.where(F.col("status") == "paid").select("customer", "cents"))
    totals = job.stage("totals", paid.groupBy("customer").agg(F.sum("cents").alias("cents")))
    job.write(totals, sinks.Iceberg("shop.totals"))  # no warehouse: the job's own directory
    job.run()
    # The default warehouse and its SQLite catalog are beside the job's work directory.
    table = sinks.Iceberg("shop.totals", warehouse=str(tmp_path / "iceberg"))
    got = {r["customer"]: r["cents"] for r in table.read().to_pylist()}
    assert got == paid_cents_per_customer(orders)
    summary = table.load_table().current_snapshot().summary  # type: ignore[union-attr]
    assert (summary.get(sinks.SINK_KEY), summary.get(sinks.BATCH_KEY)) == ("program", "0")

    # A second job whose output does not fit that table is refused when it declares it.
    again = make_job(spark, tmp_path / "again", shuffle)
    wrong = again.read(sources.Files(str(orders), format="json", schema=SCHEMA), name="orders")
    staged = again.stage("wrong", wrong.select(F.col("cents").alias("customer"), "status"))
    with pytest.raises(ProgramError) as raised:
        again.write(staged, sinks.Iceberg("shop.totals", warehouse=str(tmp_path / "iceberg")))
    message = str(raised.value)
    assert "column 'customer': the table has string, the DataFrame has bigint" in message
    assert "column 'status' (string) is not in the table (its columns: cents, customer)" in message


def test_a_streaming_dataframe_that_does_not_fit_an_iceberg_table_is_refused_at_once(
    spark: SparkSession, shuffle: LocalShuffle, tmp_path: Path
) -> None:
    warehouse = str(tmp_path / "wh")
    sinks.Iceberg("shop.events", warehouse=warehouse).target.prepare(
        pa.schema([("id", pa.int32()), ("note", pa.string())])
    )
    job = make_job(spark, tmp_path, shuffle, mode="Streaming")
    expected = "column 'id': the table has int, the DataFrame has bigint"
    with pytest.raises(ProgramError, match=expected):
        job.write_stream(spark.range(1), sinks.Iceberg("shop.events", warehouse=warehouse))


@pytest.mark.full
def test_a_wide_task_spark_cancels_mid_input_commits_nothing_and_the_next_attempt_runs_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A stage reading staged partitions has no reader of ours to vouch for its input. When a
    sibling fails and Spark cancels a task that has passed one row of its input on, Spark ends
    the task's Python workers before its writer can report those rows: nothing of the task is
    committed, and the next attempt runs it again (docs/batch-runtime.md, *Cancelled tasks*)."""
    orders = tmp_path / "orders"
    orders.mkdir()
    lines = [
        json.dumps({"customer": f"c{n % 30}", "status": ("paid", "open")[n % 3 == 0], "cents": n})
        for n in range(600)
    ]
    (orders / "orders.json").write_text("\n".join(lines) + "\n")
    gates = tmp_path / "gates"
    gates.mkdir()
    (gates / "armed").touch()
    victim, failing = 0, 1  # result partitions of the second stage; local[2] runs them together

    def gate(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Armed: the victim passes one row on and waits; the other fails once it has."""
        context = TaskContext.get()
        assert context is not None
        partition, armed = context.partitionId(), gates / "armed"
        table = pa.Table.from_batches(list(batches)) if armed.exists() else None
        if table is None:
            yield from batches
        elif partition == victim:
            yield from table.slice(0, 1).to_batches()
            (gates / "midway").touch()
            while armed.exists():  # until Spark kills this worker, or the test disarms it
                time.sleep(0.05)
        elif partition == failing:
            while not (gates / "midway").exists():
                time.sleep(0.05)
            raise RuntimeError("a sibling of the victim fails")
        else:
            yield from table.to_batches()

    def job_of(attempt: int) -> tuple[FinishableJob, sinks.TransactionalFiles]:
        job = make_job(spark, tmp_path, servers, attempt=attempt)
        rows = job.read(sources.Files(str(orders), format="json", schema=SCHEMA), name="orders")
        paid = job.stage("paid", rows.where(F.col("status") == "paid").select("customer", "cents"))
        summed = paid.groupBy("customer").agg(F.sum("cents").alias("cents"))
        totals = job.stage("totals", summed.mapInArrow(gate, summed.schema))
        sink = sinks.TransactionalFiles(str(tmp_path / "out"), name="totals")
        job.write(totals, sink)
        return job, sink

    servers = LocalShuffle(tmp_path / "shuffle", "program", 2, "5m")
    servers.ensure()
    try:
        job, sink = job_of(1)
        with pytest.raises(JobFailed, match="a sibling of the victim fails"):
            job.run()
        (gates / "armed").unlink()
        assert (gates / "midway").exists(), "the victim never passed its row on"
        logged = [e for e in logged_events(tmp_path) if isinstance(e, TaskFinished)]
        assert ("totals", victim) not in {(e.stage, e.task) for e in logged}

        again, sink = job_of(2)
        again.run()
        assert published(sink) == paid_cents_per_customer(orders)
    finally:
        servers.stop()
