"""The checkpoint store: checkpoints and savepoints as checksummed blobs over any ``ObjectBackend``.

Layout under ``<prefix>/`` (default ``snapshots/``)::

    chk-000000000042.blob   header (magic, sha256, length) + the snapshot bytes
    chk-000000000042.meta   JSON: kind, id, size, sha256, created_at, user metadata
    sp-000000000007.blob / sp-000000000007.meta

A snapshot is *committed* when its ``.meta`` exists. The blob is written first and the meta last,
so a reader never sees a half-written snapshot: a blob without a meta is invisible (and garbage
once older than every retained checkpoint). One small write-once meta per snapshot, instead of a
mutable "latest" pointer, needs no read-modify-write and works on every backend. The sha256 sits
in both the blob header and the meta, so a damaged blob and a blob/meta mix-up are both detected.
``latest()`` walks back from the newest committed snapshot past damaged or missing ones, with a
warning for each, and raises only when every one of them is unreadable: silently starting from
nothing while state exists would lose or duplicate data.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from finishable.state.backends import ObjectBackend, validate_name
from finishable.state.errors import (
    CheckpointCorrupt,
    CheckpointNotFound,
    CheckpointTooLarge,
    ObjectCorrupt,
    ObjectNotFound,
    ObjectTooLarge,
)

log = logging.getLogger(__name__)

BLOB_MAGIC = b"FSNAP01\n"
_HEADER = struct.Struct(">8s32sQ")  # magic, sha256 digest, payload length
META_FORMAT = 1


class SnapshotKind(StrEnum):
    """Checkpoints are retained by count; savepoints stay until disposed."""

    CHECKPOINT = "checkpoint"
    SAVEPOINT = "savepoint"


_TAG = {SnapshotKind.CHECKPOINT: "chk", SnapshotKind.SAVEPOINT: "sp"}
_KIND_OF_TAG = {tag: kind for kind, tag in _TAG.items()}


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """What the meta of a committed snapshot says."""

    kind: SnapshotKind
    id: int
    size: int
    sha256: str
    created_at: float
    location: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A snapshot read back and verified."""

    info: CheckpointInfo
    data: bytes

    @property
    def id(self) -> int:
        return self.info.id

    @property
    def kind(self) -> SnapshotKind:
        return self.info.kind


_SAVEPOINT_OBJECT = re.compile(rf"(?:.+/)?{_TAG[SnapshotKind.SAVEPOINT]}-\d+\.(?:blob|meta)")


def is_savepoint_object(name: str) -> bool:
    """Whether a state object is (part of) a savepoint, under any store prefix: what a
    retention policy that keeps savepoints keeps."""
    return _SAVEPOINT_OBJECT.fullmatch(name) is not None


_SAVEPOINT_BLOB = re.compile(rf"(?P<dir>(?:.+/)?){_TAG[SnapshotKind.SAVEPOINT]}-(?P<id>\d+)\.blob")


def savepoint_meta_of(blob_name: str) -> str:
    """The meta beside the savepoint blob ``blob_name`` (``[<dir>/]sp-<digits>.blob``), which a
    disposal deletes first; :class:`ValueError` naming what it is when it is not one."""
    match = _SAVEPOINT_BLOB.fullmatch(blob_name)
    if match is None:
        raise ValueError(
            f"{blob_name!r} is not a savepoint blob (sp-<digits>.blob): refusing to delete it"
        )
    return f"{match['dir']}{_TAG[SnapshotKind.SAVEPOINT]}-{match['id']}.meta"


def encode_blob(data: bytes) -> bytes:
    """Frame ``data`` with a magic, its sha256 and its length."""
    return _HEADER.pack(BLOB_MAGIC, hashlib.sha256(data).digest(), len(data)) + data


def decode_blob(blob: bytes, *, what: str = "blob") -> tuple[bytes, str]:
    """Return the payload and its sha256 hex; raise ``CheckpointCorrupt`` on any mismatch."""
    if len(blob) < _HEADER.size:
        raise CheckpointCorrupt(f"{what} is truncated: {len(blob)} of {_HEADER.size} header bytes")
    magic, digest, length = _HEADER.unpack_from(blob)
    if magic != BLOB_MAGIC:
        raise CheckpointCorrupt(f"{what} does not start with the snapshot magic")
    payload = blob[_HEADER.size :]
    if len(payload) != length:
        raise CheckpointCorrupt(f"{what} holds {len(payload)} bytes, its header says {length}")
    if hashlib.sha256(payload).digest() != digest:
        raise CheckpointCorrupt(f"{what} fails its sha256 check")
    return payload, digest.hex()


