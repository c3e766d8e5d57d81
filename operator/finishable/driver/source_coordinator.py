"""The driver's side of the finishable sources: one ``SourceCoordinator`` per source, owning its
``CoordinatorHost`` in the driver process (the readers Spark runs are its clients).

The runtime calls it like this (checkpoint ids are Spark batch ids)::

    coordinator = SourceCoordinator("clicks", source)
    coordinator.start(restore=RestorePoint(batch_id, snapshot))   # or start() for a new job
    endpoint.add(coordinator.host)
    df = coordinator.stream(spark, endpoint.url, token)          # once; reusable across runs
    coordinator.begin_run(attempt, checkpoint_location)          # before query.start()
    ...  # query listener, for every progress event (driver process):
    coordinator.on_batch_committed(progress.batchId)             # -> CommittedBatch (snapshot)
    ...  # or, synchronously when the sink has published batch N (before commits/N):
    coordinator.finish_batch(n)                                  # -> CommittedBatch (snapshot)
    ...  # stop at a batch boundary (driver.streaming.boundary.await_batch_boundary):
    coordinator.suspend(); wait until state().held_requests grew by 2 after the last commit
    ...  # drain: suspend, boundary, emit_sentinel(token), wait for its batch and one more, stop
    coordinator.end_run("stopped")                               # after the query terminated

Restart rule. A restarted query re-runs its uncommitted batch from Spark's offsets log, with the
splits embedded in the offset, without asking the coordinator; and the coordinator, restored from
the snapshot of the last batch it saw committed, may still list those splits as assigned (orphans
for the next request) or pending, or not know them at all (discovered later). ``begin_run``
therefore reconciles with the offsets and commits log (``CheckpointLog``) before the query starts:
splits of batches committed after the snapshot are adopted and finished; splits of the planned,
uncommitted batch are *adopted* by the new attempt, so nobody else gets them. Splits assigned but
never written to the log are left to the next request. Spark's log is the truth; the snapshot only
saves work.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from finishable.connectors.jvm import jvm_stream
from finishable.connectors.reading import READER_SUBTASK
from finishable.connectors.sources import Files, Source, sentinel_row
from finishable.connectors.streaming.source import SplitOffset, batch_splits, initial_offset
from finishable.coordinator.contract import NO_CHECKPOINT
from finishable.coordinator.enumerator import AdoptResult, SourceControlState, SplitEnumerator
from finishable.coordinator.events import SplitFinished
from finishable.coordinator.files import FileSplitEnumerator
from finishable.coordinator.host import CoordinatorHost
from finishable.coordinator.splits import SentinelSplit, Split
from finishable.driver.checkpoint_log import CheckpointLog

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

logger = logging.getLogger(__name__)

T = TypeVar("T")

KEPT_RESTORE_POINTS = 4


@dataclass(frozen=True, slots=True)
class RestorePoint:
    """An enumerator state and the batch (checkpoint id) it was taken at."""

    checkpoint_id: int
    data: bytes | None


@dataclass(frozen=True, slots=True)
class CommittedBatch:
    """What ``on_batch_committed`` did: the splits it finished and the snapshot it took."""

    batch_id: int
    split_ids: tuple[str, ...]
    sentinel: bool
    """The batch read a sentinel split: its rows are the drain's artificial row only."""
    snapshot: bytes


@dataclass(frozen=True, slots=True)
class RunReconciliation:
    """What ``begin_run`` found in Spark's log and did about it."""

    attempt: int
    last_committed: int
    recovered_batches: tuple[int, ...]
    """Committed after the coordinator's snapshot: their splits were finished now."""
    in_flight_batch: int | None
    """Planned but not committed: Spark will re-run it from its offsets log."""
    in_flight_splits: tuple[str, ...]
    """Adopted by the new attempt, so no request hands them out again."""
    added_splits: tuple[str, ...]
    """Splits the restored coordinator did not know (discovered after its snapshot)."""


