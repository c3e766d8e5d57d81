"""Several streaming queries in one job: one Spark query per ``write_stream`` call.

A query has a stable name (its sink's name, or ``write_stream(name=...)``) that keys its state:
its checkpoint directory, its checkpoint keeper's prefix in the checkpoint store and its part of a
savepoint. It reads the sources its plan reads, and a source feeds one query only: a
coordinator hands each split out once, so two queries would each see part of the input.

The queries share nothing (no source, no sink, no state), so the cuts each takes at its own batch
boundary are together one consistent cut of the job: the job's savepoint is the composite of its
queries' (format version 3). A job of one query keeps the layout it always had: its checkpoint
directory, the store's ``snapshots/`` prefix and savepoint versions 1 and 2.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyspark

from finishable.api.status import CheckpointStatus, QueryStatus
from finishable.connectors.sinks import Kafka, TransactionalFiles, TransactionalSink
from finishable.connectors.streaming.kafka_writer import commit_jvm_batch
from finishable.connectors.streaming.sink import publish_jvm_batch
from finishable.coordinator.contract import CoordinatorProgress
from finishable.driver.checkpoint_log import CheckpointLog
from finishable.driver.failures import ProgramError
from finishable.driver.source_coordinator import SourceCoordinator
from finishable.driver.streaming.checkpoints import (
    LINEAGE_KEY,
    CheckpointKeeper,
    Fingerprints,
    Restored,
    StoredCheckpoint,
    UnrestorableSavepoint,
    from_nothing,
    newest_checkpoint,
)
from finishable.driver.streaming.locations import SavepointUnreachable, read_snapshot_location
from finishable.driver.streaming.savepoints import (
    Savepoint,
    SavepointError,
    SavepointManifest,
    check_queries_restorable,
    composite_savepoint,
    decode_savepoint,
    encode_savepoint,
)
from finishable.state import CheckpointInfo, CheckpointKind, CheckpointStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

log = logging.getLogger(__name__)

QUERY_NAME = re.compile(r"[a-z0-9](?:[a-z0-9.-]{0,61}[a-z0-9])?")
"""A query's name is a segment of object names in the checkpoint store."""


@dataclass(frozen=True)
class Output:
    """What one ``write_stream`` call declared."""

    name: str
    dataframe: DataFrame
    sink: TransactionalSink
    output_mode: str


def check_query_name(name: str) -> str:
    """``name`` if it can key a query's state, else a ProgramError saying what would."""
    if not QUERY_NAME.fullmatch(name) or ".." in name:
        raise ProgramError(
            f"the query name {name!r} cannot key its state in the checkpoint store: pass "
            "write_stream(name=...) of lowercase a-z, 0-9, '.' and '-' (at most 63, starting and "
            "ending with a letter or digit)"
        )
    return name


def sources_read(dataframe: DataFrame) -> set[str]:
    """The coordinators ``dataframe``'s plan reads: each finishable streaming relation carries
    its coordinator's name in its ``settings`` option."""
    jdf = getattr(dataframe, "_jdf", None)
    if jdf is None:
        raise ProgramError("write_stream needs a classic PySpark DataFrame (not Spark Connect)")
    names: set[str] = set()
    leaves = jdf.queryExecution().logical().collectLeaves().iterator()
    while leaves.hasNext():
        leaf = leaves.next()
        if str(leaf.nodeName()) != "StreamingRelationV2":
            continue  # a static table, say
        settings = leaf.extraOptions().get("settings")
        if not settings:
            continue
        try:
            coordinator = json.loads(str(settings)).get("coordinator")
        except (ValueError, AttributeError):
            continue
        if isinstance(coordinator, str):
            names.add(coordinator)
    return names


def assign_sources(
    outputs: Sequence[Output], coordinators: Sequence[SourceCoordinator], *, complete: bool = True
) -> dict[str, list[SourceCoordinator]]:
    """Each query's sources. One query reads all of them, as it always did; of several, each
    reads those its plan reads, and a source read by two queries (or, ``complete``, by none) is a
    ProgramError."""
    if len(outputs) == 1:
        return {outputs[0].name: list(coordinators)}
    known = {c.name for c in coordinators}
    readers: dict[str, list[str]] = {}
    assigned: dict[str, list[SourceCoordinator]] = {}
    for output in outputs:
        names = sources_read(output.dataframe) & known
        if not names:
            raise ProgramError(
                f"the query {output.name!r} reads no source of this job: build its DataFrame "
                "from job.read_stream"
            )
        assigned[output.name] = [c for c in coordinators if c.name in names]
        for name in names:
            readers.setdefault(name, []).append(output.name)
    for source, queries in sorted(readers.items()):
        if len(queries) > 1:
            raise ProgramError(
                f"the source {source!r} feeds the queries {' and '.join(map(repr, queries))}: a "
                "source feeds one query (its splits are handed out once); read the input twice "
                "with two read_stream calls of distinct names, or union the outputs into one sink"
            )
    unread = [c.name for c in coordinators if c.name not in readers]
    if complete and unread:
        raise ProgramError(
            f"the source(s) {', '.join(map(repr, unread))} feed no query: write them with "
            "write_stream or do not read them"
        )
    return assigned


