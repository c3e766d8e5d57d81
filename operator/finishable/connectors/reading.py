"""Reading a finishable source's splits into Arrow: shared by the streaming and the Batch readers.

Both the Structured Streaming reader (``connectors.streaming.source``) and the Batch reader tasks
(``connectors.batch.datasources``) get their ``ReaderSettings`` from the data source options a
source declaration wrote (``connectors.sources``), and read a ``SplitPartition`` with
``read_partition`` on an executor: nothing here runs in the driver's own Python process.

JSON and CSV byte ranges are aligned to lines (a line belongs to the range holding its first
byte) and go to Spark as the text of their records, which Spark's own parsers read
(``connectors.fileformats``); compressed files and options a range cannot honour are read whole.
Parquet byte ranges take the row groups whose midpoint lies in the range, Spark's rule. Ranges are
generated, and a drain's sentinel split is its single row. Rows go to Spark as Arrow record
batches in exactly the Arrow form of the reader's schema. An unreadable split fails the
task with an error naming the file, or with ``on_error="skip"`` is reported to the coordinator
and skipped whole, so a replay reads exactly the same rows.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.orc as pa_orc
import pyarrow.parquet as pq
from pyspark.sql.datasource import InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from finishable.connectors.fileformats import (
    RECORD_COLUMN,
    FileOptions,
    Format,
    records_array,
)
from finishable.coordinator.client import CoordinatorClient
from finishable.coordinator.files import compression_of, partition_values
from finishable.coordinator.splits import (
    FileSplit,
    KafkaSplit,
    RangeSplit,
    SentinelSplit,
    Split,
)

logger = logging.getLogger(__name__)

READER_SUBTASK = 0
"""The planner worker is the only reader attempt that asks for splits: subtask 0."""

ARROW_BATCH_ROWS = 65_536

OnError = Literal["fail", "skip"]


class SourceReadError(RuntimeError):
    """A split could not be read; the message names the file (and byte range)."""


# ---------------------------------------------------------------------- settings


@dataclass(frozen=True, slots=True)
class ReaderSettings:
    """Everything the reader needs, carried as data source options (``settings`` JSON)."""

    coordinator: str
    endpoint: str
    kind: Literal["files", "range", "kafka"]
    schema_json: dict[str, Any]
    attempt: int | None = None
    """Pinned attempt; ``None``: the one live attempt the driver made ready for this run."""
    format: Format | None = None
    on_error: OnError = "fail"
    options: dict[str, str] = field(default_factory=dict)
    """Spark reader options, checked (``FileOptions.parse``)."""
    root: str | None = None
    """The source's URL, below which ``key=value`` directories give partition columns."""
    split_size: int | None = None
    """Bytes (files) or rows (range) per split, to translate row and byte read limits."""
    max_splits_per_batch: int = 256
    max_partition_weight: int = 128 * 1024 * 1024
    open_cost: int = 4 * 1024 * 1024
    min_partitions: int = 1
    event_time_start_us: int = 0
    event_time_step_us: int = 1000
    client_timeout: float = 10.0
    client_deadline: float = 60.0
    bootstrap_servers: str | None = None
    """Kafka: the brokers; ``options`` then holds the client's settings (no secrets: those come
    from the environment, as Spark's do)."""

    def to_options(self, token: str) -> dict[str, str]:
        """Data source options; the token goes in its own option, which Spark redacts in plans."""
        document = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return {"settings": json.dumps(document, sort_keys=True), "token": token}

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> tuple[ReaderSettings, str]:
        """The settings and the token back from the options."""
        text = options.get("settings")
        token = options.get("token")
        if not text or not token:
            raise ValueError(
                "the finishable data source needs the 'settings' and 'token' options: build the "
                "stream with a finishable source descriptor (sources.Files, sources.Range, "
                "sources.Kafka)"
            )
        document = json.loads(text)
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(document) - known)
        if unknown:
            raise ValueError(f"unknown reader settings {unknown}: a newer finishable wrote them?")
        return cls(**document), token

    @property
    def schema(self) -> StructType:
        """The Spark schema of the rows the reader yields."""
        return StructType.fromJson(self.schema_json)

    @property
    def file_options(self) -> FileOptions:
        """The file reader options (checked when the source was declared)."""
        return FileOptions(self.format or "json", dict(self.options))

    def client(self, token: str) -> CoordinatorClient:
        """A client of the driver's driver endpoint."""
        return CoordinatorClient(
            self.endpoint, token, timeout=self.client_timeout, deadline=self.client_deadline
        )


