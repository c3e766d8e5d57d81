"""The Structured Streaming side of the Kafka sink: transactions per writer and micro-batch.

Each write task writes its rows in one Kafka transaction and reports it open (phase one,
``connectors.kafka_writing``); the writer's ``commit`` (phase two, once per micro-batch, before
Spark's commit log records it) records the batch's transactions as ``committing`` in the sink's
staging store, commits them all, and records them ``committed``
(``connectors.kafka_transactions``). A replay of a batch the record already holds aborts the
replay's transactions. In at-least-once delivery the tasks deliver their rows themselves and
the commit only tells the runtime. Registered as ``finishable_kafka`` by ``sinks.Kafka``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

from finishable.connectors.kafka_transactions import (
    COMMITTING,
    KafkaCommitter,
    OpenTransaction,
    committed,
    committing,
    read_record,
    write_record,
)
from finishable.connectors.kafka_writing import brokers, fence, write_plain, write_transaction
from finishable.connectors.sink_store import SinkError, SinkStore, validate_sink_name
from finishable.connectors.streaming.commit_hook import BatchHookClient
from finishable.connectors.streaming.sink import _hook, _option, current_task

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

EXACTLY_ONCE: Final = "exactly-once"
AT_LEAST_ONCE: Final = "at-least-once"
DELIVERIES: Final = (EXACTLY_ONCE, AT_LEAST_ONCE)


@dataclass(frozen=True)
class KafkaMessage(WriterCommitMessage):
    """What a write task tells the driver: its open transaction (exactly once) and its count."""

    transaction: OpenTransaction | None
    records: int


@dataclass(frozen=True)
class KafkaTarget:
    """Where and how the sink writes: everything a task and the commit need, as one option."""

    bootstrap_servers: str
    topic: str | None
    client_options: tuple[tuple[str, str], ...]
    delivery: str
    prefix: str
    run: str = ""

    @property
    def settings(self) -> dict[str, str]:
        return dict(self.client_options)

    def to_json(self) -> str:
        return json.dumps(
            {
                "bootstrap_servers": self.bootstrap_servers,
                "topic": self.topic,
                "client_options": dict(self.client_options),
                "delivery": self.delivery,
                "prefix": self.prefix,
                "run": self.run,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> KafkaTarget:
        try:
            doc = json.loads(text)
            return cls(
                bootstrap_servers=str(doc["bootstrap_servers"]),
                topic=None if doc["topic"] is None else str(doc["topic"]),
                client_options=tuple(
                    sorted((str(k), str(v)) for k, v in doc["client_options"].items())
                ),
                delivery=str(doc["delivery"]),
                prefix=str(doc["prefix"]),
                run=str(doc.get("run", "")),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise SinkError(f"the Kafka sink's target option is malformed: {error}") from None

    def committer(self) -> KafkaCommitter:
        return KafkaCommitter(self.bootstrap_servers, self.settings)


def commit_batch(
    store: SinkStore,
    target: KafkaTarget,
    batch_id: int,
    opened: Sequence[OpenTransaction],
    committer: KafkaCommitter,
) -> None:
    """Phase two of one micro-batch (exactly once); a replay's transactions are aborted."""
    record = read_record(store)
    if record is not None and batch_id <= record.batch_id:
        if record.state == COMMITTING and record.batch_id == batch_id:
            committer.commit_all(store.name, batch_id, record.transactions)
            write_record(store, committed(record))
        committer.abort_all(opened)
        log.info(
            "batch %d of Kafka sink %s is already committed: the replay's %d transaction(s) "
            "aborted",
            batch_id,
            store.name,
            len(opened),
        )
        return
    pending = committing(store.name, batch_id, opened, target.run)
    if opened:
        write_record(store, pending)  # the checkpoint of phase one: recovery commits these
        committer.commit_all(store.name, batch_id, opened)
    write_record(store, committed(pending))
    log.info(
        "committed batch %d of Kafka sink %s: %d record(s) in %d transaction(s)",
        batch_id,
        store.name,
        pending.records,
        len(opened),
    )


