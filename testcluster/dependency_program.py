"""The job program of the dependency tests: it uses what ``spec.application`` ships, in the
driver and in its tasks, and publishes what each task saw and where it ran.

``--uses`` names what to use: ``env`` (package ``hellodep`` from an archived Python environment,
imported before the session starts, in each task, and by a Python data source's planner in the
driver and its reader in a task), ``pyfiles`` (module ``mymod`` from a
pyFiles zip), ``files`` (``data.txt`` through ``SparkFiles``) and ``jvm`` (class
``dev.finishable.test.Hello`` from a jar or a package: through py4j in the driver, through
``java_method`` in the tasks). The modules are imported by name: only the shipped dependencies
hold them (testcluster/artifacts.py builds those).
"""

from __future__ import annotations

import argparse
import importlib
import json
import socket
from collections.abc import Iterator
from typing import Any

from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention
from pyspark.sql.datasource import DataSource, DataSourceReader

from finishable import FinishableJob, sinks, sources

ROWS = 20
OUTPUT_NAME = "rows"


def seen_in_task(uses: set[str]) -> dict[str, str]:
    """What this Python worker sees of each shipped dependency, and its host."""
    seen = {"host": socket.gethostname()}
    if "env" in uses:
        hellodep = importlib.import_module("hellodep")
        seen["env"] = f"{hellodep.greet('task')} from {hellodep.__file__}"
    if "pyfiles" in uses:
        seen["pyfiles"] = importlib.import_module("mymod").NAME
    if "files" in uses:
        from pyspark import SparkFiles  # noqa: PLC0415 - pyspark's worker side

        with open(SparkFiles.get("data.txt")) as data:
            seen["files"] = data.read().strip()
    return seen


class _ProbeReader(DataSourceReader):
    def read(self, partition: Any) -> Iterator[tuple[str, str]]:
        hellodep = importlib.import_module("hellodep")  # in a task's Python worker
        yield (hellodep.greet("reader"), socket.gethostname())


class Probe(DataSource):
    """A Python data source whose planning imports the env's package (Spark plans a Python
    data source in a Python worker the driver's JVM starts) and whose reader does too."""

    @classmethod
    def name(cls) -> str:
        return "dependency_probe"

    def schema(self) -> str:
        importlib.import_module("hellodep")
        return "greeting STRING, host STRING"

    def reader(self, schema: Any) -> DataSourceReader:
        return _ProbeReader()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", required=True)
    parser.add_argument("--uses", default="env,pyfiles,files")
    args = parser.parse_args()
    uses = set(args.uses.split(","))
    seen_by_driver: dict[str, str] = {}
    if "env" in uses:  # before the session starts: from PYTHONPATH, as set for the program
        seen_by_driver["env"] = importlib.import_module("hellodep").greet("driver")
    if "pyfiles" in uses:
        seen_by_driver["pyfiles"] = importlib.import_module("mymod").NAME

    job = FinishableJob.from_env()
    if "env" in uses:
        job.spark.dataSource.register(Probe)
        (read,) = job.spark.read.format(Probe.name()).load().collect()
        seen_by_driver["datasource"] = f"{read.greeting} on {read.host}"
    if "jvm" in uses:
        hello = job.spark._jvm.dev.finishable.test.Hello  # type: ignore[union-attr]
        seen_by_driver["jvm"] = str(hello.greet("driver"))

    @F.udf("string")
    def task(value: int) -> str:
        return json.dumps(seen_in_task(uses))

    rows = job.read_stream(sources.Range(0, ROWS, split_size=5), name="numbers")
    computed = rows.select(
        "value",
        "ts",
        task("value").alias("task"),
        F.lit(json.dumps(seen_by_driver)).alias("driver"),
    )
    if "jvm" in uses:
        greeting = F.expr("java_method('dev.finishable.test.Hello', 'greet', 'task')")
        computed = computed.withColumn("jvm", greeting)
    sink = sinks.TransactionalFiles(args.output, format="json", name=OUTPUT_NAME)
    job.write_stream(computed, sink)
    job.run()


if __name__ == "__main__":
    main()
