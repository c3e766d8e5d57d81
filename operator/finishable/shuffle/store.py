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

The names, errors and records the store speaks are in :mod:`finishable.shuffle.records`; its
file-system primitives (uploads, fsynced writes, the Arrow check) in
:mod:`finishable.shuffle.files`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from finishable.shuffle.files import (
    TEMP_SUFFIX,
    Upload,
    count_rows,
    fsync_directory,
    write_new_file,
    write_synced,
)
from finishable.shuffle.records import (
    DATASET_PATTERN,
    CorruptReport,
    DatasetMissing,
    DatasetSummary,
    PartitionMeta,
    PartitionMissing,
    UnknownUpload,
    check_attempt,
    check_dataset,
    check_job,
    check_partition,
)

logger = logging.getLogger(__name__)

PROMOTED_MARKER = ".promoted"
DATA_SUFFIX = ".arrow"
SIDECAR_SUFFIX = ".json"
HASH_CHUNK = 1 << 20


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

    # ------------------------------------------------------------------ the driver's epoch

    @property
    def _epoch_path(self) -> Path:
        return self.root / f"{self.job}.driver.json"

    def load_driver_epoch(self) -> tuple[int, int] | None:
        """The newest driver (run, attempt) that registered, kept across server restarts so
        that a restarted server still refuses a superseded driver."""
        try:
            document = json.loads(self._epoch_path.read_text(encoding="utf-8"))
            return int(document["run"]), int(document["attempt"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as error:
            logger.warning("shuffle store: ignoring %s: %s", self._epoch_path, error)
            return None

    def save_driver_epoch(self, epoch: tuple[int, int]) -> None:
        document = {"run": epoch[0], "attempt": epoch[1]}
        write_synced(self._epoch_path, json.dumps(document).encode("utf-8"))

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
            write_new_file(sidecar_temp, sidecar_bytes)  # the slow fsync, outside the lock
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
        fsync_directory(directory)  # the renames are durable before the caller hears of them
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
            write_synced(marker, b"")
            fsync_directory(marker.parent)
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


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 7