class SourceCoordinator:
    """The driver's handle on one source's coordinator (see the module docstring for the flow).

    Thread-safe: the query listener (a py4j callback thread) and the runtime's main thread may
    call it concurrently; calls are serialised by a lock and by the host's thread.
    """

    def __init__(self, name: str, source: Source, *, timeout: float = 30.0) -> None:
        self._name = name
        self._source = source
        self._timeout = timeout
        self._host = CoordinatorHost(name, source.coordinator_provider())
        self._lock = threading.RLock()
        self._attempt: int | None = None
        self._log: CheckpointLog | None = None
        self._restore_points: list[RestorePoint] = [RestorePoint(NO_CHECKPOINT, None)]
        """The start point, then the newest snapshots taken (ascending)."""
        self._done_through = NO_CHECKPOINT
        """The last batch whose splits are finished in the coordinator."""

    @property
    def name(self) -> str:
        """The coordinator's name: unique per job, used in offsets."""
        return self._name

    @property
    def host(self) -> CoordinatorHost:
        """The host, for ``DriverEndpoint.add``."""
        return self._host

    @property
    def source(self) -> Source:
        """The source descriptor."""
        return self._source

    @property
    def attempt(self) -> int | None:
        """The attempt of the current query run, if one is running."""
        return self._attempt

    @property
    def last_snapshot(self) -> RestorePoint:
        """The newest snapshot (taken by ``finish_batch``, or restored)."""
        return self._restore_points[-1]

    def _keep(self, snapshot: RestorePoint) -> None:
        # The start point stays; a few recent ones let end_run skip one without a commit entry.
        self._restore_points = [
            self._restore_points[0],
            *self._restore_points[1:][-(KEPT_RESTORE_POINTS - 1) :],
        ]
        self._restore_points.append(snapshot)

    def start(self, restore: RestorePoint | None = None) -> None:
        """Restore the snapshot (if any) and start the enumerator."""
        with self._lock:
            if restore is not None and restore.data is not None:
                self._host.reset_to_checkpoint(restore.checkpoint_id, restore.data).result(
                    self._timeout
                )
                self._restore_points = [restore]
                self._done_through = restore.checkpoint_id
            self._host.start().result(self._timeout)

    def close(self) -> None:
        """Close the host (the endpoint should stop serving it first)."""
        self._host.close()

    def stream(
        self,
        spark: SparkSession,
        endpoint_url: str,
        token: str,
        *,
        attempt: int | None = None,
        min_partitions: int | None = None,
        sentinel_column: bool = False,
    ) -> DataFrame:
        """The source's streaming DataFrame, reading through this coordinator: by Spark's own
        file readers where the source allows it and ``spark.finishable.dataPath.streaming`` is not
        ``python`` (``connectors.jvm``), else by the source's Python data source."""
        jvm = jvm_stream(
            spark,
            self._source,
            coordinator=self._name,
            endpoint=endpoint_url,
            token=token,
            attempt=attempt,
            min_partitions=min_partitions,
            sentinel_column=sentinel_column,
        )
        if jvm is not None:
            return jvm
        return self._source.stream(
            spark,
            endpoint_url=endpoint_url,
            token=token,
            coordinator=self._name,
            attempt=attempt,
            min_partitions=min_partitions,
            sentinel_column=sentinel_column,
        )

    # ------------------------------------------------------------------ query runs

    def begin_run(
        self,
        attempt: int,
        checkpoint_location: str | None = None,
        *,
        discovery_timeout: float = 60.0,
    ) -> RunReconciliation:
        """Make ``attempt`` the reader's attempt and reconcile with Spark's log at
        ``checkpoint_location``; call it before ``query.start()``.

        Any attempt number works (``end_run`` resets the coordinator); the job attempt times a
        run counter keeps logs readable. A Files source also waits for its first listing, so the
        first batch (and an availableNow run) sees the files. If reconciling fails, the run is
        ended again and the error raised.
        """
        with self._lock:
            if self._attempt is not None:
                raise RuntimeError(
                    f"source {self._name!r}: attempt {self._attempt} is still running; call "
                    "end_run first"
                )
            self._call(self._host.execution_attempt_ready(READER_SUBTASK, attempt))
            self._attempt = attempt
            self._log = CheckpointLog(checkpoint_location) if checkpoint_location else None
            try:
                result = self._reconcile(attempt)
                if isinstance(self._source, Files):
                    self._await_first_listing(discovery_timeout)
            except BaseException as error:
                self.end_run(f"begin_run failed: {error}")
                raise
            return result

    def end_run(self, reason: str = "query stopped") -> None:
        """The query run ended (stopped, failed): restore the last snapshot for the next run.

        The run's attempt is failed and the coordinator restored from the snapshot of the last
        batch it saw committed, exactly as after a driver restart, so the next ``begin_run``
        reconciles with Spark's log the same way in both cases.
        """
        with self._lock:
            if self._attempt is None:
                return
            self._attempt = None
            committed = self._log.last_committed() if self._log is not None else None
            snapshot = next(
                point
                for point in reversed(self._restore_points)
                if committed is None
                or point.checkpoint_id <= committed
                or point is self._restore_points[0]
            )
            self._call(self._host.global_failover(snapshot.checkpoint_id, snapshot.data, reason))
            self._done_through = snapshot.checkpoint_id
            logger.info(
                "source %s: run ended (%s); restored the snapshot of batch %d",
                self._name,
                reason,
                snapshot.checkpoint_id,
            )

    def on_batch_committed(self, batch_id: int) -> CommittedBatch | None:
        """Batch ``batch_id`` is in Spark's commit log: ``finish_batch`` it (and any missed).

        For the query listener in the driver, for every progress event. The id is capped at the
        last entry of ``commits/`` (an idle event may name a batch that is not committed), and a
        batch already handled returns ``None``. Needs the run's checkpoint location.
        """
        with self._lock:
            if self._log is None:
                raise RuntimeError(
                    f"source {self._name!r}: on_batch_committed reads the offsets log; pass the "
                    "checkpoint location to begin_run (or call finish_batch with the offsets)"
                )
            return self.finish_batch(min(batch_id, self._log.last_committed()))

    def finish_batch(
        self,
        batch_id: int,
        end_offset: str | Mapping[str, Any] | None = None,
        start_offset: str | Mapping[str, Any] | None = None,
    ) -> CommittedBatch | None:
        """Batch ``batch_id``'s output is durable: finish the splits it read, then snapshot.

        Every batch after the last one finished, up to ``batch_id``, is read from the offsets log
        (so a missed call loses nothing); without a log, ``end_offset`` and ``start_offset``
        (``progress.sources[i]``) name the batch. The snapshot is checkpoint ``batch_id``: keep it
        with the cut of Spark's checkpoint at that batch. A runtime that snapshots synchronously
        from its sink's publish (before ``commits/N`` exists) calls this directly; ``end_run``
        never restores a snapshot of a batch without a commit entry. Returns ``None`` if the batch
        was finished already.
        """
        with self._lock:
            if batch_id <= self._done_through:
                return None
            attempt = self._require_attempt()
            read: list[Split] = []
            sentinel = False
            if self._log is not None:
                previous = self._log.source_offset(self._done_through, self._name)
                for batch in range(self._done_through + 1, batch_id + 1):
                    offset = self._log.source_offset(batch, self._name)
                    if offset is None:
                        continue
                    splits = batch_splits(previous or initial_offset(self._name), offset)
                    read.extend(splits)
                    sentinel = any(isinstance(split, SentinelSplit) for split in splits)
                    previous = offset
            elif end_offset is not None:
                end = SplitOffset.from_json(end_offset, self._name)
                start = (
                    SplitOffset.from_json(start_offset, self._name)
                    if start_offset is not None
                    else initial_offset(self._name)
                )
                splits = batch_splits(start, end)
                read.extend(splits)
                sentinel = any(isinstance(split, SentinelSplit) for split in splits)
            ids = _unique_ids(read)
            if ids:
                self._call(
                    self._host.handle_event_from_operator(
                        READER_SUBTASK, attempt, SplitFinished(ids)
                    )
                )
            data = self._call(self._host.checkpoint_coordinator(batch_id))
            self._call(self._host.notify_checkpoint_complete(batch_id))
            self._keep(RestorePoint(batch_id, data))
            self._done_through = batch_id
            return CommittedBatch(batch_id, ids, sentinel, data)

    # ------------------------------------------------------------------ lifecycle controls

    def suspend(self, *, drain: bool = False) -> None:
        """Assign no new splits (stop at a batch boundary): requests get an empty answer; for a
        ``drain``, what the input held when it was asked first (``SplitEnumerator.begin_drain``)."""
        if drain:
            self._control("begin_drain", lambda e: e.begin_drain())
        else:
            self._control("suspend", lambda e: e.suspend())

    def resume(self) -> None:
        """Assign splits again."""
        self._control("resume", lambda e: e.resume())

    def state(self) -> SourceControlState:
        """Suspension, held requests, sentinel and exhaustion figures."""
        return self._control("control_state", lambda e: e.control_state())

    def exhausted(self) -> bool:
        """Bounded, all splits discovered and finished: ready for the final checkpoint."""
        return self.state().fully_finished

    def emit_sentinel(
        self,
        token: str,
        *,
        values: Mapping[str, Any] | None = None,
        schema: StructType | None = None,
    ) -> SentinelSplit:
        """Queue a sentinel split for a drain; while suspended it makes a batch of its own.

        ``schema`` is the DataFrame's schema (pass it when ``sentinel_column`` was used);
        ``values`` override column values (see ``sentinel_row``). The same token and values give
        the same split, so repeating a drain after a restart emits nothing new.
        """
        row = sentinel_row(schema or self._source.schema, values=values)
        split = SentinelSplit.of(token, row)
        self._control("emit_sentinel", lambda e: e.emit_sentinel(split))
        return split

    def input_bytes(self) -> int | None:
        """The bytes of all the splits (None until the listing is complete, or when a split is
        not a file range)."""
        return self._control("input_bytes", lambda e: e.input_bytes())

    def file_urls(self) -> list[str]:
        """The URLs of the files the splits read (for the partition columns their paths give)."""
        return self._control("file_urls", lambda e: e.file_urls())

    def adopt(self, splits: list[Split]) -> AdoptResult:
        """Hand ``splits`` to the running attempt (``begin_run`` does this from the log)."""
        return self._adopt(self._require_attempt(), splits)

    def finish_restored(self, subtask: int, split_ids: Iterable[str]) -> bool:
        """Finish the splits of a reader task's output committed after the restored snapshot
        (Batch recovery, from its event log); False when they cannot be (the task runs again)."""
        ids = tuple(split_ids)
        return self._control("finish_restored", lambda e: e.finish_restored(subtask, ids))

    def _adopt(self, attempt: int, splits: list[Split]) -> AdoptResult:
        return self._control("adopt", lambda e: e.adopt(READER_SUBTASK, attempt, splits))

    # ------------------------------------------------------------------ internals

    def _reconcile(self, attempt: int) -> RunReconciliation:
        log = self._log
        if log is None:
            return RunReconciliation(attempt, NO_CHECKPOINT, (), None, (), ())
        offsets_ids = log.batch_ids("offsets")
        last_commit = log.last_committed()
        base = self._done_through
        if base > last_commit:
            raise RuntimeError(
                f"source {self._name!r}: the enumerator state is of batch {base}, but the "
                f"query's checkpoint {log.location} has committed only up to batch {last_commit}: "
                "they do not belong together (restore both from the same savepoint)"
            )
        wanted = [batch for batch in offsets_ids if batch > base]
        if last_commit > base and (not wanted or wanted[0] != base + 1):
            raise RuntimeError(
                f"source {self._name!r}: batches {base + 1}..{last_commit} were committed after "
                f"the enumerator state, but the offsets log of {log.location} no longer holds "
                f"batch {base + 1}; their splits cannot be known"
            )
        recovered: list[int] = []
        in_flight: int | None = None
        in_flight_ids: tuple[str, ...] = ()
        added: list[str] = []
        for batch in wanted:
            offset = log.source_offset(batch, self._name)
            if offset is None or not offset.splits:
                continue
            adopted = self._adopt(attempt, list(offset.splits))
            added.extend(adopted.added)
            if batch <= last_commit:
                if adopted.adopted:
                    self._call(
                        self._host.handle_event_from_operator(
                            READER_SUBTASK, attempt, SplitFinished(adopted.adopted)
                        )
                    )
                recovered.append(batch)
            else:
                in_flight = batch
                in_flight_ids = adopted.adopted
        self._done_through = max(base, last_commit)
        if recovered or in_flight is not None:
            logger.info(
                "source %s: attempt %d: finished the splits of batch(es) %s committed after the "
                "snapshot; adopted %d split(s) of in-flight batch %s",
                self._name,
                attempt,
                recovered,
                len(in_flight_ids),
                in_flight,
            )
        return RunReconciliation(
            attempt, last_commit, tuple(recovered), in_flight, in_flight_ids, tuple(added)
        )

    def _await_first_listing(self, timeout: float) -> None:
        """Files: wait for the first listing, so a first batch (and availableNow) sees the files."""
        deadline = time.monotonic() + timeout
        while True:
            scans = self._call(
                self._host.inspect(lambda c: c.scans if isinstance(c, FileSplitEnumerator) else 1)
            )
            if scans >= 1:
                return
            failure = self._host.failure
            if failure is not None:
                raise RuntimeError(f"source {self._name!r}: listing failed: {failure}") from failure
            if time.monotonic() >= deadline:
                logger.warning(
                    "source %s: no listing completed within %.0f s; starting anyway",
                    self._name,
                    timeout,
                )
                return
            time.sleep(0.05)

    def _require_attempt(self) -> int:
        if self._attempt is None:
            raise RuntimeError(f"source {self._name!r}: no query run (call begin_run first)")
        return self._attempt

    def _control(self, what: str, action: Callable[[SplitEnumerator], T]) -> T:
        def run(coordinator: object) -> T:
            if not isinstance(coordinator, SplitEnumerator):
                raise TypeError(f"coordinator {self._name!r} is not a split enumerator")
            return action(coordinator)

        return self._call(self._host.call(what, run))

    def _call(self, future: Future[T]) -> T:
        return future.result(self._timeout)


def _unique_ids(splits: Iterable[Split]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for split in splits:
        seen.setdefault(split.split_id, None)
    return tuple(seen)
