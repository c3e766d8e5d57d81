"""Sinks without a Spark session: names, manifests, JSON encoding, sentinels, and the writer's
stage/commit/abort exactly as Spark's commit worker calls them, on a local directory and on S3."""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import Row
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import (
    BooleanType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from finishable.connectors import sink_files, sink_store, sinks
from finishable.connectors.sink_store import (
    Manifest,
    PublishedFile,
    SinkStore,
    batch_key,
    parse_batch_key,
    parse_manifest_file_name,
)
from finishable.connectors.sinks import (
    SENTINEL_COLUMN,
    SENTINEL_EVENT_TIME,
    SinkError,
    TransactionalCallback,
    TransactionalFiles,
)
from finishable.connectors.staging import TaskIdentity
from finishable.connectors.streaming.sink import (
    CallbackDataSource,
    CallbackStreamWriter,
    FilesDataSource,
    FilesStreamWriter,
)

pytestmark = pytest.mark.quick

SPARK_SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("ts", TimestampType()),
        StructField("name", StringType()),
        StructField(SENTINEL_COLUMN, BooleanType()),
    ]
)
ARROW_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("name", pa.string()),
        (SENTINEL_COLUMN, pa.bool_()),
    ]
)
T0 = datetime(2024, 5, 1, tzinfo=UTC)


def rows_batch(ids: list[int], *, sentinel: bool = False) -> pa.RecordBatch:
    """Rows as Spark's Arrow writer hands them over; ``sentinel`` appends one drain sentinel."""
    data: dict[str, list[Any]] = {
        "id": list(ids),
        "ts": [T0 + timedelta(seconds=i) for i in ids],
        "name": [f"n{i}" for i in ids],
        SENTINEL_COLUMN: [None] * len(ids),
    }
    if sentinel:
        data["id"].append(-1)
        data["ts"].append(SENTINEL_EVENT_TIME)
        data["name"].append("sentinel")
        data[SENTINEL_COLUMN].append(True)
    return pa.RecordBatch.from_pydict(data, schema=ARROW_SCHEMA)


def files_writer(url: str, file_format: str = "parquet", sink: str = "q1") -> FilesStreamWriter:
    """The writer as Spark's commit worker builds it: a fresh DataSource from string options."""
    source = FilesDataSource({"url": url, "format": file_format, "sink": sink})
    return source.streamWriter(SPARK_SCHEMA, False)


def task(batch_id: int, partition: int, attempt_id: int = 0, attempt: int = 0) -> TaskIdentity:
    return TaskIdentity(batch_id, partition, task_attempt_id=attempt_id, attempt=attempt)


def staged_files(store: SinkStore) -> list[str]:
    return [
        n
        for n in store.list_names(sink_store.STAGING_DIR, recursive=True)
        if n.endswith((".parquet", ".json", ".arrow"))
    ]


def ids_of(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


# --- names and the manifest ----------------------------------------------------------------------


def test_batch_keys_sort_like_numbers_and_round_trip() -> None:
    keys = [batch_key(b) for b in (0, 9, 10, 123, 2**62)]
    assert keys == sorted(keys)
    assert [parse_batch_key(k) for k in keys] == [0, 9, 10, 123, 2**62]
    assert parse_batch_key(".tmp-x") is None
    assert parse_manifest_file_name(f"{batch_key(7)}.json") == 7
    assert parse_manifest_file_name(f".{batch_key(7)}.json.tmp-abc") is None
    with pytest.raises(ValueError, match="batch id must be >= 0"):
        batch_key(-1)


def test_staged_names_are_keyed_by_partition_and_attempt_published_names_are_not() -> None:
    a = sink_store.staged_file_name(3, 17, 0, "aaa", "parquet")
    b = sink_store.staged_file_name(3, 18, 1, "bbb", "parquet")
    assert a != b
    assert a.startswith("part-00003-t17-a0-")
    assert sink_store.published_file_name(5, 3, "parquet") == (
        f"batch={batch_key(5)}/part-00003.parquet"
    )


@pytest.mark.parametrize("name", ["", "-x", "a/b", "a b", "x" * 129, "..", "é"])
def test_invalid_sink_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="invalid sink name"):
        sink_store.validate_sink_name(name)


