"""Incremental checkpoints: upload what changed since the last checkpoint, delete what no
retained checkpoint needs any more.

The checkpoint keeper cuts Spark's checkpoint directory (:mod:`.cut`) and hands every large file
it reads to the store's content files (:mod:`finishable.state.contents`) one at a time: a file
whose sha256 is stored already is not uploaded again, and a file whose name, size, mtime and inode
are unchanged since the last cut is not even read. Small files go inside the checkpoint itself.
So a checkpoint costs the bytes that changed (new state deltas or SST files, new log entries) and
its small files, and the driver holds one large file at a time, not the state. After a checkpoint
commits (and the store's retention dropped the oldest), the content files that no retained
checkpoint's index names are deleted. Savepoints stay self-contained and pin nothing here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from finishable.driver.streaming.cut import CutFile, DigestCache, read_cut
from finishable.driver.streaming.savepoints import SavepointError, decode_savepoint
from finishable.state import CheckpointCorrupt, CheckpointKind, CheckpointNotFound, CheckpointStore
from finishable.state.contents import ContentStore

log = logging.getLogger(__name__)

INLINE_BELOW = 16 * 1024
"""Files smaller than this go inside the checkpoint itself (offsets, commits, small deltas and
checksums), as Flink inlines small state: one object per small file would cost more requests
(and, on the ConfigMap backend, more objects) than the bytes they save."""


@dataclass(frozen=True)
class Upload:
    """What one checkpoint took: its files, their total size, and the bytes it uploaded."""

    files: int = 0
    state_bytes: int = 0
    uploaded_bytes: int = 0


class Increments:
    """Uploads of one driver attempt's checkpoints and collection of unreferenced files.

    Not thread-safe: the checkpoint keeper calls it under its lock.
    """

    def __init__(self, store: CheckpointStore) -> None:
        self._store = store
        self._contents = ContentStore(store.backend, store.prefix)
        self._cache = DigestCache(min_size=INLINE_BELOW)
        self._indexes: dict[int, frozenset[str]] = {}
        self.last = Upload()
        self.uploaded_bytes = 0
        """Bytes uploaded by this attempt's checkpoints, for benchmarks and logs."""

    def upload(
        self, checkpoint_dir: Path, batch_id: int
    ) -> tuple[dict[str, bytes], dict[str, str]]:
        """Store the cut's new large files; return its small files (to go inline in the
        checkpoint) and its index of large ones (path → sha256)."""
        uploaded = 0
        small: dict[str, bytes] = {}

        def store(name: str, data: bytes, digest: CutFile) -> None:
            nonlocal uploaded
            if digest.size < INLINE_BELOW:
                small[name] = data
            elif self._contents.put(digest.sha256, data):
                uploaded += digest.size

        cut = read_cut(checkpoint_dir, batch_id, visit=store, cache=self._cache)
        known = self._contents.known()
        if any(d.size >= INLINE_BELOW and d.sha256 not in known for d in cut.values()):
            # A digest remembered from a cut that never committed, whose file was collected.
            self._cache = DigestCache(min_size=INLINE_BELOW)
            small.clear()
            cut = read_cut(checkpoint_dir, batch_id, visit=store, cache=self._cache)
        self.last = Upload(len(cut), sum(d.size for d in cut.values()), uploaded)
        self.uploaded_bytes += uploaded
        files = {name: d.sha256 for name, d in cut.items() if d.size >= INLINE_BELOW}
        return {name: small[name] for name in cut if name not in files}, files

    def committed(self, checkpoint_id: int, files: Mapping[str, str]) -> None:
        """Checkpoint ``checkpoint_id`` committed: delete the files no retained one names."""
        self._indexes[checkpoint_id] = frozenset(files.values())
        retained = set(self._store.ids(CheckpointKind.CHECKPOINT))
        referenced: set[str] = set()
        for snapshot_id in sorted(retained):
            index = self._indexes.get(snapshot_id)
            if index is None:
                index = self._read_index(snapshot_id)
                if index is None:
                    return  # what it needs is unknown: delete nothing this time
                self._indexes[snapshot_id] = index
            referenced |= index
        self._indexes = {i: index for i, index in self._indexes.items() if i in retained}
        self._contents.collect(referenced)

    def _read_index(self, checkpoint_id: int) -> frozenset[str] | None:
        """The digests a checkpoint another attempt stored names (none for a tar checkpoint)."""
        try:
            snapshot = self._store.get(CheckpointKind.CHECKPOINT, checkpoint_id)
            return frozenset(decode_savepoint(snapshot.data, snapshot.info.location).files.values())
        except CheckpointNotFound:
            return frozenset()  # disposed meanwhile: it needs nothing
        except (CheckpointCorrupt, SavepointError) as error:
            log.warning(
                "checkpoint files are not collected while checkpoint %d is unreadable: %s",
                checkpoint_id,
                error,
            )
            return None
