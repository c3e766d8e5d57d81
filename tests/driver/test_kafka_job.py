"""``sources.Kafka`` end to end: `finishable run` drives a real PySpark driver reading a real
Kafka broker (testcluster/kafka.py).

The clicks are produced in transactions, some aborted; the ground truth is what the test
committed, counted by pandas, and a ``read_committed`` consumer checks the topic holds exactly
that. The published windows must equal it after a bounded read, and after SIGKILLs of the driver
at random moments of a bounded read cut into many small batches. A Batch job counts the same.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

from finishable import sinks, sources
from finishable.local.shuffle import LocalShuffle
from testcluster.kafka import KafkaBroker, running_broker
from tests.support.kafka import create_topic

from .test_batch_program import make_job, shuffle, spark  # noqa: F401 - its fixtures
from .test_streaming_job import Job, published

pytestmark = pytest.mark.full

HERE = Path(__file__).parent
PROGRAM = HERE / "kafka_program.py"
START = datetime(2026, 1, 1, tzinfo=UTC)
PAGES = ("home", "search", "cart")
TIMEOUT = 60.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with running_broker(tmp_path_factory.mktemp("kafka")) as started:
        yield started


Click = tuple[datetime, str]


def produce_clicks(
    broker: KafkaBroker, topic: str, partitions: int, transactions: int, seed: int
) -> list[Click]:
    """``transactions`` transactions of 200 clicks each over the partitions, every fourth
    aborted; returns the committed clicks (the ground truth's input)."""
    rng = random.Random(seed)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": f"clicks-{seed}"}
    )
    producer.init_transactions(TIMEOUT)
    committed: list[Click] = []
    for index in range(transactions):
        clicks = [
            (START + timedelta(milliseconds=rng.randrange(20 * 60_000)), rng.choice(PAGES))
            for _ in range(200)
        ]
        producer.begin_transaction()
        for moment, page in clicks:
            producer.produce(
                topic,
                value=page.encode(),
                partition=rng.randrange(partitions),
                timestamp=int(moment.timestamp() * 1000),
            )
        # Flushed first: an abort racing the transaction's first records can reach the
        # coordinator before they registered the transaction's partitions, and librdkafka then
        # ends the previous, committed transaction's id with INVALID_TXN_STATE, a fatal error.
        producer.flush(TIMEOUT)
        if index % 4 == 3:
            producer.abort_transaction(TIMEOUT)
        else:
            producer.commit_transaction(TIMEOUT)
            committed.extend(clicks)
    return committed


def ground_truth(clicks: list[Click]) -> Counter[tuple[datetime, str]]:
    frame = pd.DataFrame(clicks, columns=["ts", "page"])
    frame["window_start"] = frame["ts"].dt.floor("1min")
    counts = frame.groupby(["window_start", "page"]).size()
    return Counter({(ts.to_pydatetime(), page): int(n) for (ts, page), n in counts.items()})


def kafka_job(
    tmp_path: Path,
    broker: KafkaBroker,
    name: str,
    topic: str,
    *args: str,
    data_path: str = "jvm",
) -> Job:
    """A job reading ``topic``; its records carried by the JVM (Kafka's Java client, what users
    get) unless ``data_path`` says ``python``."""
    return Job(
        tmp_path,
        name,
        f"--bootstrap-servers={broker.bootstrap_servers}",
        f"--topic={topic}",
        *args,
        program=PROGRAM,
        data_path=data_path,
    )


def whole_driver_logs(job: Job) -> str:
    return "".join(p.read_text() for p in sorted((job.state / job.name).glob("driver-*.log")))


def took_path(job: Job, data_path: str) -> bool:
    """Whether the driver logged that the job's Kafka records took ``data_path``."""
    logs = whole_driver_logs(job)
    jvm = "Kafka's Java consumer under the coordinator" in logs
    return jvm == (data_path == "jvm") and (jvm or "read by Python: python" in logs)


def kill_at_random_moments(job: Job, rng: random.Random, times: int = 3) -> int:
    """SIGKILL the running job's driver up to ``times`` times, each 1-5 s into an attempt (mid
    batch, mid commit or between batches), waiting for the next attempt; how many kills landed
    before the job finished."""
    kills = 0
    for _ in range(times):
        attempt = int(job.status().get("attempt", 1))
        job.wait(
            f"attempt {attempt} running",
            lambda s, a=attempt: (
                s.get("phase") in ("Running", "Finished") and s.get("attempt", 0) >= a
            ),
        )
        if job.status().get("phase") == "Finished":
            break
        time.sleep(rng.uniform(1.0, 5.0))
        try:
            killed = job.kill_driver()
        except ProcessLookupError:
            break  # it finished first
        kills += 1
        job.wait(
            "the next attempt",
            lambda s, k=killed: s.get("attempt", 0) > k or s.get("phase") == "Finished",
        )
    return kills


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    started: list[Job] = []
    yield started
    for job in started:
        job.cleanup()