def test_manifest_round_trips_and_refuses_damage() -> None:
    manifest = Manifest(
        sink="q1",
        batch_id=4,
        format="parquet",
        files=(PublishedFile("batch=4/part-00000.parquet", 0, 3, 100),),
        schema=pa.schema([("id", pa.int64())]),
        committed_at="2026-01-01T00:00:00.000Z",
    )
    again = Manifest.from_json(manifest.to_json())
    assert again == manifest
    assert again.rows == 3
    doc = json.loads(manifest.to_json())
    doc["version"] = 99
    with pytest.raises(SinkError, match="manifest version 99 is not supported"):
        Manifest.from_json(json.dumps(doc).encode(), "m.json")
    with pytest.raises(SinkError, match=r"m\.json: damaged manifest"):
        Manifest.from_json(b"{not json", "m.json")
    doc["version"] = 1
    doc["rows"] = 4
    with pytest.raises(SinkError, match="row total"):
        Manifest.from_json(json.dumps(doc).encode())


def test_locations_in_messages_carry_no_credentials() -> None:
    url = "s3://KEY:SECRET@bucket/out?endpoint_override=h:9&secret_key=S2&region=x"
    assert "SECRET" not in sink_store.redact_url(url)
    assert "S2" not in sink_store.redact_url(url)
    assert sink_store.display_location(url, "q") == "s3://bucket/out/q"
    fingerprinted = "s3://KEY:SECRET@bucket/out?endpoint_override=h:9&region=x"
    assert TransactionalFiles(fingerprinted, name="q").fingerprint() == {
        "kind": "TransactionalFiles",
        "url": "s3://bucket/out",
        "format": "parquet",
        "sink": "q",
    }


# --- JSON encoding -------------------------------------------------------------------------------


def test_json_lines_round_trip_every_type_spark_writes() -> None:
    schema = pa.schema(
        [
            ("ts", pa.timestamp("us", tz="UTC")),
            ("d", pa.date32()),
            ("x", pa.decimal128(10, 2)),
            ("b", pa.binary()),
            ("m", pa.map_(pa.string(), pa.int64())),
            ("l", pa.list_(pa.struct([("t", pa.timestamp("us", tz="UTC")), ("v", pa.float64())]))),
            ("s", pa.string()),
        ]
    )
    table = pa.Table.from_pylist(
        [
            {
                "ts": datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
                "d": date(2024, 1, 2),
                "x": Decimal("12.34"),
                "b": b"\x00\xff",
                "m": [("a", 1), ("b", None)],
                "l": [{"t": datetime(2024, 1, 1, tzinfo=UTC), "v": 1.5}, {"t": None, "v": None}],
                "s": 'ünï\n"q"',
            },
            {"ts": None, "d": None, "x": None, "b": None, "m": None, "l": None, "s": None},
        ],
        schema=schema,
    )
    encoded = sink_files.encode_json_lines(table)
    lines = encoded.decode().splitlines()
    assert len(lines) == 2
    assert json.loads(lines[0])["ts"] == "2024-01-02T03:04:05.000006+00:00"
    assert json.loads(lines[0])["m"] == {"a": 1, "b": None}
    assert json.loads(lines[1]) == {}  # nulls are omitted, as Spark's JSON writer does
    assert sink_files.decode_json_lines(encoded, schema).equals(table)


# --- sentinels -----------------------------------------------------------------------------------


