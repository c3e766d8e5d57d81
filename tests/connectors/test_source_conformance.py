"""``sources.Files`` reads what ``spark.read`` reads: a corpus of awkward files, both ways.

Every case is a directory of files, a format, a schema and Spark reader options. The source reads
it through its coordinator in a real Structured Streaming query (``availableNow``), with byte
ranges small enough that every file is cut, on both data paths (the Python reader, and Spark's
own readers in ``SplitStream``: ``spark.finishable.dataPath.streaming``); ``spark.read`` reads it
in the same session; the two DataFrames must have the same columns and the same rows, as many
times each. (tests/driver/test_batch_reads.py reads the corpus through Batch jobs.)
"""

from __future__ import annotations

import bz2
import gzip
import json
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession

from finishable.connectors.jvm import STREAMING_DATA_PATH_CONF
from finishable.connectors.sources import Files
from finishable.coordinator.endpoint import DriverEndpoint
from finishable.driver.source_coordinator import SourceCoordinator

pytestmark = pytest.mark.full

TOKEN = "conformance-token"


@pytest.fixture(params=["python", "jvm"])
def data_path(spark: SparkSession, request: pytest.FixtureRequest) -> Iterator[str]:
    """The streaming data path the source is read by."""
    spark.conf.set(STREAMING_DATA_PATH_CONF, request.param)
    yield str(request.param)
    spark.conf.unset(STREAMING_DATA_PATH_CONF)


@dataclass
class Case:
    """One corpus directory and how both readers read it."""

    format: str
    schema: str
    files: dict[str, bytes]
    options: dict[str, Any] = field(default_factory=dict)
    split_size: int | None = 48


def _lines(*rows: str, end: str = "\n") -> bytes:
    return "".join(row + end for row in rows).encode("utf-8")


PEOPLE = "id int, name string, score double, born date"
EVENTS = "id int, at timestamp, note string"


