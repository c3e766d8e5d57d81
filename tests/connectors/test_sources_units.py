"""Pure parts of the finishable sources, without Spark: offsets, grouping, alignment, reading."""

from __future__ import annotations

import itertools
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark import cloudpickle
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
    ReadMinRows,
)
from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from finishable.connectors import reading
from finishable.connectors.fileformats import RECORD_COLUMN, FileOptions, reader_schema
from finishable.connectors.sinks import SENTINEL_COLUMN, SENTINEL_EVENT_TIME, is_sentinel_row
from finishable.connectors.sources import RANGE_SCHEMA, Files, Range, sentinel_row
from finishable.connectors.streaming import source as ds
from finishable.coordinator import FileSplit, RangeSplit, SentinelSplit
from finishable.coordinator.files import ListedFile, plan_file_splits

pytestmark = pytest.mark.quick

SCHEMA = StructType(
    [
        StructField("id", LongType(), True),
        StructField("page", StringType(), True),
        StructField("ts", TimestampType(), True),
    ]
)
ARROW = reading.arrow_schema_of(SCHEMA)
PARQUET = FileOptions("parquet")


def settings_for(**overrides: object) -> reading.ReaderSettings:
    values: dict[str, object] = {
        "coordinator": "clicks",
        "endpoint": "http://127.0.0.1:1",
        "kind": "files",
        "schema_json": SCHEMA.jsonValue(),
        "format": "json",
    }
    values.update(overrides)
    return reading.ReaderSettings(**values)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- offsets


def test_an_offset_round_trips_through_json_text() -> None:
    splits = (RangeSplit(0, 10), FileSplit("file:///d/a.json", 0, 5, 5))
    offset = ds.SplitOffset("clicks", 3, 7, splits)
    text = json.dumps(offset.to_json())
    assert ds.SplitOffset.from_json(text) == offset
    assert ds.SplitOffset.from_json(json.loads(text), "clicks") == offset
    assert offset.to_json()["format"] == ds.OFFSET_FORMAT


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"seq": 1}, "not a finishable source offset"),
        ('{"format": "finishable.splits", "version": 9}', "offset version 9"),
        ("{not json", "not JSON"),
        (
            {
                "format": "finishable.splits",
                "version": 1,
                "coordinator": "x",
                "seq": -1,
                "attempt": None,
                "splits": [],
            },
            "offset.seq",
        ),
        (
            {
                "format": "finishable.splits",
                "version": 1,
                "coordinator": "x",
                "seq": 1,
                "attempt": None,
                "splits": [{"kind": "tape"}],
            },
            "unknown split kind",
        ),
    ],
)
def test_a_bad_offset_is_refused_with_the_reason(value: object, message: str) -> None:
    with pytest.raises(ds.OffsetFormatError, match=message):
        ds.SplitOffset.from_json(value)  # type: ignore[arg-type]


def test_an_offset_of_another_source_is_refused() -> None:
    offset = ds.SplitOffset("views", 1, 0, (RangeSplit(0, 1),))
    with pytest.raises(ds.OffsetFormatError, match="belongs to source 'views', not 'clicks'"):
        ds.SplitOffset.from_json(offset.to_json(), "clicks")


def test_a_batch_reads_the_end_offsets_splits_unless_nothing_new_was_planned() -> None:
    start = ds.SplitOffset("clicks", 4, 0, (RangeSplit(0, 10),))
    end = ds.SplitOffset("clicks", 5, 0, (RangeSplit(10, 20), RangeSplit(20, 30)))
    assert ds.batch_splits(start, end) == (RangeSplit(10, 20), RangeSplit(20, 30))
    assert ds.batch_splits(end, end) == ()  # a no-data batch: Spark repeats the previous end
    assert ds.batch_splits(ds.initial_offset("clicks"), ds.initial_offset("clicks")) == ()
    with pytest.raises(ds.OffsetFormatError, match="different sources"):
        ds.batch_splits(start, ds.SplitOffset("views", 5, 0, ()))


def test_the_offsets_log_line_of_a_source_is_found_among_others() -> None:
    ours = ds.SplitOffset("clicks", 2, 1, (RangeSplit(0, 3),))
    other = ds.SplitOffset("views", 9, 1, ())
    lines = ["-", json.dumps(other.to_json()), '{"offset": 5}', json.dumps(ours.to_json())]
    assert ds.find_offset(lines, "clicks") == ours
    assert ds.find_offset(lines, "orders") is None


