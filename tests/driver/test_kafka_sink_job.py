"""``sinks.Kafka`` end to end: Kafka in, a windowed count, Kafka out, on a real broker.

`finishable run` drives a real PySpark driver (``kafka_program.py --output-topic``). The ground
truth is the clicks the test committed to the input topic, counted by pandas; the output is what
an independent ``read_committed`` consumer reads from the output topic, where every (window,
page) must appear exactly once with its count: after SIGKILLs of the driver at random moments,
across a stop with savepoint longer than the sink's ``transaction.timeout.ms``, a drain, a broker
restart under the running job, and a partition added to the input while it runs.
"""

from __future__ import annotations

import importlib
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewPartitions

from finishable.connectors.kafka_transactions import KafkaCommitter
from testcluster.kafka import KafkaBroker, running_broker
from tests.support.kafka import TIMEOUT, create_topic, read_committed

from .test_kafka_job import (
    ground_truth,
    kafka_job,
    kill_at_random_moments,
    produce_clicks,
    took_path,
    whole_driver_logs,
)
from .test_streaming_job import ROOT, Job

pytestmark = pytest.mark.full

OUTPUT_PARTITIONS = 2
EXAMPLES = ROOT / "examples" / "streaming"
TRANSACTION_TIMEOUT_MS = 3000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    # The broker looks for timed-out transactions every half second (default: 10 s), so that a
    # stop longer than the sink's transaction timeout is seconds long.
    extra = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}
    with running_broker(tmp_path_factory.mktemp("kafka-sink-job"), extra) as started:
        yield started


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    started: list[Job] = []
    yield started
    for job in started:
        job.cleanup()


def sink_job(
    tmp_path: Path, broker: KafkaBroker, name: str, *args: str, data_path: str = "jvm"
) -> tuple[Job, str, str]:
    """A job counting ``<name>-in`` into ``<name>-out``; the two topic names."""
    source, output = f"{name}-in", f"{name}-out"
    create_topic(broker, output, OUTPUT_PARTITIONS)
    job = kafka_job(
        tmp_path, broker, name, source, f"--output-topic={output}", *args, data_path=data_path
    )
    return job, source, output


def published_to(broker: KafkaBroker, topic: str) -> Counter[tuple[datetime, str]]:
    """Every (window, page) record in ``topic`` read_committed; one seen twice is a duplicate."""
    seen: Counter[tuple[datetime, str]] = Counter()
    counts: dict[tuple[datetime, str], int] = {}
    for value in read_committed(broker, topic, OUTPUT_PARTITIONS):
        record = json.loads(value)
        key = (datetime.fromisoformat(record["window_start"]).astimezone(UTC), record["page"])
        seen[key] += 1
        counts[key] = int(record["count"])
    duplicates = [key for key, times in seen.items() if times > 1]
    assert not duplicates, f"windows published twice: {duplicates[:5]}"
    return Counter(counts)


def no_open_transactions(broker: KafkaBroker, job: str) -> bool:
    committer = KafkaCommitter(broker.bootstrap_servers, {})
    host, port = broker.bootstrap_servers.split(":")
    return not committer.open_transactions([(host, int(port))], f"finishable-{job}-")


@pytest.mark.quick
@pytest.mark.parametrize("data_path", ["jvm", "python"])
def test_a_bounded_read_publishes_each_window_once_to_a_kafka_topic(
    tmp_path: Path, broker: KafkaBroker, jobs: list[Job], data_path: str
) -> None:
    name = f"ks-bounded-{data_path}"
    job, source, output = sink_job(tmp_path, broker, name, "--bounded", data_path=data_path)
    jobs.append(job)
    create_topic(broker, source, 3)
    committed = produce_clicks(broker, source, 3, transactions=8, seed=21)
    job.run()
    job.finish()
    assert job.status()["phase"] == "Finished"
    assert published_to(broker, output) == ground_truth(committed)
    assert no_open_transactions(broker, name)
    assert took_path(job, data_path), job.driver_logs()
    producer = "Kafka's Java producer, committed by the driver" in whole_driver_logs(job)
    assert producer == (data_path == "jvm")


def test_a_driver_killed_at_random_moments_publishes_each_window_exactly_once(
    tmp_path: Path, broker: KafkaBroker, jobs: list[Job]
) -> None:
    rng = random.Random(23)
    job, source, output = sink_job(
        tmp_path,
        broker,
        "ks-kills",
        "--bounded",
        "--max-offsets-per-trigger=150",
        "--max-records-per-partition=150",
        "--watermark-delay=1 hour",
    )
    jobs.append(job)
    create_topic(broker, source, 4)
    committed = produce_clicks(broker, source, 4, transactions=24, seed=22)
    job.run()
    kills = kill_at_random_moments(job, rng)  # mid-transaction, mid-commit, between batches
    job.finish()
    status = job.status()
    assert status["phase"] == "Finished" and status["restarts"] == kills
    assert kills >= 1, "the job finished before any kill: make it read more"
    assert published_to(broker, output) == ground_truth(committed)
    assert no_open_transactions(broker, "ks-kills")


