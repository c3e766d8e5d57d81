"""Kafka → windowed count → Kafka: plain Structured Streaming against a finishable job, in one run.

A real broker (testcluster/kafka.py) holds ``--records`` clicks in a topic of ``--partitions``
partitions, produced in transactions (the page in the value, the event time in the record's
timestamp). The same pipeline (a windowed count per page, watermark on the record's timestamp,
each window written as one JSON record to an output topic) runs two ways:

* *plain*: Spark's Kafka source (``format("kafka")``, ``read_committed``) and Spark's Kafka sink
  (at least once), spark-sql-kafka 4.2.0 pinned in testcluster/spark-kafka-jars.txt;
* *runtime*: ``FinishableJob`` with ``sources.Kafka`` (the coordinator cutting the partitions'
  offsets into splits) and ``sinks.Kafka`` (exactly once: a transaction per task and batch,
  committed by the batch's commit), with a stored checkpoint per batch. ``--data-path`` says who
  carries the records: ``jvm`` (the default: Kafka's Java consumer and producer, ``KafkaRead``
  and ``KafkaWrite``) or ``python`` (confluent-kafka in Python workers).

Two measurements, each way in turn, a warm-up round and then the median of ``--rounds``:

* *throughput*: both take ``--per-trigger`` offsets per micro-batch with the same trigger;
  records/s is counted from the query's own progress events until every record was read, over
  the whole run and over its data batches alone (``steady_*``);
* *latency*: a producer writes ``--live-rate`` clicks/s stamped with the wall clock for
  ``--live-seconds`` into a fresh topic, counted in 1-second windows with no watermark delay; an
  independent consumer reading the output topic ``read_committed`` notes when each window's
  record arrives. A window's latency is its arrival minus its end: what a downstream reader
  waits for a result once its window closed (p50 and p95).

Prints one JSON line.

    .venv/bin/python benchmarks/kafka.py [--records 400000] [--partitions 4] [--per-trigger 50000]
        [--data-path jvm|python]
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
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
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

from finishable import sinks, sources  # noqa: E402
from finishable.connectors.jvm import DATA_PATHS, STREAMING_DATA_PATH_CONF  # noqa: E402
from testcluster.kafka import KafkaBroker, spark_kafka_jars  # noqa: E402

TOPIC = "clicks"
START = datetime(2026, 1, 1, tzinfo=UTC)
PAGES = ("home", "search", "cart", "checkout")
TIMEOUT = 120.0


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT)


def produce(broker: KafkaBroker, records: int, partitions: int) -> None:
    create_topic(broker.bootstrap_servers, TOPIC, partitions)
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


def windowed(records: DataFrame, window: str = "1 minute", delay: str = "1 minute") -> DataFrame:
    """The windowed count per page, each window as the record ``{window_start, page, count}``."""
    counts = (
        records.select(F.col("value").cast("string").alias("page"), F.col("timestamp").alias("ts"))
        .withWatermark("ts", delay)
        .groupBy(F.window("ts", window), "page")
        .count()
        .select(F.col("window.start").alias("window_start"), "page", "count")
    )
    return counts.select(
        F.col("page").alias("key"),
        F.to_json(F.struct("window_start", "page", "count")).alias("value"),
    )


def live(records: DataFrame) -> DataFrame:
    return windowed(records, "1 second", "0 seconds")


def kafka_stream(spark: SparkSession, bootstrap: str, topic: str, per_trigger: int) -> DataFrame:
    """Spark's own Kafka source, read_committed, from the earliest offsets."""
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.isolation.level", "read_committed")
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
    )


def plain_query(
    spark: SparkSession, frame: DataFrame, bootstrap: str, output: str, checkpoint: Path
) -> Any:
    """Spark's own Kafka sink (at least once) into ``output``."""
    create_topic(bootstrap, output, 2)
    return (
        frame.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", output)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=f"{TRIGGER_MS} milliseconds")
        .start()
    )


