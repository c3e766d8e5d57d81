"""``sources.Kafka`` read on both data paths against a real broker: the Python reader
(librdkafka, rows through a Python worker) and the JVM one (``KafkaRead``: Kafka's Java consumer,
rows never leave the JVM), in a real Structured Streaming query through the source's coordinator.

The topic holds committed and aborted transactions and plain records, cut into splits so small
that their ends fall on records, transaction markers and aborted records alike. The ground truth is
an independent ``read_committed`` read of the topic with the confluent client: each path must give
exactly its rows (every column), each once.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from finishable.connectors.jvm import STREAMING_DATA_PATH_CONF
from finishable.connectors.sources import KAFKA_SCHEMA, Kafka
from finishable.coordinator.endpoint import DriverEndpoint
from finishable.driver.source_coordinator import SourceCoordinator
from testcluster.kafka import KafkaBroker, running_broker
from tests.support.kafka import create_topic

pytestmark = pytest.mark.quick

TOKEN = "kafka-source-token"
TIMEOUT = 60.0
USERS = {"reader": "p w;x"}  # a JAAS value that must be quoted


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with running_broker(tmp_path_factory.mktemp("kafka-source"), sasl_users=USERS) as started:
        yield started


@pytest.fixture(params=["python", "jvm"])
def data_path(spark: SparkSession, request: pytest.FixtureRequest) -> Iterator[str]:
    spark.conf.set(STREAMING_DATA_PATH_CONF, request.param)
    yield str(request.param)
    spark.conf.unset(STREAMING_DATA_PATH_CONF)


Row = tuple[Any, ...]


def produce(broker: KafkaBroker, topic: str, partitions: int) -> None:
    """Plain records, then transactions of 7 records over the partitions, every third aborted."""
    plain = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for index in range(30):
        key = None if index % 5 == 0 else f"k{index}".encode()
        plain.produce(topic, value=f"plain-{index}".encode(), key=key, partition=index % partitions)
    plain.flush(TIMEOUT)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": f"t-{topic}"}
    )
    producer.init_transactions(TIMEOUT)
    for transaction in range(12):
        producer.begin_transaction()
        for index in range(7):
            producer.produce(
                topic,
                value=f"t{transaction}-{index}".encode(),
                key=f"k{index}".encode(),
                partition=index % partitions,
            )
        if transaction % 3 == 2:
            producer.abort_transaction(TIMEOUT)
        else:
            producer.commit_transaction(TIMEOUT)


def committed_rows(broker: KafkaBroker, topic: str, partitions: int) -> Counter[Row]:
    """Every row a read_committed consumer sees, in Spark's Kafka columns (the ground truth)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"truth-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    rows: Counter[Row] = Counter()
    ended: set[int] = set()
    try:
        while len(ended) < partitions:
            message = consumer.poll(TIMEOUT)
            assert message is not None, f"no end of {topic} within {TIMEOUT} s"
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                ended.add(int(message.partition() or 0))
                continue
            kind, millis = message.timestamp()
            rows[
                (
                    message.key(),
                    message.value(),
                    topic,
                    message.partition(),
                    message.offset(),
                    # As PySpark gives a timestamp: naive, in local time.
                    datetime.fromtimestamp(millis // 1000).replace(
                        microsecond=millis % 1000 * 1000
                    ),
                    kind - 1,  # Spark's (Java's) id: CreateTime 0; librdkafka's is 1
                )
            ] += 1
    finally:
        consumer.close()
    return rows


