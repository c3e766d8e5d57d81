"""Batch reads of ``sources.Files`` give what ``spark.read`` gives, through both readers.

The conformance corpus (tests/connectors/test_source_conformance.py: awkward files, every file
cut into byte ranges) read by a Batch job, once through Spark's own file readers under the
coordinator (``dev.finishable.spark.FilesRead``, the default) and once through the Python reader
slots (``spark.finishable.reader=python``); the published rows must equal ``spark.read``'s.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from finishable import sinks, sources
from finishable.connectors.batch.jvm_reads import READER_CONF
from finishable.local.shuffle import LocalShuffle
from tests.connectors.test_source_conformance import CASES, Case, _hashable, _write
from tests.driver.test_batch_program import close_jobs, make_job, shuffle, spark

__all__ = ["close_jobs", "shuffle", "spark"]  # the fixtures this module shares

pytestmark = pytest.mark.full


@pytest.fixture
def reader(spark: SparkSession, request: pytest.FixtureRequest) -> Iterator[str]:
    spark.conf.set(READER_CONF, request.param)
    yield str(request.param)
    spark.conf.unset(READER_CONF)


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
