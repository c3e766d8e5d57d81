"""Spark's checkpoint log as the driver reads it: which batches are planned and committed, and
which splits each batch read.

A Structured Streaming query writes ``offsets/<batch>`` before it runs a batch and
``commits/<batch>`` after its sink committed it; a finishable source's offset embeds the splits
of its batch (``connectors.streaming.source``). The driver reads both to reconcile a restored
coordinator with the query (``SourceCoordinator.begin_run``), to finish the splits of committed
batches, to find a batch boundary, and to put back the offsets of a batch that was published but
not committed before a crash. Spark's log is the truth; enumerator states only save work.
"""

from __future__ import annotations

from typing import Literal

import pyarrow.fs as pafs

from finishable.connectors.streaming.source import SplitOffset, find_offset
from finishable.coordinator.contract import NO_CHECKPOINT


class CheckpointLog:
    """Reads a query's ``offsets/`` and ``commits/`` logs (local path or ``pyarrow.fs`` URL)."""

    def __init__(self, location: str) -> None:
        url = location.replace("s3a://", "s3://", 1) if location.startswith("s3a://") else location
        if "://" in url:
            self._fs, self._root = pafs.FileSystem.from_uri(url)
        else:
            self._fs, self._root = pafs.LocalFileSystem(), url
        self._root = self._root.rstrip("/")
        self.location = location

    def batch_ids(self, log: Literal["offsets", "commits"]) -> list[int]:
        """Batch ids with an entry in the log, ascending (none if the log does not exist)."""
        selector = pafs.FileSelector(f"{self._root}/{log}", allow_not_found=True)
        ids = [
            int(info.base_name)
            for info in self._fs.get_file_info(selector)
            if info.type == pafs.FileType.File and info.base_name.isdigit()
        ]
        return sorted(ids)

    def last_committed(self) -> int:
        """The last committed batch id, or ``NO_CHECKPOINT`` (-1) if none."""
        return max(self.batch_ids("commits"), default=NO_CHECKPOINT)

    def read_entry(self, log: Literal["offsets", "commits"], batch_id: int) -> bytes | None:
        """The raw bytes of one log entry (``None`` if absent)."""
        try:
            with self._fs.open_input_stream(f"{self._root}/{log}/{batch_id}") as stream:
                data: bytes = stream.read()
                return data
        except FileNotFoundError:
            return None

    def write_entry(self, log: Literal["offsets", "commits"], batch_id: int, data: bytes) -> None:
        """Put a raw entry back, such as the offsets of a batch published but not committed
        before a crash, so the restored query replays it exactly (write, then rename)."""
        self._fs.create_dir(f"{self._root}/{log}", recursive=True)
        temporary = f"{self._root}/{log}/.{batch_id}.finishable.tmp"
        with self._fs.open_output_stream(temporary) as stream:
            stream.write(data)
        self._fs.move(temporary, f"{self._root}/{log}/{batch_id}")

    def source_offset(self, batch_id: int, coordinator: str) -> SplitOffset | None:
        """The end offset of source ``coordinator`` in batch ``batch_id`` (``None``: absent)."""
        raw = self.read_entry("offsets", batch_id)
        if raw is None:
            return None
        lines = raw.decode("utf-8").split("\n")
        if not lines or not lines[0].startswith("v"):
            raise ValueError(f"{self.location}: offsets/{batch_id} is not a Spark offsets entry")
        return find_offset(lines[2:], coordinator)
