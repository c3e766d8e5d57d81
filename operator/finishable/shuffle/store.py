"""The on-disk store of one job's result partitions, as a shuffle server keeps them.

Layout under the data directory::

    <data-dir>/<job>/<dataset>/<partition>.arrow    the partition (an Arrow IPC stream)
    <data-dir>/<job>/<dataset>/<partition>.json     its sidecar: the metadata, written last
    <data-dir>/<job>/<dataset>/.promoted            the dataset is a cluster partition
    <data-dir>/<job>/<dataset>/.<partition>.<id>.tmp  an upload not committed yet

A partition is committed exactly when its sidecar exists: the data file is fsynced and renamed
into place first, the sidecar after it, each through a temporary file and ``os.replace``. So a
crash at any point leaves either the old partition, no partition, or the new one — never a data
file whose sidecar describes other bytes. Opening the store rescans the directory and removes
whatever a crash left behind (temporary files, data files without a sidecar).

The store is synchronous and thread-safe: the server calls it from worker threads so that disk
I/O never blocks its event loop. Long operations (validating an upload, re-hashing a partition)
run outside the lock; only renames and the in-memory index are guarded by it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.ipc

logger = logging.getLogger(__name__)

DATASET_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
ATTEMPT_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
JOB_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")
MAX_PARTITION = 1_000_000
PROMOTED_MARKER = ".promoted"
DATA_SUFFIX = ".arrow"
SIDECAR_SUFFIX = ".json"
TEMP_SUFFIX = ".tmp"
HASH_CHUNK = 1 << 20

DATASET_HELP = (
    "1 to 128 letters, digits, '_', '.' or '-', starting with a letter or digit "
    "(regular expression ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$)"
)
PARTITION_HELP = f"a non-negative integer below {MAX_PARTITION:_}"
ATTEMPT_HELP = (
    "1 to 64 letters, digits, '_', '.' or '-' (regular expression ^[A-Za-z0-9_.-]{1,64}$)"
)
JOB_HELP = "1 to 253 letters, digits, '_', '.' or '-', starting with a letter or digit"


# ---------------------------------------------------------------------------------- errors


class StoreError(Exception):
    """Base of the store's errors; the message is meant for the caller as it is."""


class InvalidName(StoreError, ValueError):
    """A dataset, partition, attempt or job name the store refuses (it becomes a path)."""

    def __init__(self, name: str, value: object, accepted: str) -> None:
        super().__init__(f"{name} {value!r} is not valid: expected {accepted}")
        self.field = name
        self.value = value


class NotArrowStream(StoreError):
    """An upload whose bytes are not an Arrow IPC stream; nothing was committed."""

    def __init__(self, dataset: str, partition: int, detail: str) -> None:
        super().__init__(
            f"the body uploaded for dataset {dataset!r} partition {partition} is not an "
            f"Arrow IPC stream (write it with pyarrow.ipc.new_stream): {detail}"
        )
        self.dataset = dataset
        self.partition = partition


class UnknownUpload(StoreError):
    """A commit named an upload the store does not hold (never started, committed or expired)."""

    def __init__(self, upload_id: str, dataset: str, partition: int) -> None:
        super().__init__(
            f"no pending upload {upload_id!r} for dataset {dataset!r} partition {partition} "
            "(it was never started, is already committed, or expired)"
        )
        self.upload_id = upload_id


class PartitionMissing(StoreError):
    """The asked-for partition is not committed on this server."""

    def __init__(self, dataset: str, partition: int) -> None:
        super().__init__(f"dataset {dataset!r} has no committed partition {partition}")
        self.dataset = dataset
        self.partition = partition


class DatasetMissing(StoreError):
    """The asked-for dataset has no committed partition on this server."""

    def __init__(self, dataset: str) -> None:
        super().__init__(f"dataset {dataset!r} has no committed partitions")
        self.dataset = dataset


# ---------------------------------------------------------------------------------- names


