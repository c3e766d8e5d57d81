"""Writing rows to Kafka from a write task, and the driver's producer-side chores.

A task's rows are records in Spark's Kafka sink layout: ``value`` (binary or string, required),
and optionally ``key``, ``topic`` (else the sink's topic), ``partition`` and ``headers``
(``array<struct<key: string, value: binary>>``); other columns are ignored, as Spark does.

Exactly once (:func:`write_transaction`): a transactional producer with the id
``<prefix>-<output partition>`` (``init_transactions`` fences the id's previous producer and
aborts what it left open), one transaction, every record flushed, then the transaction is
described to learn its producer id and epoch and reported *open*. The producer is dropped
without ``close()``: ``close()`` would abort the transaction, while dropping it leaves the
transaction to the driver's commit (librdkafka behaviour the sink's tests pin). At least once
(:func:`write_plain`): an idempotent producer, flushed before the task ends.

confluent-kafka (the ``kafka`` extra) is imported here only: the package imports without it.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import pyarrow as pa

from finishable.connectors.kafka_transactions import (
    KafkaCommitter,
    OpenTransaction,
    transactional_id,
)
from finishable.connectors.sentinels import drop_sentinels
from finishable.connectors.sink_store import SinkError

log = logging.getLogger(__name__)

DEFAULT_TRANSACTION_TIMEOUT_MS: Final = 900_000
"""The broker's default ``transaction.max.timeout.ms``: a crashed driver has this long to come
back and commit what its last checkpoint holds."""
FLUSH_SECONDS: Final = 300.0
INIT_SECONDS: Final = 120.0
RECORD_COLUMNS: Final = ("key", "value", "topic", "partition", "headers")


def producer_settings(
    bootstrap_servers: str, client_options: Mapping[str, str], **required: Any
) -> dict[str, Any]:
    """The user's client options, then what the sink needs (``required``) over them."""
    return {**client_options, "bootstrap.servers": bootstrap_servers, **required}


def _producer(settings: Mapping[str, Any]) -> Any:
    from confluent_kafka import Producer  # noqa: PLC0415

    return Producer(dict(settings))


Record = tuple[str, bytes | None, bytes | None, int | None, list[tuple[str, bytes]] | None]
"""A record to produce: topic, key, value, partition (None: the partitioner's choice), headers."""


def _records(batches: Iterable[pa.RecordBatch], default_topic: str | None) -> Iterator[Record]:
    """(topic, key, value, partition, headers) of each row that is not a drain sentinel."""
    for raw in batches:
        batch, _ = drop_sentinels(raw)
        if batch.num_rows == 0:
            continue
        names = set(batch.schema.names)
        if "value" not in names:
            raise SinkError("a Kafka sink writes a 'value' column (binary or string)")
        columns = {name: batch.column(name).to_pylist() for name in RECORD_COLUMNS if name in names}
        count = batch.num_rows
        topics = columns.get("topic") or [None] * count
        keys = columns.get("key") or [None] * count
        partitions = columns.get("partition") or [None] * count
        headers = columns.get("headers") or [None] * count
        for row in range(count):
            topic = default_topic or topics[row]  # the sink's topic wins, as in Spark
            if topic is None:
                raise SinkError(
                    "a Kafka record has no topic: give the sink topic=..., or a 'topic' column "
                    "with no nulls"
                )
            yield (
                topic,
                _bytes(keys[row]),
                _bytes(columns["value"][row]),
                partitions[row],
                None
                if headers[row] is None
                else [(str(h["key"]), _bytes(h["value"]) or b"") for h in headers[row]],
            )


def _bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    raise SinkError(f"a Kafka key or value must be binary or string, got {type(value).__name__}")


def _produce_all(producer: Any, records: Iterator[Record], first: Record) -> int:
    """Produce every record, then flush; the first delivery error fails the task."""
    errors: list[str] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None and len(errors) < 5:
            errors.append(f"{message.topic()}[{message.partition()}]: {error}")

    count = 0
    for topic, key, value, partition, headers in itertools.chain([first], records):
        extra: dict[str, Any] = {} if partition is None else {"partition": partition}
        if headers:
            extra["headers"] = headers
        while True:
            try:
                producer.produce(topic, value=value, key=key, on_delivery=delivered, **extra)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
        count += 1
        if errors:
            break
    remaining = producer.flush(FLUSH_SECONDS)
    if errors:
        raise SinkError(f"Kafka refused records: {'; '.join(errors)}")
    if remaining:
        raise SinkError(
            f"{remaining} Kafka record(s) were not delivered within {FLUSH_SECONDS:.0f} s"
        )
    return count


