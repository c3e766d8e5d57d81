"""Content-addressed files shared by the retained checkpoints of a checkpoint store.

A streaming checkpoint is Spark's checkpoint directory at one batch, and most of it (state
store deltas, snapshots, RocksDB SST files, old offsets) is the same as in the checkpoint
before. So each file is stored once under the sha256 of its bytes, ``<prefix>/files/<sha256>``
(framed and verified like a snapshot blob), and a checkpoint holds only an index from paths to
digests: a checkpoint uploads what changed since the last one, not the whole state.

Files are write-once and never change, so uploads need no coordination. A file is deleted when
no retained checkpoint's index names it (:meth:`ContentStore.collect`, run by the one driver
that writes checkpoints, after each one commits). Savepoints do not use this store: they stay
self-contained, so that disposing of checkpoints, or of the whole job, never breaks one.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable

from finishable.state.backends import ObjectBackend
from finishable.state.checkpointstore import decode_blob, encode_blob
from finishable.state.errors import CheckpointCorrupt, ObjectNotFound

log = logging.getLogger(__name__)

_DIGEST = re.compile(r"[0-9a-f]{64}")


class ContentStore:
    """Put, get and collect content-addressed files under ``<prefix>/files/``. Thread-safe."""

    def __init__(self, backend: ObjectBackend, prefix: str) -> None:
        self.backend = backend
        self._prefix = f"{prefix}/files/"
        self._known: set[str] | None = None
        self._lock = threading.Lock()

    def _name(self, digest: str) -> str:
        if not _DIGEST.fullmatch(digest):
            raise ValueError(f"{digest!r} is not a sha256 hex digest")
        return f"{self._prefix}{digest}.blob"

    def _listed(self) -> set[str]:
        return {
            name.removeprefix(self._prefix).removesuffix(".blob")
            for name in self.backend.list(self._prefix)
            if name.endswith(".blob")
        }

    def _known_set(self) -> set[str]:
        """The live set (callers hold the lock): listed once, then kept up to date."""
        if self._known is None:
            self._known = self._listed()
        return self._known

    def known(self) -> frozenset[str]:
        """The digests stored, as listed once and kept up to date by this object's writes."""
        with self._lock:
            return frozenset(self._known_set())

    def put(self, digest: str, data: bytes) -> bool:
        """Store ``data`` under its ``digest`` unless it is there; say whether it was uploaded."""
        name = self._name(digest)
        with self._lock:
            if digest in self._known_set():
                return False
        self.backend.put(name, encode_blob(data))
        with self._lock:
            self._known_set().add(digest)
        return True

    def get(self, digest: str) -> bytes:
        """The bytes stored under ``digest``, verified; :class:`CheckpointCorrupt` if damaged."""
        name = self._name(digest)
        try:
            blob = self.backend.get(name)
        except ObjectNotFound:
            raise CheckpointCorrupt(f"checkpoint file {digest} is missing from the store") from None
        payload, actual = decode_blob(blob, what=f"checkpoint file {digest}")
        if actual != digest:
            raise CheckpointCorrupt(f"checkpoint file {digest} holds bytes with sha256 {actual}")
        return payload

    def collect(self, referenced: Iterable[str]) -> int:
        """Delete every stored file that ``referenced`` does not name; return how many."""
        keep = set(referenced)
        with self._lock:
            self._known = self._listed()
            garbage = sorted(self._known - keep)
            for digest in garbage:
                self.backend.delete(self._name(digest))
                self._known.discard(digest)
        if garbage:
            log.info("deleted %d checkpoint files no retained checkpoint needs", len(garbage))
        return len(garbage)
