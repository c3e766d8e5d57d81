"""Where two-phase-commit sinks keep staged and published files, and how a batch is published.

Everything a sink owns lives under ``<url>/<sink name>/`` on any ``pyarrow.fs`` filesystem::

    _staging/<batch:020d>/part-<partition:05d>-t<task attempt id>-a<attempt>-<token>.<ext>
    batch=<batch:020d>/part-<partition:05d>.<ext>          published data of one batch
    _manifests/<batch:020d>.json                           the commit marker of that batch

Executors write only under ``_staging/`` (names unique per task attempt, so retries, speculative
copies and a replay after a crash never collide). The driver-side commit moves the staged files of
the successful attempts to deterministic names under ``batch=<id>/`` and then writes the batch's
manifest in one atomic step (a single PUT on object stores, write-then-rename elsewhere). The
manifest is the only thing that makes a batch visible to ``read_committed``: a reader sees a batch
whole or not at all, and since there is one manifest name per batch id a batch is never seen twice.
A commit that finds the manifest already there is Spark replaying the batch after a crash: it
publishes nothing and deletes the replay's staged files. Spark's file listing skips names
starting with ``_``, so ``spark.read`` on ``<url>/<sink name>`` sees only ``batch=`` directories
(it may see a batch whose publish is in flight or crashed; read through the manifests to be exact).

This module has no PySpark in it: the layout, the manifest format and the publish algorithm are
tested without a Spark session.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, Final, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

log = logging.getLogger(__name__)

MANIFEST_VERSION: Final = 1
BATCH_DIGITS: Final = 20
"""Zero-padded batch ids sort lexically in listings (a long has at most 19 digits)."""

STAGING_DIR: Final = "_staging"
MANIFEST_DIR: Final = "_manifests"
LAST_COMMITTED: Final = "_last_committed.json"

FORMATS: Final = ("json", "parquet")
"""File formats ``TransactionalFiles`` publishes."""
EXTENSIONS: Final = {"parquet": "parquet", "json": "json", "arrow": "arrow"}

_SINK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_BATCH_DIR = re.compile(rf"\d{{{BATCH_DIGITS}}}")
_MANIFEST_NAME = re.compile(rf"(\d{{{BATCH_DIGITS}}})\.json")
_ATOMIC_PUT_TYPES = frozenset({"s3", "gcs"})


class SinkError(RuntimeError):
    """A sink cannot stage, publish or read; the message names the location (without secrets)."""


# --- names ---------------------------------------------------------------------------------------


def validate_sink_name(name: str) -> str:
    """A sink name is a path segment that stays the same across restarts of the same query."""
    if not _SINK_NAME.fullmatch(name):
        raise ValueError(
            f"invalid sink name {name!r}: use 1-128 characters of A-Z, a-z, 0-9, '.', '_' and '-' "
            "starting with a letter or digit"
        )
    return name


def batch_key(batch_id: int) -> str:
    """The fixed-width text of a batch id, used in every per-batch name."""
    if batch_id < 0:
        raise ValueError(f"batch id must be >= 0, got {batch_id}")
    return f"{batch_id:0{BATCH_DIGITS}d}"


def parse_batch_key(text: str) -> int | None:
    """Inverse of ``batch_key``; ``None`` for names that are not ours (temp files, markers)."""
    return int(text) if _BATCH_DIR.fullmatch(text) else None


def staged_file_name(
    partition: int, task_attempt_id: int, attempt: int, token: str, extension: str
) -> str:
    """Unique per task attempt: retries and replays of a partition never overwrite each other."""
    return f"part-{partition:05d}-t{task_attempt_id}-a{attempt}-{token}.{extension}"


def published_file_name(batch_id: int, partition: int, extension: str) -> str:
    """Deterministic, so a publish that is redone after a crash overwrites rather than adds."""
    return f"batch={batch_key(batch_id)}/part-{partition:05d}.{extension}"


def manifest_file_name(batch_id: int) -> str:
    return f"{MANIFEST_DIR}/{batch_key(batch_id)}.json"


def parse_manifest_file_name(leaf: str) -> int | None:
    """The batch id of a manifest's leaf name, ``None`` for temporary or foreign files."""
    match = _MANIFEST_NAME.fullmatch(leaf)
    return int(match.group(1)) if match else None