class SplitPartition(InputPartition):
    """One Spark task's splits; it travels pickled to an executor, so it carries them whole."""

    def __init__(self, index: int, splits: tuple[Split, ...], attempt: int | None) -> None:
        super().__init__(index)
        self.index = index
        self.splits = splits
        self.attempt = attempt
        """The query run's attempt, for skip reports (``None``: ask the coordinator)."""

    def __repr__(self) -> str:
        return f"SplitPartition({self.index}, {len(self.splits)} split(s))"


# ---------------------------------------------------------------------- reading


def next_line_start(read_at: Callable[[int, int], bytes], pos: int, size: int) -> int:
    """The position just after the first newline at or after ``pos`` (``size`` if none)."""
    probe = 64 * 1024
    while pos < size:
        chunk = read_at(pos, min(probe, size - pos))
        if not chunk:
            break
        found = chunk.find(b"\n")
        if found >= 0:
            return pos + found + 1
        pos += len(chunk)
    return size


def line_range(
    read_at: Callable[[int, int], bytes], start: int, end: int, size: int
) -> tuple[int, int]:
    """``[first, stop)``: the bytes of exactly the lines that begin in ``[start, end)``.

    Lines begin at 0 and after every newline. The first one at or after ``start`` is found by
    looking for a newline from ``start - 1``; the range stops at the first line beginning at or
    after ``end``, so its last line may run past ``end``. Adjacent ranges therefore share no line
    and miss none.
    """
    first = 0 if start <= 0 else next_line_start(read_at, start - 1, size)
    stop = size if end >= size else next_line_start(read_at, end - 1, size)
    return first, max(first, stop)


def row_group_midpoints(metadata: Any) -> list[int]:
    """The byte midpoint of every row group of a parquet file (Spark's rule for ranges)."""
    midpoints: list[int] = []
    for index in range(metadata.num_row_groups):
        group = metadata.row_group(index)
        starts: list[int] = []
        size = 0
        for column_index in range(group.num_columns):
            column = group.column(column_index)
            offset = column.data_page_offset
            dictionary = column.dictionary_page_offset
            if column.has_dictionary_page and dictionary is not None and 0 < dictionary < offset:
                offset = dictionary
            starts.append(offset)
            size += column.total_compressed_size
        begin = min(starts) if starts else 0
        midpoints.append(begin + size // 2)
    return midpoints


def arrow_schema_of(schema: StructType) -> pa.Schema:
    """The exact Arrow schema Spark expects from a Python data source with ``schema``."""
    result: pa.Schema = to_arrow_schema(schema, timezone="UTC")
    return result


def conform(table: pa.Table, target: pa.Schema) -> pa.Table:
    """``table`` in exactly the ``target`` schema: columns by name, cast, missing ones null."""
    columns: list[pa.ChunkedArray | pa.Array] = []
    for target_field in target:
        if target_field.name in table.column_names:
            column = table[target_field.name]
            if column.type != target_field.type:
                lossy = pa.types.is_timestamp(target_field.type)
                column = pc.cast(column, target_field.type, safe=not lossy)
        else:
            column = pa.nulls(table.num_rows, target_field.type)
        if not target_field.nullable and column.null_count:
            raise ValueError(
                f"column {target_field.name!r} has {column.null_count} null value(s) but the "
                "schema says NOT NULL"
            )
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=target)


