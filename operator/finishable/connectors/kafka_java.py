"""A Kafka source's or sink's client settings in the Java client's names, for the JVM data path
(``KafkaRead``'s consumer, ``KafkaWrite``'s producer).

Users give ``kafka.*`` settings in librdkafka's names, which the Python path hands to
confluent-kafka as they are. Most common settings are spelt and meant the same way by Kafka's
Java client; a few are renamed, and SASL's user name and password become a JAAS line. A setting
with no translation here raises ``NoJavaSetting`` naming it, and the Python path carries that
source or sink: a user never loses a setting to the faster path. The options the JVM reader and
writer are handed (``KafkaRead``, ``KafkaWrite``) are built here too; ``connectors.jvm`` decides
which path each source and sink takes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from finishable.connectors.kafka_reading import BATCH_ROWS, FETCH_DEFAULTS, READ_TIMEOUT_SECONDS
from finishable.connectors.kafka_writing import DEFAULT_TRANSACTION_TIMEOUT_MS
from finishable.connectors.sinks import Kafka as KafkaSink
from finishable.connectors.sources import Kafka
from finishable.connectors.streaming.kafka_writer import EXACTLY_ONCE
from finishable.connectors.streaming.source import ALL_AVAILABLE_CAP

JAVA_FETCH_DEFAULTS = {
    "max.partition.fetch.bytes": FETCH_DEFAULTS["fetch.message.max.bytes"],
    "fetch.max.bytes": FETCH_DEFAULTS["fetch.max.bytes"],
    "max.poll.records": str(BATCH_ROWS),
}
"""The Python reader's fetch sizes, and polls as large as its batches."""

_SAME_BOTH = frozenset(
    {"client.id", "client.rack", "sasl.mechanism", "security.protocol", "request.timeout.ms"}
)
_SAME_CONSUMER = frozenset({"fetch.min.bytes", "fetch.max.bytes", "max.partition.fetch.bytes"})
_SAME_PRODUCER = frozenset(
    {
        "acks",
        "batch.size",
        "compression.type",
        "delivery.timeout.ms",
        "enable.idempotence",
        "linger.ms",
        "retries",
        "transaction.timeout.ms",
    }
)
"""librdkafka settings the Java client spells and means the same way."""
_RENAMED_BOTH = {
    "sasl.mechanisms": "sasl.mechanism",
    "ssl.ca.location": "ssl.truststore.location",
    "ssl.endpoint.identification.algorithm": "ssl.endpoint.identification.algorithm",
}
_RENAMED_CONSUMER = {
    "fetch.message.max.bytes": "max.partition.fetch.bytes",
    "fetch.wait.max.ms": "fetch.max.wait.ms",
    "socket.receive.buffer.bytes": "receive.buffer.bytes",
}
_RENAMED_PRODUCER = {
    "compression.codec": "compression.type",
    "message.max.bytes": "max.request.size",
    "message.timeout.ms": "delivery.timeout.ms",
    "queue.buffering.max.ms": "linger.ms",
    "request.required.acks": "acks",
    "socket.send.buffer.bytes": "send.buffer.bytes",
}
_IGNORED = frozenset({"group.id", "sasl.username", "sasl.password"})
"""A reader that assigns its partitions commits no group; the credentials become JAAS."""
_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


class NoJavaSetting(ValueError):
    """A client setting (librdkafka's name) the Java client has no translation for here."""


def java_consumer_settings(
    bootstrap_servers: str, client_options: Mapping[str, str]
) -> dict[str, str]:
    """The JVM reader's consumer: the Python reader's fetch sizes, the user's settings, then what
    exactly-once reading needs (read_committed, nothing committed, no offset reset)."""
    translated = _translated(client_options, _SAME_CONSUMER, _RENAMED_CONSUMER)
    return {
        **JAVA_FETCH_DEFAULTS,
        **translated,
        "bootstrap.servers": bootstrap_servers,
        "enable.auto.commit": "false",
        "isolation.level": "read_committed",
        "auto.offset.reset": "none",
    }


