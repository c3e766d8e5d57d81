"""The driver's checkpoint coordinator: checkpoints, savepoints and restores in its store.

A checkpoint is Spark's checkpoint directory cut at a committed batch N plus every source
coordinator's snapshot at N, stored as one blob (``encode_savepoint``) in the job's checkpoint store
(docs/streaming-runtime.md). The sink's batch hook drives it synchronously with Spark:

* ``published(N)``: the sink published N; the coordinators finish N's splits and snapshot (before
  Spark plans N + 1, so the snapshot holds nothing of N + 1);
* ``prepare(N + 1)``: before the sink publishes N + 1, checkpoint N (committed by now) and the raw
  ``offsets/N+1`` entry become durable, so that a restore to N replays exactly this N + 1.

A driver never continues from a live checkpoint directory: every attempt unpacks the newest
checkpoint of its *lineage* (the run it belongs to: the job and the savepoint it started from)
into an empty directory, or the savepoint it was told to start from, or starts empty.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyspark

from finishable.driver.checkpoint_log import CheckpointLog
from finishable.driver.failures import PermanentError
from finishable.driver.source_coordinator import RestorePoint, SourceCoordinator
from finishable.driver.streaming.cut import TornCut
from finishable.driver.streaming.increments import Increments
from finishable.driver.streaming.locations import SavepointUnreachable, read_snapshot_location
from finishable.driver.streaming.savepoints import (
    IncompatibleSavepoint,
    Savepoint,
    SavepointError,
    SavepointManifest,
    check_restorable,
    committed_watermark,
    decode_savepoint,
    encode_savepoint,
    latest_committed_batch,
    pack_checkpoint,
    pack_files,
    unpack_checkpoint,
)
from finishable.state import (
    CheckpointCorrupt,
    CheckpointInfo,
    CheckpointKind,
    CheckpointNotFound,
    CheckpointStore,
    ObjectNotFound,
    StateError,
)
from finishable.state.contents import ContentStore
from finishable.timings import PhaseTimings

log = logging.getLogger(__name__)

PENDING_OFFSETS = "pending/offsets"
"""The raw offsets entry of the batch a sink is about to publish (one object, overwritten)."""
LINEAGE_KEY = "lineage"


class UnrestorableSavepoint(PermanentError, SavepointError):
    """The savepoint to start from is missing, damaged or does not fit the program: every
    attempt would fail the same way."""


def lineage_of(run_key: str, restore_from: str) -> str:
    """The id of a lineage (a run and the savepoint it started from): checkpoints of one
    lineage continue each other, and a new run (``JobConfig.run_key``) never sees another's."""
    return hashlib.sha256(f"{run_key}\n{restore_from}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Fingerprints:
    """What a savepoint must match to be restored: source and sink descriptions."""

    sources: Mapping[str, str]
    sinks: Mapping[str, str]


@dataclass(frozen=True)
class Restored:
    """Where a driver attempt starts from."""

    origin: str
    """For people: "checkpoint 12 (…)", "savepoint …" or "nothing"."""
    savepoint: Savepoint | None
    pending_offsets: bytes | None = None
    """The raw ``offsets/N+1`` entry stored before a sink published N + 1, if any."""
    stored: CheckpointInfo | None = None
    """The checkpoint restored from, when it is one of this lineage's."""
    contents: ContentStore | None = None
    """Where an incremental checkpoint's files are: the store it was found in."""

    @property
    def batch_id(self) -> int:
        return self.savepoint.manifest.batch_id if self.savepoint is not None else -1

    def restore_point(self, coordinator: str) -> RestorePoint | None:
        if self.savepoint is None:
            return None
        return RestorePoint(self.batch_id, self.savepoint.coordinators.get(coordinator))

    def apply(self, checkpoint_dir: Path) -> None:
        """Unpack into the empty ``checkpoint_dir`` and write back the pending offsets entry."""
        if self.savepoint is None:
            checkpoint_dir.mkdir(parents=True, exist_ok=True)
            if self.pending_offsets is not None:
                CheckpointLog(str(checkpoint_dir)).write_entry("offsets", 0, self.pending_offsets)
                log.info("batch 0 will replay from its stored offsets")
            return
        if self.savepoint.incremental and self.contents is None:
            raise UnrestorableSavepoint(
                f"{self.origin} is an incremental checkpoint of another job's store: restore "
                "from a savepoint instead"
            )
        unpack_checkpoint(
            self.savepoint.checkpoint,
            checkpoint_dir,
            self.savepoint.files,
            self.contents.get if self.contents is not None else None,
        )
        if self.pending_offsets is not None:
            CheckpointLog(str(checkpoint_dir)).write_entry(
                "offsets", self.batch_id + 1, self.pending_offsets
            )
            log.info("batch %d will replay from its stored offsets", self.batch_id + 1)


def sink_ahead_problem(
    restored: Restored, sink: str, published: int | None, *, allowed: bool
) -> str | None:
    """Why a start from a savepoint or from nothing must not write to ``sink``, or None.

    Within a lineage the pending offsets line the sink up with the checkpoint. A start from a
    savepoint (or from nothing) has no such link: if the sink already published batches after
    the savepoint's, Spark replays those batch ids with new rows and the sink, which publishes
    every batch id once, would drop them. That is only done when the user says so.
    """
    if restored.stored is not None or published is None or allowed:
        return None
    if published <= restored.batch_id:
        return None
    if restored.pending_offsets is not None and published == restored.batch_id + 1 == 0:
        return None  # batch 0 of this lineage, published before its first checkpoint: replayed
    start = "nothing" if restored.savepoint is None else f"batch {restored.batch_id}"
    return (
        f"sink {sink!r} has already published batches up to {published}, but this run starts "
        f"from {restored.origin} ({start}): the batches it writes next, "
        f"{restored.batch_id + 1} to {published}, would be dropped as already published. "
        "Restore a savepoint at or after the sink's last batch, write to a new sink name, or "
        "set spec.restoreFrom.allowSinkAhead: true to accept that the sink keeps what it has "
        "and drops those batches"
    )


def find_restore(
    store: CheckpointStore,
    *,
    lineage: str,
    restore_from: str,
    allow_drained: bool,
    fingerprints: Fingerprints,
    reach_like: str = "",
) -> Restored:
    """The newest readable checkpoint of ``lineage``, else the savepoint ``restore_from``, else
    nothing. A damaged newest checkpoint falls back to the one before with a warning."""
    newest = newest_checkpoint(store, lineage)
    if newest is not None:
        return newest
    if not restore_from:
        return from_nothing(store, lineage)
    try:
        payload, what = read_snapshot_location(restore_from, store, reach_like)
        savepoint = decode_savepoint(payload, restore_from)
        if savepoint.composite:
            raise IncompatibleSavepoint(
                f"cannot start from {restore_from}: it holds {len(savepoint.queries)} queries "
                f"({', '.join(sorted(savepoint.queries))}) and this job has one"
            )
        check_restorable(
            savepoint.manifest,
            sources=fingerprints.sources,
            sinks=fingerprints.sinks,
            allow_drained=allow_drained,
            location=restore_from,
        )
    except SavepointUnreachable:
        raise  # its store may answer the next attempt
    except SavepointError as error:
        raise UnrestorableSavepoint(str(error)) from error
    own = restore_from.startswith(store.backend.location(store.prefix))
    return Restored(
        f"{what} at batch {savepoint.manifest.batch_id}",
        savepoint,
        contents=ContentStore(store.backend, store.prefix) if own else None,
    )


def from_nothing(
    store: CheckpointStore, lineage: str, pending_key: str = PENDING_OFFSETS
) -> Restored:
    """A start from nothing. An earlier attempt of the lineage may have published batch 0 and
    died before its first checkpoint was stored: batch 0's stored offsets, then, so that Spark
    replays that very batch, which the sink knows it published."""
    return Restored("nothing (a new run)", None, _pending_offsets(store, lineage, 0, pending_key))


def newest_checkpoint(
    store: CheckpointStore, lineage: str, pending_key: str = PENDING_OFFSETS
) -> Restored | None:
    """The newest readable checkpoint of ``lineage`` in ``store``, with its pending offsets."""
    checkpoints = [
        info
        for info in store.list(CheckpointKind.CHECKPOINT)
        if info.metadata.get(LINEAGE_KEY) == lineage
    ]
    for info in reversed(checkpoints):
        try:
            savepoint = decode_savepoint(store.get(info.kind, info.id).data, info.location)
        except (CheckpointCorrupt, CheckpointNotFound, SavepointError) as error:
            log.warning("checkpoint %d is unusable (%s); trying the one before", info.id, error)
            continue
        return Restored(
            f"checkpoint {info.id} ({info.location})",
            savepoint,
            _pending_offsets(store, lineage, info.id + 1, pending_key),
            info,
            ContentStore(store.backend, store.prefix),
        )
    return None


def _pending_offsets(store: CheckpointStore, lineage: str, batch_id: int, key: str) -> bytes | None:
    try:
        document = json.loads(store.backend.get(key))
    except ObjectNotFound:
        return None
    except (StateError, ValueError) as error:
        log.warning("ignoring unreadable pending offsets: %s", error)
        return None
    if document.get(LINEAGE_KEY) != lineage or document.get("batch") != batch_id:
        return None
    return str(document["offsets"]).encode("utf-8")


@dataclass(frozen=True)
class StoredCheckpoint:
    """A completed checkpoint: batch id, location, watermark and when."""

    batch_id: int
    location: str
    watermark_ms: int | None
    time: datetime


class CheckpointKeeper:
    """Takes the coordinators' snapshots on publish and stores checkpoints and savepoints.

    Thread-safe: the batch hook runs on the endpoint's worker threads, the executor's loop on the
    main thread.
    """

    def __init__(
        self,
        *,
        store: CheckpointStore,
        job: str,
        lineage: str,
        checkpoint_dir: Path,
        coordinators: Sequence[SourceCoordinator],
        fingerprints: Fingerprints,
        restored: Restored,
        timings: PhaseTimings | None = None,
        pending_key: str = PENDING_OFFSETS,
    ) -> None:
        self._pending_key = pending_key
        self._timings = timings or PhaseTimings()
        self._store = store
        self._job = job
        self._lineage = lineage
        self._dir = checkpoint_dir
        self._log = CheckpointLog(str(checkpoint_dir))
        self._coordinators = list(coordinators)
        self._fingerprints = fingerprints
        self._lock = threading.RLock()
        self._increments = Increments(store)
        self._enumerator_states: dict[int, dict[str, bytes]] = {}
        self._latest: StoredCheckpoint | None = None
        if restored.savepoint is not None:
            self._enumerator_states[restored.batch_id] = dict(restored.savepoint.coordinators)
            if restored.stored is not None:
                self._latest = StoredCheckpoint(
                    restored.batch_id,
                    restored.stored.location,
                    restored.savepoint.manifest.watermark_ms,
                    datetime.fromtimestamp(restored.stored.created_at, UTC),
                )
        self._stored_through = restored.batch_id if restored.stored is not None else -1

    @property
    def latest(self) -> StoredCheckpoint | None:
        """The newest checkpoint stored by this attempt (or restored from)."""
        with self._lock:
            return self._latest

    # -- the sink's batch hook --------------------------------------------------------------

    def hook(self, stage: str, batch_id: int, sink: str) -> dict[str, Any]:
        """For ``DriverEndpoint.set_batch_hook``."""
        if stage == "prepare":
            with self._timings.phase("hook.prepare"):
                return self.prepare(batch_id)
        with self._timings.phase("hook.published"):
            return self.published(batch_id)

    def prepare(self, batch_id: int) -> dict[str, Any]:
        """Before a sink publishes ``batch_id``: make N - 1 and the raw offsets of N durable."""
        with self._lock:
            previous = batch_id - 1
            if previous > self._stored_through and self._log.read_entry("commits", previous):
                self.checkpoint(previous)
            raw = self._log.read_entry("offsets", batch_id)
            if raw is None:
                raise RuntimeError(f"batch {batch_id} has no offsets entry in {self._dir}")
            document = {
                LINEAGE_KEY: self._lineage,
                "batch": batch_id,
                "offsets": raw.decode("utf-8"),
            }
            self._store.backend.put(self._pending_key, json.dumps(document).encode("utf-8"))
            return {"stored_through": self._stored_through}

    def published(self, batch_id: int) -> dict[str, Any]:
        """A sink published ``batch_id``: finish its splits, snapshot every coordinator."""
        with self._lock:
            snapshots: dict[str, bytes] = {}
            sentinel = False
            for coordinator in self._coordinators:
                committed = coordinator.finish_batch(batch_id)
                snapshot = (
                    committed.snapshot if committed is not None else coordinator.last_snapshot.data
                )
                sentinel = sentinel or (committed is not None and committed.sentinel)
                if snapshot is not None:
                    snapshots[coordinator.name] = snapshot
            self._enumerator_states[batch_id] = snapshots
            for old in [b for b in self._enumerator_states if b < batch_id - 8]:
                del self._enumerator_states[old]
            return {"sentinel": sentinel}

    # -- checkpoints and savepoints ---------------------------------------------------------

    def store_latest(self) -> StoredCheckpoint | None:
        """Store the newest committed batch whose snapshots are known, if not stored yet.

        The query runs on meanwhile; a cut it tore (:class:`TornCut`) is skipped, not fatal.
        """
        with self._timings.phase("hook.checkpoint_store"), self._lock:
            committed = latest_committed_batch(self._dir)
            if (
                committed is not None
                and committed > self._stored_through
                and committed in self._enumerator_states
            ):
                try:
                    self._store_checkpoint(committed)
                except TornCut as torn:  # the query ran on and Spark deleted what it needed
                    log.warning(
                        "checkpoint %d skipped, a later batch is cut next: %s", committed, torn
                    )
            return self._latest

    def checkpoint(self, batch_id: int) -> StoredCheckpoint:
        """Make sure committed ``batch_id`` is stored; return it."""
        with self._lock:
            latest = self._latest
            if latest is not None and latest.batch_id == batch_id:
                return latest
            if batch_id not in self._enumerator_states:
                # No sink commit reported it (a batch that wrote nothing): finish it from the
                # offsets log; a batch planned after it is adopted from its stored offsets.
                self.published(batch_id)
            return self._store_checkpoint(batch_id)

    def savepoint(
        self,
        batch_id: int,
        *,
        drained: bool,
        request_id: str | None,
        target: CheckpointStore | None = None,
    ) -> tuple[CheckpointInfo, StoredCheckpoint]:
        """Copy checkpoint ``batch_id`` as a savepoint (into ``target``, or the job's store)."""
        with self._lock:
            whole, stored = self.savepoint_state(batch_id, drained=drained)
            blob = encode_savepoint(whole)
            store = target or self._store
            savepoint_id = max(store.ids(CheckpointKind.SAVEPOINT), default=0) + 1
            info = store.put_savepoint(
                savepoint_id,
                blob,
                metadata={
                    LINEAGE_KEY: self._lineage,
                    "batch": batch_id,
                    "drained": drained,
                    "request": request_id or "",
                },
            )
            log.info(
                "savepoint %d at batch %d%s: %s",
                savepoint_id,
                batch_id,
                " (drained)" if drained else "",
                info.location,
            )
            return info, stored

    def _manifest(self, batch_id: int, *, drained: bool) -> SavepointManifest:
        return SavepointManifest(
            job=self._job,
            batch_id=batch_id,
            watermark_ms=committed_watermark(self._dir, batch_id),
            drained=drained,
            sources=dict(self._fingerprints.sources),
            sinks=dict(self._fingerprints.sinks),
            spark_version=pyspark.__version__,
        )

    def savepoint_state(
        self, batch_id: int, *, drained: bool
    ) -> tuple[Savepoint, StoredCheckpoint]:
        """Checkpoint ``batch_id`` and a self-contained savepoint of it (Spark's checkpoint as a
        tar), not stored: a composite savepoint holds one per query."""
        with self._lock:
            stored = self.checkpoint(batch_id)
            whole = Savepoint(
                self._manifest(batch_id, drained=drained),
                pack_checkpoint(self._dir, batch_id),
                self._enumerator_states[batch_id],
            )
            return whole, stored

    def _store_checkpoint(self, batch_id: int) -> StoredCheckpoint:
        """An incremental checkpoint: upload the files no stored checkpoint has, then the index."""
        small, files = self._increments.upload(self._dir, batch_id)
        blob = encode_savepoint(
            Savepoint(
                self._manifest(batch_id, drained=False),
                pack_files(small),
                self._enumerator_states[batch_id],
                files,
            )
        )
        info = self._store.put_checkpoint(
            batch_id, blob, metadata={LINEAGE_KEY: self._lineage, "job": self._job}
        )
        self._increments.committed(batch_id, files)
        self._stored_through = batch_id
        self._latest = StoredCheckpoint(
            batch_id,
            info.location,
            committed_watermark(self._dir, batch_id),
            datetime.fromtimestamp(info.created_at, UTC),
        )
        log.info(
            "checkpoint %d stored: %d files, %d bytes of which %d new, index %d bytes",
            batch_id,
            self._increments.last.files,
            self._increments.last.state_bytes,
            self._increments.last.uploaded_bytes,
            info.size,
        )
        return self._latest
