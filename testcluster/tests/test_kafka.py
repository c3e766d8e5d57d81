"""The tests' Kafka broker (testcluster/kafka.py): pinned jars checked, and a broker that keeps
transactions as a real one does, across a SIGKILL and a restart."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from testcluster import kafka
from testcluster.kafka import (
    JARS_LIST,
    KafkaBroker,
    KafkaUnavailable,
    PinnedJar,
    fetch_jars,
    kafka_version,
    pinned_jars,
    running_broker,
)

pytestmark = pytest.mark.quick

TIMEOUT = 60.0


def test_the_pinned_list_names_the_broker_and_a_sha256_for_each_jar() -> None:
    jars = pinned_jars(JARS_LIST.read_text(encoding="utf-8"))
    assert kafka_version(jars).startswith("4.")
    assert all(len(jar.sha256) == 64 for jar in jars)
    assert len({jar.file_name for jar in jars}) == len(jars)


def test_a_malformed_line_is_named() -> None:
    with pytest.raises(ValueError, match=r"line 2 of the jar list: 'org\.example:x' is not"):
        pinned_jars("# a comment\norg.example:x\n")


def _repository(root: Path, jar: PinnedJar, content: bytes) -> str:
    path = root / jar.group.replace(".", "/") / jar.artifact / jar.version / jar.file_name
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    return root.as_uri()


def test_a_jar_with_another_sha256_is_refused_and_nothing_is_kept(tmp_path: Path) -> None:
    jar = PinnedJar("org.example", "thing", "1.0", hashlib.sha256(b"the real jar").hexdigest())
    repository = _repository(tmp_path / "maven", jar, b"a tampered jar")
    cache = tmp_path / "cache"
    with pytest.raises(KafkaUnavailable, match=r"thing-1\.0\.jar has sha256 \w+, not the"):
        fetch_jars([jar], cache, repository)
    assert [p.name for p in cache.iterdir() if not p.name.startswith(".lock")] == []


def test_a_jar_is_fetched_once(tmp_path: Path) -> None:
    jar = PinnedJar("org.example", "thing", "1.0", hashlib.sha256(b"the real jar").hexdigest())
    repository = _repository(tmp_path / "maven", jar, b"the real jar")
    cache = tmp_path / "cache"
    [fetched] = fetch_jars([jar], cache, repository)
    assert fetched.read_bytes() == b"the real jar"
    (tmp_path / "maven").rename(tmp_path / "gone")  # a second fetch would now fail
    assert fetch_jars([jar], cache, repository) == [fetched]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with running_broker(tmp_path_factory.mktemp("kafka")) as started:
        yield started


def _committed(bootstrap: str, topic: str, partitions: int) -> list[str]:
    """Every committed record of ``topic``, read with ``isolation.level=read_committed`` until
    each partition reports its end (its last stable offset: nothing is left open here)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "test-reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[str] = []
        ended: set[int] = set()
        while len(ended) < partitions:
            message = consumer.poll(TIMEOUT)
            assert message is not None, f"no record within {TIMEOUT}s; read {values}"
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                ended.add(message.partition())
                continue
            values.append(message.value().decode())
        return sorted(values)
    finally:
        consumer.close()


def test_the_broker_keeps_committed_transactions_and_drops_aborted_ones_across_a_kill(
    broker: KafkaBroker,
) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for future in admin.create_topics([NewTopic("orders", 2, 1)]).values():
        future.result(TIMEOUT)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "writer-0"}
    )
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    for i in range(6):
        producer.produce("orders", value=f"kept-{i}", partition=i % 2)
    producer.commit_transaction(TIMEOUT)
    producer.begin_transaction()
    for i in range(4):
        producer.produce("orders", value=f"aborted-{i}", partition=i % 2)
    producer.abort_transaction(TIMEOUT)

    broker.kill()
    broker.start()

    # A new producer of the same transactional id fences the old one, as a restarted writer's does.
    successor = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "writer-0"}
    )
    successor.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.produce("orders", value="from-the-fenced-writer", partition=0)
    with pytest.raises(KafkaException):
        producer.commit_transaction(TIMEOUT)
    successor.begin_transaction()
    successor.produce("orders", value="from-the-successor", partition=1)
    successor.commit_transaction(TIMEOUT)

    assert _committed(broker.bootstrap_servers, "orders", 2) == sorted(
        [f"kept-{i}" for i in range(6)] + ["from-the-successor"]
    )


def test_a_cluster_id_that_starts_with_a_dash_formats_and_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One id in 64 starts with "-" (URL-safe base64 of a random UUID); the storage tool took
    it for an option once, and a test run failed at its broker's start."""
    dashed = uuid.UUID(bytes=bytes([0xF8]) + bytes(15))
    monkeypatch.setattr(kafka.uuid, "uuid4", lambda: dashed)
    with running_broker(tmp_path) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        assert admin.list_topics(timeout=TIMEOUT).brokers, "the broker started and answers"