def test_sentinel_rows_are_found_by_marker_or_event_time_and_dropped() -> None:
    batch = rows_batch([1, 2], sentinel=True)
    kept, dropped = sinks.drop_sentinels(batch)
    assert dropped == 1
    assert kept.column_names == ["id", "ts", "name"]
    assert kept.column("id").to_pylist() == [1, 2]
    # A projection dropped the marker: the event time alone still identifies it.
    no_marker = batch.drop_columns([SENTINEL_COLUMN])
    assert sinks.drop_sentinels(no_marker)[1] == 1
    # A window struct whose start is the sentinel's time (tumbling windows are aligned).
    window = pa.StructArray.from_arrays(
        [
            pa.array([T0, SENTINEL_EVENT_TIME], pa.timestamp("us", tz="UTC")),
            pa.array([T0, SENTINEL_EVENT_TIME], pa.timestamp("us", tz="UTC")),
        ],
        names=["start", "end"],
    )
    windows = pa.record_batch([window, pa.array([5, 1])], names=["window", "count"])
    assert sinks.sentinel_mask(windows).to_pylist() == [False, True]
    assert sinks.sentinel_mask(pa.record_batch([pa.array([1])], names=["x"])) is None
    # Only a string column survived the projection.
    names = pa.record_batch([pa.array(["a", sinks.SENTINEL_TEXT, None])], names=["page"])
    assert sinks.drop_sentinels(names)[0].column(0).to_pylist() == ["a", None]


def test_is_sentinel_row_for_rows_and_mappings() -> None:
    assert sinks.is_sentinel_row(Row(id=1, **{SENTINEL_COLUMN: True}))
    assert sinks.is_sentinel_row({"id": 1, "ts": SENTINEL_EVENT_TIME})
    assert sinks.is_sentinel_row({"id": 1, "ts": SENTINEL_EVENT_TIME.replace(tzinfo=None)})
    assert sinks.is_sentinel_row(Row(window=Row(start=SENTINEL_EVENT_TIME, end=None), n=1))
    assert sinks.is_sentinel_row(Row(page=sinks.SENTINEL_TEXT))
    assert not sinks.is_sentinel_row(Row(id=1, ts=T0, **{SENTINEL_COLUMN: None}))
    assert not sinks.is_sentinel_row({"id": 1, SENTINEL_COLUMN: False})


# --- stage, commit, replay, abort on a local directory -------------------------------------------


def test_commit_publishes_once_and_a_replayed_commit_deletes_the_replays_staging(
    tmp_path: Path,
) -> None:
    url = str(tmp_path / "out")
    first = files_writer(url)
    messages = [
        first.stage([rows_batch([1, 2]), rows_batch([3])], task(0, 0, attempt_id=10)),
        first.stage([rows_batch([4], sentinel=True)], task(0, 1, attempt_id=11)),
    ]
    files_writer(url).commit(list(messages), 0)
    store = SinkStore(url, "q1")
    published = store.read_manifest(0)
    assert published is not None
    assert [f.path for f in published.files] == [
        f"batch={batch_key(0)}/part-00000.parquet",
        f"batch={batch_key(0)}/part-00001.parquet",
    ]
    assert published.rows == 4
    assert staged_files(store) == []

    # Spark re-ran batch 0 after a crash that came after our publish: new tasks, new staging.
    replay = files_writer(url)
    replayed = [
        replay.stage([rows_batch([1, 2, 3])], task(0, 0, attempt_id=0)),
        replay.stage([rows_batch([4])], task(0, 1, attempt_id=1)),
    ]
    assert len(staged_files(store)) == 2
    files_writer(url).commit(list(replayed), 0)
    assert staged_files(store) == []
    assert store.read_manifest(0) == published  # untouched, committed_at included
    sink = TransactionalFiles(url, name="q1")
    assert ids_of(sink.read_committed()) == [1, 2, 3, 4]
    assert sink.committed_batches() == [0]
    assert sink.read_committed().column_names == ["id", "ts", "name"]


