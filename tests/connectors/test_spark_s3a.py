"""Spark's own readers and writers on object storage (``s3a://``): the S3 connector
docker/spark-jars.sh puts in pyspark's jars (`make jars`; the image has it too), against moto's
S3 server on loopback. What Spark writes is read back by pyarrow, and what pyarrow wrote is read
by Spark: each side is checked against the other, not against itself."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pyarrow.fs
import pyarrow.parquet as pq
import pytest

from tests.state.conftest import BUCKET, S3Server

pytestmark = pytest.mark.quick


def s3a_for(spark: Any, server: S3Server) -> None:
    """Point ``s3a://`` at the moto server for the test bucket (per-bucket settings, as a user
    points one bucket at a MinIO or Ceph endpoint)."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    settings = {
        "endpoint": f"http://{server.endpoint}",
        "endpoint.region": "us-east-1",
        "path.style.access": "true",
        "connection.ssl.enabled": "false",
        "access.key": "testing",
        "secret.key": "testing",
    }
    for key, value in settings.items():
        hadoop.set(f"fs.s3a.bucket.{BUCKET}.{key}", value)


def object_store(server: S3Server) -> pyarrow.fs.S3FileSystem:
    return pyarrow.fs.S3FileSystem(
        access_key="testing",
        secret_key="testing",
        endpoint_override=server.endpoint,
        scheme="http",
        region="us-east-1",
    )


def test_spark_writes_and_reads_s3a_urls_itself(spark: Any, s3_server: S3Server) -> None:
    s3a_for(spark, s3_server)
    prefix = f"s3a-{uuid.uuid4().hex[:8]}"
    store = object_store(s3_server)

    rows = [{"customer": f"c{n % 7}", "cents": n} for n in range(500)]
    with store.open_output_stream(f"{BUCKET}/{prefix}/in/orders.json") as out:
        out.write("".join(json.dumps(row) + "\n" for row in rows).encode())
    orders = spark.read.schema("customer STRING, cents LONG").json(f"s3a://{BUCKET}/{prefix}/in")
    totals = orders.groupBy("customer").sum("cents").withColumnRenamed("sum(cents)", "cents")
    totals.write.parquet(f"s3a://{BUCKET}/{prefix}/out")

    expected: dict[str, int] = {}
    for row in rows:
        expected[row["customer"]] = expected.get(row["customer"], 0) + row["cents"]
    written = pq.read_table(f"{BUCKET}/{prefix}/out", filesystem=store).to_pylist()
    assert {row["customer"]: row["cents"] for row in written} == expected
    assert store.get_file_info(f"{BUCKET}/{prefix}/out/_SUCCESS").type == pyarrow.fs.FileType.File
