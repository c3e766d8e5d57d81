"""The Kafka sink's two phases against a real broker (testcluster/kafka.py), and its parts.

Phase one leaves a flushed transaction open when the task's producer goes; phase two commits it
from another connection by id, producer id and epoch. What a consumer reading
``read_committed`` sees is the ground truth: each record once after the commit, none before it,
none of a replay, and none of a transaction the broker aborted, which the sink reports by name.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession

from finishable.connectors import kafka_wire as wire
from finishable.connectors.jvm import JVM_KAFKA_WRITE, why_not_jvm_sink
from finishable.connectors.kafka_java import kafka_write_options
from finishable.connectors.kafka_transactions import (
    COMMITTED,
    COMMITTING,
    CommitRecord,
    KafkaCommitter,
    KafkaTransactionLost,
    OpenTransaction,
    committing,
    read_record,
    write_record,
)
from finishable.connectors.kafka_writing import write_plain, write_transaction
from finishable.connectors.sink_store import SinkError, SinkStore
from finishable.connectors.sinks import Kafka
from finishable.connectors.streaming.kafka_writer import (
    KafkaTarget,
    commit_batch,
    commit_jvm_batch,
    recover,
)
from finishable.coordinator.endpoint import DriverEndpoint
from testcluster.kafka import KafkaBroker, running_broker
from tests.support.kafka import TIMEOUT, new_topic
from tests.support.kafka import read_committed as read_topic

pytestmark = pytest.mark.quick

SHORT_TIMEOUT_MS = 3000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    # The broker looks for timed-out transactions every second (default: 10 s), so that a test
    # of a transaction it aborts waits seconds, not minutes.
    extra = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}
    with running_broker(tmp_path_factory.mktemp("kafka-sink"), extra) as started:
        yield started


def read_committed(broker: KafkaBroker, topic: str, partitions: int = 2) -> list[bytes]:
    return read_topic(broker, topic, partitions)


def rows(values: list[str], partition: int | None = None) -> pa.RecordBatch:
    columns = {"value": pa.array(values, pa.string())}
    if partition is not None:
        columns["partition"] = pa.array([partition] * len(values), pa.int32())
    return pa.RecordBatch.from_pydict(columns)


def open_transaction(
    broker: KafkaBroker, topic: str, prefix: str, partition: int, values: list[str], **options: str
) -> OpenTransaction:
    opened = write_transaction(
        [rows(values, partition % 2)],
        bootstrap_servers=broker.bootstrap_servers,
        client_options=options,
        topic=topic,
        prefix=prefix,
        partition=partition,
    )
    assert opened is not None
    return opened


def committer(broker: KafkaBroker) -> KafkaCommitter:
    return KafkaCommitter(broker.bootstrap_servers, {})


def settle(by: KafkaCommitter, transactions: Sequence[OpenTransaction]) -> None:
    """Wait until each transaction's coordinator has written its markers.

    The coordinator answers EndTxn once the transaction is prepared and writes the markers to
    the partitions after it; a read_committed reader sees the records only then. It records
    CompleteCommit or CompleteAbort when the markers are written; an id a new producer fenced
    is Empty under its new epoch after that."""
    deadline = time.monotonic() + TIMEOUT
    ended = ("CompleteCommit", "CompleteAbort", "Empty")
    for transaction in transactions:
        while by.describe(transaction.transactional_id).state not in ended:
            assert time.monotonic() < deadline, f"{transaction.transactional_id} never completed"
            time.sleep(0.1)


def exactly_once(
    broker: KafkaBroker, tmp_path: Path, name: str, **options: str
) -> tuple[str, Kafka, SinkStore, KafkaTarget]:
    """A new topic, an exactly-once sink into it, and the sink's store and target."""
    topic = new_topic(broker)
    sink = Kafka(
        topic,
        broker.bootstrap_servers,
        transactional_id_prefix=f"{name}-{uuid.uuid4().hex[:6]}",
        staging_url=str(tmp_path),
        name=name,
        options={f"kafka.{key}": value for key, value in options.items()},
    )
    assert sink.store is not None
    return topic, sink, sink.store, sink.target


def test_a_task_leaves_its_transaction_open_and_the_driver_commits_it_by_id_and_epoch(
    broker: KafkaBroker,
) -> None:
    topic = new_topic(broker)
    opened = open_transaction(broker, topic, f"p-{uuid.uuid4().hex[:6]}", 0, ["a", "b", "c"])
    assert opened.records == 3
    found = committer(broker).describe(opened.transactional_id)
    assert found.state == "Ongoing", "the producer's end aborted the transaction"
    assert read_committed(broker, topic) == []
    committer(broker).commit_all("s", 0, [opened])
    settle(committer(broker), [opened])
    assert sorted(read_committed(broker, topic)) == [b"a", b"b", b"c"]
    committer(broker).commit_all("s", 0, [opened])  # a retry after a crash: success, no copy
    assert sorted(read_committed(broker, topic)) == [b"a", b"b", b"c"]


