"""``sources.Kafka`` against Spark's own Kafka source, on the same topic in the same session.

A real broker (testcluster/kafka.py) holds ``--records`` clicks in a topic of ``--partitions``
partitions, produced in transactions (the page in the value, the event time in the record's
timestamp). The same pipeline (a windowed count per page and minute, watermark on the record's
timestamp, appended to parquet) reads it two ways, ``read_committed`` both:

* *plain*: Spark's Kafka source (``format("kafka")``, spark-sql-kafka 4.2.0, pinned in
  testcluster/spark-kafka-jars.txt) and Spark's parquet sink;
* *runtime*: ``FinishableJob`` with ``sources.Kafka`` (the coordinator cutting the partitions'
  offsets into splits, the records read in Python workers with confluent-kafka) and
  ``sinks.TransactionalFiles`` (a stored checkpoint per batch, the sink's two-phase commit).

Both take ``--per-trigger`` offsets per micro-batch with the same trigger; records/s is counted
from the query's own progress events until every record was read, over the whole run and over its
data batches alone (``steady_*``). End-to-end latency is not measured yet: the Kafka sink that would
close the loop is still to come (issue 46). Each runs once to warm up, then the median of
alternating rounds is taken. Prints one JSON line.

    .venv/bin/python benchmarks/kafka.py [--records 400000] [--partitions 4] [--per-trigger 50000]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from streaming import (  # noqa: E402 - benchmarks/streaming.py: the runs and their phases
    TRIGGER_MS,
    Run,
    RuntimeRun,
    batch_phases,
    steady_rate,
    wait_rows,
    watched,
)

from finishable import sources  # noqa: E402
from testcluster.kafka import KafkaBroker, spark_kafka_jars  # noqa: E402

TOPIC = "clicks"
START = datetime(2026, 1, 1, tzinfo=UTC)
PAGES = ("home", "search", "cart", "checkout")
TIMEOUT = 120.0


def produce(broker: KafkaBroker, records: int, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(TIMEOUT)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "transactional.id": "benchmark",
            "linger.ms": 20,
        }
    )
    producer.init_transactions(TIMEOUT)
    rng = random.Random(1)
    per_transaction = 20_000
    for first in range(0, records, per_transaction):
        producer.begin_transaction()
        for index in range(first, min(records, first + per_transaction)):
            moment = START + timedelta(milliseconds=index * 10 + rng.randrange(5_000))
            producer.produce(
                TOPIC,
                value=rng.choice(PAGES).encode(),
                partition=index % partitions,
                timestamp=int(moment.timestamp() * 1000),
            )
            if index % 10_000 == 0:
                producer.poll(0)
        producer.commit_transaction(TIMEOUT)


def windowed(records: DataFrame) -> DataFrame:
    return (
        records.select(F.col("value").cast("string").alias("page"), F.col("timestamp").alias("ts"))
        .withWatermark("ts", "1 minute")
        .groupBy(F.window("ts", "1 minute"), "page")
        .count()
        .select(F.col("window.start").alias("window_start"), "page", "count")
    )


def plain(spark: SparkSession, bootstrap: str, work: Path, total: int, per_trigger: int) -> Run:
    frame = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.isolation.level", "read_committed")
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
    )
    started = time.perf_counter()
    query = (
        windowed(frame)
        .writeStream.format("parquet")
        .option("path", str(work / "plain-out"))
        .option("checkpointLocation", str(work / "plain-checkpoint"))
        .trigger(processingTime=f"{TRIGGER_MS} milliseconds")
        .start()
    )
    return watched(spark, query, total, started)


def runtime(spark: SparkSession, bootstrap: str, work: Path, total: int, per_trigger: int) -> Run:
    source = sources.Kafka(
        bootstrap,
        topics=TOPIC,
        starting_offsets="earliest",
        max_offsets_per_trigger=per_trigger,
        discovery_interval="200ms",
    )
    run = RuntimeRun(spark, work, "throughput", source=source, transform=windowed)
    elapsed: list[float] = []
    phases: list[dict[str, Any]] = []

    def measure(started: float) -> None:
        elapsed.append(wait_rows(spark, total, started))
        phases.append(batch_phases(spark, started, elapsed[0]))
        run.request_stop(drain=False)

    run.run(measure)
    return total / elapsed[0], {"seconds": round(elapsed[0], 3), **phases[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--per-trigger", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3, help="measured runs of each (median)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    with tempfile.TemporaryDirectory(prefix="finishable-kafka-bench-") as tmp:
        root = Path(tmp)
        broker = KafkaBroker(root / "broker")
        broker.start()
        try:
            produce(broker, args.records, args.partitions)
            spark = (
                SparkSession.builder.master("local[2]")
                .config("spark.jars", ",".join(str(jar) for jar in spark_kafka_jars()))
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            ways = {"plain": plain, "runtime": runtime}
            runs: dict[str, list[Run]] = {name: [] for name in ways}
            for round_number in range(args.rounds + 1):  # round 0 warms up
                for name, way in ways.items():
                    work = root / f"{name}-{round_number}"
                    result = way(
                        spark, broker.bootstrap_servers, work, args.records, args.per_trigger
                    )
                    if round_number:
                        runs[name].append(result)
            spark.stop()
        finally:
            broker.stop()

    medians = {name: statistics.median(rate for rate, _ in done) for name, done in runs.items()}
    steady = {
        name: statistics.median(steady_rate(run, args.records) for run in done)
        for name, done in runs.items()
    }
    print(
        json.dumps(
            {
                "benchmark": "kafka",
                "records": args.records,
                "partitions": args.partitions,
                "per_trigger": args.per_trigger,
                "rounds": args.rounds,
                **{f"{name}_rows_per_s": round(rate) for name, rate in medians.items()},
                **{f"steady_{name}_rows_per_s": round(rate) for name, rate in steady.items()},
                "runtime_time_vs_plain": round(medians["plain"] / medians["runtime"], 2),
                "steady_runtime_time_vs_plain": round(steady["plain"] / steady["runtime"], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