def runtime_run(
    spark: SparkSession,
    work: Path,
    name: str,
    *,
    source: sources.Source,
    transform: Callable[[DataFrame], DataFrame],
    bootstrap: str,
    output: str,
) -> RuntimeRun:
    create_topic(bootstrap, output, 2)
    sink = sinks.Kafka(output, bootstrap, name="out")
    return RuntimeRun(spark, work, name, source=source, transform=transform, sink=sink)


def kafka_source(bootstrap: str, topic: str, per_trigger: int) -> sources.Kafka:
    return sources.Kafka(
        bootstrap,
        topics=topic,
        starting_offsets="earliest",
        max_offsets_per_trigger=per_trigger,
        discovery_interval="200ms",
    )


def plain(spark: SparkSession, bootstrap: str, work: Path, total: int, per_trigger: int) -> Run:
    frame = windowed(kafka_stream(spark, bootstrap, TOPIC, per_trigger))
    started = time.perf_counter()
    query = plain_query(spark, frame, bootstrap, f"plain-{work.name}", work / "checkpoint")
    return watched(spark, query, total, started)


def runtime(spark: SparkSession, bootstrap: str, work: Path, total: int, per_trigger: int) -> Run:
    source = kafka_source(bootstrap, TOPIC, per_trigger)
    run = runtime_run(
        spark,
        work,
        "throughput",
        source=source,
        transform=windowed,
        bootstrap=bootstrap,
        output=f"rt-{work.name}",
    )
    elapsed: list[float] = []
    phases: list[dict[str, Any]] = []

    def measure(started: float) -> None:
        elapsed.append(wait_rows(spark, total, started))
        phases.append(batch_phases(spark, started, elapsed[0]))
        run.request_stop(drain=False)

    run.run(measure)
    return total / elapsed[0], {"seconds": round(elapsed[0], 3), **phases[0]}


# -- latency: live clicks, 1-second windows, an independent read_committed consumer --------------


class WindowWatch:
    """Notes when each window's record arrives in ``topic``, read ``read_committed``."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.arrivals: dict[tuple[float, str], float] = {}
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"watch-{topic}",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            message = self._consumer.poll(0.05)
            if message is None or message.error():
                continue
            arrived = time.time()
            record = json.loads(message.value() or b"{}")
            start = datetime.fromisoformat(record["window_start"]).timestamp()
            self.arrivals.setdefault((start, record["page"]), arrived)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


def produce_live(bootstrap: str, topic: str, rate: int, seconds: float) -> float:
    """``rate`` clicks/s stamped with the wall clock for ``seconds``; returns when it stopped."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    rng = random.Random(2)
    began = time.time()
    sent = 0
    while (now := time.time()) < began + seconds:
        due = int((now - began) * rate)
        for _ in range(due - sent):
            producer.produce(topic, value=rng.choice(PAGES).encode(), timestamp=int(now * 1000))
        sent = due
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(TIMEOUT)
    return time.time()


def latencies(watch: WindowWatch, began: float, ended: float) -> list[float]:
    """Seconds from each window's end to its record's arrival, for windows the clicks closed."""
    return sorted(
        arrived - (start + 1)
        for (start, _), arrived in watch.arrivals.items()
        if start >= began and start + 2 <= ended
    )


def wait_windows(watch: WindowWatch, began: float, ended: float) -> None:
    """Until the window that closed last has arrived (or a minute went by)."""
    last = int(ended) - 2
    deadline = time.time() + 60
    while time.time() < deadline and not any(s >= last for s, _ in watch.arrivals):
        time.sleep(0.1)


def live_plain(
    spark: SparkSession, bootstrap: str, work: Path, rate: int, seconds: float
) -> list[float]:
    topic = f"live-plain-{work.name}"
    create_topic(bootstrap, topic, 2)
    frame = live(kafka_stream(spark, bootstrap, topic, 1_000_000))
    output = f"live-plain-out-{work.name}"
    query = plain_query(spark, frame, bootstrap, output, work / "live-checkpoint")
    watch = WindowWatch(bootstrap, output)
    try:
        while not query.recentProgress:
            time.sleep(0.05)
        began = time.time()
        ended = produce_live(bootstrap, topic, rate, seconds)
        wait_windows(watch, began, ended)
    finally:
        query.stop()
        watch.close()
    return latencies(watch, began, ended)