def test_a_crash_mid_publish_is_redone_by_the_replay(tmp_path: Path) -> None:
    url = str(tmp_path / "out")
    store = SinkStore(url, "q1")
    crashed = files_writer(url)
    old = [crashed.stage([rows_batch([1])], task(2, p, attempt_id=p)) for p in range(2)]
    # The earlier publish moved one file and died before its manifest; a stray file lies there.
    assert old[0].part.path is not None
    store.move(old[0].part.path, sink_store.published_file_name(2, 0, "parquet"))
    with store.open_output(f"batch={batch_key(2)}/part-00009.parquet") as out:
        out.write(b"junk")
    assert TransactionalFiles(url, name="q1").committed_batches() == []  # invisible

    replay = files_writer(url)
    messages = [
        replay.stage([rows_batch([p + 10])], task(2, p, attempt_id=5 + p)) for p in range(2)
    ]
    files_writer(url).commit(list(messages), 2)
    sink = TransactionalFiles(url, name="q1")
    assert ids_of(sink.read_committed()) == [10, 11]
    assert store.list_names(f"batch={batch_key(2)}") == [
        f"batch={batch_key(2)}/part-00000.parquet",
        f"batch={batch_key(2)}/part-00001.parquet",
    ]
    assert staged_files(store) == []  # the crashed attempt's leftover went with batch 2's staging


def test_abort_with_only_none_messages_cleans_that_batchs_staging(tmp_path: Path) -> None:
    url = str(tmp_path / "out")
    writer = files_writer(url)
    writer.stage([rows_batch([1])], task(3, 0))
    writer.stage([rows_batch([2])], task(3, 1))
    writer.stage([rows_batch([3])], task(4, 0))
    files_writer(url).abort([None, None], 3)
    store = SinkStore(url, "q1")
    assert store.staged_batches() == [4]
    assert store.committed_batches() == []


def test_leftovers_of_batches_up_to_the_committed_one_are_cleaned(tmp_path: Path) -> None:
    url = str(tmp_path / "out")
    writer = files_writer(url)
    for batch_id in (0, 1, 2, 7):
        writer.stage([rows_batch([batch_id])], task(batch_id, 0))
    messages = [writer.stage([rows_batch([30])], task(3, 0, attempt_id=99))]
    files_writer(url).commit(list(messages), 3)
    assert SinkStore(url, "q1").staged_batches() == [7]


def test_zero_row_and_sentinel_only_batches_commit_with_no_files(tmp_path: Path) -> None:
    url = str(tmp_path / "out")
    writer = files_writer(url, "json")
    empty = writer.stage([], task(0, 0))
    only_sentinel = writer.stage([rows_batch([], sentinel=True)], task(0, 1))
    assert empty.part.path is None
    assert only_sentinel.part.path is None
    assert only_sentinel.part.sentinels == 1
    files_writer(url, "json").commit([empty, only_sentinel], 0)
    sink = TransactionalFiles(url, format="json", name="q1")
    assert sink.committed_batches() == [0]
    table = sink.read_committed()
    assert table.num_rows == 0
    assert table.column_names == ["id", "ts", "name"]


def test_a_commit_with_a_missing_message_publishes_nothing(tmp_path: Path) -> None:
    url = str(tmp_path / "out")
    message = files_writer(url).stage([rows_batch([1])], task(0, 0))
    with pytest.raises(SinkError, match="task 1 sent no commit message"):
        files_writer(url).commit([message, None], 0)
    assert SinkStore(url, "q1").committed_batches() == []


def test_json_sink_reads_back_exact_values(tmp_path: Path) -> None:
    url = str(tmp_path / "out")
    writer = files_writer(url, "json")
    message = writer.stage([rows_batch([1, 2], sentinel=True)], task(0, 0))
    files_writer(url, "json").commit([message], 0)
    sink = TransactionalFiles(url, format="json", name="q1")
    expected = rows_batch([1, 2]).drop_columns([SENTINEL_COLUMN])
    assert sink.read_committed().equals(pa.Table.from_batches([expected]))
    [path] = sink.committed_files()
    first = json.loads(Path(path).read_text().splitlines()[0])
    assert first == {"id": 1, "ts": "2024-05-01T00:00:01+00:00", "name": "n1"}