def test_no_rows_open_no_transaction(broker: KafkaBroker) -> None:
    topic = new_topic(broker)
    opened = write_transaction(
        [rows([])],
        bootstrap_servers=broker.bootstrap_servers,
        client_options={},
        topic=topic,
        prefix="empty",
        partition=0,
    )
    assert opened is None


def test_a_batch_is_committed_once_and_its_replay_is_aborted(
    broker: KafkaBroker, tmp_path: Path
) -> None:
    topic, sink, store, target = exactly_once(broker, tmp_path, "once")
    first = [
        open_transaction(broker, topic, target.prefix, p, [f"{p}-x", f"{p}-y"]) for p in (0, 1)
    ]
    commit_batch(store, target, 7, first, committer(broker))
    record = read_record(store)
    assert record is not None and record.state == COMMITTED and record.batch_id == 7
    assert sink.last_committed_batch() == 7
    replay = [
        open_transaction(broker, topic, target.prefix, p, [f"{p}-x", f"{p}-y"]) for p in (0, 1)
    ]
    commit_batch(store, target, 7, replay, committer(broker))
    settle(committer(broker), first + replay)
    assert sorted(read_committed(broker, topic)) == [b"0-x", b"0-y", b"1-x", b"1-y"]
    for transaction in replay:
        assert committer(broker).describe(transaction.transactional_id).state == "CompleteAbort"


def test_recovery_commits_what_the_record_holds_and_fences_the_sinks_other_open_ids(
    broker: KafkaBroker, tmp_path: Path
) -> None:
    topic, _, store, target = exactly_once(broker, tmp_path, "recovered")
    held = open_transaction(broker, topic, target.prefix, 0, ["held"])
    write_record(store, committing(store.name, 3, [held], "run-1"))  # the driver died here
    zombie = open_transaction(broker, topic, target.prefix, 1, ["zombie"])
    other = open_transaction(broker, topic, f"{target.prefix}-other", 0, ["other sink"])
    recover(store, target)
    record = read_record(store)
    assert record is not None and record.state == COMMITTED and record.batch_id == 3
    fenced = committer(broker).describe(zombie.transactional_id)
    assert fenced.state != "Ongoing" and fenced.producer_epoch > zombie.epoch
    assert committer(broker).end(zombie, commit=True) != wire.NONE, "the zombie still commits"
    assert committer(broker).describe(other.transactional_id).state == "Ongoing"
    committer(broker).abort_all([other])
    settle(committer(broker), [held, zombie, other])
    assert read_committed(broker, topic) == [b"held"]


def test_a_transaction_the_broker_aborted_is_reported_lost_with_the_setting_to_raise(
    broker: KafkaBroker, tmp_path: Path
) -> None:
    timeout = {"transaction.timeout.ms": str(SHORT_TIMEOUT_MS)}
    topic, _, store, target = exactly_once(broker, tmp_path, "late", **timeout)
    held = open_transaction(broker, topic, target.prefix, 0, ["late"], **timeout)
    write_record(store, committing(store.name, 9, [held], "run-1"))
    deadline = time.monotonic() + TIMEOUT
    while committer(broker).describe(held.transactional_id).state == "Ongoing":
        assert time.monotonic() < deadline, "the broker never aborted the timed-out transaction"
        time.sleep(0.2)
    with pytest.raises(KafkaTransactionLost) as lost:
        recover(store, target)
    message = str(lost.value)
    assert "batch 9" in message and held.transactional_id in message
    assert "transaction.timeout.ms (3000 ms)" in message and "lost" in message
    assert read_record(store) == CommitRecord(
        store.name,
        9,
        COMMITTING,
        (held,),
        "run-1",
        read_record(store).at,  # type: ignore[union-attr]
    ), "a lost batch stays recorded: the job stops, it does not carry on past it"
    assert read_committed(broker, topic) == []


def test_at_least_once_delivers_before_the_task_ends(broker: KafkaBroker) -> None:
    topic = new_topic(broker)
    count = write_plain(
        [rows(["one", "two"], 0)],
        bootstrap_servers=broker.bootstrap_servers,
        client_options={},
        topic=topic,
    )
    assert count == 2
    assert sorted(read_committed(broker, topic)) == [b"one", b"two"]


