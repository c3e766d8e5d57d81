"""The Structured Streaming side of the Iceberg sink: staged like the callback sink, then committed.

Write tasks stage each micro-batch as Arrow IPC (phase one, ``_StagingWriter``); the writer's
``commit`` (phase two, once per micro-batch, before Spark's commit log records it) reads the
batch's staged rows and commits them to the table in one catalog commit that records the batch id
(``connectors.iceberg``). A replay of a batch already in the table is recognised there and only
its staging is dropped. Registered as ``finishable_iceberg`` by ``sinks.Iceberg``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, WriterCommitMessage

from finishable.connectors.iceberg import IcebergTarget, validate_mode
from finishable.connectors.sink_store import SinkError, validate_sink_name
from finishable.connectors.staging import checked_parts, discard_replay, read_staged_parts
from finishable.connectors.streaming.commit_hook import BatchHookClient
from finishable.connectors.streaming.sink import (
    _hook,
    _messages,
    _option,
    _output_schema,
    _StagingWriter,
)

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)


class IcebergStreamWriter(_StagingWriter):
    """Stages Arrow IPC; ``commit`` appends (or overwrites) the batch's rows in the table."""

    def __init__(
        self,
        url: str,
        name: str,
        target: IcebergTarget,
        schema: StructType,
        overwrite: bool,
        *,
        mode: str,
        hook: BatchHookClient | None = None,
    ) -> None:
        super().__init__(url, name, schema, overwrite, hook)
        self.target = target
        self.mode = mode

    def commit(self, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        self.notify("prepare", batch_id)
        checked = _messages(messages)
        store = self.store
        if self.target.is_committed(batch_id):
            discard_replay(store, batch_id, checked)
            log.info(
                "batch %d of %s is already in %s: replay discarded",
                batch_id,
                store.name,
                self.target.table,
            )
        else:
            parts = checked_parts(store, batch_id, checked)
            table = read_staged_parts(store, parts, _output_schema(self.schema))
            # Spark asks for an overwrite in complete output mode: each batch is the whole result.
            overwrite = self.overwrite or self.mode == "overwrite"
            try:
                self.target.commit(batch_id, table, overwrite=overwrite)
            except SinkError:
                raise
            except Exception as exc:
                raise SinkError(
                    f"the commit of batch {batch_id} ({table.num_rows} rows) to Iceberg table "
                    f"{self.target.table!r} failed: {type(exc).__name__}: {exc}"
                ) from exc
            store.delete_staging_up_to(batch_id)
        self.notify("published", batch_id)


class IcebergDataSource(DataSource):
    """``format("finishable_iceberg")``: options ``url`` (staging), ``sink``, ``iceberg``
    (the target as JSON) and ``mode``."""

    @classmethod
    def name(cls) -> str:
        return "finishable_iceberg"

    def streamWriter(  # noqa: N802 - Spark's name
        self, schema: StructType, overwrite: bool
    ) -> IcebergStreamWriter:
        options = self.options
        sink = validate_sink_name(_option(options, "sink", self.name()))
        return IcebergStreamWriter(
            _option(options, "url", self.name()),
            sink,
            IcebergTarget.from_json(_option(options, "iceberg", self.name())),
            schema,
            overwrite,
            mode=validate_mode(_option(options, "mode", self.name())),
            hook=_hook(options, sink),
        )