def _read_range(
    split: FileSplit, filesystem: pafs.FileSystem, path: str, compression: str | None
) -> bytes:
    """The bytes of the lines that begin in the split's range (a compressed file is one split:
    all of it, decompressed)."""
    if compression == "deflate":
        with filesystem.open_input_stream(path) as stream:
            return zlib.decompress(stream.read())
    if compression is not None:
        with filesystem.open_input_stream(path, compression=compression) as stream:
            data: bytes = stream.read()
            return data
    with filesystem.open_input_file(path) as handle:
        if split.whole_file:
            everything: bytes = handle.read()
            return everything

        def read_at(pos: int, count: int) -> bytes:
            chunk: bytes = handle.read_at(count, pos)
            return chunk

        first, stop = line_range(read_at, split.start, split.end, split.file_size)
        return read_at(first, stop - first) if stop > first else b""


def _read_records(
    split: FileSplit, filesystem: pafs.FileSystem, path: str, options: FileOptions
) -> pa.Array:
    compression = compression_of(path)
    whole = options.whole_files or compression is not None
    if whole and not split.whole_file:
        raise ValueError(
            "a byte range of a file that must be read whole (compressed, or multiLine, lineSep "
            "or a non-ASCII encoding); its splits were planned for other options"
        )
    data = _read_range(split, filesystem, path, compression)
    return records_array(data, options, file_start=split.start == 0)


def _records_table(records: pa.Array, target: pa.Schema) -> pa.Table:
    columns = [
        records if target_field.name == RECORD_COLUMN else pa.nulls(len(records), target_field.type)
        for target_field in target
    ]
    return pa.Table.from_arrays(columns, schema=target)


def _read_parquet(
    split: FileSplit, filesystem: pafs.FileSystem, path: str, target: pa.Schema
) -> pa.Table:
    with filesystem.open_input_file(path) as handle:
        parquet = pq.ParquetFile(handle)
        if split.whole_file:
            groups = list(range(parquet.metadata.num_row_groups))
        else:
            groups = [
                index
                for index, middle in enumerate(row_group_midpoints(parquet.metadata))
                if split.start <= middle < split.end
            ]
        present = set(parquet.schema_arrow.names)
        columns = [name for name in target.names if name in present]
        if not groups:
            return target.empty_table()
        table: pa.Table = parquet.read_row_groups(groups, columns=columns)
        return table


def _read_orc(filesystem: pafs.FileSystem, path: str, target: pa.Schema) -> pa.Table:
    """A whole ORC file (``sources.Files`` never cuts one), the target's columns it has."""
    with filesystem.open_input_file(path) as handle:
        orc = pa_orc.ORCFile(handle)
        present = set(orc.schema.names)
        table: pa.Table = orc.read(columns=[name for name in target.names if name in present])
        return table


def read_file_split(
    split: FileSplit, options: FileOptions, target: pa.Schema, *, root: str | None = None
) -> pa.Table:
    """Read one file split into a table of the reader's ``target`` schema (raises on any
    problem): parquet or ORC rows, or the text of CSV and JSON records for Spark to parse. Columns
    named by a ``key=value`` directory below ``root`` hold that value, as in Spark."""
    filesystem, path = pafs.FileSystem.from_uri(split.url)
    if options.format == "parquet":
        table = conform(_read_parquet(split, filesystem, path, target), target)
    elif options.format == "orc":
        table = conform(_read_orc(filesystem, path, target), target)
    elif options.text:
        table = _records_table(_read_records(split, filesystem, path, options), target)
    else:
        raise ValueError(f"unknown file format {options.format!r}")
    return _with_partition_values(table, partition_values(root, split.url) if root else {})


def _with_partition_values(table: pa.Table, values: dict[str, str | None]) -> pa.Table:
    for index, target_field in enumerate(table.schema):
        if target_field.name in values:
            value = pa.array([values[target_field.name]] * table.num_rows, type=pa.string())
            table = table.set_column(index, target_field, value.cast(target_field.type))
    return table


def range_batches(
    split: RangeSplit, target: pa.Schema, *, start_us: int, step_us: int
) -> Iterator[pa.RecordBatch]:
    """The rows of a range split: ``value`` and the event time ``ts = start + value * step``."""
    for low in range(split.start, split.end, ARROW_BATCH_ROWS):
        high = min(low + ARROW_BATCH_ROWS, split.end)
        values = pa.array(range(low, high), type=pa.int64())
        micros = pc.add_checked(pc.multiply_checked(values, step_us), start_us)
        columns: list[pa.Array] = []
        for target_field in target:
            if target_field.name == "value":
                columns.append(values.cast(target_field.type))
            elif target_field.name == "ts":
                columns.append(micros.cast(target_field.type))
            else:
                columns.append(pa.nulls(high - low, target_field.type))
        yield pa.RecordBatch.from_arrays(columns, schema=target)