def live_runtime(
    spark: SparkSession, bootstrap: str, work: Path, rate: int, seconds: float
) -> list[float]:
    topic = f"live-rt-{work.name}"
    create_topic(bootstrap, topic, 2)
    source = kafka_source(bootstrap, topic, 1_000_000)
    output = f"live-rt-out-{work.name}"
    run = runtime_run(
        spark, work, "latency", source=source, transform=live, bootstrap=bootstrap, output=output
    )
    watch = WindowWatch(bootstrap, output)
    found: list[float] = []

    def measure(_: float) -> None:
        while not any(q.recentProgress for q in spark.streams.active):
            time.sleep(0.05)
        began = time.time()
        ended = produce_live(bootstrap, topic, rate, seconds)
        wait_windows(watch, began, ended)
        found.extend(latencies(watch, began, ended))
        run.request_stop(drain=False)

    try:
        run.run(measure)
    finally:
        watch.close()
    return found


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(fraction * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--per-trigger", type=int, default=50_000)
    parser.add_argument("--live-rate", type=int, default=2_000, help="clicks/s of the latency run")
    parser.add_argument("--live-seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3, help="measured runs of each (median)")
    parser.add_argument("--data-path", choices=DATA_PATHS, default="jvm", help="the runtime's")
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
                .config("spark.sql.session.timeZone", "UTC")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            spark.conf.set(STREAMING_DATA_PATH_CONF, args.data_path)
            bootstrap = broker.bootstrap_servers
            throughput = {"plain": plain, "runtime": runtime}
            latency = {"plain": live_plain, "runtime": live_runtime}
            runs: dict[str, list[Run]] = {name: [] for name in throughput}
            delays: dict[str, list[float]] = {name: [] for name in latency}
            for round_number in range(args.rounds + 1):  # round 0 warms up
                for name, measure_throughput in throughput.items():
                    work = root / f"{name}-{round_number}"
                    result = measure_throughput(
                        spark, bootstrap, work, args.records, args.per_trigger
                    )
                    measured = latency[name](
                        spark, bootstrap, work, args.live_rate, args.live_seconds
                    )
                    if round_number:
                        runs[name].append(result)
                        delays[name].extend(measured)
            spark.stop()
        finally:
            broker.stop()

    medians = {name: statistics.median(rate for rate, _ in done) for name, done in runs.items()}
    per_batch = {  # where the median run's data batches spent their time (Spark's progress)
        name: sorted(done, key=lambda run: run[0])[len(done) // 2][1].get("per_batch", {})
        for name, done in runs.items()
    }
    steady = {
        name: statistics.median(steady_rate(run, args.records) for run in done)
        for name, done in runs.items()
    }
    latency_ms = {
        f"{name}_window_latency_{label}_ms": round(percentile(sorted(found), q) * 1000)
        for name, found in delays.items()
        for label, q in (("p50", 0.5), ("p95", 0.95))
    }
    print(
        json.dumps(
            {
                "benchmark": "kafka",
                "pipeline": "kafka -> windowed count -> kafka",
                "records": args.records,
                "partitions": args.partitions,
                "per_trigger": args.per_trigger,
                "rounds": args.rounds,
                "runtime_data_path": args.data_path,
                **{f"{name}_rows_per_s": round(rate) for name, rate in medians.items()},
                **{f"steady_{name}_rows_per_s": round(rate) for name, rate in steady.items()},
                "runtime_time_vs_plain": round(medians["plain"] / medians["runtime"], 2),
                "steady_runtime_time_vs_plain": round(steady["plain"] / steady["runtime"], 2),
                "live_rate": args.live_rate,
                "windows_measured": {name: len(found) for name, found in delays.items()},
                **latency_ms,
                **{f"{name}_per_batch_s": phases for name, phases in per_batch.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
