"""``sources.Files`` on ``s3://``, read by Spark's own readers (Hadoop's S3 connector, ``s3a``)
and by the Python readers, and ``sinks.TransactionalFiles`` on ``s3://`` staged by Spark's own
writers or by Python's, against moto's S3 server on loopback.

The objects are written by pyarrow, in ``key=value`` directories and cut into byte ranges; what
a Batch job publishes (read back by pyarrow through its manifests) and what a streaming query
reads are compared with the rows written, not with another Spark read. The URL carries the store
and the keys as pyarrow takes them; the JVM is handed them as that bucket's ``fs.s3a`` settings
(connectors/jvm.py ``hadoop_settings``).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from finishable import sinks, sources
from finishable.connectors.jvm import DATA_PATH_CONF, STREAMING_DATA_PATH_CONF
from finishable.local.shuffle import LocalShuffle
from tests.connectors.test_source_conformance import _read_with_source
from tests.connectors.test_spark_s3a import object_store
from tests.driver.test_batch_program import close_jobs, make_job, shuffle, spark
from tests.state.conftest import BUCKET, S3Server, s3_server

__all__ = ["close_jobs", "s3_server", "shuffle", "spark"]  # the fixtures this module shares

pytestmark = pytest.mark.quick

REGIONS = ("eu", "us", "ap")
SCHEMA = "id long, customer string, cents long, region string"


def _url(server: S3Server, prefix: str) -> str:
    """The source's URL with its store and keys in it, as a user writes it for MinIO or Ceph."""
    return f"s3://testing:testing@{server.url(prefix).removeprefix('s3://')}"


def _orders_as_json(server: S3Server, prefix: str) -> Counter[tuple[object, ...]]:
    """Three ``region=`` directories of JSON lines; the rows written, as the job must give them."""
    store = object_store(server)
    written: Counter[tuple[object, ...]] = Counter()
    for index, region in enumerate(REGIONS):
        rows = [
            {"id": index * 1000 + n, "customer": f"c{n % 7}", "cents": n * 3} for n in range(400)
        ]
        with store.open_output_stream(f"{BUCKET}/{prefix}/region={region}/part-0.json") as out:
            out.write("".join(json.dumps(row) + "\n" for row in rows).encode())
        written.update((r["id"], r["customer"], r["cents"], region) for r in rows)
    return written


@pytest.fixture
def reader(spark: SparkSession, request: pytest.FixtureRequest) -> Iterator[str]:
    spark.conf.set(DATA_PATH_CONF, request.param)
    spark.conf.set(STREAMING_DATA_PATH_CONF, request.param)
    yield str(request.param)
    spark.conf.unset(DATA_PATH_CONF)
    spark.conf.unset(STREAMING_DATA_PATH_CONF)


@pytest.mark.parametrize("reader", ["jvm", "python"], indirect=True)
def test_a_batch_job_reads_s3_objects_by_byte_range_with_their_partition_values(
    spark: SparkSession,
    shuffle: LocalShuffle,
    s3_server: S3Server,
    tmp_path: Path,
    *,
    reader: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    prefix = f"orders-{uuid.uuid4().hex[:8]}"
    written = _orders_as_json(s3_server, prefix)
    job = make_job(spark, tmp_path, shuffle)
    source = sources.Files(_url(s3_server, prefix), "json", SCHEMA, split_size="4Ki")
    sink = sinks.TransactionalFiles(_url(s3_server, f"{prefix}-out"), name="orders")
    with caplog.at_level(logging.INFO, logger="finishable.driver.batch"):
        job.write(job.stage("orders", job.read(source, name="orders")), sink)
        job.run()
    said = [record.getMessage() for record in caplog.records]
    read = "Spark's" if reader == "jvm" else "Python reader slots"
    assert any(read in line for line in said), said
    written_by = "Spark's own writers" if reader == "jvm" else "Python writers"
    assert any(f"stage orders: written by {written_by}" in line for line in said), said
    published = sink.read_committed().to_pylist()
    got = Counter((r["id"], r["customer"], r["cents"], r["region"]) for r in published)
    assert got == written


@pytest.mark.parametrize("reader", ["jvm", "python"], indirect=True)
def test_a_stream_reads_s3_parquet_objects_once_each(
    spark: SparkSession,
    s3_server: S3Server,
    tmp_path: Path,
    *,
    reader: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    prefix = f"clicks-{uuid.uuid4().hex[:8]}"
    store = object_store(s3_server)
    written: Counter[tuple[object, ...]] = Counter()
    for index in range(4):
        ids = list(range(index * 500, index * 500 + 500))
        table = pa.table({"id": ids, "page": [f"p{n % 11}" for n in ids]})
        pq.write_table(table, f"{BUCKET}/{prefix}/part-{index}.parquet", filesystem=store)
        written.update((n, f"p{n % 11}") for n in ids)
    source = sources.Files(_url(s3_server, prefix), "parquet", "id long, page string")
    with caplog.at_level(logging.INFO, logger="finishable.connectors.jvm"):
        fields, got = _read_with_source(spark, source, tmp_path / "checkpoint")
    jvm = any("Spark's parquet reader" in record.getMessage() for record in caplog.records)
    assert jvm == (reader == "jvm")
    assert [name for name, _ in fields] == ["id", "page"]
    assert got == written