def commit_jvm_batch(
    store: SinkStore | None, target: KafkaTarget, batch_id: int, body: Mapping[str, object]
) -> None:
    """Phase two of a micro-batch Kafka's Java producer wrote (``dev.finishable.spark.KafkaWrite``):
    its commit sends the transactions its tasks left open (``{"transactions": [...]}``, each an
    ``OpenTransaction``) to the driver, which commits them here as ``KafkaStreamWriter.commit``
    would. A malformed body is a ValueError naming it."""
    raw = body.get("transactions")
    if not isinstance(raw, list):
        raise ValueError(f"commit of batch {batch_id}: 'transactions' must be a list, not {raw!r}")
    try:
        opened = [OpenTransaction.from_dict(transaction) for transaction in raw]
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"commit of batch {batch_id}: a malformed transaction: {error}") from None
    if target.delivery != EXACTLY_ONCE:
        return
    if store is None:
        raise SinkError("a Kafka sink needs staging_url for exactly-once delivery")
    with target.committer() as committer:
        commit_batch(store, target, batch_id, opened, committer)


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """Writes each task's rows to Kafka; ``commit`` commits the batch's transactions."""

    def __init__(
        self,
        url: str | None,
        name: str,
        target: KafkaTarget,
        *,
        hook: BatchHookClient | None = None,
    ) -> None:
        self.url = url
        self.name = name
        self.target = target
        self.hook = hook

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaMessage:
        task = current_task()
        target = self.target
        if target.delivery == AT_LEAST_ONCE:
            count = write_plain(
                iterator,
                bootstrap_servers=target.bootstrap_servers,
                client_options=target.settings,
                topic=target.topic,
            )
            return KafkaMessage(None, count)
        opened = write_transaction(
            iterator,
            bootstrap_servers=target.bootstrap_servers,
            client_options=target.settings,
            topic=target.topic,
            prefix=target.prefix,
            partition=task.partition,
        )
        return KafkaMessage(opened, 0 if opened is None else opened.records)

    def commit(self, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        self._notify("prepare", batch_id)
        if self.target.delivery == EXACTLY_ONCE:
            with self.target.committer() as committer:
                commit_batch(self._store(), self.target, batch_id, _opened(messages), committer)
        self._notify("published", batch_id)

    def abort(self, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        """The batch failed: abort what its tasks reported (what they did not report is fenced
        by the next attempt of their ids, or at the next start)."""
        if self.target.delivery == EXACTLY_ONCE:
            with self.target.committer() as committer:
                committer.abort_all(_opened(messages))
        log.info("aborted batch %d of Kafka sink %s", batch_id, self.name)

    def _store(self) -> SinkStore:
        if self.url is None:
            raise SinkError(f"Kafka sink {self.name!r} needs staging_url for exactly-once delivery")
        return SinkStore(self.url, self.name)

    def _notify(self, stage: str, batch_id: int) -> None:
        if self.hook is not None:
            self.hook.notify(stage, batch_id)


def _opened(messages: Sequence[WriterCommitMessage | None]) -> list[OpenTransaction]:
    opened: list[OpenTransaction] = []
    for message in messages:
        if message is None:
            continue
        if not isinstance(message, KafkaMessage):
            raise SinkError(f"unexpected commit message {type(message).__name__}")
        if message.transaction is not None:
            opened.append(message.transaction)
    return opened


class KafkaDataSource(DataSource):
    """``format("finishable_kafka")``: options ``sink``, ``kafka`` (the target as JSON) and, for
    exactly-once delivery, ``url`` (the staging store of the commit record)."""

    @classmethod
    def name(cls) -> str:
        return "finishable_kafka"

    def streamWriter(  # noqa: N802 - Spark's name
        self, schema: StructType, overwrite: bool
    ) -> KafkaStreamWriter:
        options: Mapping[str, str] = self.options
        sink = validate_sink_name(_option(options, "sink", self.name()))
        return KafkaStreamWriter(
            options.get("url") or None,
            sink,
            KafkaTarget.from_json(_option(options, "kafka", self.name())),
            hook=_hook(options, sink),
        )


def recover(store: SinkStore | None, target: KafkaTarget) -> None:
    """Before a query starts: commit what the last checkpoint holds, then fence every other
    open transaction of the sink's ids (zombies of an earlier attempt would hold read_committed
    consumers back until their timeout). A lost transaction is KafkaTransactionLost."""
    if target.delivery != EXACTLY_ONCE or store is None:
        return
    with target.committer() as committer:
        record = read_record(store)
        if record is not None and record.state == COMMITTING:
            log.info(
                "Kafka sink %s: committing the %d transaction(s) of batch %d its last checkpoint "
                "holds",
                store.name,
                len(record.transactions),
                record.batch_id,
            )
            committer.commit_all(store.name, record.batch_id, record.transactions)
            write_record(store, committed(record))
        ours = f"{target.prefix}-"
        brokers_found = brokers(target.bootstrap_servers, target.settings)
        for identifier in committer.open_transactions(brokers_found, ours):
            if identifier[len(ours) :].isdigit():
                fence(target.bootstrap_servers, target.settings, identifier)
