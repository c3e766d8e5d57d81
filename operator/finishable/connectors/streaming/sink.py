"""The Structured Streaming side of the two-phase-commit sinks: the writers Spark runs.

Spark's Python ``DataSourceStreamWriter`` is the two phases: ``write()`` runs in each task and
stages that task's rows (phase one); ``commit(messages, batch_id)`` runs once per micro-batch after
every task succeeded and before Spark records the batch in its commit log (phase two). Spark may
call ``commit`` again for the same batch after a crash (the batch is re-run when its commit-log
entry is missing), so each publish here is idempotent per (sink name, batch id); the staging and
publish themselves are in ``connectors.staging``.

Facts from pyspark 4.3 that shape the code (docs/architecture.md): the writer's ``commit`` and
``abort`` run in a Python worker where the ``DataSource`` and ``streamWriter()`` are rebuilt on
every call, so nothing may live in memory between calls and everything travels in the string
options (the callback sink's callable too, cloudpickled); ``write()`` learns its batch id only from
the local property ``streaming.sql.batchId``; ``abort`` may get only ``None`` messages, so it
cleans by batch id.

The data sources are registered under the names ``finishable_files`` and ``finishable_callback``
by the sink declarations (``connectors.sinks``), which build their options.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
from pyspark import TaskContext, cloudpickle
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema

from finishable.connectors.sentinels import SENTINEL_COLUMN, drop_sentinels
from finishable.connectors.sink_files import FORMATS
from finishable.connectors.sink_store import SinkError, SinkStore, validate_sink_name
from finishable.connectors.staging import (
    StagedPart,
    TaskIdentity,
    checked_parts,
    discard_replay,
    publish_files,
    read_staged_parts,
    stage_batches,
    staged_from_json,
)
from finishable.connectors.streaming.commit_hook import HOOK_OPTION, BatchHookClient

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"
"""The only way a write task learns its micro-batch id (a Spark-internal local property)."""


def _output_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of the query's rows, for batches in which no task saw any data."""
    try:
        arrow = to_arrow_schema(schema, timezone="UTC")
    except Exception:  # types Arrow cannot hold: the files will carry their own schema
        log.debug("no Arrow schema for %s", schema, exc_info=True)
        return pa.schema([])
    index = arrow.get_field_index(SENTINEL_COLUMN)
    return arrow.remove(index) if index >= 0 else arrow


# --- the writer side, shared by both sinks -------------------------------------------------------


@dataclass(frozen=True)
class StagedMessage(WriterCommitMessage):
    """The commit message a write task sends to the driver: what it staged, where."""

    part: StagedPart


def current_task() -> TaskIdentity:
    """The running Spark task's micro-batch, partition and attempt."""
    context = TaskContext.get()
    if context is None:
        raise SinkError("a sink's write() runs inside a Spark task")
    raw = context.getLocalProperty(BATCH_ID_PROPERTY)
    if raw is None:
        raise SinkError(
            f"no micro-batch id in this task (local property {BATCH_ID_PROPERTY}): "
            "finishable sinks take streaming writes (DataFrame.writeStream) only"
        )
    return TaskIdentity(
        batch_id=int(raw),
        partition=context.partitionId(),
        task_attempt_id=context.taskAttemptId(),
        attempt=context.attemptNumber(),
    )


def _messages(
    messages: Sequence[WriterCommitMessage | None],
) -> list[StagedMessage | None]:
    checked: list[StagedMessage | None] = []
    for message in messages:
        if message is not None and not isinstance(message, StagedMessage):
            raise SinkError(f"unexpected commit message {type(message).__name__}")
        checked.append(message)
    return checked


