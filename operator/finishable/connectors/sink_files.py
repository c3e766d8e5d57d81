"""The data files a sink writes and reads: parquet, JSON lines (as Spark writes them) and Arrow IPC.

Staging writes each task's rows as one file of the sink's format (``TransactionalFiles``
publishes parquet or JSON; the callback sink stages Arrow IPC for its commit to read back), and
``read_committed`` reads published ones, each cast to the schema its manifest recorded. No PySpark
in here either.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Final, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from finishable.connectors.sink_store import SinkError, SinkStore

FORMATS: Final = ("json", "parquet")
"""File formats ``TransactionalFiles`` publishes."""
EXTENSIONS: Final = {"parquet": "parquet", "json": "json", "arrow": "arrow"}


class BatchFileWriter(Protocol):
    def write(self, batch: pa.RecordBatch) -> None: ...
    def close(self) -> None: ...


def _json_encoder(data_type: pa.DataType) -> Callable[[Any], Any] | None:
    """How to turn a value of ``data_type`` into JSON the way Spark's JSON writer does."""
    if pa.types.is_timestamp(data_type):
        return lambda v: v.isoformat()
    if pa.types.is_date(data_type):
        return lambda v: v.isoformat()
    if pa.types.is_decimal(data_type):
        return str
    if pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type):
        return lambda v: base64.b64encode(v).decode("ascii")
    if pa.types.is_map(data_type):
        key = _json_encoder(data_type.key_type)
        value = _json_encoder(data_type.item_type)
        return lambda v: {
            str(key(k) if key and k is not None else k): (
                value(x) if value and x is not None else x
            )
            for k, x in v
        }
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        item = _json_encoder(data_type.value_type)
        if item is None:
            return None
        return lambda v: [None if x is None else item(x) for x in v]
    if pa.types.is_struct(data_type):
        fields = [(f.name, _json_encoder(f.type)) for f in data_type]
        if all(enc is None for _, enc in fields):
            return None
        return lambda v: {
            name: (enc(v[name]) if enc and v[name] is not None else v[name]) for name, enc in fields
        }
    return None


def _json_decoder(data_type: pa.DataType) -> Callable[[Any], Any] | None:
    """Inverse of ``_json_encoder``, so JSON output reads back with its exact Arrow types."""
    if pa.types.is_timestamp(data_type):
        return datetime.fromisoformat
    if pa.types.is_date(data_type):
        return date.fromisoformat
    if pa.types.is_decimal(data_type):
        return Decimal
    if pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type):
        return base64.b64decode
    if pa.types.is_map(data_type):
        value = _json_decoder(data_type.item_type)
        return lambda v: [(k, value(x) if value and x is not None else x) for k, x in v.items()]
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        item = _json_decoder(data_type.value_type)
        if item is None:
            return None
        return lambda v: [None if x is None else item(x) for x in v]
    if pa.types.is_struct(data_type):
        fields = [(f.name, _json_decoder(f.type)) for f in data_type]
        if all(dec is None for _, dec in fields):
            return None
        return lambda v: {
            name: (dec(v.get(name)) if dec and v.get(name) is not None else v.get(name))
            for name, dec in fields
        }
    return None


def encode_json_lines(batch: pa.RecordBatch | pa.Table) -> bytes:
    """JSON lines like Spark's JSON writer: ISO times, base64 binary, maps as objects, no nulls."""
    columns: list[list[Any]] = []
    for field, column in zip(batch.schema, batch.columns, strict=True):
        values = column.to_pylist()
        encode = _json_encoder(field.type)
        if encode is not None:
            values = [None if v is None else encode(v) for v in values]
        columns.append(values)
    names = batch.schema.names
    lines = []
    for row in zip(*columns, strict=True):
        doc = {n: v for n, v in zip(names, row, strict=True) if v is not None}
        lines.append(json.dumps(doc, separators=(",", ":"), ensure_ascii=False))
    return ("\n".join(lines) + "\n").encode() if lines else b""


