"""The bodies of shuffle uploads and downloads: chunks sent once, Arrow IPC in chunks.

An upload streams its chunks as they come, so it cannot be replayed: ``SendOnce`` counts what was
taken so the client knows whether a retry is still safe, and tells the chunks' own failure apart
from the connection's. ``ipc_chunks`` writes record batches as an Arrow IPC stream in chunks of
about 1 MiB without holding the partition whole. Arrow is imported only when batches are written.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

CHUNK = 1 << 20
"""Bytes per upload chunk and per read of a download."""


class CutOff(Exception):
    """An upload failed after its first chunk was taken: it cannot be replayed."""

    def __init__(self, problem: Exception) -> None:
        super().__init__(str(problem))
        self.problem = problem


class SourceFailed(Exception):
    """The upload's own chunks raised: the body is cut off and the connection must go."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"the chunks of the upload raised {cause!r}")
        self.cause = cause


class SendOnce:
    """Wraps an upload's chunks: counts what was sent and whether any chunk was taken."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self.started = False
        self.sent = 0

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        self.started = True
        while True:
            try:
                chunk = next(self._chunks)
            except StopIteration:
                raise
            except Exception as error:
                raise SourceFailed(error) from error
            if chunk:  # an empty chunk would end a chunked body early
                self.sent += len(chunk)
                return bytes(chunk)


class _ChunkSink:
    """A write-only file for ``pyarrow.ipc.new_stream`` whose bytes are drained into chunks."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.closed = False

    def write(self, data: bytes | memoryview) -> int:
        self.buffer += data
        return len(data)

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True

    def drain(self) -> bytes:
        data = bytes(self.buffer)
        self.buffer.clear()
        return data


def ipc_chunks(schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> Iterator[bytes]:
    """An IPC stream of ``batches`` in chunks of about 1 MiB, written as batches arrive."""
    import pyarrow as pa  # noqa: PLC0415

    sink = _ChunkSink()
    writer = pa.ipc.new_stream(pa.PythonFile(sink, mode="w"), schema)
    try:
        for batch in batches:
            writer.write_batch(batch)
            if len(sink.buffer) >= CHUNK:
                yield sink.drain()
    finally:
        writer.close()
    if sink.buffer:
        yield sink.drain()


def batches_then_close(
    reader: pa.ipc.RecordBatchStreamReader, spool: IO[bytes]
) -> Iterator[pa.RecordBatch]:
    try:
        yield from reader
    finally:
        spool.close()