def test_a_stop_longer_than_the_transaction_timeout_loses_nothing_and_a_drain_ends_it(
    tmp_path: Path, broker: KafkaBroker, jobs: list[Job]
) -> None:
    """A stop with savepoint commits the last batch's transactions before the savepoint
    completes, so nothing is left for the broker to abort however long the job stays stopped
    (where Flink commits a savepoint's transactions after it, on resume)."""
    job, source, output = sink_job(
        tmp_path,
        broker,
        "ks-stop",
        "--max-offsets-per-trigger=200",
        "--max-records-per-partition=200",
        "--watermark-delay=1 hour",
        f"--transaction-timeout-ms={TRANSACTION_TIMEOUT_MS}",
    )
    jobs.append(job)
    create_topic(broker, source, 3)
    committed = produce_clicks(broker, source, 3, transactions=4, seed=24)
    job.run()
    job.wait_read(2)
    stopped = job.cli("stop", "--timeout", "300")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr + job.driver_logs()
    assert "Suspended" in job.finish()
    assert no_open_transactions(broker, "ks-stop")
    before = published_to(broker, output)
    truth = ground_truth(committed)
    assert all(truth[key] == count for key, count in before.items())

    time.sleep(3 * TRANSACTION_TIMEOUT_MS / 1000)  # the stop outlasts the transaction timeout
    committed += produce_clicks(broker, source, 3, transactions=4, seed=25)
    job.run("--resume")
    job.wait("running again", lambda s: s.get("phase") == "Running")
    drained = job.cli("stop", "--drain", "--timeout", "400")
    assert drained.returncode == 0, drained.stdout + drained.stderr + job.driver_logs()
    job.finish()
    assert job.status()["phase"] == "Finished"
    assert published_to(broker, output) == ground_truth(committed)


def test_a_broker_restart_and_a_new_input_partition_lose_and_duplicate_nothing(
    tmp_path: Path, broker: KafkaBroker, jobs: list[Job]
) -> None:
    job, source, output = sink_job(
        tmp_path,
        broker,
        "ks-restart",
        "--max-offsets-per-trigger=200",
        "--max-records-per-partition=200",
        "--watermark-delay=1 hour",
    )
    jobs.append(job)
    create_topic(broker, source, 2)
    committed = produce_clicks(broker, source, 2, transactions=4, seed=26)
    job.run()
    job.wait_read(2)

    broker.kill()  # SIGKILL under the running job: its reads and commits wait, then go on
    broker.start()
    committed += produce_clicks(broker, source, 2, transactions=4, seed=27)

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for future in admin.create_partitions([NewPartitions(source, 3)]).values():
        future.result(TIMEOUT)
    committed += produce_clicks(broker, source, 3, transactions=4, seed=28)

    drained = job.cli("stop", "--drain", "--timeout", "400")
    assert drained.returncode == 0, drained.stdout + drained.stderr + job.driver_logs()
    job.finish()
    assert job.status()["phase"] == "Finished"
    assert published_to(broker, output) == ground_truth(committed)
    assert no_open_transactions(broker, "ks-restart")


def test_the_shipped_example_counts_each_committed_click_once(
    tmp_path: Path, broker: KafkaBroker, jobs: list[Job]
) -> None:
    """``examples/streaming/kafka.yaml`` as shipped, its producer script writing the input, with
    the broker replaced and ``--bounded`` added so that it ends by itself."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        producer = importlib.import_module("kafka_producer")
    finally:
        sys.path.remove(str(EXAMPLES))
    bootstrap = broker.bootstrap_servers
    producer.ensure_topic(bootstrap, "clicks", 3)
    committed = producer.produce(bootstrap, "clicks", clicks=6000, minutes=5, seed=7)
    create_topic(broker, "page-counts", OUTPUT_PARTITIONS)

    job = Job(tmp_path, "clickstream-kafka")
    jobs.append(job)
    document = yaml.safe_load((EXAMPLES / "kafka.yaml").read_text())
    application = document["spec"]["application"]
    application["file"] = str(EXAMPLES / application["file"])
    shipped = [a for a in application["args"] if not a.startswith("--bootstrap-servers=")]
    application["args"] = [f"--bootstrap-servers={bootstrap}", *shipped, "--bounded"]
    job.manifest.write_text(yaml.safe_dump(document))
    job.run()
    job.finish()
    assert job.status()["phase"] == "Finished"

    per_page: Counter[str] = Counter()
    for (_, page), count in published_to(broker, "page-counts").items():
        per_page[page] += count
    assert per_page == committed
    assert no_open_transactions(broker, "clickstream-kafka")
