"""The partition storage: cluster partitions as parquet parts and a manifest per partition.

Layout under the storage URL (an object store URL, ``file://`` or a local directory)::

    <id>/part-000000.parquet   one part per result partition of the promoted dataset
    <id>/staged.json           the manifest of a promotion whose job has not committed yet
    <id>/manifest.json         the manifest: its presence is the cluster partition
    <id>/readers/<run>.json    a lease of a job run reading it (deletes wait for it)

A producing driver writes the parts and ``staged.json`` before it publishes the job's output, and
``manifest.json`` after, so only a job that succeeded leaves a cluster partition (FLIP-67's
"promote on success"); a run that fails in between leaves a staged promotion that
``discard_staged`` removes. Deleting removes the manifest first: from that moment no new reader
finds the partition, and the parts go after it.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import io
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from finishable.partitions.manifest import (
    Manifest,
    ManifestError,
    PartFile,
    is_partition_id,
    matches,
    now_utc,
    object_url,
    part_file,
    summary,
)
from finishable.state.backends import ObjectBackend, open_backend
from finishable.state.errors import ObjectNotFound
from finishable.state.local import LocalDirBackend

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
STAGED = "staged.json"
READERS = "readers"
LEASE_TIMEOUT = timedelta(minutes=2)
"""A reader refreshes its lease well within this; a lease older than this is a crashed reader's."""


class PartitionNotFound(LookupError):
    """No cluster partition answers to the reference."""

    def __init__(self, reference: str, location: str, known: list[str]) -> None:
        listed = ", ".join(known[:10]) + (" ..." if len(known) > 10 else "") or "none"
        super().__init__(
            f"no cluster partition {reference!r} in {location} (pass an id, <job>/<dataset> "
            f"or a dataset name; known: {listed})"
        )
        self.reference = reference


class AmbiguousPartition(LookupError):
    """A dataset name that several jobs promoted: the caller must say which."""


class PartitionLost(RuntimeError):
    """The manifest is there but parts are gone: the storage that held them lost them."""


class PartitionInUse(RuntimeError):
    """A running job reads the partition: deleting it now would cut the read in half."""

    def __init__(self, partition_id: str, readers: list[str]) -> None:
        super().__init__(
            f"cluster partition {partition_id} is being read by {', '.join(readers)}: delete it "
            "once they finished (a crashed reader's lease lapses after "
            f"{int(LEASE_TIMEOUT.total_seconds())} s)"
        )
        self.readers = readers


@dataclass(frozen=True, slots=True)
class Health:
    """What a check of a partition's parts found."""

    missing: tuple[str, ...]

    @property
    def lost(self) -> bool:
        return bool(self.missing)