def query_store(store: CheckpointStore, query: str) -> CheckpointStore:
    """The checkpoint store a query of a job of several keeps its checkpoints in."""
    return CheckpointStore(
        store.backend, retained=store.retained, prefix=f"{store.prefix}/queries/{query}"
    )


def checkpointed_queries(store: CheckpointStore) -> set[str]:
    """The queries that keep checkpoints in ``store`` as queries of a job of several."""
    prefix = f"{store.prefix}/queries/"
    return {key[len(prefix) :].split("/", 1)[0] for key in store.backend.list(prefix)}


def pending_key(query: str) -> str:
    """Where a query of a job of several keeps the offsets of the batch its sink publishes next."""
    return f"pending/queries/{query}/offsets"


@dataclass
class Query:
    """One running query: its Spark writer and handle, sink, sources and checkpoints."""

    name: str
    writer: DataStreamWriter
    sink: TransactionalSink
    coordinators: list[SourceCoordinator]
    keeper: CheckpointKeeper
    checkpoint_dir: Path
    log: CheckpointLog = field(init=False)
    handle: StreamingQuery | None = None
    rest: int | None = None
    """The batch the suspended query rests at, once an ending found it."""

    def __post_init__(self) -> None:
        self.log = CheckpointLog(str(self.checkpoint_dir))


class QuerySet:
    """The job's queries as one: the sinks' batch hook, checkpoints and savepoints of them all."""

    def __init__(
        self,
        queries: Sequence[Query],
        *,
        store: CheckpointStore,
        job: str,
        lineage: str,
        fingerprints: Fingerprints,
    ) -> None:
        if not queries:
            raise ProgramError("the program called run() without write_stream(): nothing to run")
        self.queries = list(queries)
        self._store = store
        self._job = job
        self._lineage = lineage
        self._fingerprints = fingerprints
        self._by_sink = {q.sink.sink_name: q for q in self.queries}

    @property
    def single(self) -> bool:
        return len(self.queries) == 1

    def statuses(self) -> list[QueryStatus]:
        """Each query's newest checkpoint and splits, for a job of several (none for one): the
        health check watches them one by one (one stuck query must not hide behind others)."""
        if self.single:
            return []
        statuses = []
        for query in self.queries:
            total, finished = splits(progress_of(query.coordinators))
            statuses.append(
                QueryStatus(
                    name=query.name,
                    last_checkpoint=checkpoint_status(query.keeper.latest),
                    splits_total=total,
                    splits_finished=finished,
                )
            )
        return statuses

    @property
    def coordinators(self) -> list[SourceCoordinator]:
        return [c for q in self.queries for c in q.coordinators]

    def hook(self, stage: str, batch_id: int, body: dict[str, Any]) -> dict[str, Any]:
        """For ``DriverEndpoint.set_batch_hook``: the keeper of the query writing
        ``body["sink"]``; a ``publish`` (the JVM writers': Spark's own file writers' parts, Kafka's
        Java producer's open transactions) runs both of its stages around the publish or commit,
        as a Python sink writer's commit calls them around its own."""
        sink = str(body.get("sink", ""))
        query = self._by_sink.get(sink)
        if query is None:
            raise ValueError(f"no query of this job writes to the sink {sink!r}")
        if stage != "publish":
            return query.keeper.hook(stage, batch_id, sink)
        target = query.sink
        if not isinstance(target, TransactionalFiles | Kafka):
            raise ValueError(f"sink {sink!r} is not published by the driver")
        query.keeper.hook("prepare", batch_id, sink)
        if isinstance(target, Kafka):
            commit_jvm_batch(target.store, target.target, batch_id, body)
        else:
            publish_jvm_batch(target.url, sink, target.format, batch_id, body)
        return query.keeper.hook("published", batch_id, sink)

    @property
    def latest(self) -> StoredCheckpoint | None:
        """The newest checkpoint any query stored (the only one's, for one query)."""
        stored = [q.keeper.latest for q in self.queries]
        present = [s for s in stored if s is not None]
        return max(present, key=lambda s: s.time) if present else None

    def store_latest(self) -> StoredCheckpoint | None:
        for query in self.queries:
            query.keeper.store_latest()
        return self.latest

    def savepoint(
        self,
        batches: Mapping[str, int],
        *,
        drained: bool,
        request_id: str | None,
        target: CheckpointStore | None,
    ) -> tuple[CheckpointInfo, int]:
        """A savepoint of every query at its batch in ``batches`` (-1: it committed none), into
        ``target`` or the job's store; and the batch id status shows for it."""
        if self.single:
            query = self.queries[0]
            info, stored = query.keeper.savepoint(
                batches[query.name], drained=drained, request_id=request_id, target=target
            )
            return info, stored.batch_id
        parts: dict[str, Savepoint | None] = {}
        for query in self.queries:
            batch = batches.get(query.name, -1)
            parts[query.name] = (
                query.keeper.savepoint_state(batch, drained=drained)[0] if batch >= 0 else None
            )
        whole = composite_savepoint(
            SavepointManifest(
                job=self._job,
                batch_id=0,
                drained=drained,
                sources=dict(self._fingerprints.sources),
                sinks=dict(self._fingerprints.sinks),
                spark_version=pyspark.__version__,
            ),
            parts,
        )
        store = target or self._store
        savepoint_id = max(store.ids(CheckpointKind.SAVEPOINT), default=0) + 1
        info = store.put_savepoint(
            savepoint_id,
            encode_savepoint(whole),
            metadata={
                LINEAGE_KEY: self._lineage,
                "batch": whole.manifest.batch_id,
                "drained": drained,
                "request": request_id or "",
            },
        )
        log.info(
            "savepoint %d of %d queries at batches %s%s: %s",
            savepoint_id,
            len(parts),
            dict(whole.manifest.queries),
            " (drained)" if drained else "",
            info.location,
        )
        return info, whole.manifest.batch_id