class _StagingWriter(DataSourceStreamArrowWriter):
    """Arrow batches straight to a staged file (about 3-7x faster than Row writing, measured)."""

    file_format = "arrow"

    def __init__(
        self,
        url: str,
        name: str,
        schema: StructType,
        overwrite: bool,
        hook: BatchHookClient | None = None,
    ) -> None:
        self.url = url
        self.name = name
        self.schema = schema
        self.overwrite = overwrite
        self.hook = hook
        self._store: SinkStore | None = None

    def notify(self, stage: str, batch_id: int) -> None:
        """Tell the job runtime (if any) that the batch reached ``stage`` of its commit."""
        if self.hook is not None:
            self.hook.notify(stage, batch_id)

    @property
    def store(self) -> SinkStore:
        """Built where it is used: the writer is pickled to executors without a filesystem."""
        if self._store is None:
            self._store = SinkStore(self.url, self.name)
        return self._store

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_store"] = None
        return state

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
        return self.stage(iterator, current_task())

    def stage(self, batches: Iterable[pa.RecordBatch], task: TaskIdentity) -> StagedMessage:
        """Stage ``batches`` as ``task`` would (``write`` with the task given, e.g. in tests)."""
        part = stage_batches(self.store, task, iter(batches), self.file_format, drop_sentinels)
        if part.sentinels:
            log.info(
                "batch %d partition %d: dropped %d drain sentinel row(s) before %s",
                task.batch_id,
                task.partition,
                part.sentinels,
                self.store.display,
            )
        return StagedMessage(part)

    def abort(self, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        """Spark may pass only ``None``s, even for tasks that staged: clean by batch id."""
        for message in _messages(messages):
            if message is not None and message.part.path is not None:
                self.store.delete_file(message.part.path)
        self.store.delete_staging(batch_id)
        log.info("aborted batch %d of %s: staging removed", batch_id, self.store.display)


class FilesStreamWriter(_StagingWriter):
    """Stages parquet or JSON; ``commit`` publishes the batch under its manifest."""

    def __init__(
        self,
        url: str,
        name: str,
        file_format: str,
        schema: StructType,
        overwrite: bool,
        *,
        hook: BatchHookClient | None = None,
    ) -> None:
        super().__init__(url, name, schema, overwrite, hook)
        self.file_format = file_format

    def commit(self, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        self.notify("prepare", batch_id)
        publish_files(
            self.store,
            batch_id,
            _messages(messages),
            self.file_format,
            _output_schema(self.schema),
            overwrite=self.overwrite,
        )
        self.notify("published", batch_id)


def publish_jvm_batch(
    sink_url: str, sink_name: str, file_format: str, batch_id: int, body: Mapping[str, Any]
) -> None:
    """Publish a micro-batch that Spark's own writers staged (``dev.finishable.spark.SinkWrite``):
    its commit sends the tasks' staged parts, the query's schema and whether the batch replaces
    the sink's rows (``{"parts", "schema", "overwrite"}``) to the driver, which publishes them
    here as ``FilesStreamWriter.commit`` would. A malformed body is a ValueError naming it."""
    from pyspark.sql.types import StructType  # noqa: PLC0415

    parts = body.get("parts")
    if not isinstance(parts, list):
        raise ValueError(f"publish of batch {batch_id}: 'parts' must be a list, not {parts!r}")
    try:
        messages: list[StagedMessage | None] = [
            None if part is None else StagedMessage(staged_from_json(part)) for part in parts
        ]
        schema = StructType.fromJson(json.loads(str(body.get("schema"))))
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"publish of batch {batch_id}: malformed parts or schema: {error}"
        ) from None
    writer = FilesStreamWriter(
        sink_url, sink_name, file_format, schema, bool(body.get("overwrite", False))
    )
    writer.commit(list(messages), batch_id)


CommitFunction = Callable[[int, pa.Table], None]


class CallbackStreamWriter(_StagingWriter):
    """Stages Arrow IPC; ``commit`` hands the batch's table to the user's callable."""

    def __init__(
        self,
        url: str,
        name: str,
        fn: CommitFunction,
        schema: StructType,
        overwrite: bool,
        *,
        hook: BatchHookClient | None = None,
    ) -> None:
        super().__init__(url, name, schema, overwrite, hook)
        self.fn = fn

    def commit(self, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        """Call the user's commit, then mark the batch done and drop its staging.

        The marker (the highest committed batch id) spares the user a second call when the crash
        came after it; a crash between the user's commit and the marker calls them again with the
        same rows, which is why their commit must be idempotent per batch id.
        """
        self.notify("prepare", batch_id)
        self._deliver(_messages(messages), batch_id)
        self.notify("published", batch_id)

    def _deliver(self, checked: list[StagedMessage | None], batch_id: int) -> None:
        store = self.store
        last = store.last_committed()
        if last is not None and batch_id <= last:
            discard_replay(store, batch_id, checked)
            log.info("batch %d of %s already committed: replay discarded", batch_id, store.display)
            return
        parts = checked_parts(store, batch_id, checked)
        table = read_staged_parts(store, parts, _output_schema(self.schema))
        try:
            self.fn(batch_id, table)
        except Exception as exc:
            raise SinkError(
                f"the commit callable of sink {store.name!r} failed for batch {batch_id} "
                f"({table.num_rows} rows): {type(exc).__name__}: {exc}"
            ) from exc
        store.set_last_committed(batch_id)
        cleaned = store.delete_staging_up_to(batch_id)
        log.info(
            "committed batch %d of %s through the callback: %d rows (staging cleaned for %s)",
            batch_id,
            store.display,
            table.num_rows,
            cleaned,
        )


# --- Python data sources (the names Spark knows them by) -----------------------------------------


def _option(options: Mapping[str, str], key: str, source: str) -> str:
    value = options.get(key)
    if not value:
        raise SinkError(f"the {source} data source needs the option {key!r}")
    return value


class FilesDataSource(DataSource):
    """``format("finishable_files")``: options ``url``, ``format`` and ``sink``."""

    @classmethod
    def name(cls) -> str:
        return "finishable_files"

    def streamWriter(  # noqa: N802 - Spark's name
        self, schema: StructType, overwrite: bool
    ) -> FilesStreamWriter:
        options = self.options
        file_format = check_format(_option(options, "format", self.name()))
        sink = validate_sink_name(_option(options, "sink", self.name()))
        return FilesStreamWriter(
            _option(options, "url", self.name()),
            sink,
            file_format,
            schema,
            overwrite,
            hook=_hook(options, sink),
        )


class CallbackDataSource(DataSource):
    """``format("finishable_callback")``: options ``url``, ``sink`` and ``commit`` (cloudpickle)."""

    @classmethod
    def name(cls) -> str:
        return "finishable_callback"

    def streamWriter(  # noqa: N802 - Spark's name
        self, schema: StructType, overwrite: bool
    ) -> CallbackStreamWriter:
        options = self.options
        fn = _load_function(_option(options, "commit", self.name()))
        sink = validate_sink_name(_option(options, "sink", self.name()))
        return CallbackStreamWriter(
            _option(options, "url", self.name()),
            sink,
            fn,
            schema,
            overwrite,
            hook=_hook(options, sink),
        )


def _hook(options: Mapping[str, str], sink: str) -> BatchHookClient | None:
    text = options.get(HOOK_OPTION)
    return BatchHookClient.from_option(text, sink) if text else None


def dump_function(fn: CommitFunction) -> str:
    try:
        return base64.b64encode(cloudpickle.dumps(fn)).decode("ascii")  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise ValueError(f"the commit callable {fn!r} cannot be pickled: {exc}") from exc


def _load_function(text: str) -> CommitFunction:
    try:
        fn = cloudpickle.loads(base64.b64decode(text))
    except Exception as exc:
        raise SinkError(
            f"cannot load the commit callable in this worker ({type(exc).__name__}: {exc}); "
            "modules it uses must be importable on the workers"
        ) from exc
    if not callable(fn):
        raise SinkError(f"the commit option holds {type(fn).__name__}, not a callable")
    return fn  # type: ignore[no-any-return]


def check_format(value: str) -> str:
    if value not in FORMATS:
        raise ValueError(
            f"unknown format {value!r}: TransactionalFiles writes one of "
            + ", ".join(repr(f) for f in FORMATS)
        )
    return value