# --- manifest ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PublishedFile:
    """One published data file, its path relative to the sink root."""

    path: str
    partition: int
    rows: int
    bytes: int


@dataclass(frozen=True)
class Manifest:
    """The commit marker of one batch: written last, it alone makes the batch visible."""

    sink: str
    batch_id: int
    format: str
    files: tuple[PublishedFile, ...]
    schema: pa.Schema
    overwrite: bool = False
    committed_at: str = ""

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    def to_json(self) -> bytes:
        doc = {
            "version": MANIFEST_VERSION,
            "sink": self.sink,
            "batch_id": self.batch_id,
            "format": self.format,
            "overwrite": self.overwrite,
            "rows": self.rows,
            "files": [dataclasses.asdict(f) for f in self.files],
            "schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode("ascii"),
            "committed_at": self.committed_at,
        }
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str = "manifest") -> Manifest:
        """Parse and check a manifest; a damaged or future one is an error, never a guess."""
        try:
            doc = json.loads(data)
            version = doc["version"]
            if version != MANIFEST_VERSION:
                raise SinkError(
                    f"{where}: manifest version {version} is not supported "
                    f"(this finishable reads version {MANIFEST_VERSION})"
                )
            files = tuple(
                PublishedFile(
                    path=str(f["path"]),
                    partition=int(f["partition"]),
                    rows=int(f["rows"]),
                    bytes=int(f["bytes"]),
                )
                for f in doc["files"]
            )
            schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(doc["schema"])))
            manifest = cls(
                sink=str(doc["sink"]),
                batch_id=int(doc["batch_id"]),
                format=str(doc["format"]),
                files=files,
                schema=schema,
                overwrite=bool(doc.get("overwrite", False)),
                committed_at=str(doc.get("committed_at", "")),
            )
        except SinkError:
            raise
        except (ValueError, KeyError, TypeError, pa.ArrowException) as exc:
            raise SinkError(f"{where}: damaged manifest: {exc}") from exc
        if manifest.rows != int(doc.get("rows", manifest.rows)):
            raise SinkError(f"{where}: damaged manifest: row total does not match its files")
        return manifest


# --- commit messages -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskIdentity:
    """Who staged a file: a Spark task of one micro-batch."""

    batch_id: int
    partition: int
    task_attempt_id: int
    attempt: int


@dataclass(frozen=True)
class StagedPart:
    """What one write task staged: the commit message content (the sinks wrap it for Spark)."""

    task: TaskIdentity
    path: str | None
    """Relative to the sink root; ``None`` when the partition had no rows after filtering."""
    rows: int
    size: int
    sentinels: int
    schema: bytes | None
    """The staged data's Arrow schema (serialized), ``None`` if the task saw no batch at all."""


class HasStagedPart(Protocol):
    @property
    def part(self) -> StagedPart: ...


# --- filesystem ----------------------------------------------------------------------------------


def redact_url(url: str) -> str:
    """Drop credentials from a URL before it reaches a log line or an exception message."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = [
        (k, "***" if any(s in k.lower() for s in ("key", "token", "secret")) else v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
    ]
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))


def display_location(url: str, name: str = "") -> str:
    """``scheme://host/path[/name]`` without credentials or query (endpoint options, keys)."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/") + (f"/{name}" if name else "")
    if not parts.scheme:
        return path
    return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[-1], path, "", ""))


def normalize_url(url: str) -> str:
    """Absolute local paths for plain paths, so executors and workers resolve the same place."""
    if not url:
        raise ValueError("a sink URL is required (a local path or a pyarrow.fs URL such as s3://)")
    if "://" in url:
        return url
    return os.path.abspath(os.path.expanduser(url))