def find_query_restores(
    store: CheckpointStore,
    *,
    stores: Mapping[str, CheckpointStore],
    lineage: str,
    restore_from: str,
    allow_drained: bool,
    fingerprints: Mapping[str, Fingerprints],
    allow_non_restored: bool = False,
    reach_like: str = "",
) -> dict[str, Restored]:
    """Where each query of a job of several starts: its newest checkpoint of ``lineage`` (in its
    own store, ``stores``), else its part of the savepoint ``restore_from``, else nothing.

    A query without a checkpoint in the lineage has published nothing after the savepoint (its
    first publish after it stores the savepoint's batch as a checkpoint), so its part of the
    savepoint is still where it stands.
    """
    restored: dict[str, Restored] = {}
    for name, own in stores.items():
        newest = newest_checkpoint(own, lineage, pending_key(name))
        if newest is not None:
            restored[name] = newest
    if len(restored) == len(stores):
        return restored
    savepoint: Savepoint | None = None
    what = ""
    if restore_from:
        try:
            payload, what = read_snapshot_location(restore_from, store, reach_like)
            savepoint = decode_savepoint(payload, restore_from)
            check_queries_restorable(
                savepoint,
                queries={q: (f.sources, f.sinks) for q, f in fingerprints.items()},
                allow_drained=allow_drained,
                allow_non_restored=allow_non_restored,
                location=restore_from,
            )
        except SavepointUnreachable:
            raise  # its store may answer the next attempt
        except SavepointError as error:
            raise UnrestorableSavepoint(str(error)) from error
    for name in stores:
        if name in restored:
            continue
        part = savepoint.queries.get(name) if savepoint is not None else None
        if part is None:
            restored[name] = from_nothing(stores[name], lineage, pending_key(name))
        else:
            origin = f"{what} at batch {part.manifest.batch_id} (query {name!r})"
            restored[name] = Restored(origin, part)
    return restored


def checkpoint_status(stored: StoredCheckpoint | None) -> CheckpointStatus | None:
    """A stored checkpoint as the status shows it."""
    if stored is None:
        return None
    return CheckpointStatus(id=stored.batch_id, location=stored.location, time=stored.time)


def progress_of(coordinators: Iterable[SourceCoordinator]) -> dict[str, CoordinatorProgress]:
    """Each coordinator's progress, by source name (one that cannot answer is left out: a failed
    coordinator shows in its query's failure instead)."""
    progress = {}
    for coordinator in coordinators:
        try:
            each = coordinator.host.progress().result(5)
        except Exception:
            continue
        if each is not None:
            progress[coordinator.name] = each
    return progress


def splits(progress: Mapping[str, CoordinatorProgress]) -> tuple[int, int]:
    """Splits discovered and finished, in all."""
    total = sum(each.splits_discovered for each in progress.values())
    return total, sum(each.splits_finished for each in progress.values())