def test_records_take_key_topic_and_headers_from_their_columns(broker: KafkaBroker) -> None:
    topic = new_topic(broker, partitions=1)
    batch = pa.RecordBatch.from_pydict(
        {
            "key": pa.array([b"k1", None]),
            "value": pa.array([b"v1", b"v2"]),
            "topic": pa.array([topic, topic]),
            "headers": pa.array(
                [[{"key": "h", "value": b"1"}], None],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )
    write_plain([batch], bootstrap_servers=broker.bootstrap_servers, client_options={}, topic=None)
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "headers",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = []
    while len(seen) < 2:
        message = consumer.poll(TIMEOUT)
        assert message is not None and not message.error()
        seen.append((message.key(), message.value(), message.headers()))
    consumer.close()
    assert seen == [(b"k1", b"v1", [("h", b"1")]), (None, b"v2", None)]


# --- without a broker ----------------------------------------------------------------------------


def test_the_wire_encoding_round_trips_varints_and_compact_strings() -> None:
    for value in (0, 1, 127, 128, 300, 2**31, 2**62):
        assert wire.Reader(wire.uvarint(value)).uvarint() == value
    reader = wire.Reader(wire.compact_string("héllo") + wire.compact_array([]) + b"\x00")
    assert reader.string() == "héllo"
    assert reader.array_length() == 0
    reader.skip_tags()
    assert reader.at == len(reader.data)
    with pytest.raises(wire.KafkaWireError, match="truncated"):
        wire.Reader(b"\x05ab").string()


def test_an_end_txn_request_is_laid_out_as_kafka_defines_it() -> None:
    frame = wire.request_frame(wire.END_TXN, 7, wire.end_txn_body("t", 5, 2, True))
    size = int.from_bytes(frame[:4], "big")
    assert size == len(frame) - 4
    client = wire.CLIENT_ID.encode()
    header = (26).to_bytes(2, "big") + (3).to_bytes(2, "big") + (7).to_bytes(4, "big")
    header += len(client).to_bytes(2, "big") + client + b"\x00"
    body = b"\x02t" + (5).to_bytes(8, "big") + (2).to_bytes(2, "big") + b"\x01\x00"
    assert frame[4:] == header + body


def test_kerberos_and_oauth_are_refused_with_what_to_use_instead() -> None:
    for mechanism in ("GSSAPI", "OAUTHBEARER"):
        settings = {"security.protocol": "SASL_SSL", "sasl.mechanisms": mechanism}
        with pytest.raises(wire.KafkaWireError, match=rf"{mechanism}.*not supported yet"):
            wire.WireSecurity.from_settings(settings)
    with pytest.raises(wire.KafkaWireError, match=r"needs kafka\.sasl\.username"):
        wire.WireSecurity.from_settings(
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}
        )


def test_scram_computes_rfc_7677s_proof_and_server_signature() -> None:
    nonce = "rOprNGfwEbeRWgbNEkqO"
    server_first = f"r={nonce}%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    first = wire.scram_client_first("user", nonce)
    final, signature = wire.scram_client_final(
        "SCRAM-SHA-256", "pencil", first, server_first, nonce
    )
    assert final == (
        f"c=biws,r={nonce}%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert base64.b64encode(signature).decode() == "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert wire.scram_client_first("a=b,c", nonce) == f"n=a=3Db=2Cc,r={nonce}"


SASL_USERS = {"alice": "alice-secret"}


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with running_broker(tmp_path_factory.mktemp("kafka-sasl"), sasl_users=SASL_USERS) as started:
        yield started


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_transactions_are_committed_over_sasl(sasl_broker: KafkaBroker, mechanism: str) -> None:
    """A broker that takes only authenticated clients: librdkafka's producer and the sink's own
    commit authenticate with the same settings."""
    sasl = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": "alice",
        "sasl.password": SASL_USERS["alice"],
    }
    topic = new_topic(sasl_broker)
    opened = write_transaction(
        [rows(["secured"], 0)],
        bootstrap_servers=sasl_broker.sasl_bootstrap_servers,
        client_options=sasl,
        topic=topic,
        prefix=f"sasl-{mechanism.lower()}",
        partition=0,
    )
    assert opened is not None
    KafkaCommitter(sasl_broker.sasl_bootstrap_servers, sasl).commit_all("s", 0, [opened])
    settle(KafkaCommitter(sasl_broker.sasl_bootstrap_servers, sasl), [opened])
    assert read_committed(sasl_broker, topic) == [b"secured"]
    wrong = {**sasl, "sasl.password": "not-it"}
    with pytest.raises(wire.KafkaAuthError, match="refused the SASL authentication"):
        KafkaCommitter(sasl_broker.sasl_bootstrap_servers, wrong).describe(opened.transactional_id)


def test_a_damaged_commit_record_is_an_error_naming_it(tmp_path: Path) -> None:
    store = SinkStore(str(tmp_path), "damaged")
    store.put_atomic("_kafka_commit.json", b'{"version": 1, "sink": "x"}')
    with pytest.raises(SinkError, match=r"_kafka_commit\.json: damaged commit record"):
        read_record(store)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"delivery": "twice"},
            "delivery='twice': expected one of 'exactly-once', 'at-least-once'",
        ),
        ({"options": {"linger.ms": "5"}}, r"options\['linger.ms'\]: a Kafka sink takes kafka\.\*"),
        ({"options": {"kafka.transactional.id": "x"}}, "set by the sink"),
        ({"bootstrap_servers": " "}, "bootstrap_servers=' ': expected brokers"),
    ],
)
def test_a_sink_declaration_names_the_mistake(arguments: dict[str, object], message: str) -> None:
    given: dict[str, object] = {"topic": "t", "bootstrap_servers": "127.0.0.1:9092", **arguments}
    with pytest.raises(ValueError, match=message):
        Kafka(**given)  # type: ignore[arg-type]