def check_dataset(value: str) -> str:
    """``value`` if it is a valid dataset name, else ``InvalidName``."""
    if not isinstance(value, str) or not DATASET_PATTERN.fullmatch(value):
        raise InvalidName("dataset", value, DATASET_HELP)
    return value


def check_partition(value: object) -> int:
    """The partition number from an ``int`` or its decimal text, else ``InvalidName``."""
    if isinstance(value, bool):
        raise InvalidName("partition", value, PARTITION_HELP)
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 7:
        number = int(value)
    else:
        raise InvalidName("partition", value, PARTITION_HELP)
    if not 0 <= number < MAX_PARTITION:
        raise InvalidName("partition", value, PARTITION_HELP)
    return number


def check_attempt(value: str) -> str:
    """``value`` if it is a valid attempt label, else ``InvalidName``."""
    if not isinstance(value, str) or not ATTEMPT_PATTERN.fullmatch(value):
        raise InvalidName("attempt", value, ATTEMPT_HELP)
    return value


def check_job(value: str) -> str:
    """``value`` if it can name the job's directory under the data dir, else ``InvalidName``."""
    if not isinstance(value, str) or not JOB_PATTERN.fullmatch(value) or value in (".", ".."):
        raise InvalidName("job", value, JOB_HELP)
    return value


# ---------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class PartitionMeta:
    """What the sidecar of a committed partition says about it."""

    dataset: str
    partition: int
    bytes: int
    rows: int
    attempt: str
    committed_at: datetime
    sha256: str

    def to_json(self) -> dict[str, Any]:
        """The sidecar document, also the server's answer for a partition."""
        return {
            "dataset": self.dataset,
            "partition": self.partition,
            "bytes": self.bytes,
            "rows": self.rows,
            "attempt": self.attempt,
            "committedAt": format_time(self.committed_at),
            "sha256": self.sha256,
        }

    @classmethod
    def from_json(cls, document: object) -> PartitionMeta:
        """Read a sidecar; ``ValueError`` (naming the field) when it is damaged."""
        if not isinstance(document, dict):
            raise ValueError("the sidecar is not a JSON object")
        try:
            dataset = check_dataset(document["dataset"])
            partition = check_partition(document["partition"])
            attempt = check_attempt(document["attempt"])
            size = document["bytes"]
            rows = document["rows"]
            digest = document["sha256"]
            committed_at = parse_time(document["committedAt"])
        except KeyError as missing:
            raise ValueError(f"the sidecar lacks the field {missing}") from None
        for name, number in (("bytes", size), ("rows", rows)):
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise ValueError(f"the sidecar's {name} is not a non-negative integer")
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ValueError("the sidecar's sha256 is not 64 lowercase hex digits")
        return cls(dataset, partition, size, rows, attempt, committed_at, digest)


@dataclass(frozen=True)
class CorruptReport:
    """A partition whose bytes no longer match its sidecar; the store has deleted it."""

    dataset: str
    partition: int
    error: str

    def to_json(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "partition": self.partition, "error": self.error}


@dataclass(frozen=True)
class DatasetSummary:
    """One dataset's totals, as ``GET /v1/datasets`` lists them."""

    dataset: str
    partitions: int
    bytes: int
    rows: int
    promoted: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "partitions": self.partitions,
            "bytes": self.bytes,
            "rows": self.rows,
            "promoted": self.promoted,
        }


def format_time(moment: datetime) -> str:
    """ISO 8601 in UTC with a ``Z``, the form sidecars and answers carry."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_time(text: object) -> datetime:
    """The inverse of ``format_time``; ``ValueError`` when ``text`` is not such a time."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not an ISO 8601 time")
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return moment.astimezone(UTC)


# ---------------------------------------------------------------------------------- uploads


