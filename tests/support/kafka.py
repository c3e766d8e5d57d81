"""What the Kafka tests share: topics on a test broker, and an independent read_committed read."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from testcluster.kafka import KafkaBroker

TIMEOUT = 60.0


def create_topic(broker: KafkaBroker, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(TIMEOUT)


def new_topic(broker: KafkaBroker, partitions: int = 2) -> str:
    topic = f"out-{uuid.uuid4().hex[:8]}"
    create_topic(broker, topic, partitions)
    return topic


def read_committed(broker: KafkaBroker, topic: str, partitions: int) -> list[bytes]:
    """Every record a read_committed consumer sees, up to each partition's last stable offset.

    A transaction still open holds that offset back: what it wrote is not read, nor anything
    after it."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    done: set[int] = set()
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(done) < partitions:
            assert time.monotonic() < deadline, f"no end of {topic} within {TIMEOUT} s"
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                done.add(int(message.partition() or 0))
                continue
            values.append(message.value() or b"")
    finally:
        consumer.close()
    return values