def decode_json_lines(data: bytes, schema: pa.Schema) -> pa.Table:
    """Read ``encode_json_lines`` output back into ``schema`` (pyarrow.json cannot do maps)."""
    decoders = [_json_decoder(f.type) for f in schema]
    rows: list[dict[str, Any]] = []
    for line in data.splitlines():
        if not line.strip():
            continue
        doc = json.loads(line)
        for field, dec in zip(schema, decoders, strict=True):
            value = doc.get(field.name)
            if dec is not None and value is not None:
                doc[field.name] = dec(value)
        rows.append(doc)
    return pa.Table.from_pylist(rows, schema=schema)


class _ParquetFile:
    """Spark hands over 10,000-row batches; buffering them makes row groups of useful size."""

    ROW_GROUP_ROWS = 128 * 1024
    ROW_GROUP_BYTES = 64 * 1024 * 1024

    def __init__(self, out: Any, schema: pa.Schema) -> None:
        self._out = out
        self._writer = pq.ParquetWriter(out, schema, compression="snappy")
        self._pending: list[pa.RecordBatch] = []
        self._rows = self._bytes = 0

    def write(self, batch: pa.RecordBatch) -> None:
        self._pending.append(batch)
        self._rows += batch.num_rows
        self._bytes += batch.nbytes
        if self._rows >= self.ROW_GROUP_ROWS or self._bytes >= self.ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            table = pa.Table.from_batches(self._pending)
            self._writer.write_table(table, row_group_size=max(table.num_rows, 1))
            self._pending, self._rows, self._bytes = [], 0, 0

    def close(self) -> None:
        self._flush()
        self._writer.close()
        self._out.close()


class _JsonFile:
    def __init__(self, out: Any, schema: pa.Schema) -> None:
        self._out = out

    def write(self, batch: pa.RecordBatch) -> None:
        self._out.write(encode_json_lines(batch))

    def close(self) -> None:
        self._out.close()


class _ArrowFile:
    def __init__(self, out: Any, schema: pa.Schema) -> None:
        self._out = out
        self._writer = pa.ipc.new_file(out, schema)

    def write(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(batch)

    def close(self) -> None:
        self._writer.close()
        self._out.close()


FILE_WRITERS: dict[str, Callable[[Any, pa.Schema], BatchFileWriter]] = {
    "parquet": _ParquetFile,
    "json": _JsonFile,
    "arrow": _ArrowFile,
}


def read_data_file(
    store: SinkStore, relative: str, file_format: str, schema: pa.Schema
) -> pa.Table:
    """One published or staged file as a table in ``schema``."""
    try:
        if file_format == "parquet":
            with store.fs.open_input_file(store.path(relative)) as source:
                table = pq.read_table(source)
        elif file_format == "arrow":
            with store.fs.open_input_file(store.path(relative)) as source:
                table = pa.ipc.open_file(source).read_all()
        elif file_format == "json":
            with store.fs.open_input_stream(store.path(relative)) as stream:
                table = decode_json_lines(bytes(stream.read()), schema)
        else:
            raise SinkError(f"{store.where(relative)}: unknown file format {file_format!r}")
    except FileNotFoundError as exc:
        raise SinkError(f"data file {store.where(relative)} is missing: {exc}") from exc
    except (OSError, pa.ArrowException) as exc:
        raise SinkError(f"cannot read {store.where(relative)}: {exc}") from exc
    return conform(table, schema)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Cast to the manifest's schema (e.g. a timestamp's zone name differs between sessions)."""
    if table.schema.equals(schema):
        return table
    try:
        return table.select(schema.names).cast(schema)
    except (KeyError, ValueError, pa.ArrowException):
        return table  # an evolved schema: leave it to concat's promotion


def concat(tables: Sequence[pa.Table], schema: pa.Schema) -> pa.Table:
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables, promote_options="permissive")