@dataclass(eq=False)
class Upload:
    """An upload being written to its temporary file; hashed as the bytes arrive."""

    id: str
    dataset: str
    partition: int
    attempt: str
    path: Path
    _file: BinaryIO
    _hash: Any = field(default_factory=hashlib.sha256)
    size: int = 0
    finished: bool = False
    touched: float = field(default_factory=time.monotonic)

    def write(self, chunk: bytes | bytearray | memoryview) -> None:
        """Append ``chunk`` (blocking: call it from a worker thread in async code)."""
        if self.finished:
            raise StoreError(f"upload {self.id!r} is finished; it takes no more bytes")
        self._file.write(chunk)
        self._hash.update(chunk)
        self.size += len(chunk)
        self.touched = time.monotonic()

    def finish(self) -> None:
        """Flush and fsync the bytes: after this the upload can be committed."""
        if self.finished:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self.finished = True
        self.touched = time.monotonic()

    @property
    def sha256(self) -> str:
        return str(self._hash.hexdigest())

    def discard(self) -> None:
        """Close and delete the temporary file."""
        with contextlib.suppress(OSError):
            self._file.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


# ---------------------------------------------------------------------------------- the store


class PartitionStore:
    """The committed partitions of one job under ``root/<job>``, indexed in memory."""

    def __init__(self, root: Path, job: str) -> None:
        self.job = check_job(job)
        self.root = Path(root)
        self.directory = self.root / job
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._index: dict[tuple[str, int], PartitionMeta] = {}
        self._promoted: set[str] = set()
        self._uploads: dict[str, Upload] = {}
        self.recovered = self._rescan()

    # ------------------------------------------------------------------ paths

    def _dataset_dir(self, dataset: str) -> Path:
        return self.directory / dataset

    def data_path(self, dataset: str, partition: int) -> Path:
        """Where a committed partition's bytes live."""
        return self._dataset_dir(dataset) / f"{partition}{DATA_SUFFIX}"

    def _sidecar_path(self, dataset: str, partition: int) -> Path:
        return self._dataset_dir(dataset) / f"{partition}{SIDECAR_SUFFIX}"

    # ------------------------------------------------------------------ recovery

    def _rescan(self) -> int:
        """Load committed partitions from their sidecars; remove what a crash left behind."""
        removed = 0
        for entry in sorted(self.directory.iterdir()):
            if not entry.is_dir() or not DATASET_PATTERN.fullmatch(entry.name):
                logger.warning("shuffle store: ignoring %s (not a dataset directory)", entry)
                continue
            removed += self._rescan_dataset(entry.name, entry)
        if removed:
            logger.warning("shuffle store: removed %d leftover file(s) of earlier runs", removed)
        logger.info(
            "shuffle store %s: %d committed partition(s) of job %r in %d dataset(s)",
            self.directory,
            len(self._index),
            self.job,
            len({dataset for dataset, _ in self._index}),
        )
        return len(self._index)

    def _rescan_dataset(self, dataset: str, directory: Path) -> int:
        removed = 0
        sidecars: dict[int, Path] = {}
        data_files: dict[int, Path] = {}
        promoted = False
        for item in directory.iterdir():
            name = item.name
            if name == PROMOTED_MARKER:
                promoted = True
            elif name.startswith(".") and name.endswith(TEMP_SUFFIX):
                item.unlink(missing_ok=True)
                removed += 1
            elif name.endswith(SIDECAR_SUFFIX) and _is_number(name[: -len(SIDECAR_SUFFIX)]):
                sidecars[int(name[: -len(SIDECAR_SUFFIX)])] = item
            elif name.endswith(DATA_SUFFIX) and _is_number(name[: -len(DATA_SUFFIX)]):
                data_files[int(name[: -len(DATA_SUFFIX)])] = item
            else:
                logger.warning("shuffle store: ignoring unexpected file %s", item)
        for partition, sidecar in sidecars.items():
            data = data_files.get(partition)
            problem = None
            meta = None
            try:
                meta = PartitionMeta.from_json(json.loads(sidecar.read_bytes()))
            except (OSError, ValueError) as error:
                problem = f"unreadable sidecar: {error}"
            if meta is not None:
                if (meta.dataset, meta.partition) != (dataset, partition):
                    problem = f"the sidecar describes {meta.dataset}/{meta.partition}"
                elif data is None:
                    problem = "the data file is missing"
                elif data.stat().st_size != meta.bytes:
                    problem = f"the data file has {data.stat().st_size} bytes, not {meta.bytes}"
            if problem is not None or meta is None:
                logger.warning("shuffle store: dropping %s/%d: %s", dataset, partition, problem)
                sidecar.unlink(missing_ok=True)
                if data is not None:
                    data.unlink(missing_ok=True)
                removed += 1
                continue
            self._index[(dataset, partition)] = meta
        for partition, data in data_files.items():
            if (dataset, partition) not in self._index and data.exists():
                data.unlink(missing_ok=True)
                removed += 1
        if not any(key[0] == dataset for key in self._index):
            # Nothing committed is left: the promotion marker alone means nothing.
            (directory / PROMOTED_MARKER).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                directory.rmdir()
        elif promoted:
            self._promoted.add(dataset)
        return removed

    # ------------------------------------------------------------------ writing

    def begin(self, dataset: str, partition: int, attempt: str) -> Upload:
        """Start an upload: a new temporary file next to where the partition will live."""
        check_dataset(dataset)
        partition = check_partition(partition)
        check_attempt(attempt)
        upload_id = uuid.uuid4().hex
        with self._lock:
            directory = self._dataset_dir(dataset)
            directory.mkdir(exist_ok=True)
            path = directory / f".{partition}.{upload_id}{TEMP_SUFFIX}"
            handle = path.open("xb")
            upload = Upload(upload_id, dataset, partition, attempt, path, handle)
            self._uploads[upload_id] = upload
        return upload

    def abort(self, upload: Upload) -> None:
        """Forget an upload and delete its temporary file."""
        with self._lock:
            self._uploads.pop(upload.id, None)
            upload.discard()
            self._drop_if_empty(upload.dataset)

    def _drop_if_empty(self, dataset: str) -> None:
        """Remove a dataset directory that holds nothing committed (nor other uploads)."""
        if any(key[0] == dataset for key in self._index):
            return
        with contextlib.suppress(OSError):
            self._dataset_dir(dataset).rmdir()

    def pending(self, upload_id: str) -> Upload | None:
        """The pending upload with this id, if any."""
        with self._lock:
            return self._uploads.get(upload_id)

    def abort_stale(self, idle_seconds: float) -> int:
        """Abort finished uploads nobody committed within ``idle_seconds``; returns how many."""
        limit = time.monotonic() - idle_seconds
        with self._lock:
            stale = [u for u in self._uploads.values() if u.finished and u.touched < limit]
            for upload in stale:
                self.abort(upload)
        for upload in stale:
            logger.warning(
                "shuffle store: upload %s of %s/%d was never committed; deleted",
                upload.id,
                upload.dataset,
                upload.partition,
            )
        return len(stale)

    def commit(
        self, upload_id: str, dataset: str | None = None, partition: int | None = None
    ) -> PartitionMeta:
        """Validate the upload as an Arrow stream, count its rows, and make it the partition.

        ``dataset`` and ``partition``, when given, must be the upload's (a commit names the
        partition in its URL). A re-commit by another attempt replaces the partition: the old
        sidecar goes first, so a crash in between loses the partition rather than mixing two.
        """
        with self._lock:
            upload = self._uploads.get(upload_id)
            if upload is None or (
                (dataset is not None and upload.dataset != dataset)
                or (partition is not None and upload.partition != partition)
            ):
                raise UnknownUpload(
                    upload_id,
                    dataset if dataset is not None else "?",
                    partition if partition is not None else -1,
                )
            del self._uploads[upload_id]
        try:
            upload.finish()
            rows = count_rows(upload.path, upload.dataset, upload.partition)
        except BaseException:
            self.abort(upload)
            raise
        meta = PartitionMeta(
            dataset=upload.dataset,
            partition=upload.partition,
            bytes=upload.size,
            rows=rows,
            attempt=upload.attempt,
            committed_at=datetime.now(UTC),
            sha256=upload.sha256,
        )
        sidecar_bytes = json.dumps(meta.to_json(), indent=1).encode("utf-8")
        directory = self._dataset_dir(upload.dataset)
        sidecar_temp = directory / f".{upload.partition}.{upload.id}.json{TEMP_SUFFIX}"
        key = (upload.dataset, upload.partition)
        try:
            _write_new_file(sidecar_temp, sidecar_bytes)  # the slow fsync, outside the lock
        except BaseException:
            sidecar_temp.unlink(missing_ok=True)
            self.abort(upload)
            raise
        with self._lock:
            sidecar = self._sidecar_path(*key)
            try:
                sidecar.unlink(missing_ok=True)
                os.replace(upload.path, self.data_path(*key))
                os.replace(sidecar_temp, sidecar)
            except BaseException:
                sidecar_temp.unlink(missing_ok=True)
                upload.discard()
                self._index.pop(key, None)
                raise
            replaced = self._index.get(key)
            self._index[key] = meta
        _fsync_directory(directory)  # the renames are durable before the caller hears of them
        if replaced is not None:
            logger.info(
                "shuffle store: %s/%d of attempt %s replaced by attempt %s",
                meta.dataset,
                meta.partition,
                replaced.attempt,
                meta.attempt,
            )
        return meta

    def put(
        self, dataset: str, partition: int, attempt: str, chunks: Iterable[bytes]
    ) -> PartitionMeta:
        """Upload and commit in one call (tests and local tools)."""
        upload = self.begin(dataset, partition, attempt)
        try:
            for chunk in chunks:
                upload.write(chunk)
        except BaseException:
            self.abort(upload)
            raise
        return self.commit(upload.id)

    # ------------------------------------------------------------------ reading

    def get(self, dataset: str, partition: int) -> PartitionMeta:
        """The metadata of a committed partition, or ``PartitionMissing``."""
        with self._lock:
            meta = self._index.get((dataset, partition))
        if meta is None:
            raise PartitionMissing(dataset, partition)
        return meta

    def open(self, dataset: str, partition: int) -> tuple[PartitionMeta, BinaryIO]:
        """Metadata and an open data file that belong together even if a re-commit follows."""
        with self._lock:
            meta = self.get(dataset, partition)
            return meta, self.data_path(dataset, partition).open("rb")

    def partitions(self, dataset: str | None = None) -> list[PartitionMeta]:
        """Committed partitions (of one dataset), ordered by dataset and partition."""
        with self._lock:
            metas = [
                meta for key, meta in self._index.items() if dataset is None or key[0] == dataset
            ]
        return sorted(metas, key=lambda meta: (meta.dataset, meta.partition))

    def totals(self) -> tuple[int, int]:
        """``(partitions, bytes)`` stored."""
        with self._lock:
            return len(self._index), sum(meta.bytes for meta in self._index.values())

    def promoted(self) -> set[str]:
        """The promoted datasets."""
        with self._lock:
            return set(self._promoted)

    def datasets(self) -> list[DatasetSummary]:
        """Per-dataset totals."""
        with self._lock:
            sums: dict[str, list[int]] = {}
            for (dataset, _), meta in self._index.items():
                row = sums.setdefault(dataset, [0, 0, 0])
                row[0] += 1
                row[1] += meta.bytes
                row[2] += meta.rows
            promoted = set(self._promoted)
        return [
            DatasetSummary(name, count, size, rows, name in promoted)
            for name, (count, size, rows) in sorted(sums.items())
        ]

    # ------------------------------------------------------------------ verification

    def verify(self, dataset: str | None = None) -> list[CorruptReport]:
        """Re-hash every listed partition; delete and report the ones that do not match."""
        return [
            report
            for meta in self.partitions(dataset)
            if (report := self.verify_one(meta)) is not None
        ]

    def verify_one(self, meta: PartitionMeta) -> CorruptReport | None:
        """Re-hash one partition (outside the lock); delete it when its bytes changed."""
        path = self.data_path(meta.dataset, meta.partition)
        digest = hashlib.sha256()
        size = 0
        try:
            with path.open("rb") as handle:
                while chunk := handle.read(HASH_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
        except OSError as error:
            problem = f"cannot read the data file: {error}"
        else:
            if size != meta.bytes:
                problem = f"the data file has {size} bytes, the sidecar says {meta.bytes}"
            elif digest.hexdigest() != meta.sha256:
                problem = (
                    f"sha256 {digest.hexdigest()} of the data file differs from "
                    f"{meta.sha256} in the sidecar"
                )
            else:
                return None
        with self._lock:
            if self._index.get((meta.dataset, meta.partition)) != meta:
                return None  # re-committed or released while we were hashing
            self._delete(meta.dataset, meta.partition)
        logger.warning(
            "shuffle store: partition %s/%d is corrupt and was deleted: %s",
            meta.dataset,
            meta.partition,
            problem,
        )
        return CorruptReport(meta.dataset, meta.partition, problem)

    # ------------------------------------------------------------------ release

    def promote(self, dataset: str) -> DatasetSummary:
        """Mark a dataset promoted (a cluster partition): releasing the job keeps it."""
        check_dataset(dataset)
        with self._lock:
            if not any(key[0] == dataset for key in self._index):
                raise DatasetMissing(dataset)
            marker = self._dataset_dir(dataset) / PROMOTED_MARKER
            _write_synced(marker, b"")
            _fsync_directory(marker.parent)
            self._promoted.add(dataset)
        return next(summary for summary in self.datasets() if summary.dataset == dataset)

    def release(self, *, include_promoted: bool = False) -> int:
        """Delete the job's partitions (not those of promoted datasets unless asked)."""
        with self._lock:
            datasets = {key[0] for key in self._index}
            if not include_promoted:
                datasets -= self._promoted
            return sum(self._release_dataset(dataset) for dataset in sorted(datasets))

    def release_dataset(self, dataset: str) -> int:
        """Delete one dataset's partitions, promoted or not; returns how many."""
        check_dataset(dataset)
        with self._lock:
            return self._release_dataset(dataset)

    def _release_dataset(self, dataset: str) -> int:
        partitions = [key[1] for key in self._index if key[0] == dataset]
        for partition in partitions:
            self._delete(dataset, partition)
        self._promoted.discard(dataset)
        directory = self._dataset_dir(dataset)
        (directory / PROMOTED_MARKER).unlink(missing_ok=True)
        # An upload still being written keeps the directory (and becomes a fresh partition).
        with contextlib.suppress(OSError):
            directory.rmdir()
        return len(partitions)

    def _delete(self, dataset: str, partition: int) -> None:
        """Sidecar first: from then on the partition is not committed, even after a crash."""
        self._sidecar_path(dataset, partition).unlink(missing_ok=True)
        self.data_path(dataset, partition).unlink(missing_ok=True)
        self._index.pop((dataset, partition), None)

    def close(self) -> None:
        """Abort pending uploads (their temporary files go)."""
        with self._lock:
            uploads = list(self._uploads.values())
            self._uploads.clear()
        for upload in uploads:
            upload.discard()


# ---------------------------------------------------------------------------------- helpers


def count_rows(path: Path, dataset: str, partition: int) -> int:
    """Rows of the Arrow IPC stream at ``path``; ``NotArrowStream`` when it is not one."""
    if path.stat().st_size == 0:
        raise NotArrowStream(dataset, partition, "the body is empty")
    try:
        with pa.memory_map(str(path), "r") as source:
            reader = pyarrow.ipc.open_stream(source)
            rows = 0
            for batch in reader:
                rows += batch.num_rows
            return rows
    except (pa.ArrowException, OSError, ValueError) as error:
        raise NotArrowStream(dataset, partition, str(error) or type(error).__name__) from None


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 7


def _write_new_file(path: Path, data: bytes) -> None:
    """Create ``path`` holding ``data`` and fsync it (it must not exist yet)."""
    with path.open("xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _write_synced(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it and rename it into place."""
    temp = path.parent / f".{path.name}.{uuid.uuid4().hex}{TEMP_SUFFIX}"
    try:
        _write_new_file(temp, data)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _fsync_directory(directory: Path) -> None:
    """Make renames in ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
