"""The two phases of a sink's commit: executors stage a task's rows, the driver publishes a batch.

Phase one (``stage_batches``, in a write task) streams the task's rows into one staged file under
``_staging/`` (see ``sink_store`` for the layout) and answers with a ``StagedPart``, the content of
the commit message. Phase two (``publish_files``, once per batch on the driver side) moves the
staged files of the successful attempts to their published names and writes the batch's manifest,
the commit point. A commit that finds the manifest already there is Spark replaying the batch after
a crash: it publishes nothing and deletes the replay's staged files. The callback sink reads the
staged parts back instead (``read_staged_parts``).

This module has no PySpark in it: the publish algorithm is tested without a Spark session.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import pyarrow as pa

from finishable.connectors.sink_files import (
    EXTENSIONS,
    FILE_WRITERS,
    BatchFileWriter,
    concat,
    read_data_file,
)
from finishable.connectors.sink_store import (
    Manifest,
    PublishedFile,
    SinkError,
    SinkStore,
    batch_key,
    manifest_file_name,
    now_text,
    published_file_name,
    staged_file_name,
)

log = logging.getLogger(__name__)


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


def staged_to_json(part: StagedPart) -> dict[str, Any]:
    """A staged part as JSON: what a Batch task reports, and what the JVM writers send."""
    return {
        "task": asdict(part.task),
        "path": part.path,
        "rows": part.rows,
        "size": part.size,
        "sentinels": part.sentinels,
        "schema": None if part.schema is None else base64.b64encode(part.schema).decode("ascii"),
    }


def staged_from_json(data: dict[str, Any]) -> StagedPart:
    schema = data.get("schema")
    return StagedPart(
        task=TaskIdentity(**data["task"]),
        path=data.get("path"),
        rows=int(data["rows"]),
        size=int(data["size"]),
        sentinels=int(data.get("sentinels", 0)),
        schema=None if schema is None else base64.b64decode(schema),
    )


class HasStagedPart(Protocol):
    @property
    def part(self) -> StagedPart: ...


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
                writer = FILE_WRITERS[file_format](store.open_output(relative), batch.schema)
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
    run: str = "",
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
        committed_at=now_text(),
        run=run,
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


def visible_manifests(store: SinkStore, batches: Iterable[int] | None = None) -> list[Manifest]:
    """The manifests a reader combines, oldest first: from the newest overwrite batch on.

    Walking back from the newest batch, a reader never opens a manifest that an overwrite has
    replaced, so :func:`retire_replaced` may delete those at any time.
    """
    wanted = store.committed_batches() if batches is None else sorted(set(batches))
    found: list[Manifest] = []
    for manifest in (_manifest(store, batch_id) for batch_id in reversed(wanted)):
        found.append(manifest)
        if manifest.overwrite:
            break
    return found[::-1]


def _manifest(store: SinkStore, batch_id: int) -> Manifest:
    manifest = store.read_manifest(batch_id)
    if manifest is None:
        raise SinkError(f"batch {batch_id} is not committed in {store.display}")
    return manifest


def retire_replaced(store: SinkStore, overwrite_batch: int) -> list[int]:
    """Delete the batches an overwrite batch replaced (manifest first, then its files)."""
    retired = [b for b in store.committed_batches() if b < overwrite_batch]
    for batch_id in retired:
        store.delete_file(manifest_file_name(batch_id))
        store.delete_tree(f"batch={batch_key(batch_id)}")
    return retired


def read_published(
    store: SinkStore, batches: Iterable[int] | None = None
) -> tuple[list[pa.Table], pa.Schema | None]:
    """The tables of committed batches in batch order; an overwrite batch restarts the result."""
    tables: list[pa.Table] = []
    schema: pa.Schema | None = None
    for manifest in visible_manifests(store, batches):
        schema = manifest.schema
        tables.extend(
            read_data_file(store, f.path, manifest.format, manifest.schema) for f in manifest.files
        )
    return tables, schema


def published_urls(store: SinkStore, batches: Iterable[int] | None = None) -> list[str]:
    """Locations of committed files (for readers that take a file list, e.g. Spark)."""
    return [
        store.url_of(f.path)
        for manifest in visible_manifests(store, batches)
        for f in manifest.files
    ]


def read_staged_parts(
    store: SinkStore, parts: Sequence[StagedPart], fallback_schema: pa.Schema
) -> pa.Table:
    """The rows a batch staged as Arrow IPC, in partition order (the callback sink's input)."""
    schema = batch_schema(parts, fallback_schema)
    tables = [
        read_data_file(store, part.path, "arrow", schema) for part in parts if part.path is not None
    ]
    return concat(tables, schema)