def _cases() -> dict[str, Case]:
    headerless = {
        f"part-{index:02d}.csv": _lines(
            *(
                f"{index * 10 + row},name {row},{row * 1.5},2024-01-{row + 1:02d}"
                for row in range(4)
            )
        )
        for index in range(6)
    }
    return {
        # The case: headerless CSV files, where a header default loses a row per file.
        "csv-headerless": Case("csv", PEOPLE, headerless),
        "csv-header-bom-crlf-blank-lines": Case(
            "csv",
            PEOPLE,
            {
                "a.csv": b"\xef\xbb\xbfid,name,score,born\r\n1,ann,1.0,2024-02-01\r\n\r\n"
                b"2,bob,,2024-02-02\r\n   \r\n3,,3.5,\r\n",
                "b.csv": b"\n\nid,name,score,born\n4,dan,4.0,2024-02-04\n5,eve,5.5,2024-02-05",
            },
            {"header": True},
        ),
        "csv-quoting-nulls-and-separators": Case(
            "csv",
            "id int, text string, amount decimal(10,2)",
            {
                "q.csv": _lines(
                    '1;"semi;colon";1.25',
                    '2;"say \\"hi\\"";NA',
                    "3;NA;3.50",
                    "4;'single';4",
                    '5;"";5',
                    "6;;6",
                    "  7 ;  padded  ; 7",
                )
            },
            {"sep": ";", "nullValue": "NA", "emptyValue": "<empty>", "quote": '"'},
        ),
        "csv-multiline-quoted-newlines": Case(
            "csv",
            "id int, body string, tail string",
            {
                "m.csv": _lines(
                    "id,body,tail",
                    '1,"first line',
                    'second line",x',
                    '2,"a ""quoted"" word",y',
                    '3,"three',
                    "",
                    'lines",z',
                    "4,plain,w",
                ),
                "n.csv": _lines("id,body,tail", '5,"x\\"', 'y",v'),
            },
            {"header": True, "multiLine": True},
        ),
        "csv-permissive-with-corrupt-column": Case(
            "csv",
            "id int, name string, _corrupt_record string",
            {"bad.csv": _lines("1,ok", "two,bad", "3,ok,extra", "4", "5,fine")},
            {"mode": "PERMISSIVE"},
        ),
        "csv-dropmalformed": Case(
            "csv",
            "id int, name string",
            {"bad.csv": _lines("1,ok", "two,bad", "3,ok,extra", "4", "5,fine")},
            {"mode": "DROPMALFORMED"},
        ),
        "csv-timestamps-formats-and-zones": Case(
            "csv",
            EVENTS,
            {
                "t.csv": _lines(
                    "1,01/03/2024 10:15,plain",
                    "2,02/03/2024 23:59,late",
                    "3,not a time,bad",
                )
            },
            {"timestampFormat": "dd/MM/yyyy HH:mm"},
        ),
        "csv-iso-timestamps-mixed-zones": Case(
            "csv",
            EVENTS,
            {
                "z.csv": _lines(
                    "1,2024-03-01T10:00:00Z,utc",
                    "2,2024-03-01T10:00:00+02:00,plus two",
                    "3,2024-03-01 10:00:00,no zone",
                    "4,2024-03-01T10:00:00.123-05:30,minus",
                )
            },
        ),
        "csv-compressed-and-comments": Case(
            "csv",
            PEOPLE,
            {
                "a.csv.gz": gzip.compress(_lines("id,name,score,born", "1,gz,1.0,2024-01-01") * 3),
                "b.csv.bz2": bz2.compress(_lines("id,name,score,born", "# note", "2,bz,2,")),
                "c.csv.deflate": zlib.compress(_lines("id,name,score,born", "3,zz,3,")),
                "d.csv": _lines("id,name,score,born", "#4,hidden,4,", "5,shown,5,"),
            },
            {"header": True, "comment": "#"},
        ),
        "csv-listing-glob-hidden-and-nested": Case(
            "csv",
            "id int, name string",
            {
                "top.csv": _lines("1,top"),
                "skip.txt": _lines("2,txt"),
                "_SUCCESS": b"",
                ".hidden.csv": _lines("3,hidden"),
                "nested/deeper.csv": _lines("4,nested"),
            },
            {"pathGlobFilter": "*.{csv,tsv}"},
        ),
        "csv-partition-directories": Case(
            "csv",
            "id int, name string, year int, month string",
            {
                "year=2024/month=01/a.csv": _lines("1,jan", "2,jan"),
                "year=2024/month=02/b.csv": _lines("3,feb"),
                "year=2025/month=a%3Ab/c.csv": _lines("4,escaped"),
                "year=__HIVE_DEFAULT_PARTITION__/month=03/d.csv": _lines("5,no year"),
            },
        ),
        "csv-recursive-lookup": Case(
            "csv",
            "id int, name string",
            {
                "top.csv": _lines("1,top"),
                "nested/deeper.csv": _lines("4,nested"),
                "nested/more/deepest.csv": _lines("5,deepest"),
                "nested/_temporary/x.csv": _lines("6,temporary"),
            },
            {"recursiveFileLookup": True},
        ),
        "csv-latin1-and-line-separator": Case(
            "csv",
            "id int, name string",
            {"l.csv": "1,Zoë|2,Ångström|3,naïve".encode("latin-1")},
            {"encoding": "ISO-8859-1", "lineSep": "|"},
        ),
        "json-lines-awkward": Case(
            "json",
            "id int, name string, tags array<string>, inner struct<a: int, b: string>, "
            "at timestamp, _corrupt_record string",
            {
                "a.json": _lines(
                    '{"id": 1, "name": "one", "tags": ["x", "y"], "inner": {"a": 1, "b": "b"}}',
                    "",
                    '   {"id": 2, "name": null, "at": "2024-03-01T10:00:00+02:00"}   ',
                    '[{"id": 3}, {"id": 4, "name": "in array"}]',
                    "[]",
                    "[1, 2]",
                    '{"id": "not a number"}',
                    "{broken",
                    '{"id": 5, "extra": "ignored", "at": "2024-03-01 10:00:00"}',
                    '{"id": 6, "name": "say \\"hi\\", [not an array]"}',
                ),
                "b.json": _lines('{"id": 7}', '{"id": 8, "name": "\\u00e9t\\u00e9"}', end="\r\n"),
            },
        ),
        "json-multiline-documents": Case(
            "json",
            "id int, name string",
            {
                "array.json": json.dumps(
                    [{"id": 1, "name": "a"}, {"id": 2, "name": "b, [c]"}], indent=2
                ).encode(),
                "object.json": json.dumps({"id": 3, "name": "multi\nline"}, indent=4).encode(),
            },
            {"multiLine": True},
        ),
        "json-dropmalformed-and-options": Case(
            "json",
            "id int, name string",
            {
                "d.json": _lines(
                    "{'id': 1, 'name': 'single quotes'}",
                    '{"id": 2, /* a comment */ "name": "commented"}',
                    '{"id": 03, "name": "leading zero"}',
                    "{bad json",
                )
            },
            {"mode": "DROPMALFORMED", "allowSingleQuotes": True, "allowComments": True},
        ),
        "orc-stripes-nulls-and-a-missing-column": Case(
            "orc",
            "id long, name string, price decimal(10,2), day date, flags array<boolean>, extra int",
            _orc_files(),
            split_size=64,  # ignored: ORC files are read whole
        ),
    }


def _orc_files() -> dict[str, bytes]:
    """Two ORC files: one of several small stripes with nulls, one without a declared column."""
    import datetime as dt
    import io
    from decimal import Decimal

    from pyarrow import orc

    many = pa.table(
        {
            "id": pa.array(range(3000), pa.int64()),
            "name": [None if i % 7 == 0 else f"n{i} ✓" for i in range(3000)],
            "price": pa.array([Decimal(i) / 4 for i in range(3000)], pa.decimal128(10, 2)),
            "day": [dt.date(2024, 1, 1) + dt.timedelta(days=i % 400) for i in range(3000)],
            "flags": [[i % 2 == 0, None] if i % 3 else None for i in range(3000)],
        }
    )
    files = {}
    for name, table, stripe in (("a.orc", many, 4096), ("b.orc", many.select(["id"]), 64 << 20)):
        out = io.BytesIO()
        orc.write_table(table, out, stripe_size=stripe)
        files[name] = out.getvalue()
    return files


