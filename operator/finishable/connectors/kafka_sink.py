"""The Kafka sink a program declares (``sinks.Kafka``): exactly once, a transaction per write task.

A write task's transaction is committed once the micro-batch's commit recorded it
(``connectors.streaming.kafka_writer``, ``connectors.kafka_transactions``); here is what a program
declares and the checks of the DataFrame it writes. The catalogue :mod:`finishable.connectors.sinks`
lists it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from finishable.connectors.kafka_transactions import read_record
from finishable.connectors.sink_store import (
    DEFAULT_SINK_NAME,
    SinkError,
    SinkStore,
    validate_sink_name,
)
from finishable.connectors.streaming.kafka_writer import (
    AT_LEAST_ONCE,
    DELIVERIES,
    EXACTLY_ONCE,
    KafkaDataSource,
    KafkaTarget,
    recover,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter


@dataclass(frozen=True)
class Kafka:
    """Exactly-once records into Kafka: a transaction per write task and micro-batch, committed
    once the batch's commit has recorded it (Flink's KafkaSink protocol).

    Rows are records in Spark's Kafka sink layout: a ``value`` column (binary or string), and
    optionally ``key``, ``topic`` (required when ``topic`` is None), ``partition`` and
    ``headers``. ``options`` takes ``kafka.*`` client settings in librdkafka's names (Spark's
    ``kafka.`` prefix); ``kafka.transaction.timeout.ms`` (default 15 minutes, the broker's
    default cap) bounds how long a crashed driver may take to come back and commit what its last
    checkpoint holds. Consumers must read ``isolation.level=read_committed`` to see each record
    once. Transactional ids are ``<transactional_id_prefix>-<output partition>``: keep the
    prefix unique per sink and stable across restarts (a ``FinishableJob`` derives it from the
    job's namespace, name and the sink's name). ``delivery="at-least-once"`` writes without
    transactions: a replayed batch is written again.
    """

    topic: str | None
    bootstrap_servers: str
    delivery: str = EXACTLY_ONCE
    options: Mapping[str, str] | None = None
    transactional_id_prefix: str | None = None
    name: str | None = None
    staging_url: str | None = None
    run: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.bootstrap_servers, str) or not self.bootstrap_servers.strip():
            raise ValueError(
                f"bootstrap_servers={self.bootstrap_servers!r}: expected brokers as 'host:port,...'"
            )
        if self.topic is not None and (not isinstance(self.topic, str) or not self.topic):
            raise ValueError(
                f"topic={self.topic!r}: expected a topic name, or None to take "
                "each row's 'topic' column"
            )
        if self.delivery not in DELIVERIES:
            raise ValueError(
                f"delivery={self.delivery!r}: expected one of {', '.join(map(repr, DELIVERIES))}"
            )
        client: dict[str, str] = {}
        for key, value in (self.options or {}).items():
            if not key.startswith("kafka."):
                raise ValueError(
                    f"options[{key!r}]: a Kafka sink takes kafka.* client settings "
                    "(librdkafka names, e.g. 'kafka.compression.type'); the topic and brokers "
                    "are arguments"
                )
            if key in ("kafka.transactional.id", "kafka.bootstrap.servers"):
                raise ValueError(
                    f"options[{key!r}]: set by the sink (use transactional_id_prefix= or "
                    "bootstrap_servers=)"
                )
            client[key] = str(value)
        object.__setattr__(self, "options", client)
        if self.name is not None:
            validate_sink_name(self.name)
        if self.transactional_id_prefix is not None and not self.transactional_id_prefix.strip():
            raise ValueError("transactional_id_prefix must not be empty")
        if self.staging_url is not None:
            object.__setattr__(self, "staging_url", SinkStore(self.staging_url, self.sink_name).url)

    @property
    def sink_name(self) -> str:
        return self.name or DEFAULT_SINK_NAME

    def with_defaults(
        self,
        *,
        name: str | None = None,
        staging_url: str | None = None,
        transactional_id_prefix: str | None = None,
        run: str = "",
    ) -> Kafka:
        """A copy with unset fields filled in (the job runtime knows the job and its state)."""
        return dataclasses.replace(
            self,
            name=self.name or name,
            staging_url=self.staging_url or staging_url,
            transactional_id_prefix=self.transactional_id_prefix or transactional_id_prefix,
            run=self.run or run,
        )

    @property
    def target(self) -> KafkaTarget:
        prefix = self.transactional_id_prefix
        if prefix is None and self.delivery == EXACTLY_ONCE:
            raise SinkError(
                f"Kafka sink {self.sink_name!r} needs transactional_id_prefix for exactly-once "
                "delivery (a FinishableJob derives one from the job)"
            )
        return KafkaTarget(
            bootstrap_servers=self.bootstrap_servers,
            topic=self.topic,
            client_options=tuple(
                sorted((k.removeprefix("kafka."), v) for k, v in (self.options or {}).items())
            ),
            delivery=self.delivery,
            prefix=prefix or "",
            run=self.run,
        )

    @property
    def store(self) -> SinkStore | None:
        """Where the commit record lives (exactly once); at least once keeps none."""
        if self.delivery == AT_LEAST_ONCE:
            return None
        if self.staging_url is None:
            raise SinkError(
                f"Kafka sink {self.sink_name!r} needs staging_url for exactly-once delivery, a "
                "location the driver can reach (run it through FinishableJob to get one)"
            )
        return SinkStore(self.staging_url, self.sink_name)

    def options_for_spark(self) -> dict[str, str]:
        store = self.store
        found = {"sink": self.sink_name, "kafka": self.target.to_json()}
        return found if store is None else {**found, "url": store.url}

    def fingerprint(self) -> dict[str, str]:
        return {
            "kind": "Kafka",
            "topic": self.topic or "(topic column)",
            "delivery": self.delivery,
            "sink": self.sink_name,
        }

    def check(self, df: DataFrame) -> None:
        """Refuse, naming the mistake, a DataFrame or a session this sink cannot write."""
        check_kafka_columns(df, has_topic=self.topic is not None)
        speculation = df.sparkSession.conf.get("spark.speculation", "false")
        if self.delivery == EXACTLY_ONCE and str(speculation).lower() == "true":
            raise SinkError(
                f"Kafka sink {self.sink_name!r}: exactly-once delivery gives each output "
                "partition one transactional id, and spark.speculation=true runs two attempts "
                "of a task at once, which fence each other; turn speculation off or use "
                "delivery='at-least-once'"
            )

    def prepare(self, df: DataFrame) -> None:
        """Before a query writes ``df`` here, by either writer: check it, then commit what the
        last checkpoint holds and fence the sink's other open transactions."""
        self.check(df)
        store = self.store
        if store is not None:
            store.probe()
        recover(store, self.target)

    def write_stream(self, df: DataFrame) -> DataStreamWriter:
        """``df.writeStream`` aimed at this sink's Python writer, once prepared."""
        self.prepare(df)
        df.sparkSession.dataSource.register(KafkaDataSource)
        return df.writeStream.format(KafkaDataSource.name()).options(**self.options_for_spark())

    def clean_staging(self) -> None:
        """Nothing is staged: records go to Kafka from the tasks."""

    def finish(self) -> None:
        """Nothing to flush: each micro-batch's transactions are committed by its own commit."""

    def last_committed_batch(self) -> int | None:
        store = self.store
        if store is None:
            return None
        record = read_record(store)
        return None if record is None else record.batch_id


