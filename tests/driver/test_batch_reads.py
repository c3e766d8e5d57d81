"""Batch reads of ``sources.Files`` give what ``spark.read`` gives, through both readers.

The conformance corpus (tests/connectors/test_source_conformance.py: awkward files, every file
cut into byte ranges) read by a Batch job, once through Spark's own file readers under the
coordinator (``dev.finishable.spark.FilesRead``, the default) and once through the Python reader
slots (``spark.finishable.dataPath=python``); the published rows must equal ``spark.read``'s.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from finishable import sinks, sources
from finishable.connectors.jvm import DATA_PATH_CONF
from finishable.driver.batch.joblog import CoordinatorSnapshot
from finishable.driver.outcome import JobFailed
from finishable.local.shuffle import LocalShuffle
from tests.connectors.test_source_conformance import CASES, Case, _hashable, _write
from tests.driver.test_batch_program import close_jobs, logged_events, make_job, shuffle, spark

__all__ = ["close_jobs", "shuffle", "spark"]  # the fixtures this module shares

pytestmark = pytest.mark.full


@pytest.fixture
def reader(spark: SparkSession, request: pytest.FixtureRequest) -> Iterator[str]:
    spark.conf.set(DATA_PATH_CONF, request.param)
    yield str(request.param)
    spark.conf.unset(DATA_PATH_CONF)


def _batch_read(
    spark: SparkSession, shuffle: LocalShuffle, tmp_path: Path, root: Path, case: Case
) -> tuple[list[tuple[str, Any]], Counter[Any]]:
    job = make_job(spark, tmp_path, shuffle)
    source = sources.Files(
        str(root), case.format, case.schema, options=case.options, split_size=case.split_size
    )
    sink = sinks.TransactionalFiles(str(tmp_path / "out"), name="rows")
    frame = job.read(source, name="input")
    fields = [(f.name, f.dataType) for f in frame.schema.fields]
    job.write(job.stage("rows", frame), sink)
    job.run()
    published = spark.read.schema(frame.schema).parquet(*sink.committed_files())
    return fields, Counter(_hashable(row) for row in published.collect())


@pytest.mark.parametrize("reader", ["jvm", "python"], indirect=True)
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_batch_read_gives_what_spark_read_gives(
    spark: SparkSession,
    shuffle: LocalShuffle,
    tmp_path: Path,
    *,
    reader: str,
    name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    case = CASES[name]
    root = tmp_path / "input"
    _write(root, case)
    options = {
        k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in case.options.items()
    }
    plain = spark.read.format(case.format).options(**options).schema(case.schema).load(str(root))
    expected = Counter(_hashable(row) for row in plain.collect())
    with caplog.at_level(logging.INFO, logger="finishable.driver.batch.runtime"):
        fields, got = _batch_read(spark, shuffle, tmp_path, root, case)
    said = "Spark's" if reader == "jvm" else "Python reader slots"
    assert any(said in record.getMessage() for record in caplog.records)
    assert fields == [(f.name, f.dataType) for f in plain.schema.fields]
    assert sum(expected.values()) > 0, "the case must have rows"
    assert got == expected, (
        f"only spark.read: {sorted(map(repr, expected - got))}\n"
        f"only the job: {sorted(map(repr, got - expected))}"
    )


def _orders_with_a_corrupt_file(root: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir()
    for index in range(3):
        table = pa.table({"id": list(range(index * 10, index * 10 + 10))})
        pq.write_table(table, root / f"part-{index}.parquet")
    (root / "part-3.parquet").write_bytes(b"PAR1 this is not parquet at all PAR1")


@pytest.mark.parametrize("reader", ["jvm", "python"], indirect=True)
def test_an_unreadable_file_fails_the_job_naming_it_or_is_skipped_and_reported(
    spark: SparkSession, shuffle: LocalShuffle, tmp_path: Path, reader: str
) -> None:
    root = tmp_path / "input"
    _orders_with_a_corrupt_file(root)
    job = make_job(spark, tmp_path / "fail", shuffle)
    source = sources.Files(str(root), "parquet", "id long")
    job.write(
        job.stage("rows", job.read(source, name="input")),
        sinks.TransactionalFiles(str(tmp_path / "fail" / "out"), name="rows"),
    )
    named = r"SourceReadError: cannot read file://\S*/part-3\.parquet as parquet"
    with pytest.raises(JobFailed, match=named):
        job.run()

    job = make_job(spark, tmp_path / "skip", shuffle)
    skipping = sources.Files(str(root), "parquet", "id long", on_error="skip")
    frame = job.read(skipping, name="input")
    sink = sinks.TransactionalFiles(str(tmp_path / "skip" / "out"), name="rows")
    job.write(job.stage("rows", frame), sink)
    job.run()
    assert sorted(sink.read_committed()["id"].to_pylist()) == list(range(30)), reader
    # the skip is in the source's last snapshot in the event log, with the reader's reason
    (last,) = [e for e in logged_events(tmp_path / "skip") if isinstance(e, CoordinatorSnapshot)][
        -1:
    ]
    reasons = list(json.loads(base64.b64decode(last.data)).get("skipped", {}).values())
    assert len(reasons) == 1
    assert re.search(r"cannot read file://\S*/part-3\.parquet as parquet", reasons[0]), reasons
