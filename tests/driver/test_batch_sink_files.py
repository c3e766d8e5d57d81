"""What a Batch job publishes to ``sinks.TransactionalFiles`` is what it read, type for type,
whether Spark's own writers staged the files (``dev.finishable.spark.SinkWrite``, the default
for parquet) or Python's (``spark.finishable.dataPath=python``, and every JSON sink).

The input is a parquet file pyarrow writes with one column of each kind a sink carries (nulls in
every column); the published files are read back by ``read_committed`` (pyarrow, through the
manifests) and by ``spark.read``, and both must equal the table written.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from finishable import sinks, sources
from finishable.connectors.jvm import DATA_PATH_CONF
from finishable.local.shuffle import LocalShuffle
from tests.driver.test_batch_program import close_jobs, make_job, shuffle, spark

__all__ = ["close_jobs", "shuffle", "spark"]  # the fixtures this module shares

pytestmark = pytest.mark.quick

SCHEMA = (
    "id long, small int, ratio double, price decimal(12,2), name string, payload binary, "
    "flag boolean, day date, at timestamp, tags array<long>, counts map<string,long>, "
    "point struct<x:long,label:string>"
)


def _every_kind() -> pa.Table:
    utc = dt.UTC
    rows: list[dict[str, Any]] = []
    for n in range(300):
        rows.append(
            {
                "id": n,
                "small": n % 100,
                "ratio": n / 7,
                "price": Decimal(n * 101) / 100,
                "name": f"näme-{n} ✓",
                "payload": bytes([n % 256, 0, 255]),
                "flag": n % 2 == 0,
                "day": dt.date(2024, 1, 1) + dt.timedelta(days=n),
                "at": dt.datetime(2024, 3, 1, 12, 0, 0, n * 1000, tzinfo=utc),
                "tags": [n, n + 1] if n % 5 else [],
                "counts": {"a": n, "b": None} if n % 3 else {},
                "point": {"x": n, "label": None if n % 4 else "corner"},
            }
        )
    rows.append({"id": 300})  # nulls in every other column
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("small", pa.int32()),
            ("ratio", pa.float64()),
            ("price", pa.decimal128(12, 2)),
            ("name", pa.string()),
            ("payload", pa.binary()),
            ("flag", pa.bool_()),
            ("day", pa.date32()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("tags", pa.list_(pa.int64())),
            ("counts", pa.map_(pa.string(), pa.int64())),
            ("point", pa.struct([("x", pa.int64()), ("label", pa.string())])),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


@pytest.fixture
def writers(spark: SparkSession, request: pytest.FixtureRequest) -> Iterator[str]:
    spark.conf.set(DATA_PATH_CONF, request.param)
    yield str(request.param)
    spark.conf.unset(DATA_PATH_CONF)


def _comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows by id, maps as sorted pairs (pyarrow gives maps as lists of pairs), instants in UTC
    (``collect()`` gives them as naive local times)."""
    out = []
    for row in sorted(rows, key=lambda r: r["id"]):
        counts = row.get("counts")
        if isinstance(counts, dict):
            counts = list(counts.items())
        at = row.get("at")
        if at is not None:
            at = at.astimezone(dt.UTC)
        out.append({**row, "counts": None if counts is None else sorted(counts), "at": at})
    return out


@pytest.mark.parametrize("writers", ["jvm", "python"], indirect=True)
def test_a_batch_sink_publishes_every_kind_of_column_as_it_was_read(
    spark: SparkSession,
    shuffle: LocalShuffle,
    tmp_path: Path,
    *,
    writers: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    table = _every_kind()
    (tmp_path / "input").mkdir()
    pq.write_table(table, tmp_path / "input" / "part-0.parquet")
    job = make_job(spark, tmp_path, shuffle)
    frame = job.read(sources.Files(str(tmp_path / "input"), "parquet", SCHEMA), name="rows")
    sink = sinks.TransactionalFiles(str(tmp_path / "out"), name="rows")
    with caplog.at_level(logging.INFO, logger="finishable.driver.batch.rounds"):
        job.write(job.stage("rows", frame), sink)
        job.run()
    written_by = "Spark's own writers" if writers == "jvm" else "Python writers"
    assert any(f"written by {written_by}" in r.getMessage() for r in caplog.records)

    expected = _comparable(table.to_pylist())
    assert _comparable(sink.read_committed().to_pylist()) == expected
    by_spark = spark.read.schema(SCHEMA).parquet(*sink.committed_files())
    assert _comparable([row.asDict(recursive=True) for row in by_spark.collect()]) == expected