def _with_s3_defaults(url: str) -> str:
    """Delayed opens on S3: small objects (manifests) go up in one PUT instead of a multipart."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "s3":
        return url
    query = parse_qsl(parts.query, keep_blank_values=True)
    if not any(key == "allow_delayed_open" for key, _ in query):
        query.append(("allow_delayed_open", "true"))
    return urlunsplit(parts._replace(query=urlencode(query)))


class SinkStore:
    """The files of one sink (``<url>/<name>``) on its filesystem; safe to rebuild anywhere."""

    def __init__(self, url: str, name: str) -> None:
        self.url = normalize_url(url)
        self.name = validate_sink_name(name)
        self.display = display_location(self.url, name)
        try:
            fs, path = pafs.FileSystem.from_uri(_with_s3_defaults(self.url))
        except (ValueError, OSError, pa.ArrowException) as exc:
            raise SinkError(f"cannot open sink URL {redact_url(self.url)}: {exc}") from exc
        self.fs: pafs.FileSystem = fs
        self.root = f"{str(path).rstrip('/')}/{name}"
        self.atomic_put = fs.type_name in _ATOMIC_PUT_TYPES

    def __repr__(self) -> str:
        return f"SinkStore({self.display!r})"

    def path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def url_of(self, relative: str) -> str:
        """A URL other readers understand: a plain path locally, ``s3://bucket/key`` and so on."""
        scheme = {"local": "", "gcs": "gs"}.get(self.fs.type_name, self.fs.type_name)
        return f"{scheme}://{self.path(relative)}" if scheme else self.path(relative)

    def where(self, relative: str = "") -> str:
        """A location for messages: the redacted URL, never a secret."""
        return f"{self.display}/{relative}" if relative else self.display

    def staging_dir(self, batch_id: int) -> str:
        return f"{STAGING_DIR}/{batch_key(batch_id)}"

    # -- primitive operations; every OSError becomes a SinkError naming the place --

    def _fail(self, action: str, relative: str, exc: BaseException) -> SinkError:
        return SinkError(f"cannot {action} {self.where(relative)}: {exc}")

    def ensure_dir(self, relative: str) -> None:
        if self.atomic_put:
            return  # object stores have no directories to create
        try:
            self.fs.create_dir(self.path(relative) if relative else self.root, recursive=True)
        except OSError as exc:
            raise self._fail("create directory", relative, exc) from exc

    def open_output(self, relative: str) -> Any:
        parent = relative.rsplit("/", 1)[0] if "/" in relative else ""
        if parent:
            self.ensure_dir(parent)
        try:
            return self.fs.open_output_stream(self.path(relative))
        except OSError as exc:
            raise self._fail("write", relative, exc) from exc

    def put_atomic(self, relative: str, data: bytes) -> None:
        """Readers see the old state or all of ``data``, never a prefix of it."""
        try:
            if self.atomic_put:
                with self.fs.open_output_stream(self.path(relative)) as out:
                    out.write(data)
                return
            parent, leaf = relative.rsplit("/", 1) if "/" in relative else ("", relative)
            self.ensure_dir(parent)
            hidden = f".{leaf}.tmp-{uuid.uuid4().hex}"
            tmp = f"{parent}/{hidden}" if parent else hidden
            with self.fs.open_output_stream(self.path(tmp)) as out:
                out.write(data)
            self.fs.move(self.path(tmp), self.path(relative))
        except OSError as exc:
            raise self._fail("write", relative, exc) from exc

    def get(self, relative: str) -> bytes | None:
        """The object's bytes, ``None`` if it does not exist."""
        try:
            with self.fs.open_input_stream(self.path(relative)) as stream:
                return bytes(stream.read())
        except FileNotFoundError:
            return None
        except OSError as exc:
            text = str(exc).lower()
            if "not found" in text or "no such file" in text or "is a directory" in text:
                return None
            raise self._fail("read", relative, exc) from exc

    def size(self, relative: str) -> int:
        try:
            info = self.fs.get_file_info(self.path(relative))
        except OSError as exc:
            raise self._fail("stat", relative, exc) from exc
        if info.type != pafs.FileType.File:
            raise SinkError(f"staged file {self.where(relative)} is missing")
        return int(info.size or 0)

    def list_names(self, relative: str, *, recursive: bool = False) -> list[str]:
        """Entry paths under ``relative`` (relative to the sink root); empty if it is absent."""
        selector = pafs.FileSelector(self.path(relative), recursive=recursive, allow_not_found=True)
        try:
            infos = self.fs.get_file_info(selector)
        except OSError as exc:
            raise self._fail("list", relative, exc) from exc
        cut = len(self.root) + 1
        return sorted(info.path[cut:] for info in infos)

    def move(self, source: str, target: str) -> None:
        parent = target.rsplit("/", 1)[0] if "/" in target else ""
        if parent:
            self.ensure_dir(parent)
        try:
            self.fs.move(self.path(source), self.path(target))
        except FileNotFoundError as exc:
            raise SinkError(f"staged file {self.where(source)} is missing: {exc}") from exc
        except OSError as exc:
            raise self._fail(f"move {self.where(source)} to", target, exc) from exc

    def delete_file(self, relative: str) -> None:
        try:
            self.fs.delete_file(self.path(relative))
        except FileNotFoundError:
            return
        except OSError as exc:
            if "not found" in str(exc).lower() or "no such file" in str(exc).lower():
                return
            raise self._fail("delete", relative, exc) from exc

    def delete_tree(self, relative: str) -> None:
        """Delete a directory (or key prefix) and everything under it; absent is fine."""
        try:
            info = self.fs.get_file_info(self.path(relative))
            if info.type == pafs.FileType.NotFound:
                return
            self.fs.delete_dir(self.path(relative))
        except FileNotFoundError:
            return
        except OSError as exc:
            if "not found" in str(exc).lower() or "does not exist" in str(exc).lower():
                return
            raise self._fail("delete", relative, exc) from exc

    def probe(self) -> None:
        """Fail early, in the driver, with the URL in the message, if executors could not write."""
        name = f"{STAGING_DIR}/.probe-{uuid.uuid4().hex}"
        try:
            if not self.atomic_put:
                self.fs.create_dir(self.path(STAGING_DIR), recursive=True)
            with self.fs.open_output_stream(self.path(name)) as out:
                out.write(b"probe")
            self.fs.delete_file(self.path(name))
        except OSError as exc:
            raise SinkError(f"sink location {self.display} is not writable: {exc}") from exc

    # -- staging --

    def staged_batches(self) -> list[int]:
        """Batch ids that have something under ``_staging/``."""
        ids = (parse_batch_key(n.rsplit("/", 1)[-1]) for n in self.list_names(STAGING_DIR))
        return sorted(i for i in ids if i is not None)

    def delete_staging(self, batch_id: int) -> None:
        self.delete_tree(self.staging_dir(batch_id))

    def delete_staging_up_to(self, batch_id: int) -> list[int]:
        """Leftovers of batches that are committed can never be needed again."""
        done = [b for b in self.staged_batches() if b <= batch_id]
        for b in done:
            self.delete_staging(b)
        return done

    def delete_all_staging(self) -> None:
        """Between query runs nothing staged is reusable: Spark re-runs every uncommitted task."""
        self.delete_tree(STAGING_DIR)

    # -- manifests --

    def read_manifest(self, batch_id: int) -> Manifest | None:
        relative = manifest_file_name(batch_id)
        data = self.get(relative)
        return None if data is None else Manifest.from_json(data, self.where(relative))

    def committed_batches(self) -> list[int]:
        ids = (
            parse_manifest_file_name(n.rsplit("/", 1)[-1]) for n in self.list_names(MANIFEST_DIR)
        )
        return sorted(i for i in ids if i is not None)

    def manifests(self, batches: Iterable[int] | None = None) -> list[Manifest]:
        wanted = self.committed_batches() if batches is None else sorted(set(batches))
        found: list[Manifest] = []
        for batch_id in wanted:
            manifest = self.read_manifest(batch_id)
            if manifest is None:
                raise SinkError(f"batch {batch_id} is not committed in {self.display}")
            found.append(manifest)
        return found

    # -- the callback sink's marker --

    def last_committed(self) -> int | None:
        data = self.get(LAST_COMMITTED)
        if data is None:
            return None
        try:
            return int(json.loads(data)["batch_id"])
        except (ValueError, KeyError, TypeError) as exc:
            raise SinkError(f"{self.where(LAST_COMMITTED)}: damaged marker: {exc}") from exc

    def set_last_committed(self, batch_id: int) -> None:
        doc = {"batch_id": batch_id, "committed_at": _now()}
        self.put_atomic(LAST_COMMITTED, json.dumps(doc).encode())


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --- file formats --------------------------------------------------------------------------------


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