def check_kafka_columns(df: DataFrame, *, has_topic: bool) -> None:
    """Refuse, naming the column, a DataFrame Spark's Kafka sink would refuse."""
    from pyspark.sql.types import (  # noqa: PLC0415
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructType,
    )

    fields = {f.name: f.dataType for f in df.schema.fields}
    text = (StringType, BinaryType)
    if "value" not in fields:
        raise SinkError(
            f"a Kafka sink writes a 'value' column (binary or string); the DataFrame has "
            f"{', '.join(fields) or 'no columns'}"
        )
    wanted: dict[str, tuple[type, ...]] = {
        "value": text,
        "key": text,
        "topic": (StringType,),
        "partition": (IntegerType,),
        "headers": (ArrayType,),
    }
    for column, types in wanted.items():
        if column in fields and not isinstance(fields[column], types):
            raise SinkError(
                f"a Kafka sink's {column!r} column must be "
                f"{' or '.join(t.__name__.removesuffix('Type').lower() for t in types)}, "
                f"got {fields[column].simpleString()}"
            )
    headers = fields.get("headers")
    if isinstance(headers, ArrayType) and not (
        isinstance(headers.elementType, StructType)
        and [f.name for f in headers.elementType.fields] == ["key", "value"]
    ):
        raise SinkError(
            "a Kafka sink's 'headers' column must be array<struct<key: string, value: binary>>, "
            f"got {headers.simpleString()}"
        )
    if not has_topic and "topic" not in fields:
        raise SinkError("a Kafka sink needs topic=... or a 'topic' column")