def test_complete_mode_batches_replace_what_came_before(tmp_path: Path) -> None:
    url = str(tmp_path / "out")
    source = FilesDataSource({"url": url, "format": "parquet", "sink": "agg"})
    for batch_id, ids in ((0, [1, 2]), (1, [1, 2, 3])):
        writer = source.streamWriter(SPARK_SCHEMA, True)  # Spark passes overwrite=True
        messages = [writer.stage([rows_batch(ids)], task(batch_id, 0))]
        source.streamWriter(SPARK_SCHEMA, True).commit(list(messages), batch_id)
    sink = TransactionalFiles(url, name="agg")
    assert ids_of(sink.read_committed()) == [1, 2, 3]
    assert len(sink.committed_files()) == 1
    assert ids_of(sink.read_committed([0])) == [1, 2]


def test_two_sinks_on_one_url_keep_their_batches_apart(tmp_path: Path) -> None:
    url = str(tmp_path / "out")
    for name, value in (("a", 1), ("b", 2)):
        message = files_writer(url, sink=name).stage([rows_batch([value])], task(0, 0))
        files_writer(url, sink=name).commit([message], 0)
    assert ids_of(TransactionalFiles(url, name="a").read_committed()) == [1]
    assert ids_of(TransactionalFiles(url, name="b").read_committed()) == [2]


# --- bad input -----------------------------------------------------------------------------------


def test_unknown_format_names_the_value_and_the_accepted_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown format 'csv'.*'json', 'parquet'"):
        TransactionalFiles(str(tmp_path), format="csv")
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        FilesDataSource({"url": str(tmp_path), "format": "xml", "sink": "q"}).streamWriter(
            SPARK_SCHEMA, False
        )


def test_an_unwritable_url_is_named_in_the_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    sink = TransactionalFiles(str(blocker / "out"), name="q")
    with pytest.raises(SinkError, match=f"{blocker}/out/q"):
        sink.store.probe()
    with pytest.raises(SinkError, match="cannot open sink URL nosuch://bucket/x"):
        TransactionalFiles("nosuch://bucket/x")
    with pytest.raises(ValueError, match="a sink URL is required"):
        TransactionalFiles("")


def test_relative_paths_become_absolute_before_they_travel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    sink = TransactionalFiles("out", name="q")
    assert sink.options()["url"] == str(tmp_path / "out")


# --- the callback sink's commit ------------------------------------------------------------------


def callback_writer(sink: TransactionalCallback) -> CallbackStreamWriter:
    """As Spark's commit worker builds it, so the callable goes through its pickled option."""
    return CallbackDataSource(sink.options()).streamWriter(SPARK_SCHEMA, False)