@pytest.mark.quick
@pytest.mark.parametrize("data_path", ["jvm", "python"])
def test_a_bounded_read_counts_every_committed_click_once_and_no_aborted_one(
    tmp_path: Path, broker: KafkaBroker, jobs: list[Job], data_path: str
) -> None:
    topic = f"clicks-bounded-{data_path}"
    create_topic(broker, topic, 3)
    committed = produce_clicks(broker, topic, 3, transactions=8, seed=1)
    job = kafka_job(tmp_path, broker, "kafka-bounded", topic, "--bounded", data_path=data_path)
    jobs.append(job)
    job.run()
    output = job.finish()
    assert "Finished" in output
    status = job.status()
    assert status["phase"] == "Finished"
    assert status["lifecycle"]["mode"] == "FINAL_CHECKPOINT"
    assert published(job.output) == ground_truth(committed)
    assert took_path(job, data_path), job.driver_logs()


def test_a_driver_killed_at_random_moments_reads_each_committed_click_exactly_once(
    tmp_path: Path, broker: KafkaBroker, jobs: list[Job]
) -> None:
    rng = random.Random(11)
    create_topic(broker, "clicks-kills", 4)
    committed = produce_clicks(broker, "clicks-kills", 4, transactions=24, seed=2)
    job = kafka_job(
        tmp_path,
        broker,
        "kafka-kills",
        "clicks-kills",
        "--bounded",
        "--max-offsets-per-trigger=150",
        "--max-records-per-partition=150",
        # Small batches read the partitions unevenly, and the clicks of a partition are not in
        # event-time order: no click may be late, so that every one is counted.
        "--watermark-delay=1 hour",
    )
    jobs.append(job)
    job.run()
    kills = kill_at_random_moments(job, rng)
    job.finish()
    status = job.status()
    assert status["phase"] == "Finished" and status["restarts"] == kills
    assert kills >= 1, "the job finished before any kill: make it read more"
    assert published(job.output) == ground_truth(committed)


@pytest.mark.quick
def test_a_batch_job_reads_a_bounded_topic_and_counts_each_committed_click_once(
    tmp_path: Path,
    broker: KafkaBroker,
    spark: SparkSession,  # noqa: F811 - test_batch_program's fixture
    shuffle: LocalShuffle,  # noqa: F811 - test_batch_program's fixture
) -> None:
    create_topic(broker, "clicks-batch", 3)
    committed = produce_clicks(broker, "clicks-batch", 3, transactions=4, seed=3)
    job = make_job(spark, tmp_path, shuffle)
    clicks = job.read(
        sources.Kafka(
            broker.bootstrap_servers,
            topics="clicks-batch",
            starting_offsets="earliest",
            ending_offsets="latest",
            max_records_per_partition=100,
        ),
        name="clicks",
    )
    pages = job.stage("pages", clicks.select(F.col("value").cast("string").alias("page")))
    counts = job.stage("counts", pages.groupBy("page").count())
    sink = sinks.TransactionalFiles(str(tmp_path / "out"), name="counts")
    job.write(counts, sink)
    job.run()
    published_counts = {row["page"]: row["count"] for row in sink.read_committed().to_pylist()}
    assert published_counts == Counter(page for _, page in committed)


def test_a_drain_reads_what_was_committed_when_it_was_asked_across_a_kill(
    tmp_path: Path, broker: KafkaBroker, jobs: list[Job]
) -> None:
    create_topic(broker, "clicks-drain", 3)
    committed = produce_clicks(broker, "clicks-drain", 3, transactions=4, seed=4)
    job = kafka_job(
        tmp_path,
        broker,
        "kafka-drain",
        "clicks-drain",
        "--max-offsets-per-trigger=200",
        "--max-records-per-partition=200",
        "--watermark-delay=1 hour",
    )
    jobs.append(job)
    job.run()
    job.wait_read(2)
    killed = job.kill_driver()
    job.wait(
        "the next attempt", lambda s: s.get("attempt", 0) > killed and s.get("phase") == "Running"
    )
    committed += produce_clicks(broker, "clicks-drain", 3, transactions=8, seed=5)
    stop = job.cli("stop", "--drain", "--timeout", "400")
    assert stop.returncode == 0, stop.stdout + stop.stderr + job.driver_logs()
    job.finish()
    status = job.status()
    assert status["phase"] == "Finished" and status["restarts"] == 1
    assert published(job.output) == ground_truth(committed)
