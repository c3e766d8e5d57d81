"""The checkpoint store: checkpoints and savepoints as checksummed blobs over any ``ObjectBackend``.

Layout under ``<prefix>/`` (default ``snapshots/``)::

    chk-000000000042.blob   header (magic, sha256, length) + the checkpoint's or savepoint's bytes
    chk-000000000042.meta   JSON: kind, id, size, sha256, created_at, user metadata
    sp-000000000007.blob / sp-000000000007.meta

A blob is *committed* when its ``.meta`` exists. The blob is written first and the meta last,
so a reader never sees a half-written blob: a blob without a meta is invisible (and garbage
once older than every retained checkpoint). One small write-once meta per blob, instead of a
mutable "latest" pointer, needs no read-modify-write and works on every backend. The sha256 sits
in both the blob header and the meta, so a damaged blob and a blob/meta mix-up are both detected.
``latest()`` walks back from the newest committed blob past damaged or missing ones, with a
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


class CheckpointKind(StrEnum):
    """Checkpoints are retained by count; savepoints stay until disposed."""

    CHECKPOINT = "checkpoint"
    SAVEPOINT = "savepoint"


_TAG = {CheckpointKind.CHECKPOINT: "chk", CheckpointKind.SAVEPOINT: "sp"}
_KIND_OF_TAG = {tag: kind for kind, tag in _TAG.items()}


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """What the meta of a committed blob says."""

    kind: CheckpointKind
    id: int
    size: int
    sha256: str
    created_at: float
    location: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CheckpointBlob:
    """A blob read back and verified."""

    info: CheckpointInfo
    data: bytes

    @property
    def id(self) -> int:
        return self.info.id

    @property
    def kind(self) -> CheckpointKind:
        return self.info.kind


_SAVEPOINT_OBJECT = re.compile(rf"(?:.+/)?{_TAG[CheckpointKind.SAVEPOINT]}-\d+\.(?:blob|meta)")


def is_savepoint_object(name: str) -> bool:
    """Whether a state object is (part of) a savepoint, under any store prefix: what a
    retention policy that keeps savepoints keeps."""
    return _SAVEPOINT_OBJECT.fullmatch(name) is not None


_SAVEPOINT_BLOB = re.compile(
    rf"(?P<dir>(?:.+/)?){_TAG[CheckpointKind.SAVEPOINT]}-(?P<id>\d+)\.blob"
)


def savepoint_meta_of(blob_name: str) -> str:
    """The meta beside the savepoint blob ``blob_name`` (``[<dir>/]sp-<digits>.blob``), which a
    disposal deletes first; :class:`ValueError` naming what it is when it is not one."""
    match = _SAVEPOINT_BLOB.fullmatch(blob_name)
    if match is None:
        raise ValueError(
            f"{blob_name!r} is not a savepoint blob (sp-<digits>.blob): refusing to delete it"
        )
    return f"{match['dir']}{_TAG[CheckpointKind.SAVEPOINT]}-{match['id']}.meta"


def encode_blob(data: bytes) -> bytes:
    """Frame ``data`` with a magic, its sha256 and its length."""
    return _HEADER.pack(BLOB_MAGIC, hashlib.sha256(data).digest(), len(data)) + data


def decode_blob(blob: bytes, *, what: str = "blob") -> tuple[bytes, str]:
    """Return the payload and its sha256 hex; raise ``CheckpointCorrupt`` on any mismatch."""
    if len(blob) < _HEADER.size:
        raise CheckpointCorrupt(f"{what} is truncated: {len(blob)} of {_HEADER.size} header bytes")
    magic, digest, length = _HEADER.unpack_from(blob)
    if magic != BLOB_MAGIC:
        raise CheckpointCorrupt(f"{what} does not start with the blob magic")
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

    def _name(self, kind: CheckpointKind, blob_id: int, suffix: str) -> str:
        return f"{self.prefix}/{_TAG[kind]}-{blob_id:012d}.{suffix}"

    def _scan(self) -> dict[tuple[CheckpointKind, str], set[int]]:
        """Ids found per (kind, "blob"|"meta"), from names only."""
        found: dict[tuple[CheckpointKind, str], set[int]] = {
            (kind, suffix): set() for kind in CheckpointKind for suffix in ("blob", "meta")
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
        kind: CheckpointKind,
        blob_id: int,
        data: bytes,
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> CheckpointInfo:
        """Store and commit a blob; for a checkpoint, then drop those beyond ``retained``.

        Re-putting an id first un-commits the old blob, so a reader sees the old one, none
        (and falls back) or the new one, never a mix.
        """
        kind = CheckpointKind(kind)
        if isinstance(blob_id, bool) or not isinstance(blob_id, int) or blob_id < 0:
            raise ValueError(f"blob id must be a non-negative integer, got {blob_id!r}")
        payload = bytes(data)
        blob = encode_blob(payload)
        blob_name = self._name(kind, blob_id, "blob")
        meta_name = self._name(kind, blob_id, "meta")
        info = CheckpointInfo(
            kind=kind,
            id=blob_id,
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
                "id": blob_id,
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
                    f"{kind.value} {blob_id}", exc.size, exc.limit, exc.limit_name
                ) from exc
            self.backend.put(meta_name, meta)
            log.info(
                "committed %s %d (%d bytes) at %s",
                kind.value,
                blob_id,
                info.size,
                info.location,
            )
            if kind is CheckpointKind.CHECKPOINT:
                try:
                    self.apply_retention()
                except Exception:
                    # The checkpoint is committed; old ones linger until the next retention pass.
                    log.warning("retention after checkpoint %d failed", blob_id, exc_info=True)
        return info

    def put_checkpoint(
        self, checkpoint_id: int, data: bytes, *, metadata: Mapping[str, Any] | None = None
    ) -> CheckpointInfo:
        return self.put(CheckpointKind.CHECKPOINT, checkpoint_id, data, metadata=metadata)

    def put_savepoint(
        self, savepoint_id: int, data: bytes, *, metadata: Mapping[str, Any] | None = None
    ) -> CheckpointInfo:
        return self.put(CheckpointKind.SAVEPOINT, savepoint_id, data, metadata=metadata)

    def dispose(self, kind: CheckpointKind, blob_id: int) -> bool:
        """Delete a blob, meta first so it is never seen half-deleted; say if it existed."""
        kind = CheckpointKind(kind)
        meta_name = self._name(kind, blob_id, "meta")
        with self._write_lock:
            existed = meta_name in self.backend.list(meta_name)
            self.backend.delete(meta_name)
            self.backend.delete(self._name(kind, blob_id, "blob"))
        if existed:
            log.info("disposed %s %d", kind.value, blob_id)
        return existed

    def apply_retention(self) -> list[int]:
        """Keep the newest ``retained`` checkpoints; return the ids removed. Savepoints stay."""
        with self._write_lock:
            found = self._scan()
            committed = sorted(found[CheckpointKind.CHECKPOINT, "meta"])
            keep = committed[-self.retained :]
            drop = committed[: -self.retained] if len(committed) > self.retained else []
            for blob_id in drop:
                self.backend.delete(self._name(CheckpointKind.CHECKPOINT, blob_id, "meta"))
                self.backend.delete(self._name(CheckpointKind.CHECKPOINT, blob_id, "blob"))
            if keep:
                # Blobs of writes that never committed (a crash between blob and meta).
                orphans = found[CheckpointKind.CHECKPOINT, "blob"] - set(committed)
                for blob_id in sorted(i for i in orphans if i < keep[0]):
                    self.backend.delete(self._name(CheckpointKind.CHECKPOINT, blob_id, "blob"))
            if drop:
                log.info("retention dropped checkpoints %s, kept %s", drop, keep)
            return drop

    # -- reads --------------------------------------------------------------------------------

    def ids(self, kind: CheckpointKind = CheckpointKind.CHECKPOINT) -> list[int]:
        """Ids of committed blobs of ``kind``, ascending (names only, no blob reads)."""
        return sorted(self._scan()[CheckpointKind(kind), "meta"])

    def info(self, kind: CheckpointKind, blob_id: int) -> CheckpointInfo:
        """The meta of a committed blob, without reading its blob."""
        kind = CheckpointKind(kind)
        meta_name = self._name(kind, blob_id, "meta")
        try:
            raw = self.backend.get(meta_name)
        except ObjectNotFound:
            raise CheckpointNotFound(
                f"no {kind.value} {blob_id} at {self.backend.location(self.prefix)}"
            ) from None
        except ObjectCorrupt as exc:
            raise CheckpointCorrupt(f"meta of {kind.value} {blob_id}: {exc}") from exc
        try:
            meta = json.loads(raw)
            if meta["kind"] != kind.value or int(meta["id"]) != blob_id:
                raise ValueError(f"it describes {meta['kind']} {meta['id']}")
            return CheckpointInfo(
                kind=kind,
                id=blob_id,
                size=int(meta["size"]),
                sha256=str(meta["sha256"]),
                created_at=float(meta["created_at"]),
                location=self.backend.location(self._name(kind, blob_id, "blob")),
                metadata=dict(meta.get("metadata") or {}),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointCorrupt(f"meta of {kind.value} {blob_id} is unreadable: {exc}") from exc

    def get(self, kind: CheckpointKind, blob_id: int) -> CheckpointBlob:
        """Read and verify one blob; no fallback (see ``latest``)."""
        info = self.info(kind, blob_id)
        what = f"{info.kind.value} {blob_id}"
        blob_name = self._name(info.kind, blob_id, "blob")
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
        return CheckpointBlob(info, payload)

    def get_checkpoint(self, checkpoint_id: int) -> CheckpointBlob:
        return self.get(CheckpointKind.CHECKPOINT, checkpoint_id)

    def get_savepoint(self, savepoint_id: int) -> CheckpointBlob:
        return self.get(CheckpointKind.SAVEPOINT, savepoint_id)

    def list(self, kind: CheckpointKind | None = None) -> list[CheckpointInfo]:
        """Committed blobs (checkpoints first, then savepoints), ascending by id.

        A blob whose meta cannot be read is left out with a warning.
        """
        found = self._scan()
        kinds = [CheckpointKind(kind)] if kind is not None else list(CheckpointKind)
        infos: list[CheckpointInfo] = []
        for each in kinds:
            for blob_id in sorted(found[each, "meta"]):
                try:
                    infos.append(self.info(each, blob_id))
                except (CheckpointNotFound, CheckpointCorrupt) as exc:
                    log.warning("skipping %s %d in the listing: %s", each.value, blob_id, exc)
        return infos

    def latest(self, kind: CheckpointKind = CheckpointKind.CHECKPOINT) -> CheckpointBlob | None:
        """The newest readable blob of ``kind``, or ``None`` if none was ever committed.

        A damaged or vanished newest blob is skipped with a warning in favour of the previous
        one; if every committed blob is unreadable, ``CheckpointCorrupt`` says so.
        """
        kind = CheckpointKind(kind)
        ids = self.ids(kind)
        problems: list[str] = []
        for blob_id in reversed(ids):
            try:
                blob = self.get(kind, blob_id)
            except (CheckpointCorrupt, CheckpointNotFound) as exc:
                log.warning(
                    "%s %d is unusable (%s); falling back to the previous one",
                    kind.value,
                    blob_id,
                    exc,
                )
                problems.append(str(exc))
                continue
            return blob
        if problems:
            raise CheckpointCorrupt(
                f"none of the {len(ids)} committed {kind.value}s at "
                f"{self.backend.location(self.prefix)} is readable: {'; '.join(problems)}"
            )
        return None

    def latest_checkpoint(self) -> CheckpointBlob | None:
        return self.latest(CheckpointKind.CHECKPOINT)

    def latest_savepoint(self) -> CheckpointBlob | None:
        return self.latest(CheckpointKind.SAVEPOINT)

    def __repr__(self) -> str:
        return (
            f"CheckpointStore({self.backend!r}, retained={self.retained}, prefix={self.prefix!r})"
        )
