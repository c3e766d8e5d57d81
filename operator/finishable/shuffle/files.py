"""Durable files of the shuffle store: an upload being written, fsynced writes, the Arrow check.

These are the store's file-system primitives, free of its index and lock: an ``Upload`` hashes its
bytes into a temporary file as they arrive, ``write_new_file`` / ``write_synced`` /
``fsync_directory`` make a write and its rename survive a crash, and ``count_rows`` checks that a
finished upload is an Arrow IPC stream before it is committed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.ipc

from finishable.shuffle.records import NotArrowStream, StoreError

TEMP_SUFFIX = ".tmp"
"""Temporary files (uploads, sidecars, markers) are ``.<name>.<id>.tmp``: a rescan removes them."""


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


def write_new_file(path: Path, data: bytes) -> None:
    """Create ``path`` holding ``data`` and fsync it (it must not exist yet)."""
    with path.open("xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def write_synced(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it and rename it into place."""
    temp = path.parent / f".{path.name}.{uuid.uuid4().hex}{TEMP_SUFFIX}"
    try:
        write_new_file(temp, data)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def fsync_directory(directory: Path) -> None:
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
