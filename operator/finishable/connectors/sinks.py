"""Two-phase-commit sinks for Structured Streaming: executors stage, the driver publishes once.

What a program declares: ``sinks.TransactionalFiles(url, format=...)`` (exactly-once parquet or
JSON files), ``sinks.TransactionalCallback(commit)`` (exactly-once delivery into the user's own
system), ``sinks.Iceberg(table)`` or ``sinks.Kafka(topic, bootstrap_servers)`` (whose phase one is
a Kafka transaction per task rather than a staged file: ``connectors.streaming.kafka_writer``).
One cohesive module: the catalogue of every sink a program can declare, as ``sources`` is of the
sources. Each writes a DataFrame through a Python data source whose writers Spark runs
(``connectors.streaming.sink``): every task stages its rows (phase one), and once per micro-batch,
before Spark records the batch in its commit log, the batch is published (phase two), idempotently
per (sink name, batch id). Where the files live and how a batch is published is in
``connectors.sink_store`` and ``connectors.staging``.

``finish()``: Flink's two-phase sinks buffer rows across checkpoints, so FLIP-147 needs
``finish()`` to flush before the final checkpoint. Here a write task ends with its file complete
and the micro-batch *is* the checkpoint whose commit publishes it, so there is nothing to flush:
the last batch of a drained or bounded query is published by its own commit, before Spark writes
``commits/<id>``. ``finish()`` exists for the lifecycle executor's symmetry and does nothing.
``clean_staging()`` is the ``close()`` counterpart: between query runs no staged file is ever
reused (Spark re-runs every uncommitted task), so a program may call it between query runs; the
job runtime relies on each batch's commit removing what earlier batches staged. The Kafka sink's
counterpart is its recovery before a query starts (``kafka_writer.recover``).

Drain sentinels: every sink drops the artificial row of a drain and its marker column, so it never
reaches an output; the constants and helpers that recognise it (``connectors.sentinels``) are
exported here for programs and tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol

import pyarrow as pa

from finishable.connectors.iceberg import (
    BATCH_KEY,
    RUN_KEY,
    SINK_KEY,
    IcebergTarget,
    catalog_properties,
    validate_mode,
    validate_table_name,
)
from finishable.connectors.iceberg_schema import (
    IcebergConfigError,
    IcebergSchemaError,
    parse_partition,
)
from finishable.connectors.kafka_transactions import read_record
from finishable.connectors.sentinels import (
    SENTINEL_COLUMN,
    SENTINEL_EVENT_TIME,
    SENTINEL_EVENT_TIME_MICROS,
    SENTINEL_TEXT,
    drop_sentinels,
    is_sentinel_row,
    sentinel_mask,
)
from finishable.connectors.sink_files import FORMATS, concat
from finishable.connectors.sink_store import (
    Manifest,
    SinkError,
    SinkStore,
    display_location,
    validate_sink_name,
)
from finishable.connectors.staging import published_urls, read_published
from finishable.connectors.streaming.iceberg_writer import IcebergDataSource
from finishable.connectors.streaming.kafka_writer import (
    AT_LEAST_ONCE,
    DELIVERIES,
    EXACTLY_ONCE,
    KafkaDataSource,
    KafkaTarget,
    recover,
)
from finishable.connectors.streaming.sink import (
    CallbackDataSource,
    CommitFunction,
    FilesDataSource,
    check_format,
    dump_function,
)

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter

__all__ = [
    "BATCH_KEY",
    "DEFAULT_SINK_NAME",
    "FORMATS",
    "RUN_KEY",
    "SENTINEL_COLUMN",
    "SENTINEL_EVENT_TIME",
    "SENTINEL_EVENT_TIME_MICROS",
    "SENTINEL_TEXT",
    "SINK_KEY",
    "CommitFunction",
    "Iceberg",
    "IcebergConfigError",
    "IcebergSchemaError",
    "Kafka",
    "Manifest",
    "SinkError",
    "TransactionalCallback",
    "TransactionalFiles",
    "TransactionalSink",
    "drop_sentinels",
    "is_sentinel_row",
    "sentinel_mask",
]


def __dir__() -> list[str]:
    """What a program sees of this module (``dir()``, completion): its API, not its imports."""
    return sorted(__all__)


DEFAULT_SINK_NAME: Final = "default"


# --- the public sink objects ---------------------------------------------------------------------


class TransactionalSink(Protocol):
    """What the job runtime needs from a sink."""

    @property
    def sink_name(self) -> str: ...

    def write_stream(self, df: DataFrame) -> DataStreamWriter: ...

    def clean_staging(self) -> None: ...

    def finish(self) -> None: ...

    def fingerprint(self) -> dict[str, str]: ...

    def last_committed_batch(self) -> int | None: ...


@dataclass(frozen=True)
class TransactionalFiles:
    """Exactly-once parquet or JSON files under ``url`` (a local path or any ``pyarrow.fs`` URL).

    ``name`` identifies the query across restarts: keep it stable, and give two queries that
    write to the same URL different names. S3 takes credentials and endpoint from the URL
    (``s3://KEY:SECRET@bucket/prefix?endpoint_override=host:port&scheme=http``) or from the AWS
    environment of every executor. Read the result with ``read_committed`` (or give
    ``committed_files`` to another reader).
    """

    url: str
    format: str = "parquet"
    name: str | None = None

    def __post_init__(self) -> None:
        check_format(self.format)
        if self.name is not None:
            validate_sink_name(self.name)
        object.__setattr__(self, "url", SinkStore(self.url, self.sink_name).url)

    @property
    def sink_name(self) -> str:
        return self.name or DEFAULT_SINK_NAME

    def with_defaults(self, *, name: str | None = None) -> TransactionalFiles:
        """A copy with ``name`` filled in unless the user chose one (used by the job runtime)."""
        return self if self.name or not name else dataclasses.replace(self, name=name)

    @property
    def store(self) -> SinkStore:
        return SinkStore(self.url, self.sink_name)

    def options(self) -> dict[str, str]:
        return {"url": self.url, "format": self.format, "sink": self.sink_name}

    def fingerprint(self) -> dict[str, str]:
        return {
            "kind": "TransactionalFiles",
            "url": display_location(self.url),
            "format": self.format,
            "sink": self.sink_name,
        }

    def write_stream(self, df: DataFrame) -> DataStreamWriter:
        """``df.writeStream`` aimed at this sink; add a checkpoint location, a trigger, start."""
        df.sparkSession.dataSource.register(FilesDataSource)
        self.store.probe()
        return df.writeStream.format(FilesDataSource.name()).options(**self.options())

    def clean_staging(self) -> None:
        self.store.delete_all_staging()

    def finish(self) -> None:
        """Nothing to flush: every micro-batch's files are complete when its tasks end."""

    def committed_batches(self) -> list[int]:
        return self.store.committed_batches()

    def last_committed_batch(self) -> int | None:
        batches = self.committed_batches()
        return batches[-1] if batches else None

    def manifest(self, batch_id: int) -> Manifest | None:
        return self.store.read_manifest(batch_id)

    def committed_files(self, batches: Iterable[int] | None = None) -> list[str]:
        """URLs of the files of committed batches, e.g. for ``spark.read.parquet(*files)``."""
        return published_urls(self.store, batches)

    def read_committed(self, batches: Iterable[int] | None = None) -> pa.Table:
        """Every committed row (or those of ``batches``), in batch and partition order.

        Only batches with a manifest are read and each exactly once, so a concurrent or
        crashed publish is invisible. A batch written in complete output mode (its manifest says
        ``overwrite``) replaces everything before it. ``.to_pandas()`` needs pandas installed.
        """
        store = self.store
        tables, schema = read_published(store, batches)
        return concat(tables, schema if schema is not None else pa.schema([]))


@dataclass(frozen=True)
class TransactionalCallback:
    """Exactly-once delivery into the user's own system through ``commit(batch_id, table)``.

    Executors stage each micro-batch as Arrow IPC under ``staging_url``; once every task
    succeeded the driver side calls ``commit`` with the batch's rows (sentinels removed). The
    callable runs in a Spark Python worker on the driver's machine, not in the driver process:
    it is cloudpickled, so closures travel but modules it uses must be importable there. It may be
    called again with the same batch id and rows after a crash and must be idempotent (e.g. an
    upsert keyed by batch id, or a transaction that also records the batch id). Every micro-batch
    is delivered, empty ones too; in complete output mode each table is the whole result.
    """

    commit: CommitFunction
    name: str | None = None
    staging_url: str | None = None
    _pickled: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not callable(self.commit):
            raise ValueError(f"commit must be a callable (batch_id, table), got {self.commit!r}")
        if self.name is not None:
            validate_sink_name(self.name)
        if self.staging_url is not None:
            object.__setattr__(self, "staging_url", SinkStore(self.staging_url, self.sink_name).url)
        object.__setattr__(self, "_pickled", dump_function(self.commit))

    @property
    def sink_name(self) -> str:
        return self.name or DEFAULT_SINK_NAME

    def with_defaults(
        self, *, name: str | None = None, staging_url: str | None = None
    ) -> TransactionalCallback:
        """A copy with unset fields filled in (the job runtime knows a staging location)."""
        return dataclasses.replace(
            self, name=self.name or name, staging_url=self.staging_url or staging_url
        )

    @property
    def store(self) -> SinkStore:
        if self.staging_url is None:
            raise SinkError(
                f"TransactionalCallback {self.sink_name!r} needs staging_url, a location every "
                "executor and the driver can reach (run it through FinishableJob to get one)"
            )
        return SinkStore(self.staging_url, self.sink_name)

    def options(self) -> dict[str, str]:
        return {"url": self.store.url, "sink": self.sink_name, "commit": self._pickled}

    def fingerprint(self) -> dict[str, str]:
        return {
            "kind": "TransactionalCallback",
            "staging_url": display_location(self.staging_url or ""),
            "sink": self.sink_name,
            "commit": getattr(self.commit, "__qualname__", type(self.commit).__name__),
        }

    def write_stream(self, df: DataFrame) -> DataStreamWriter:
        df.sparkSession.dataSource.register(CallbackDataSource)
        self.store.probe()
        return df.writeStream.format(CallbackDataSource.name()).options(**self.options())

    def clean_staging(self) -> None:
        self.store.delete_all_staging()

    def finish(self) -> None:
        """Nothing to flush: the user's commit runs in each micro-batch's own commit."""

    def last_committed_batch(self) -> int | None:
        return self.store.last_committed()


@dataclass(frozen=True)
class Iceberg:
    """Exactly-once into an Apache Iceberg table (``namespace.table``), with pyiceberg.

    Executors stage each micro-batch as Arrow IPC under ``staging_url``; once per micro-batch the
    driver side commits the batch's rows to the table in one catalog commit whose snapshot summary
    records ``finishable.sink``, ``finishable.batch-id`` and ``finishable.run``, so a replay after
    a crash is recognised and skipped (``connectors.iceberg``). ``mode="append"`` adds each batch;
    ``"overwrite"`` replaces the table's rows with each batch (the last micro-batch's result; in a
    Batch job, the job's output), and so does Spark's complete output mode. The catalog is
    ``catalog`` (pyiceberg catalog properties: REST, Glue, Hive, SQL...; ``"name"`` sets the
    catalog's name, default ``finishable``), else a SQL catalog on SQLite in
    ``<warehouse>/catalog.db`` with the data under ``warehouse`` (a local directory; in a
    ``FinishableJob`` with local state it defaults to ``<job dir>/iceberg``). A missing table is
    created from the DataFrame's schema (every column optional), partitioned by ``partition_by``
    (``"col"``, ``"day(ts)"``, ``"bucket(16, user)"``...); an existing one is checked against the
    DataFrame before the query runs. The commit passes each batch through the memory of the
    driver's machine once.
    """

    table: str
    catalog: Mapping[str, str] | None = None
    warehouse: str | None = None
    mode: str = "append"
    partition_by: Sequence[str] = ()
    name: str | None = None
    staging_url: str | None = None
    run: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        validate_table_name(self.table)
        validate_mode(self.mode)
        if isinstance(self.partition_by, str):
            raise IcebergConfigError(
                f"partition_by must be a list of entries, got the string {self.partition_by!r}: "
                f"write partition_by=[{self.partition_by!r}]"
            )
        for entry in self.partition_by:
            parse_partition(entry)
        object.__setattr__(self, "partition_by", tuple(self.partition_by))
        object.__setattr__(self, "catalog", None if self.catalog is None else dict(self.catalog))
        if self.name is not None:
            validate_sink_name(self.name)
        if self.catalog is not None or self.warehouse is not None:
            catalog_properties(self.catalog, self.warehouse)  # refuse a bad one now
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
        warehouse: str | None = None,
        run: str = "",
    ) -> Iceberg:
        """A copy with unset fields filled in (the job runtime knows where it may keep files)."""
        return dataclasses.replace(
            self,
            name=self.name or name,
            staging_url=self.staging_url or staging_url,
            warehouse=self.warehouse or (None if self.catalog is not None else warehouse),
            run=self.run or run,
        )

    @property
    def target(self) -> IcebergTarget:
        catalog_name, properties = catalog_properties(self.catalog, self.warehouse)
        return IcebergTarget(
            table=self.table,
            catalog_name=catalog_name,
            properties=tuple(sorted(properties.items())),
            sink=self.sink_name,
            partition_by=tuple(parse_partition(entry) for entry in self.partition_by),
            run=self.run,
        )

    @property
    def store(self) -> SinkStore:
        if self.staging_url is None:
            raise SinkError(
                f"Iceberg sink {self.sink_name!r} needs staging_url, a location every executor "
                "and the driver can reach (run it through FinishableJob to get one)"
            )
        return SinkStore(self.staging_url, self.sink_name)

    def options(self) -> dict[str, str]:
        return {
            "url": self.store.url,
            "sink": self.sink_name,
            "iceberg": self.target.to_json(),
            "mode": self.mode,
        }

    def fingerprint(self) -> dict[str, str]:
        _, properties = catalog_properties(self.catalog, self.warehouse)
        return {
            "kind": "Iceberg",
            "table": self.table,
            "catalog": display_location(properties.get("uri", properties.get("type", ""))),
            "mode": self.mode,
            "sink": self.sink_name,
        }

    def prepare(self, df: DataFrame) -> Table:
        """Create the table if missing, else check that ``df`` fits it (before the query runs)."""
        from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415

        schema = to_arrow_schema(df.schema, timezone="UTC")
        index = schema.get_field_index(SENTINEL_COLUMN)
        if index >= 0:
            schema = schema.remove(index)
        shown = {f.name: f.dataType.simpleString() for f in df.schema.fields}
        return self.target.prepare(schema, shown)

    def write_stream(self, df: DataFrame) -> DataStreamWriter:
        """``df.writeStream`` aimed at this sink, once the table fits ``df``."""
        self.prepare(df)
        df.sparkSession.dataSource.register(IcebergDataSource)
        self.store.probe()
        return df.writeStream.format(IcebergDataSource.name()).options(**self.options())

    def clean_staging(self) -> None:
        self.store.delete_all_staging()

    def finish(self) -> None:
        """Nothing to flush: each micro-batch is committed by its own commit."""

    def committed_batches(self) -> list[int]:
        """This sink's batch ids found in the table's snapshot history."""
        return self.target.committed_batches()

    def last_committed_batch(self) -> int | None:
        return self.target.last_committed()

    def load_table(self) -> Table:
        """The pyiceberg table (e.g. ``.scan().to_arrow()``); an error while it does not exist."""
        table = self.target.load()
        if table is None:
            raise SinkError(f"Iceberg table {self.table!r} does not exist (yet)")
        return table

    def read(self) -> pa.Table:
        """Every row of the table's current snapshot."""
        return self.load_table().scan().to_arrow()


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