class PartitionCatalog:
    """Cluster partitions in one partition storage."""

    def __init__(self, url: str, backend: ObjectBackend | None = None) -> None:
        self.url = url
        self.backend = backend or open_backend(url)

    def close(self) -> None:
        self.backend.close()

    @property
    def location(self) -> str:
        return self.backend.location()

    # -- producing ----------------------------------------------------------------------------

    def write_part(self, partition_id: str, partition: int, table: pa.Table) -> PartFile:
        """Store one result partition as a parquet part (replacing a part of a crashed try)."""
        import pyarrow.parquet as pq  # noqa: PLC0415 - the CLI lists partitions without pyarrow

        buffer = io.BytesIO()
        pq.write_table(table, buffer, compression="zstd")
        data = buffer.getvalue()
        name = part_file(partition)
        self.backend.put(f"{partition_id}/{name}", data)
        digest = hashlib.sha256(data).hexdigest()
        return PartFile(partition, name, len(data), table.num_rows, digest)

    def stage(self, manifest: Manifest) -> None:
        """Record a promotion whose parts are written; it becomes a partition on ``commit``."""
        self.backend.put(f"{manifest.id}/{STAGED}", _encode(manifest))

    def committed(self, partition_id: str) -> Manifest | None:
        try:
            return _decode(self.backend.get(f"{partition_id}/{MANIFEST}"), partition_id)
        except ObjectNotFound:
            return None

    def commit(self, partition_id: str) -> Manifest:
        """Publish a staged promotion (idempotent: a second commit finds it published)."""
        try:
            data = self.backend.get(f"{partition_id}/{STAGED}")
        except ObjectNotFound:
            existing = self.committed(partition_id)
            if existing is None:
                raise PartitionNotFound(partition_id, self.location, []) from None
            return existing
        manifest = _decode(data, partition_id)
        self.backend.put(f"{partition_id}/{MANIFEST}", data)
        self.backend.delete(f"{partition_id}/{STAGED}")
        log.info(
            "cluster partition %s (%s) promoted: %d part(s), %d row(s), %d byte(s)",
            manifest.id,
            manifest.name,
            len(manifest.parts),
            manifest.rows,
            manifest.bytes,
        )
        return manifest

    def discard_staged(self, job_uid: str, run: int) -> list[str]:
        """Remove the staged promotions of a run that did not succeed; returns their ids."""
        discarded = []
        for staged in self._documents(STAGED):
            if staged.job_uid == job_uid and staged.run == run:
                self._remove(staged.id)
                discarded.append(staged.id)
        return discarded

    # -- reading --------------------------------------------------------------------------------

    def list(self) -> list[Manifest]:
        """The cluster partitions, oldest first: an expired one is gone even before ``expire``
        deletes its files; unreadable manifests are logged and skipped."""
        now = now_utc()
        return [manifest for manifest in self._manifests() if not manifest.expired(now)]

    def listed(self) -> builtins.list[tuple[Manifest, str]]:
        """``list()`` with each partition's state, from one listing of the storage."""
        names = self.backend.list()
        present = set(names)
        now = now_utc()
        return [
            (manifest, _state_of(manifest, present))
            for manifest in self._manifests(names)
            if not manifest.expired(now)
        ]

    def _manifests(self, names: builtins.list[str] | None = None) -> builtins.list[Manifest]:
        manifests = self._documents(MANIFEST, names)
        return sorted(manifests, key=lambda manifest: (manifest.created_at, manifest.id))

    def _documents(
        self, leaf: str, names: builtins.list[str] | None = None
    ) -> builtins.list[Manifest]:
        """Every ``<id>/<leaf>`` manifest; one deleted meanwhile or unreadable is skipped."""
        found = []
        for name in self.backend.list() if names is None else names:
            partition_id, _, rest = name.partition("/")
            if rest != leaf:
                continue
            try:
                found.append(_decode(self.backend.get(name), partition_id))
            except ObjectNotFound:
                continue  # deleted while listing
            except ManifestError as error:
                log.warning("skipping %s: %s", name, error)
        return found

    def get(self, reference: str) -> Manifest:
        """The partition named by its id, ``<job>/<dataset>`` or its dataset name; of several
        runs of one job, the newest."""
        exact = self.committed(reference) if is_partition_id(reference) else None
        if exact is not None and not exact.expired(now_utc()):
            return exact
        everything = self.list()
        found = [manifest for manifest in everything if matches(manifest, reference)]
        if not found:
            raise PartitionNotFound(reference, self.location, [m.name for m in everything])
        names = sorted({manifest.name for manifest in found})
        if len(names) > 1:
            raise AmbiguousPartition(
                f"{reference!r} names cluster partitions of several jobs ({', '.join(names)}): "
                "pass <job>/<dataset> or an id"
            )
        return found[-1]

    def health(self, manifest: Manifest) -> Health:
        """Which of the manifest's parts the storage no longer has."""
        return _health(manifest, set(self.backend.list(f"{manifest.id}/")))

    def state(self, manifest: Manifest) -> str:
        """Available, or Lost when the storage no longer has every part (FLIP-67's third case)."""
        return _state_of(manifest, set(self.backend.list(f"{manifest.id}/")))

    def describe(self, manifest: Manifest) -> dict[str, Any]:
        """The summary with the schema, the readers and where each part lives."""
        document = summary(manifest, self.state(manifest))
        document["schema"] = manifest.schema
        document["readers"] = self.readers(manifest.id, now_utc())
        document["descriptors"] = [
            {**part.to_json(), "url": self.part_url(manifest, part)} for part in manifest.parts
        ]
        return document

    def part_url(self, manifest: Manifest, part: PartFile | None = None) -> str:
        """The URL of a part (or of the partition's directory) for ``pyarrow.fs`` readers."""
        leaf = f"{manifest.id}/{part.file}" if part else manifest.id
        return object_url(self.url, leaf)

    # -- readers --------------------------------------------------------------------------------

    def hold(self, partition_id: str, reader: str, now: datetime) -> None:
        """Record (or refresh) that the job run ``reader`` reads the partition: a delete is
        refused while the lease is fresh, so a partition is never deleted half-read."""
        document = {"reader": reader, "heartbeatAt": now.isoformat()}
        self.backend.put(f"{partition_id}/{READERS}/{reader}.json", json.dumps(document).encode())

    def let_go(self, partition_id: str, reader: str) -> None:
        self.backend.delete(f"{partition_id}/{READERS}/{reader}.json")

    def readers(self, partition_id: str, now: datetime) -> builtins.list[str]:
        """The readers whose lease is fresh (a crashed reader's lease goes stale by itself)."""
        live = []
        for name in self.backend.list(f"{partition_id}/{READERS}/"):
            try:
                document = json.loads(self.backend.get(name))
                beat = datetime.fromisoformat(document["heartbeatAt"])
            except (ObjectNotFound, ValueError, KeyError, TypeError):
                continue
            if now - beat < LEASE_TIMEOUT:
                live.append(str(document["reader"]))
        return sorted(live)

    # -- releasing ------------------------------------------------------------------------------

    def delete(self, partition_id: str, *, force: bool = False) -> int:
        """Release a cluster partition: the manifest first, then its files; returns how many
        files went. Deleting an unknown id removes nothing and returns 0. ``PartitionInUse``
        while a job reads it, unless ``force``."""
        if not force:
            readers = self.readers(partition_id, now_utc())
            if readers:
                raise PartitionInUse(partition_id, readers)
        return self._remove(partition_id)

    def expire(self, now: datetime) -> builtins.list[str]:
        """Release every partition whose time to live ran out; returns their ids."""
        expired = [manifest.id for manifest in self._manifests() if manifest.expired(now)]
        for partition_id in expired:
            log.info("cluster partition %s: its time to live ran out; releasing it", partition_id)
            self._remove(partition_id)
        return expired

    def _remove(self, partition_id: str) -> int:
        names = self.backend.list(f"{partition_id}/")
        ordered = sorted(names, key=lambda name: not name.endswith(f"/{MANIFEST}"))
        for name in ordered:
            self.backend.delete(name)
        _prune(self.backend, partition_id)
        return len(ordered)


