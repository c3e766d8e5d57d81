"""Two-phase-commit sinks for Structured Streaming: executors stage, the driver publishes once.

What a program declares: ``sinks.TransactionalFiles(url, format=...)`` (exactly-once parquet or
JSON files), ``sinks.TransactionalCallback(commit)`` (exactly-once delivery into the user's own
system), ``sinks.Iceberg(table)`` or ``sinks.Kafka(topic, bootstrap_servers)`` (whose phase one is
a Kafka transaction per task rather than a staged file: ``connectors.streaming.kafka_writer``).
This is the catalogue of every sink a program can declare, as ``sources`` is of the sources
(``Iceberg`` and ``Kafka`` are in modules of their own). Each writes a DataFrame through a Python
data source whose writers Spark runs (``connectors.streaming.sink``): every task stages its rows
(phase one), and once per micro-batch, before Spark records the batch in its commit log, the batch
is published (phase two), idempotently per (sink name, batch id). Where the files live and how a
batch is published is in ``connectors.sink_store`` and ``connectors.staging``.

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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

from finishable.connectors.iceberg import BATCH_KEY, RUN_KEY, SINK_KEY
from finishable.connectors.iceberg_schema import IcebergConfigError, IcebergSchemaError
from finishable.connectors.iceberg_sink import Iceberg
from finishable.connectors.kafka_sink import Kafka
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
    DEFAULT_SINK_NAME,
    Manifest,
    SinkError,
    SinkStore,
    display_location,
    validate_sink_name,
)
from finishable.connectors.staging import published_urls, read_published
from finishable.connectors.streaming.sink import (
    CallbackDataSource,
    CommitFunction,
    FilesDataSource,
    check_format,
    dump_function,
)

if TYPE_CHECKING:
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