def write_transaction(
    batches: Iterable[pa.RecordBatch],
    *,
    bootstrap_servers: str,
    client_options: Mapping[str, str],
    topic: str | None,
    prefix: str,
    partition: int,
) -> OpenTransaction | None:
    """Phase one: the rows in one flushed, open transaction; ``None`` if there are no rows."""
    records = _records(batches, topic)
    first = next(records, None)
    if first is None:
        return None
    identifier = transactional_id(prefix, partition)
    settings = producer_settings(
        bootstrap_servers,
        {"transaction.timeout.ms": str(DEFAULT_TRANSACTION_TIMEOUT_MS), **client_options},
        **{"transactional.id": identifier, "enable.idempotence": True},
    )
    producer = _producer(settings)
    try:
        producer.init_transactions(INIT_SECONDS)
        producer.begin_transaction()
        count = _produce_all(producer, records, first)
    except SinkError:
        _abort_quietly(producer)
        raise
    except Exception as error:
        _abort_quietly(producer)
        raise SinkError(f"Kafka transaction {identifier!r}: {error}") from error
    with KafkaCommitter(bootstrap_servers, client_options) as committer:
        found = committer.describe(identifier)
    if found.state != "Ongoing":
        raise SinkError(
            f"Kafka transaction {identifier!r} is {found.state} right after its records were "
            "flushed: another producer took the id (is spark.speculation on?)"
        )
    del producer  # not close(): that would abort the transaction the driver is to commit
    return OpenTransaction(identifier, found.producer_id, found.producer_epoch, partition, count)


def _abort_quietly(producer: Any) -> None:
    try:
        producer.abort_transaction(30)
    except Exception:  # the task fails anyway; a retry with the same id fences what is left
        log.debug("abort after a failed Kafka write failed too", exc_info=True)


def write_plain(
    batches: Iterable[pa.RecordBatch],
    *,
    bootstrap_servers: str,
    client_options: Mapping[str, str],
    topic: str | None,
) -> int:
    """At least once: every row delivered (acknowledged by all in-sync replicas) before the
    task ends, so a batch Spark records as done is in the topic; a replay writes it again."""
    records = _records(batches, topic)
    first = next(records, None)
    if first is None:
        return 0
    producer = _producer(
        producer_settings(bootstrap_servers, client_options, **{"enable.idempotence": True})
    )
    try:
        return _produce_all(producer, records, first)
    finally:
        producer.close()


# --- the driver's chores: what recovery needs a real producer or admin client for ---------------


def brokers(bootstrap_servers: str, client_options: Mapping[str, str]) -> list[tuple[str, int]]:
    """Every broker of the cluster (host, port), from its metadata."""
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    admin = AdminClient({**client_options, "bootstrap.servers": bootstrap_servers})
    try:
        metadata = admin.list_topics(timeout=INIT_SECONDS)
    except Exception as error:
        raise SinkError(
            f"cannot read the metadata of Kafka at {bootstrap_servers}: {error}"
        ) from None
    return sorted((str(b.host), int(b.port)) for b in metadata.brokers.values())


def fence(bootstrap_servers: str, client_options: Mapping[str, str], identifier: str) -> None:
    """Abort whatever ``identifier`` has open and fence its producer (a new epoch)."""
    started = time.monotonic()
    producer = _producer(
        producer_settings(
            bootstrap_servers,
            client_options,
            **{"transactional.id": identifier, "enable.idempotence": True},
        )
    )
    try:
        producer.init_transactions(INIT_SECONDS)
    except Exception as error:
        raise SinkError(f"cannot fence Kafka transactional id {identifier!r}: {error}") from None
    finally:
        producer.close()
    log.info("fenced Kafka transactional id %s in %.2f s", identifier, time.monotonic() - started)