def _health(manifest: Manifest, present: set[str]) -> Health:
    missing = [p.file for p in manifest.parts if f"{manifest.id}/{p.file}" not in present]
    return Health(tuple(missing))


def _state_of(manifest: Manifest, present: set[str]) -> str:
    return "Lost" if _health(manifest, present).lost else "Available"


def _prune(backend: ObjectBackend, partition_id: str) -> None:
    """Remove what a deleted partition leaves besides objects: empty directories of a local
    directory, the directory markers ``pyarrow`` keeps in an object store."""
    if isinstance(backend, LocalDirBackend):
        directory = backend.root / partition_id
        if directory.is_dir():
            inner = sorted(directory.rglob("*"), key=lambda item: len(item.parts), reverse=True)
            for path in [*inner, directory]:
                if path.is_dir():
                    with contextlib.suppress(OSError):
                        path.rmdir()
        return
    from finishable.state.objectstore import ObjectStoreBackend  # noqa: PLC0415 - pyarrow.fs

    if isinstance(backend, ObjectStoreBackend):
        with contextlib.suppress(OSError):
            backend.fs.delete_dir(f"{backend.root}/{partition_id}")


def _encode(manifest: Manifest) -> bytes:
    return json.dumps(manifest.to_json(), indent=2, sort_keys=True).encode("utf-8")


def _decode(data: bytes, partition_id: str) -> Manifest:
    try:
        document = json.loads(data)
    except ValueError as error:
        raise ManifestError(f"the manifest of {partition_id} is not JSON: {error}") from None
    manifest = Manifest.from_json(document)
    if manifest.id != partition_id:
        raise ManifestError(
            f"the manifest under {partition_id} names the partition {manifest.id!r}"
        )
    return manifest