_FILE_WRITERS: dict[str, Callable[[Any, pa.Schema], BatchFileWriter]] = {
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


# --- staging (executor side) ---------------------------------------------------------------------


def stage_batches(
    store: SinkStore,
    task: TaskIdentity,
    batches: Iterator[pa.RecordBatch],
    file_format: str,
    transform: Callable[[pa.RecordBatch], tuple[pa.RecordBatch, int]],
) -> StagedPart:
    """Stream one task's batches into one staged file; no file at all when no row survives.

    ``transform`` filters each batch (drain sentinels) and reports how many rows it dropped. The
    file is opened on the first row that survives; memory stays at one Arrow batch (one row
    group for parquet).
    """
    extension = EXTENSIONS[file_format]
    name = staged_file_name(
        task.partition, task.task_attempt_id, task.attempt, uuid.uuid4().hex[:12], extension
    )
    relative = f"{store.staging_dir(task.batch_id)}/{name}"
    writer: BatchFileWriter | None = None
    schema: pa.Schema | None = None
    rows = sentinels = 0
    try:
        for raw in batches:
            batch, dropped = transform(raw)
            sentinels += dropped
            schema = batch.schema
            if batch.num_rows == 0:
                continue
            if writer is None:
                writer = _FILE_WRITERS[file_format](store.open_output(relative), batch.schema)
            writer.write(batch)
            rows += batch.num_rows
        if writer is not None:
            writer.close()
            writer = None
    except (OSError, pa.ArrowException) as exc:
        raise SinkError(f"cannot stage {store.where(relative)}: {exc}") from exc
    finally:
        if writer is not None:  # an exception mid-file: the half file is a leftover
            try:
                writer.close()
            except (OSError, pa.ArrowException):
                log.debug("closing the half-written %s failed", relative, exc_info=True)
    size = store.size(relative) if rows else 0
    return StagedPart(
        task=task,
        path=relative if rows else None,
        rows=rows,
        size=size,
        sentinels=sentinels,
        schema=None if schema is None else schema.serialize().to_pybytes(),
    )


# --- publishing (driver side) --------------------------------------------------------------------


def checked_parts(
    store: SinkStore, batch_id: int, messages: Sequence[HasStagedPart | None]
) -> list[StagedPart]:
    """The staged parts of a commit; refuses anything that would publish a partial batch."""
    parts: list[StagedPart] = []
    seen: set[int] = set()
    for index, message in enumerate(messages):
        if message is None:
            raise SinkError(
                f"commit of batch {batch_id} in {store.display}: task {index} sent no commit "
                "message; refusing to publish a partial batch"
            )
        part = message.part
        if part.task.batch_id != batch_id:
            raise SinkError(
                f"commit of batch {batch_id} in {store.display}: task {index} staged for batch "
                f"{part.task.batch_id}"
            )
        if part.task.partition in seen:
            raise SinkError(
                f"commit of batch {batch_id} in {store.display}: partition "
                f"{part.task.partition} reported twice"
            )
        seen.add(part.task.partition)
        parts.append(part)
    return sorted(parts, key=lambda p: p.task.partition)


def batch_schema(parts: Sequence[StagedPart], fallback: pa.Schema) -> pa.Schema:
    """The schema executors actually wrote, or the query's when no task saw a batch."""
    for part in parts:
        if part.schema is not None:
            return pa.ipc.read_schema(pa.py_buffer(part.schema))
    return fallback


def discard_replay(store: SinkStore, batch_id: int, parts: Sequence[HasStagedPart | None]) -> None:
    """A replayed batch that is already published: drop what the replay staged, publish nothing."""
    for message in parts:
        if message is not None and message.part.path is not None:
            store.delete_file(message.part.path)
    store.delete_staging(batch_id)


def publish_files(
    store: SinkStore,
    batch_id: int,
    messages: Sequence[HasStagedPart | None],
    file_format: str,
    fallback_schema: pa.Schema,
    *,
    overwrite: bool = False,
) -> Manifest:
    """Publish one batch exactly once; a replay of a published batch is a no-op plus cleanup.

    Order matters for crash safety: (1) a manifest already present means a replay, so only the
    replay's staging goes; (2) whatever a crashed earlier publish left under ``batch=<id>/`` goes;
    (3) the staged files of the successful attempts move to deterministic names; (4) the manifest
    is written in one atomic step, the commit point; (5) staging of batches up to this one goes.
    A crash anywhere before (4) leaves the batch invisible, and Spark replays it; after (4) the
    replay finds the manifest.
    """
    existing = store.read_manifest(batch_id)
    if existing is not None:
        replay_rows = sum(m.part.rows for m in messages if m is not None)
        if replay_rows != existing.rows:
            log.warning(
                "batch %d of %s was published with %d rows but its replay has %d: was the query's "
                "checkpoint reset while the sink kept its output? Use a new sink name to write "
                "again.",
                batch_id,
                store.display,
                existing.rows,
                replay_rows,
            )
        discard_replay(store, batch_id, messages)
        log.info("batch %d of %s is already published: replay discarded", batch_id, store.display)
        return existing
    parts = checked_parts(store, batch_id, messages)
    batch_dir = f"batch={batch_key(batch_id)}"
    store.delete_tree(batch_dir)
    extension = EXTENSIONS[file_format]
    files: list[PublishedFile] = []
    for part in parts:
        if part.path is None:
            continue
        target = published_file_name(batch_id, part.task.partition, extension)
        store.move(part.path, target)
        files.append(PublishedFile(target, part.task.partition, part.rows, part.size))
    manifest = Manifest(
        sink=store.name,
        batch_id=batch_id,
        format=file_format,
        files=tuple(files),
        schema=batch_schema(parts, fallback_schema),
        overwrite=overwrite,
        committed_at=_now(),
    )
    store.put_atomic(manifest_file_name(batch_id), manifest.to_json())
    cleaned = store.delete_staging_up_to(batch_id)
    log.info(
        "published batch %d of %s: %d rows in %d files (staging cleaned for batches %s)",
        batch_id,
        store.display,
        manifest.rows,
        len(files),
        cleaned,
    )
    return manifest


def read_published(
    store: SinkStore, batches: Iterable[int] | None = None
) -> tuple[list[pa.Table], pa.Schema | None]:
    """The tables of committed batches in batch order; an overwrite batch restarts the result."""
    tables: list[pa.Table] = []
    schema: pa.Schema | None = None
    for manifest in store.manifests(batches):
        if manifest.overwrite:
            tables = []
        schema = manifest.schema
        tables.extend(
            read_data_file(store, f.path, manifest.format, manifest.schema) for f in manifest.files
        )
    return tables, schema


def published_urls(store: SinkStore, batches: Iterable[int] | None = None) -> list[str]:
    """Locations of committed files (for readers that take a file list, e.g. Spark)."""
    paths: list[str] = []
    for manifest in store.manifests(batches):
        if manifest.overwrite:
            paths = []
        paths.extend(store.url_of(f.path) for f in manifest.files)
    return paths


def read_staged_parts(
    store: SinkStore, parts: Sequence[StagedPart], fallback_schema: pa.Schema
) -> pa.Table:
    """The rows a batch staged as Arrow IPC, in partition order (the callback sink's input)."""
    schema = batch_schema(parts, fallback_schema)
    tables = [
        read_data_file(store, part.path, "arrow", schema) for part in parts if part.path is not None
    ]
    return concat(tables, schema)