def test_reader_settings_travel_as_options_with_the_token_apart() -> None:
    settings = settings_for(attempt=3, on_error="skip", split_size=100)
    options = settings.to_options("s3cret")
    assert options["token"] == "s3cret"
    assert "s3cret" not in options["settings"]
    assert reading.ReaderSettings.from_options(options) == (settings, "s3cret")
    with pytest.raises(ValueError, match="needs the 'settings' and 'token' options"):
        reading.ReaderSettings.from_options({"settings": options["settings"]})


@pytest.mark.parametrize(
    ("limit", "kind", "expected"),
    [
        (ReadMaxFiles(7), "files", 7),
        (ReadAllAvailable(), "files", ds.ALL_AVAILABLE_CAP),
        (ReadMaxRows(2500), "range", 25),
        (ReadMaxRows(50), "range", 1),
        (ReadMaxBytes(1000), "files", 10),
        (ReadMinRows(5), "files", 256),
        (ReadMaxFiles(10**9), "files", 100_000),
    ],
)
def test_read_limits_become_a_split_count(limit: object, kind: str, expected: int) -> None:
    settings = settings_for(kind=kind, split_size=100)
    assert ds.max_splits_for(limit, settings) == expected  # type: ignore[arg-type]


# ---------------------------------------------------------------------- grouping


def test_small_splits_share_partitions_spread_over_the_cores() -> None:
    splits = [RangeSplit(i * 10, i * 10 + 10) for i in range(10)]
    groups = ds.group_splits(splits, max_weight=1_000, min_partitions=2)
    assert [len(group) for group in groups] == [5, 5]
    assert [split for group in groups for split in group] == splits


def test_files_pay_an_open_cost_and_big_splits_stand_alone() -> None:
    small = [FileSplit(f"file:///d/{i}.json", 0, 100, 100) for i in range(6)]
    big = FileSplit("file:///d/big.json", 0, 10_000, 10_000)
    groups = ds.group_splits([*small[:3], big, *small[3:]], max_weight=1_000, open_cost=200)
    assert groups == [tuple(small[:3]), (big,), tuple(small[3:])]


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 500), min_size=0, max_size=40),
    max_weight=st.integers(1, 2000),
    open_cost=st.integers(0, 100),
    cores=st.integers(1, 8),
)
def test_grouping_is_deterministic_and_keeps_every_split_once(
    sizes: list[int], max_weight: int, open_cost: int, cores: int
) -> None:
    splits = [RangeSplit(i * 1000, i * 1000 + size) for i, size in enumerate(sizes)]
    first = ds.group_splits(
        splits, max_weight=max_weight, open_cost=open_cost, min_partitions=cores
    )
    again = ds.group_splits(
        list(splits), max_weight=max_weight, open_cost=open_cost, min_partitions=cores
    )
    assert first == again
    assert [split for group in first for split in group] == splits
    assert all(group for group in first)
    weights = [[ds.split_weight(split, open_cost) for split in group] for group in first]
    assert all(len(group) == 1 or sum(group) <= max_weight for group in weights)
    if all(sum(group) <= max_weight for group in weights) and sum(map(sum, weights)) <= max_weight:
        assert len(first) <= cores


# ---------------------------------------------------------------------- line alignment


def _lines_of_ranges(data: bytes, cuts: list[int]) -> list[bytes]:
    def read_at(pos: int, count: int) -> bytes:
        return data[pos : pos + count]

    bounds = [0, *sorted(set(cuts)), len(data)]
    pieces: list[bytes] = []
    for start, end in itertools.pairwise(bounds):
        if end <= start:
            continue
        first, stop = reading.line_range(read_at, start, end, len(data))
        pieces.append(data[first:stop])
    return pieces


def test_adjacent_byte_ranges_share_no_line_and_miss_none() -> None:
    data = b"aa\nbbbb\n\ncc\nd"
    for cut in range(len(data) + 1):
        assert b"".join(_lines_of_ranges(data, [cut])) == data
    # The line starting exactly at a cut belongs to the range that begins there.
    assert _lines_of_ranges(data, [3]) == [b"aa\n", b"bbbb\n\ncc\nd"]
    assert _lines_of_ranges(data, [2]) == [b"aa\n", b"bbbb\n\ncc\nd"]
    assert _lines_of_ranges(data, [4]) == [b"aa\nbbbb\n", b"\ncc\nd"]


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"x")), max_size=20),
    trailing=st.booleans(),
    cuts=st.lists(st.integers(0, 300), max_size=6),
)
def test_line_ranges_tile_any_file(lines: list[bytes], trailing: bool, cuts: list[int]) -> None:
    data = b"\n".join(lines) + (b"\n" if trailing and lines else b"")
    cuts = [cut for cut in cuts if cut <= len(data)]
    pieces = _lines_of_ranges(data, cuts)
    assert b"".join(pieces) == data
    end = 0
    for piece in pieces:  # every piece ends on a line boundary
        end += len(piece)
        assert not piece or end == len(data) or data[end - 1 : end] == b"\n"