def test_exactly_once_outside_a_job_asks_for_its_prefix_and_staging() -> None:
    sink = Kafka("t", "127.0.0.1:9092")
    with pytest.raises(SinkError, match="needs transactional_id_prefix"):
        _ = sink.target
    with pytest.raises(SinkError, match="needs staging_url"):
        _ = sink.store
    assert Kafka("t", "127.0.0.1:9092", delivery="at-least-once").store is None


# --- the JVM writer (dev.finishable.spark.KafkaWrite) ---------------------------------------------


def test_the_jvm_writer_leaves_each_tasks_transaction_open_and_the_driver_commits_it(
    spark: SparkSession, broker: KafkaBroker, tmp_path: Path
) -> None:
    """A real micro-batch through Kafka's Java producer: its tasks' transactions (version 2 on
    this 4.x broker) are open and unread when the commit reaches the driver, and committed by
    ``EndTxn`` v5 from there; a retried commit is answered with success; every value is read
    once."""
    topic, sink, store, target = exactly_once(broker, tmp_path / "staging", "jvm")
    source = tmp_path / "in"
    source.mkdir()
    values = [f"v{index}" for index in range(300)]
    (source / "part.json").write_text("".join(f'{{"value": "{v}"}}\n' for v in values))
    seen: list[dict[str, object]] = []

    def hook(stage: str, batch_id: int, body: dict[str, Any]) -> dict[str, Any]:
        assert stage == "publish"
        seen.extend(body["transactions"])
        assert read_committed(broker, topic) == []  # open: nothing is read yet
        commit_jvm_batch(store, target, batch_id, body)
        return {}

    endpoint = DriverEndpoint("jvm-sink-token")
    endpoint.set_batch_hook(hook)
    endpoint.start()
    try:
        frame = spark.readStream.schema("value string").json(str(source)).repartition(3)
        sink.prepare(frame)
        options = kafka_write_options(sink, endpoint=endpoint.url, token="jvm-sink-token")
        query = (
            frame.writeStream.format(JVM_KAFKA_WRITE)
            .options(**options)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(240)
    finally:
        endpoint.stop()
    opened = [OpenTransaction.from_dict(t) for t in seen]
    settle(committer(broker), opened)
    assert sorted(read_committed(broker, topic)) == sorted(v.encode() for v in values)
    assert sorted(t.partition for t in opened) == [0, 1, 2]
    assert {t.version for t in opened} == {2}
    assert sum(t.records for t in opened) == len(values)
    with committer(broker) as again:
        again.commit_all("jvm", 0, opened)  # a retry after a crash: already committed is fine
    assert sorted(read_committed(broker, topic)) == sorted(v.encode() for v in values)


def test_librdkafka_settings_reach_the_java_producer_translated_or_keep_the_python_writer() -> None:
    sink = Kafka(
        "out",
        "b:9092",
        transactional_id_prefix="p",
        staging_url="/tmp/x",
        options={"kafka.compression.codec": "zstd", "kafka.queue.buffering.max.ms": "20"},
    )
    settings = json.loads(kafka_write_options(sink, endpoint="http://d", token="t")["producer"])
    assert settings == {
        "bootstrap.servers": "b:9092",
        "compression.type": "zstd",
        "linger.ms": "20",
        "transaction.timeout.ms": "900000",
    }
    assert why_not_jvm_sink(sink) is None
    odd = Kafka("out", "b:9092", options={"kafka.partitioner": "murmur2_random"})
    assert "kafka.partitioner has no Java" in (why_not_jvm_sink(odd) or "")