def _parquet_case(root: Path) -> None:
    table = pa.table(
        {
            "id": pa.array(range(40), pa.int64()),
            "name": [None if i % 7 == 0 else f"n{i}" for i in range(40)],
        }
    )
    pq.write_table(table, root / "a.parquet", row_group_size=8)
    pq.write_table(pa.table({"id": pa.array([100, 101], pa.int64())}), root / "b.parquet")


def _write(root: Path, case: Case) -> None:
    for name, data in case.files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


Fields = list[tuple[str, Any]]
Rows = Counter[tuple[Any, ...]]


def _read_with_source(spark: SparkSession, source: Files, checkpoint: Path) -> tuple[Fields, Rows]:
    """The source's columns and rows, read once through its coordinator (``availableNow``)."""
    endpoint = DriverEndpoint(TOKEN)
    endpoint.start()
    coordinator = SourceCoordinator("conformance", source)
    coordinator.start(None)
    endpoint.add(coordinator.host)
    rows: Rows = Counter()

    def collect(frame: DataFrame, batch_id: int) -> None:
        del batch_id
        rows.update(_hashable(row) for row in frame.collect())

    try:
        frame = coordinator.stream(spark, endpoint.url, TOKEN)
        coordinator.begin_run(1, str(checkpoint))
        query = (
            frame.writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(240), "the availableNow run did not end"
    finally:
        endpoint.stop()
        coordinator.close()
    return _fields(frame), rows


def _hashable(value: Any) -> Any:
    """A row as nested tuples (arrays and structs included), so rows can be counted."""
    if isinstance(value, list | tuple):
        return tuple(_hashable(item) for item in value)
    return value


def _fields(frame: DataFrame) -> Fields:
    return [(f.name, f.dataType) for f in frame.schema.fields]


def _both(
    spark: SparkSession, root: Path, case: Case, tmp_path: Path
) -> tuple[Fields, Rows, Fields, Rows]:
    """What ``spark.read`` and the source read of ``root``: columns and rows of each."""
    options = {
        name: ("true" if value is True else "false" if value is False else str(value))
        for name, value in case.options.items()
    }
    expected = spark.read.format(case.format).options(**options).schema(case.schema)
    frame = expected.load(str(root))
    source = Files(
        str(root), case.format, case.schema, options=case.options, split_size=case.split_size
    )
    got_fields, got = _read_with_source(spark, source, tmp_path / "checkpoint")
    return _fields(frame), Counter(_hashable(r) for r in frame.collect()), got_fields, got


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_source_reads_what_spark_read_reads(
    spark: SparkSession, tmp_path: Path, name: str, data_path: str
) -> None:
    del data_path  # the fixture set it
    case = CASES[name]
    root = tmp_path / "input"
    _write(root, case)
    expected_fields, expected, got_fields, got = _both(spark, root, case, tmp_path)
    assert got_fields == expected_fields
    assert sum(expected.values()) > 0, "the case must have rows"
    assert got == expected, (
        f"only spark.read: {sorted(map(repr, expected - got))}\n"
        f"only the source: {sorted(map(repr, got - expected))}"
    )


def test_parquet_files_with_nulls_and_a_missing_column(
    spark: SparkSession, tmp_path: Path, data_path: str
) -> None:
    del data_path  # the fixture set it
    root = tmp_path / "input"
    root.mkdir()
    _parquet_case(root)
    case = Case("parquet", "id long, name string", {}, split_size=200)
    expected_fields, expected, got_fields, got = _both(spark, root, case, tmp_path)
    assert got_fields == expected_fields
    assert got == expected and sum(got.values()) == 42


def test_failfast_fails_both_readers_on_the_first_malformed_record(
    spark: SparkSession, tmp_path: Path, data_path: str
) -> None:
    del data_path  # the fixture set it
    root = tmp_path / "input"
    _write(root, Case("csv", "", {"bad.csv": _lines("1,ok", "two,bad")}))
    schema = "id int, name string"
    with pytest.raises(Exception, match="FAILFAST"):
        spark.read.schema(schema).options(mode="FAILFAST").csv(str(root)).collect()
    source = Files(str(root), "csv", schema, options={"mode": "failfast"})
    with pytest.raises(Exception, match="FAILFAST"):
        _read_with_source(spark, source, tmp_path / "checkpoint")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"heder": True}, "'heder' is not a csv reader option"),
        ({"header": "yes"}, "options.header: 'yes' is not a boolean"),
        ({"mode": "LENIENT"}, "options.mode: 'LENIENT' is not a parse mode"),
        ({"inferSchema": True}, "inferSchema must be false"),
        ({"encoding": "klingon"}, "options.encoding: 'klingon' is not a known encoding"),
        ({"lineSep": "||"}, "a line separator is one character"),
    ],
)
def test_bad_options_name_the_option_and_what_is_accepted(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        Files("/tmp/in", "csv", "id int", options=options)