# ---------------------------------------------------------------------- reading files


ROWS = [{"id": i, "page": f"p{i % 3}", "ts": f"2024-01-01T00:00:{i:02d}Z"} for i in range(40)]


def _expected_ids() -> list[int]:
    return list(range(40))


RECORDS = reading.arrow_schema_of(reader_schema(SCHEMA, FileOptions("json")))


def _records_of(url: str, size: int, split_size: int, options: FileOptions) -> list[str]:
    """Every record the text reader hands Spark, split by split (more than one split)."""
    splits = plan_file_splits([ListedFile(url, size)], split_size)
    assert len(splits) > 1
    tables = [reading.read_file_split(split, options, RECORDS) for split in splits]
    for table in tables:
        assert table.schema == RECORDS
        assert table["id"].null_count == table.num_rows  # Spark fills the columns
    return [text for table in tables for text in table[RECORD_COLUMN].to_pylist()]


def test_json_byte_ranges_hand_spark_every_line_once(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    lines = [json.dumps(row) for row in ROWS]
    path.write_text("".join(line + "\n" for line in lines))
    records = _records_of(path.as_uri(), path.stat().st_size, 97, FileOptions("json"))
    assert records == lines


def test_csv_byte_ranges_skip_only_the_files_header(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    body = [f"{row['id']},{row['page']},{row['ts']}" for row in ROWS]
    path.write_text("id,page,ts\n" + "".join(line + "\n" for line in body))
    size = path.stat().st_size
    with_header = FileOptions.parse("csv", {"header": True})
    assert _records_of(path.as_uri(), size, 64, with_header) == body
    assert _records_of(path.as_uri(), size, 64, FileOptions("csv")) == ["id,page,ts", *body]


def test_parquet_byte_ranges_take_the_row_groups_whose_middle_they_hold(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    table = pa.table(
        {
            "id": pa.array(range(1000), pa.int64()),
            "page": [f"p{i}" for i in range(1000)],
            "extra": [i * 2 for i in range(1000)],
        }
    )
    pq.write_table(table, path, row_group_size=100)
    size = path.stat().st_size
    for split_size in (500, 1500, 4000, size):
        splits = plan_file_splits([ListedFile(path.as_uri(), size)], split_size)
        ids = [
            value
            for split in splits
            for value in reading.read_file_split(split, PARQUET, ARROW)["id"].to_pylist()
        ]
        assert ids == list(range(1000)), split_size
    whole = reading.read_file_split(FileSplit(path.as_uri(), 0, size, size), PARQUET, ARROW)
    assert whole["ts"].null_count == 1000  # a column the file lacks reads as nulls


def test_conform_refuses_nulls_in_a_not_null_column() -> None:
    target = pa.schema([pa.field("n", pa.int64(), nullable=False)])
    with pytest.raises(ValueError, match="column 'n' has 1 null value"):
        reading.conform(pa.table({"n": [1, None]}), target)
    assert reading.conform(pa.table({"n": pa.array([1], pa.int32())}), target).schema == target


def _partition(*splits: object) -> reading.SplitPartition:
    return reading.SplitPartition(0, tuple(splits), attempt=None)  # type: ignore[arg-type]


def test_an_unreadable_file_fails_with_an_error_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json.gz"
    bad.write_text('{"id": 1}\n')  # not gzip: undecompressable, unlike a malformed record
    split = FileSplit(bad.as_uri(), 0, bad.stat().st_size, bad.stat().st_size)
    with pytest.raises(reading.SourceReadError, match=r"cannot read file://.*/bad.json.gz as json"):
        list(reading.read_partition(_partition(split), settings_for(), "t", RECORDS))
    missing = FileSplit((tmp_path / "gone.parquet").as_uri(), 0, 10, 10)
    with pytest.raises(reading.SourceReadError, match=r"gone\.parquet as parquet"):
        list(
            reading.read_partition(_partition(missing), settings_for(format="parquet"), "t", ARROW)
        )


# ---------------------------------------------------------------------- ranges and sentinels


def test_range_rows_carry_an_event_time_derived_from_the_value() -> None:
    source = Range(0, 100, event_time_step="10ms")
    settings = source._settings("r", "http://x", RANGE_SCHEMA, None, 2)
    target = reading.arrow_schema_of(RANGE_SCHEMA)
    batches = list(reading.read_partition(_partition(RangeSplit(5, 8)), settings, "t", target))
    rows = pa.Table.from_batches(batches).to_pylist()
    assert [row["value"] for row in rows] == [5, 6, 7]
    assert rows[2]["ts"] == datetime(2024, 1, 1, 0, 0, 0, 70_000, tzinfo=UTC)
    assert rows[2]["ts"] == source.event_time(7)
    assert batches[0].schema == target


def test_a_sentinel_row_is_recognisable_by_the_sinks() -> None:
    schema = StructType(
        [
            *SCHEMA.fields,
            StructField("n", IntegerType(), False),
            StructField(SENTINEL_COLUMN, BooleanType()),
        ]
    )
    row = sentinel_row(schema)
    assert row["ts"] == (SENTINEL_EVENT_TIME - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(
        microseconds=1
    )
    assert row["n"] == -(2**31) and row["id"] is None and row[SENTINEL_COLUMN] is True
    split = SentinelSplit.of("drain-1", row)
    batch = reading.sentinel_batch(split, reading.arrow_schema_of(schema))
    assert batch.num_rows == 1
    assert is_sentinel_row(batch.to_pylist()[0])
    without_marker = reading.sentinel_batch(split, ARROW).to_pylist()[0]
    assert is_sentinel_row(without_marker)  # the event time alone marks it
    assert SentinelSplit.of("drain-1", dict(reversed(row.items()))) == split
    with pytest.raises(ValueError, match="lacks"):
        sentinel_row(SCHEMA, values={"nope": 1})


def test_descriptors_validate_what_users_write() -> None:
    with pytest.raises(ValueError, match="unknown source format 'xml'"):
        Files("/tmp/x", format="xml", schema=SCHEMA)
    with pytest.raises(ValueError, match="on_error"):
        Files("/tmp/x", schema=SCHEMA, on_error="ignore")
    with pytest.raises(ValueError, match="needs a schema"):
        Files("/tmp/x")
    files = Files("/tmp/x", format="csv", schema=SCHEMA, split_size="1Mi", discovery_interval="2s")
    assert files.url == "file:///tmp/x" and files.split_size == 1024**2
    assert files.discovery_interval == 2.0 and files.bounded
    assert (
        files.fingerprint()
        == Files("/tmp/x", format="csv", schema=SCHEMA, split_size="1Mi").fingerprint()
    )
    assert Range(0, 10).bounded and not Range(0).bounded
    assert Range(0, 10).fingerprint() != Range(0, 11).fingerprint()


def test_the_readers_partitions_are_a_pure_function_of_the_offsets() -> None:
    settings = settings_for(kind="range", schema_json=RANGE_SCHEMA.jsonValue(), min_partitions=2)
    splits = tuple(RangeSplit(i * 100, i * 100 + 100) for i in range(7))
    start = ds.SplitOffset("clicks", 4, 1, (RangeSplit(0, 1),)).to_json()
    end = ds.SplitOffset("clicks", 5, 1, splits).to_json()

    def plan() -> list[tuple[object, ...]]:
        reader = ds.FinishableStreamReader(settings, "t", RANGE_SCHEMA)  # a fresh planner worker
        return [part.splits for part in reader.partitions(json.loads(json.dumps(start)), end)]

    first = plan()
    assert first == plan()
    assert [split for group in first for split in group] == list(splits)
    assert len(first) == 2
    reader = ds.FinishableStreamReader(settings, "t", RANGE_SCHEMA)
    assert reader.partitions(end, end) == []
    assert reader.initialOffset() == ds.initial_offset("clicks").to_json()


def test_each_source_has_its_own_stable_data_source_name() -> None:
    # one registration per source (a shared one races in Spark 4, see data_source_name)
    names = ["clicks", "a-b", "a_b", "A.b", "x" * 200, "source-0"]
    registered = [ds.data_source_name(name) for name in names]
    assert len(set(registered)) == len(names), registered
    assert registered == [ds.data_source_name(name) for name in names]  # a restart agrees
    assert all(re.fullmatch(r"finishable_\w{1,40}_[0-9a-f]{8}", name) for name in registered)


def test_a_sources_data_source_class_travels_to_the_workers() -> None:
    cls = ds.data_source_for("clicks")
    assert issubclass(cls, ds.FinishableDataSource)
    assert cls.name() == ds.data_source_name("clicks") != ds.FinishableDataSource.name()
    unpickled = cloudpickle.loads(cloudpickle.dumps(cls))  # as Spark ships it to a worker
    assert unpickled.name() == cls.name() and issubclass(unpickled, ds.FinishableDataSource)