def java_producer_settings(
    bootstrap_servers: str, client_options: Mapping[str, str]
) -> dict[str, str]:
    """The JVM writer's producer, before the sink adds its transactional id: the user's settings
    (librdkafka's names), translated."""
    translated = _translated(client_options, _SAME_PRODUCER, _RENAMED_PRODUCER)
    return {**translated, "bootstrap.servers": bootstrap_servers}


def _translated(
    client_options: Mapping[str, str], same: frozenset[str], renamed: Mapping[str, str]
) -> dict[str, str]:
    translated: dict[str, str] = {}
    for key, value in client_options.items():
        if key in _IGNORED:
            continue
        if key in _SAME_BOTH or key in same:
            translated[key] = value
        elif key in _RENAMED_BOTH or key in renamed:
            translated[_RENAMED_BOTH.get(key) or renamed[key]] = value
        else:
            raise NoJavaSetting(f"kafka.{key} has no Java client equivalent here")
    if "ssl.ca.location" in client_options:
        translated["ssl.truststore.type"] = "PEM"
    if translated.get("ssl.endpoint.identification.algorithm") == "none":
        translated["ssl.endpoint.identification.algorithm"] = ""
    if "sasl.username" in client_options or "sasl.password" in client_options:
        mechanism = translated.get("sasl.mechanism", "GSSAPI").upper()
        module = _JAAS_MODULES.get(mechanism)
        if module is None:
            raise NoJavaSetting(f"SASL {mechanism} with a user name and password")
        user = _jaas_quoted(client_options.get("sasl.username", ""))
        password = _jaas_quoted(client_options.get("sasl.password", ""))
        translated["sasl.jaas.config"] = f"{module} required username={user} password={password};"
    return translated


def _jaas_quoted(value: str) -> str:
    """A JAAS option value, quoted (Kafka's JaasConfig reads it as a Java string token)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def jvm_kafka_stream_options(
    source: Kafka,
    *,
    coordinator: str,
    endpoint: str,
    token: str,
    attempt: int | None,
    min_partitions: int,
) -> dict[str, str]:
    """The options of a streaming read's ``KafkaRead`` (its ``SplitStream``), grouped into tasks
    as the Python reader groups a Kafka batch (``Kafka._settings``): one split, one task."""
    consumer = java_consumer_settings(source.bootstrap_servers, source.client_options)
    return {
        "name": f"finishable_stream__{coordinator}",
        "endpoint": endpoint,
        "token": token,
        "coordinator": coordinator,
        "schema": source.schema.json(),
        "consumer": json.dumps(consumer, sort_keys=True),
        "failOnDataLoss": str(source.fail_on_data_loss).lower(),
        "readTimeoutMs": str(int(READ_TIMEOUT_SECONDS * 1000)),
        "attempt": str(-1 if attempt is None else attempt),
        "maxSplitsPerBatch": str(ALL_AVAILABLE_CAP),  # the coordinator keeps maxOffsetsPerTrigger
        "maxPartitionWeight": str(source.split_size),
        "openCost": "0",
        "minPartitions": str(min_partitions),
        "splitSize": str(source.split_size),
    }


def kafka_producer_settings(sink: KafkaSink) -> dict[str, str]:
    """The Java producer's settings for ``sink``: the Python writer's, translated (an exactly-once
    sink's transaction timeout defaults as there)."""
    client = {key.removeprefix("kafka."): value for key, value in (sink.options or {}).items()}
    if sink.delivery == EXACTLY_ONCE:
        client.setdefault("transaction.timeout.ms", str(DEFAULT_TRANSACTION_TIMEOUT_MS))
    return java_producer_settings(sink.bootstrap_servers, client)


def kafka_write_options(sink: KafkaSink, *, endpoint: str, token: str) -> dict[str, str]:
    """The options of a streaming query's ``KafkaWrite`` (KafkaWrite.Settings reads them)."""
    target = sink.target
    options = {
        "endpoint": endpoint,
        "token": token,
        "sink": sink.sink_name,
        "delivery": target.delivery,
        "prefix": target.prefix,
        "producer": json.dumps(kafka_producer_settings(sink), sort_keys=True),
    }
    if target.topic is not None:
        options["topic"] = target.topic
    return options