def sentinel_batch(split: SentinelSplit, target: pa.Schema) -> pa.RecordBatch:
    """The sentinel's single row (JSON values: timestamps in microseconds, dates in days)."""
    row = split.row
    columns: list[pa.Array] = []
    for target_field in target:
        value = row.get(target_field.name)
        if value is None and not target_field.nullable:
            raise ValueError(
                f"the sentinel row has no value for the NOT NULL column {target_field.name!r}"
            )
        columns.append(pa.array([value], type=target_field.type))
    return pa.RecordBatch.from_arrays(columns, schema=target)


def describe_split(split: FileSplit) -> str:
    """``url`` or ``url [start, end)`` for messages."""
    if split.whole_file:
        return split.url
    return f"{split.url} bytes [{split.start}, {split.end})"


@dataclass
class _ReadContext:
    settings: ReaderSettings
    token: str
    target: pa.Schema
    attempt: int | None


def read_partition(
    partition: SplitPartition, settings: ReaderSettings, token: str, target: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Every row of the partition's splits, in split order."""
    context = _ReadContext(settings, token, target, partition.attempt)
    for split in partition.splits:
        if isinstance(split, SentinelSplit):
            yield sentinel_batch(split, target)
        elif isinstance(split, RangeSplit):
            yield from range_batches(
                split,
                target,
                start_us=settings.event_time_start_us,
                step_us=settings.event_time_step_us,
            )
        elif isinstance(split, FileSplit):
            yield from _read_file(split, context)
        elif isinstance(split, KafkaSplit):
            from finishable.connectors.kafka_reading import kafka_batches  # noqa: PLC0415

            yield from kafka_batches(
                split,
                target,
                bootstrap_servers=settings.bootstrap_servers or "",
                client_options=settings.options,
                fail_on_data_loss=settings.on_error == "fail",
            )
        else:
            raise SourceReadError(f"a finishable source cannot read {split.kind!r} splits")


def _read_file(split: FileSplit, context: _ReadContext) -> Iterator[pa.RecordBatch]:
    settings = context.settings
    options = settings.file_options
    try:
        # A whole split is read before any row goes out, so a skipped split leaves no partial
        # rows behind and a replay reads exactly the same rows.
        table = read_file_split(split, options, context.target, root=settings.root)
    except Exception as error:
        reason = (
            f"cannot read {describe_split(split)} as {options.format}: "
            f"{type(error).__name__}: {error}"
        )
        if settings.on_error != "skip" and not options.skip_unreadable:
            raise SourceReadError(reason) from error
        logger.warning("skipping an unreadable split: %s", reason)
        _report_skipped(split, reason, context)
        return
    for batch in table.to_batches(max_chunksize=ARROW_BATCH_ROWS):
        if batch.num_rows:
            yield batch


def _report_skipped(split: Split, reason: str, context: _ReadContext) -> None:
    """Tell the coordinator, so the job status lists the skipped file; failing to is an error."""
    settings = context.settings
    client = settings.client(context.token)
    try:
        attempt = context.attempt
        if attempt is None:
            attempt = resolve_attempt(client, settings)
        client.report_skipped(settings.coordinator, READER_SUBTASK, attempt, split.split_id, reason)
    finally:
        client.close()


def resolve_attempt(client: CoordinatorClient, settings: ReaderSettings) -> int:
    """The query run's attempt: pinned in the settings, or the one the driver made ready."""
    if settings.attempt is not None:
        return settings.attempt
    live = client.live_attempts(settings.coordinator).get(READER_SUBTASK, [])
    if len(live) != 1:
        raise RuntimeError(
            f"coordinator {settings.coordinator!r} has live attempts {live} for the reader; the "
            "driver must make exactly one attempt ready before the query starts "
            "(SourceCoordinator.begin_run)"
        )
    return live[0]