def test_callback_commit_is_retried_until_it_succeeds_then_replays_are_skipped(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger.json"
    fail_once = tmp_path / "fail-once"
    fail_once.touch()

    def commit(batch_id: int, table: pa.Table) -> None:
        # Idempotent per batch id: the batch's rows replace whatever an earlier call wrote.
        state = json.loads(ledger.read_text()) if ledger.exists() else {}
        state[str(batch_id)] = table.column("id").to_pylist()
        ledger.write_text(json.dumps(state))
        if fail_once.exists():  # the "crash" right after the user's system took the rows
            fail_once.unlink()
            raise ConnectionError("lost the driver")

    sink = TransactionalCallback(commit, name="cb", staging_url=str(tmp_path / "stage"))
    store = sink.store
    messages = [
        callback_writer(sink).stage([rows_batch([1, 2], sentinel=True)], task(0, 0)),
        callback_writer(sink).stage([rows_batch([3])], task(0, 1)),
    ]
    with pytest.raises(SinkError, match="commit callable of sink 'cb' failed for batch 0"):
        callback_writer(sink).commit(list(messages), 0)
    assert sink.last_committed_batch() is None

    replay = [callback_writer(sink).stage([rows_batch([1, 2, 3])], task(0, 0, attempt_id=7))]
    callback_writer(sink).commit(list(replay), 0)
    assert json.loads(ledger.read_text()) == {"0": [1, 2, 3]}
    assert sink.last_committed_batch() == 0
    assert staged_files(store) == []

    # A replay after the marker: the user is not called again and the staging goes.
    ledger.unlink()
    again = [callback_writer(sink).stage([rows_batch([1, 2, 3])], task(0, 0, attempt_id=8))]
    callback_writer(sink).commit(list(again), 0)
    assert not ledger.exists()
    assert staged_files(store) == []


def test_callback_gets_an_empty_table_with_the_schema_for_an_empty_batch(tmp_path: Path) -> None:
    seen = tmp_path / "seen.json"

    def commit(batch_id: int, table: pa.Table) -> None:
        seen.write_text(json.dumps([batch_id, table.num_rows, table.column_names]))

    sink = TransactionalCallback(commit, name="cb", staging_url=str(tmp_path / "stage"))
    message = callback_writer(sink).stage([], task(5, 0))
    callback_writer(sink).commit([message], 5)
    assert json.loads(seen.read_text()) == [5, 0, ["id", "ts", "name"]]


def test_callback_sink_needs_a_staging_url_and_a_callable(tmp_path: Path) -> None:
    with pytest.raises(SinkError, match="needs staging_url"):
        TransactionalCallback(lambda b, t: None, name="cb").options()
    with pytest.raises(ValueError, match="must be a callable"):
        TransactionalCallback("nope", name="cb")  # type: ignore[arg-type]
    filled = TransactionalCallback(lambda b, t: None).with_defaults(
        name="job-1", staging_url=str(tmp_path)
    )
    assert filled.sink_name == "job-1"
    assert filled.options()["url"] == str(tmp_path)


def test_a_commit_message_of_another_kind_is_refused(tmp_path: Path) -> None:
    class Foreign(WriterCommitMessage):
        pass

    with pytest.raises(SinkError, match="unexpected commit message Foreign"):
        files_writer(str(tmp_path)).commit([Foreign()], 0)


# --- S3 (moto over HTTP) -------------------------------------------------------------------------

BUCKET = "finishable-sinks"


def start_moto() -> tuple[Any, int]:
    """A moto S3 server on a free loopback port with one bucket; credentials go in the URL."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    import pyarrow.fs as pafs

    fs, _ = pafs.FileSystem.from_uri(
        f"s3://k:s@{BUCKET}?endpoint_override=127.0.0.1:{port}&scheme=http"
        "&region=us-east-1&allow_bucket_creation=true"
    )
    fs.create_dir(BUCKET)
    return server, port


def s3_url(port: int, prefix: str) -> str:
    return (
        f"s3://AKIDSINKS:SECRETSINKS@{BUCKET}/{prefix}"
        f"?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
    )


@pytest.fixture(scope="module")
def moto_port() -> Iterator[int]:
    server, port = start_moto()
    try:
        yield port
    finally:
        server.stop()


def test_s3_publish_replay_and_read(moto_port: int) -> None:
    url = s3_url(moto_port, f"units-{os.getpid()}")
    writer = files_writer(url)
    messages = [writer.stage([rows_batch([p, p + 2])], task(0, p)) for p in range(2)]
    files_writer(url).commit(list(messages), 0)
    replay = [files_writer(url).stage([rows_batch([0, 1, 2, 3])], task(0, 0, attempt_id=9))]
    files_writer(url).commit(list(replay), 0)
    sink = TransactionalFiles(url, name="q1")
    assert ids_of(sink.read_committed()) == [0, 1, 2, 3]
    assert staged_files(sink.store) == []
    assert all(f.startswith(f"s3://{BUCKET}/units-") for f in sink.committed_files())
    files_writer(url).abort([None], 1)  # nothing staged: still fine


def test_s3_errors_name_the_bucket_but_not_the_secret(moto_port: int) -> None:
    url = s3_url(moto_port, "x").replace(BUCKET, "no-such-bucket")
    with pytest.raises(SinkError, match="s3://no-such-bucket/x/default is not writable") as info:
        TransactionalFiles(url).store.probe()
    assert "SECRETSINKS" not in str(info.value)