def read(
    spark: SparkSession, source: Kafka, checkpoint: Path
) -> tuple[DataFrame, Counter[Row], str]:
    """The source's rows, read once through its coordinator (``availableNow``), and the name
    Spark's progress gives the source."""
    endpoint = DriverEndpoint(TOKEN)
    endpoint.start()
    coordinator = SourceCoordinator("clicks", source)
    coordinator.start(None)
    endpoint.add(coordinator.host)
    rows: Counter[Row] = Counter()

    def collect(frame: DataFrame, batch_id: int) -> None:
        del batch_id
        for row in frame.collect():
            key, value, topic, partition, offset, stamp, kind = row
            rows[(key and bytes(key), bytes(value), topic, partition, offset, stamp, kind)] += 1

    try:
        frame = coordinator.stream(spark, endpoint.url, TOKEN)
        coordinator.begin_run(1, str(checkpoint))
        query = (
            frame.writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(240), "the availableNow run did not end"
        finally:
            query.stop()
        described = " ".join(
            str(source["description"]) for p in query.recentProgress for source in p["sources"]
        )
    finally:
        endpoint.stop()
        coordinator.close()
    return frame, rows, described


def reader_named(data_path: str, described: str) -> bool:
    """Whether Spark's progress names the reader the data path chose."""
    return ("KafkaSplitReader" in described) == (data_path == "jvm")


def test_both_paths_read_each_committed_record_once_and_no_aborted_one(
    spark: SparkSession, broker: KafkaBroker, tmp_path: Path, data_path: str
) -> None:
    topic = f"mixed-{data_path}"
    create_topic(broker, topic, 3)
    produce(broker, topic, 3)
    expected = committed_rows(broker, topic, 3)
    assert len(expected) == 30 + 8 * 7
    # Splits of 3 offsets: their ends fall on records, markers and aborted records alike.
    source = Kafka(
        broker.bootstrap_servers,
        topics=topic,
        starting_offsets="earliest",
        ending_offsets="latest",
        max_records_per_partition=3,
    )
    frame, rows, described = read(spark, source, tmp_path / "checkpoint")
    assert frame.schema == KAFKA_SCHEMA
    assert rows == expected
    assert reader_named(data_path, described), described


def test_both_paths_read_over_sasl_scram_with_a_password_jaas_must_quote(
    spark: SparkSession, broker: KafkaBroker, tmp_path: Path, data_path: str
) -> None:
    topic = f"sasl-{data_path}"
    create_topic(broker, topic, 2)
    produce(broker, topic, 2)
    [(user, password)] = USERS.items()
    source = Kafka(
        broker.sasl_bootstrap_servers,
        topics=topic,
        starting_offsets="earliest",
        ending_offsets="latest",
        options={
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanisms": "SCRAM-SHA-256",
            "kafka.sasl.username": user,
            "kafka.sasl.password": password,
        },
    )
    _, rows, described = read(spark, source, tmp_path / "checkpoint")
    assert rows == committed_rows(broker, topic, 2)
    assert reader_named(data_path, described), described


def delete_below(broker: KafkaBroker, topic: str, offset: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for future in admin.delete_records([TopicPartition(topic, 0, offset)]).values():
        future.result(TIMEOUT)


def test_deleted_offsets_fail_the_read_naming_them_or_are_read_past_when_allowed(
    spark: SparkSession, broker: KafkaBroker, tmp_path: Path, data_path: str
) -> None:
    topic = f"deleted-{data_path}"
    create_topic(broker, topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for index in range(50):
        producer.produce(topic, value=f"v{index}".encode(), partition=0)
    producer.flush(TIMEOUT)
    delete_below(broker, topic, 20)

    def source(fail_on_data_loss: bool) -> Kafka:
        # Offset 0 named explicitly: the split starts below what the partition still holds.
        return Kafka(
            broker.bootstrap_servers,
            topics=topic,
            starting_offsets={topic: {"0": 0}},
            ending_offsets="latest",
            fail_on_data_loss=fail_on_data_loss,
        )

    with pytest.raises(StreamingQueryException) as failed:
        read(spark, source(True), tmp_path / "failing")
    assert f"offsets [0, 20) of {topic}-0 offsets [0, 50) were deleted" in str(failed.value)
    assert "failOnDataLoss" in str(failed.value)

    _, rows, _ = read(spark, source(False), tmp_path / "allowed")
    assert sorted(row[1] for row in rows) == sorted(f"v{i}".encode() for i in range(20, 50))