class CheckpointStore:
    """Put, get, list, dispose and retain checkpoints and savepoints. Thread-safe, synchronous."""

    def __init__(
        self, backend: ObjectBackend, *, retained: int = 3, prefix: str = "snapshots"
    ) -> None:
        if retained < 1:
            raise ValueError(f"retained={retained}: at least one checkpoint must be kept")
        self.backend = backend
        self.retained = retained
        self.prefix = validate_name(prefix)
        self._names = re.compile(rf"{re.escape(self.prefix)}/(chk|sp)-(\d+)\.(blob|meta)")
        self._write_lock = threading.RLock()

    # -- naming -------------------------------------------------------------------------------

    def _name(self, kind: SnapshotKind, snapshot_id: int, suffix: str) -> str:
        return f"{self.prefix}/{_TAG[kind]}-{snapshot_id:012d}.{suffix}"

    def _scan(self) -> dict[tuple[SnapshotKind, str], set[int]]:
        """Ids found per (kind, "blob"|"meta"), from names only."""
        found: dict[tuple[SnapshotKind, str], set[int]] = {
            (kind, suffix): set() for kind in SnapshotKind for suffix in ("blob", "meta")
        }
        for name in self.backend.list(self.prefix + "/"):
            match = self._names.fullmatch(name)
            if match:
                tag, number, suffix = match.groups()
                found[_KIND_OF_TAG[tag], suffix].add(int(number))
        return found

    # -- writes -------------------------------------------------------------------------------

    def put(
        self,
        kind: SnapshotKind,
        snapshot_id: int,
        data: bytes,
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> CheckpointInfo:
        """Store and commit a snapshot; for a checkpoint, then drop those beyond ``retained``.

        Re-putting an id first un-commits the old snapshot, so a reader sees the old one, none
        (and falls back) or the new one, never a mix.
        """
        kind = SnapshotKind(kind)
        if isinstance(snapshot_id, bool) or not isinstance(snapshot_id, int) or snapshot_id < 0:
            raise ValueError(f"snapshot id must be a non-negative integer, got {snapshot_id!r}")
        payload = bytes(data)
        blob = encode_blob(payload)
        blob_name = self._name(kind, snapshot_id, "blob")
        meta_name = self._name(kind, snapshot_id, "meta")
        info = CheckpointInfo(
            kind=kind,
            id=snapshot_id,
            size=len(payload),
            sha256=hashlib.sha256(payload).hexdigest(),
            created_at=time.time(),
            location=self.backend.location(blob_name),
            metadata=dict(metadata or {}),
        )
        meta = json.dumps(
            {
                "format": META_FORMAT,
                "kind": kind.value,
                "id": snapshot_id,
                "size": info.size,
                "sha256": info.sha256,
                "created_at": info.created_at,
                "blob": blob_name,
                "metadata": info.metadata,
            },
            sort_keys=True,
        ).encode()
        with self._write_lock:
            self.backend.delete(meta_name)
            try:
                self.backend.put(blob_name, blob)
            except ObjectTooLarge as exc:
                raise CheckpointTooLarge(
                    f"{kind.value} {snapshot_id}", exc.size, exc.limit, exc.limit_name
                ) from exc
            self.backend.put(meta_name, meta)
            log.info(
                "committed %s %d (%d bytes) at %s",
                kind.value,
                snapshot_id,
                info.size,
                info.location,
            )
            if kind is SnapshotKind.CHECKPOINT:
                try:
                    self.apply_retention()
                except Exception:
                    # The checkpoint is committed; old ones linger until the next retention pass.
                    log.warning("retention after checkpoint %d failed", snapshot_id, exc_info=True)
        return info

    def put_checkpoint(
        self, checkpoint_id: int, data: bytes, *, metadata: Mapping[str, Any] | None = None
    ) -> CheckpointInfo:
        return self.put(SnapshotKind.CHECKPOINT, checkpoint_id, data, metadata=metadata)

    def put_savepoint(
        self, savepoint_id: int, data: bytes, *, metadata: Mapping[str, Any] | None = None
    ) -> CheckpointInfo:
        return self.put(SnapshotKind.SAVEPOINT, savepoint_id, data, metadata=metadata)

    def dispose(self, kind: SnapshotKind, snapshot_id: int) -> bool:
        """Delete a snapshot, meta first so it is never seen half-deleted; say if it existed."""
        kind = SnapshotKind(kind)
        meta_name = self._name(kind, snapshot_id, "meta")
        with self._write_lock:
            existed = meta_name in self.backend.list(meta_name)
            self.backend.delete(meta_name)
            self.backend.delete(self._name(kind, snapshot_id, "blob"))
        if existed:
            log.info("disposed %s %d", kind.value, snapshot_id)
        return existed

    def apply_retention(self) -> list[int]:
        """Keep the newest ``retained`` checkpoints; return the ids removed. Savepoints stay."""
        with self._write_lock:
            found = self._scan()
            committed = sorted(found[SnapshotKind.CHECKPOINT, "meta"])
            keep = committed[-self.retained :]
            drop = committed[: -self.retained] if len(committed) > self.retained else []
            for snapshot_id in drop:
                self.backend.delete(self._name(SnapshotKind.CHECKPOINT, snapshot_id, "meta"))
                self.backend.delete(self._name(SnapshotKind.CHECKPOINT, snapshot_id, "blob"))
            if keep:
                # Blobs of writes that never committed (a crash between blob and meta).
                orphans = found[SnapshotKind.CHECKPOINT, "blob"] - set(committed)
                for snapshot_id in sorted(i for i in orphans if i < keep[0]):
                    self.backend.delete(self._name(SnapshotKind.CHECKPOINT, snapshot_id, "blob"))
            if drop:
                log.info("retention dropped checkpoints %s, kept %s", drop, keep)
            return drop

    # -- reads --------------------------------------------------------------------------------

    def ids(self, kind: SnapshotKind = SnapshotKind.CHECKPOINT) -> list[int]:
        """Ids of committed snapshots of ``kind``, ascending (names only, no blob reads)."""
        return sorted(self._scan()[SnapshotKind(kind), "meta"])

    def info(self, kind: SnapshotKind, snapshot_id: int) -> CheckpointInfo:
        """The meta of a committed snapshot, without reading its blob."""
        kind = SnapshotKind(kind)
        meta_name = self._name(kind, snapshot_id, "meta")
        try:
            raw = self.backend.get(meta_name)
        except ObjectNotFound:
            raise CheckpointNotFound(
                f"no {kind.value} {snapshot_id} at {self.backend.location(self.prefix)}"
            ) from None
        except ObjectCorrupt as exc:
            raise CheckpointCorrupt(f"meta of {kind.value} {snapshot_id}: {exc}") from exc
        try:
            meta = json.loads(raw)
            if meta["kind"] != kind.value or int(meta["id"]) != snapshot_id:
                raise ValueError(f"it describes {meta['kind']} {meta['id']}")
            return CheckpointInfo(
                kind=kind,
                id=snapshot_id,
                size=int(meta["size"]),
                sha256=str(meta["sha256"]),
                created_at=float(meta["created_at"]),
                location=self.backend.location(self._name(kind, snapshot_id, "blob")),
                metadata=dict(meta.get("metadata") or {}),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointCorrupt(
                f"meta of {kind.value} {snapshot_id} is unreadable: {exc}"
            ) from exc

    def get(self, kind: SnapshotKind, snapshot_id: int) -> Snapshot:
        """Read and verify one snapshot; no fallback (see ``latest``)."""
        info = self.info(kind, snapshot_id)
        what = f"{info.kind.value} {snapshot_id}"
        blob_name = self._name(info.kind, snapshot_id, "blob")
        try:
            blob = self.backend.get(blob_name)
        except ObjectNotFound:
            raise CheckpointCorrupt(
                f"{what} is committed but its blob {blob_name} is missing"
            ) from None
        except ObjectCorrupt as exc:
            raise CheckpointCorrupt(f"{what}: {exc}") from exc
        payload, digest = decode_blob(blob, what=what)
        if digest != info.sha256 or len(payload) != info.size:
            raise CheckpointCorrupt(f"{what}: the blob does not match its meta (sha256 or size)")
        return Snapshot(info, payload)

    def get_checkpoint(self, checkpoint_id: int) -> Snapshot:
        return self.get(SnapshotKind.CHECKPOINT, checkpoint_id)

    def get_savepoint(self, savepoint_id: int) -> Snapshot:
        return self.get(SnapshotKind.SAVEPOINT, savepoint_id)

    def list(self, kind: SnapshotKind | None = None) -> list[CheckpointInfo]:
        """Committed snapshots (checkpoints first, then savepoints), ascending by id.

        A snapshot whose meta cannot be read is left out with a warning.
        """
        found = self._scan()
        kinds = [SnapshotKind(kind)] if kind is not None else list(SnapshotKind)
        infos: list[CheckpointInfo] = []
        for each in kinds:
            for snapshot_id in sorted(found[each, "meta"]):
                try:
                    infos.append(self.info(each, snapshot_id))
                except (CheckpointNotFound, CheckpointCorrupt) as exc:
                    log.warning("skipping %s %d in the listing: %s", each.value, snapshot_id, exc)
        return infos

    def latest(self, kind: SnapshotKind = SnapshotKind.CHECKPOINT) -> Snapshot | None:
        """The newest readable snapshot of ``kind``, or ``None`` if none was ever committed.

        A damaged or vanished newest snapshot is skipped with a warning in favour of the previous
        one; if every committed snapshot is unreadable, ``CheckpointCorrupt`` says so.
        """
        kind = SnapshotKind(kind)
        ids = self.ids(kind)
        problems: list[str] = []
        for snapshot_id in reversed(ids):
            try:
                snapshot = self.get(kind, snapshot_id)
            except (CheckpointCorrupt, CheckpointNotFound) as exc:
                log.warning(
                    "%s %d is unusable (%s); falling back to the previous one",
                    kind.value,
                    snapshot_id,
                    exc,
                )
                problems.append(str(exc))
                continue
            return snapshot
        if problems:
            raise CheckpointCorrupt(
                f"none of the {len(ids)} committed {kind.value}s at "
                f"{self.backend.location(self.prefix)} is readable: {'; '.join(problems)}"
            )
        return None

    def latest_checkpoint(self) -> Snapshot | None:
        return self.latest(SnapshotKind.CHECKPOINT)

    def latest_savepoint(self) -> Snapshot | None:
        return self.latest(SnapshotKind.SAVEPOINT)

    def __repr__(self) -> str:
        return (
            f"CheckpointStore({self.backend!r}, retained={self.retained}, prefix={self.prefix!r})"
        )
