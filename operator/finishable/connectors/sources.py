"""Finishable sources: what a user declares, and the driver-side hooks the runtime steers them by.

A user writes ``sources.Files(url, format=..., schema=...)`` or ``sources.Range(...)``. Each
descriptor knows its schema, whether it is bounded, how to build its split enumerator, and how to
produce a streaming DataFrame read by the ``finishable`` Python data source
(``runtime.datasource``), a thin client of the coordinator that lives in the driver process.

The driver side is ``SourceCoordinator``: one per source, owning its ``CoordinatorHost``. The
runtime calls it like this (checkpoint ids are Spark batch ids)::

    coordinator = SourceCoordinator("clicks", source)
    coordinator.start(restore=RestorePoint(batch_id, snapshot))   # or start() for a new job
    endpoint.add(coordinator.host)
    df = coordinator.stream(spark, endpoint.url, token)          # once; reusable across runs
    coordinator.begin_run(attempt, checkpoint_location)          # before query.start()
    ...  # query listener, for every progress event (driver process):
    coordinator.on_batch_committed(progress.batchId)             # -> CommittedBatch (snapshot)
    ...  # or, synchronously when the sink has published batch N (before commits/N):
    coordinator.finish_batch(n)                                  # -> CommittedBatch (snapshot)
    ...  # stop at a batch boundary:
    coordinator.suspend(); wait until state().held_requests grew by 2 after the last commit
    ...  # drain: suspend, boundary, emit_sentinel(token), wait for its batch and one more, stop
    coordinator.end_run("stopped")                               # after the query terminated

Restart rule. A restarted query re-runs its uncommitted batch from Spark's offsets log, with the
splits embedded in the offset, without asking the coordinator; and the coordinator, restored from
the snapshot of the last batch it saw committed, may still list those splits as assigned (orphans
for the next request) or pending, or not know them at all (discovered later). ``begin_run``
therefore reconciles with the offsets and commits log before the query starts: splits of batches
committed after the snapshot are adopted and finished; splits of the planned, uncommitted batch
are *adopted* by the new attempt, so nobody else gets them. Splits assigned but never written to
the log are left to the next request. Spark's log is the truth; the snapshot only saves work.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

import pyarrow.fs as pafs
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    _parse_datatype_string,
)

from finishable.api.units import Duration, Quantity
from finishable.connectors.sinks import SENTINEL_COLUMN, SENTINEL_EVENT_TIME, SENTINEL_TEXT
from finishable.connectors.streaming.source import (
    DATA_SOURCE_NAME,
    FORMATS,
    READER_SUBTASK,
    FinishableDataSource,
    ReaderSettings,
    SplitOffset,
    batch_splits,
    find_offset,
    initial_offset,
)
from finishable.coordinator.contract import NO_CHECKPOINT, CoordinatorProvider
from finishable.coordinator.enumerator import AdoptResult, SourceControlState, SplitEnumerator
from finishable.coordinator.events import SplitFinished
from finishable.coordinator.files import (
    DEFAULT_SPLIT_SIZE,
    FileSplitEnumerator,
    normalize_source_url,
)
from finishable.coordinator.host import CoordinatorHost
from finishable.coordinator.ranges import RangeSplitEnumerator
from finishable.coordinator.splits import SentinelSplit, Split

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger(__name__)

T = TypeVar("T")

KEPT_SNAPSHOTS = 4

__all__ = [
    "SENTINEL_COLUMN",
    "SENTINEL_EVENT_TIME",
    "CheckpointLog",
    "CommittedBatch",
    "Files",
    "Range",
    "RestorePoint",
    "RunReconciliation",
    "Source",
    "SourceCoordinator",
    "await_batch_boundary",
    "register_data_source",
    "sentinel_row",
]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_INTEGRAL_MIN: dict[type, int] = {
    ByteType: -(2**7),
    ShortType: -(2**15),
    IntegerType: -(2**31),
    LongType: -(2**63),
}


def _micros(value: datetime) -> int:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return (aware - _EPOCH) // timedelta(microseconds=1)


def register_data_source(spark: SparkSession) -> None:
    """Register the ``finishable`` Python data source with the session (once)."""
    if getattr(spark, "_finishable_source_registered", False):
        return
    spark.dataSource.register(FinishableDataSource)
    spark._finishable_source_registered = True  # type: ignore[attr-defined]


def sentinel_row(
    schema: StructType,
    *,
    event_time: datetime = SENTINEL_EVENT_TIME,
    values: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON row of a sentinel split for ``schema``.

    Every timestamp column gets ``event_time`` (by default ``SENTINEL_EVENT_TIME``, the value
    sinks recognise), the marker column ``SENTINEL_COLUMN`` true, strings ``SENTINEL_TEXT``,
    nullable columns null, and NOT NULL numbers their type's minimum; ``values`` overrides any.
    """
    given = dict(values or {})
    row: dict[str, Any] = {}
    for spark_field in schema.fields:
        name, kind = spark_field.name, spark_field.dataType
        value: Any
        if name in given:
            value = given.pop(name)
        elif name == SENTINEL_COLUMN:
            value = True
        elif isinstance(kind, TimestampType | TimestampNTZType):
            value = event_time
        elif isinstance(kind, DateType):
            value = event_time.date()
        elif isinstance(kind, StringType):
            value = SENTINEL_TEXT
        elif spark_field.nullable:
            value = None
        elif type(kind) in _INTEGRAL_MIN:
            value = _INTEGRAL_MIN[type(kind)]
        elif isinstance(kind, FloatType | DoubleType | DecimalType):
            value = 0
        elif isinstance(kind, BooleanType):
            value = False
        else:
            raise ValueError(
                f"the sentinel row needs a value for the NOT NULL column {name!r} of type "
                f"{kind.simpleString()}: pass it in values"
            )
        if isinstance(value, datetime):
            value = _micros(value)
        elif isinstance(value, date):
            value = (value - _EPOCH.date()).days
        row[name] = value
    if given:
        raise ValueError(f"sentinel values for columns the schema lacks: {sorted(given)}")
    return row


def _with_marker(schema: StructType) -> StructType:
    if SENTINEL_COLUMN in schema.fieldNames():
        return schema
    return StructType([*schema.fields, StructField(SENTINEL_COLUMN, BooleanType(), True)])


# ---------------------------------------------------------------------- descriptors


class Source(ABC):
    """A source a finishable job reads: its schema, boundedness, enumerator and DataFrame."""

    @property
    @abstractmethod
    def schema(self) -> StructType:
        """The rows' Spark schema."""

    @property
    @abstractmethod
    def bounded(self) -> bool:
        """Whether the input ends."""

    @abstractmethod
    def coordinator_provider(self) -> CoordinatorProvider:
        """Creates this source's split enumerator (for a ``CoordinatorHost``)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """What identifies the input (savepoints compare its fingerprint)."""

    @abstractmethod
    def _settings(
        self, coordinator: str, endpoint: str, schema: StructType, attempt: int | None, cores: int
    ) -> ReaderSettings:
        """The reader's settings for this source."""

    def fingerprint(self) -> str:
        """A short stable hash of ``describe()``."""
        text = json.dumps(self.describe(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    def stream(
        self,
        spark: SparkSession,
        *,
        endpoint_url: str,
        token: str,
        coordinator: str,
        attempt: int | None = None,
        min_partitions: int | None = None,
        sentinel_column: bool = False,
    ) -> DataFrame:
        """A streaming DataFrame of this source, read through the coordinator ``coordinator``.

        ``attempt`` pins the reader to one attempt; left ``None``, each query run uses the one
        attempt the driver made ready (``SourceCoordinator.begin_run``), so the same DataFrame can
        be started again after a stop. ``sentinel_column`` adds the boolean ``SENTINEL_COLUMN``
        (true only on a drain's sentinel row) so sinks can recognise it after any projection that
        keeps it.
        """
        register_data_source(spark)
        schema = _with_marker(self.schema) if sentinel_column else self.schema
        cores = min_partitions or max(1, int(spark.sparkContext.defaultParallelism))
        settings = self._settings(coordinator, endpoint_url, schema, attempt, cores)
        return (
            spark.readStream.format(DATA_SOURCE_NAME)
            .schema(schema)
            .options(**settings.to_options(token))
            .load()
        )


def _parse_schema(schema: StructType | str) -> StructType:
    if isinstance(schema, StructType):
        return schema
    if not isinstance(schema, str) or not schema.strip():
        raise ValueError("a Files source needs a schema: a StructType or a DDL string")
    try:
        parsed = _parse_datatype_string(schema)
    except AssertionError:
        raise ValueError(
            f"parsing the DDL schema {schema!r} needs an active SparkSession; create it first "
            "or pass a StructType"
        ) from None
    if not isinstance(parsed, StructType):
        raise ValueError(f"the schema {schema!r} is not a struct of columns")
    return parsed


class Files(Source):
    """JSON Lines, CSV or parquet files under a ``pyarrow.fs`` URL (or a local path).

    Bounded: the files present at start. Unbounded: new files are discovered every
    ``discovery_interval`` (files must be complete when they appear: write, then rename). Files
    larger than ``split_size`` are read as byte ranges (JSON/CSV lines may not contain raw
    newlines inside quoted values; use ``split_size=None`` for such CSV). ``on_error="skip"``
    skips an unreadable split and reports it to the coordinator; ``"fail"`` fails the query with
    an error naming the file.
    """

    def __init__(
        self,
        url: str,
        format: str = "json",
        schema: StructType | str | None = None,
        *,
        bounded: bool = True,
        discovery_interval: str | float | timedelta = "10s",
        split_size: str | int | None = DEFAULT_SPLIT_SIZE,
        max_splits_per_batch: int = 256,
        on_error: str = "fail",
        header: bool = True,
        pattern: str | None = None,
        max_partition_bytes: str | int = "128Mi",
        open_cost: str | int = "4Mi",
    ) -> None:
        if format not in FORMATS:
            raise ValueError(f"unknown source format {format!r} (known: {', '.join(FORMATS)})")
        if on_error not in ("fail", "skip"):
            raise ValueError(f"on_error must be 'fail' or 'skip', got {on_error!r}")
        if schema is None:
            raise ValueError("a Files source needs a schema (StructType or DDL string)")
        if max_splits_per_batch < 1:
            raise ValueError("max_splits_per_batch must be at least 1")
        self.url = normalize_source_url(url)
        self.format = format
        self._schema_spec = schema
        self._schema: StructType | None = schema if isinstance(schema, StructType) else None
        self._bounded = bounded
        interval = (
            float(discovery_interval)
            if isinstance(discovery_interval, int | float)
            else Duration.parse(discovery_interval).seconds_float
        )
        if interval <= 0:
            raise ValueError("discovery_interval must be positive")
        self.discovery_interval = interval
        self.split_size = None if split_size is None else int(Quantity.parse(split_size))
        if self.split_size is not None and self.split_size < 1:
            raise ValueError("split_size must be at least one byte")
        self.max_splits_per_batch = max_splits_per_batch
        self.on_error = on_error
        self.header = header
        self.pattern = pattern
        self.max_partition_bytes = int(Quantity.parse(max_partition_bytes))
        self.open_cost = int(Quantity.parse(open_cost))

    @property
    def schema(self) -> StructType:
        if self._schema is None:
            self._schema = _parse_schema(self._schema_spec)
        return self._schema

    @property
    def bounded(self) -> bool:
        return self._bounded

    def coordinator_provider(self) -> CoordinatorProvider:
        return FileSplitEnumerator.provider(
            self.url,
            split_size=self.split_size,
            bounded=self._bounded,
            discovery_interval=self.discovery_interval,
            pattern=self.pattern,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "files",
            "url": self.url,
            "format": self.format,
            "schema": self.schema.jsonValue(),
            "bounded": self._bounded,
            "split_size": self.split_size,
            "pattern": self.pattern,
        }

    def _settings(
        self, coordinator: str, endpoint: str, schema: StructType, attempt: int | None, cores: int
    ) -> ReaderSettings:
        return ReaderSettings(
            coordinator=coordinator,
            endpoint=endpoint,
            kind="files",
            schema_json=schema.jsonValue(),
            attempt=attempt,
            format=cast(Literal["json", "csv", "parquet"], self.format),
            on_error=cast(Literal["fail", "skip"], self.on_error),
            header=self.header,
            split_size=self.split_size,
            max_splits_per_batch=self.max_splits_per_batch,
            max_partition_weight=self.max_partition_bytes,
            open_cost=self.open_cost,
            min_partitions=cores,
        )

    def __repr__(self) -> str:
        return (
            f"Files({self.url!r}, format={self.format!r}, "
            f"{'bounded' if self._bounded else 'unbounded'})"
        )


RANGE_SCHEMA = StructType(
    [StructField("value", LongType(), False), StructField("ts", TimestampType(), False)]
)
"""Rows of a ``Range``: ``value`` and the event time ``ts`` derived from it."""


class Range(Source):
    """Generated rows ``value`` in ``[start, end)`` with event time ``ts = event_time_start +
    value * event_time_step``: deterministic, so windowed results can be computed independently.

    Without ``end`` it is unbounded; ``rows_per_second`` releases rows at that rate.
    """

    def __init__(
        self,
        start: int = 0,
        end: int | None = None,
        *,
        rows_per_second: float | None = None,
        split_size: int = 1000,
        max_splits_per_batch: int = 64,
        event_time_start: datetime = datetime(2024, 1, 1, tzinfo=UTC),
        event_time_step: str | timedelta = "1ms",
        max_partition_rows: int = 1_000_000,
    ) -> None:
        if end is not None and end < start:
            raise ValueError(f"range [{start}, {end}) ends before it starts")
        if split_size < 1 or max_splits_per_batch < 1 or max_partition_rows < 1:
            raise ValueError("split_size, max_splits_per_batch and max_partition_rows must be >= 1")
        if rows_per_second is not None and rows_per_second <= 0:
            raise ValueError("rows_per_second must be positive")
        step = (
            event_time_step
            if isinstance(event_time_step, timedelta)
            else Duration.parse(event_time_step)
        )
        self.start = start
        self.end = end
        self.rows_per_second = rows_per_second
        self.split_size = split_size
        self.max_splits_per_batch = max_splits_per_batch
        self.event_time_start = event_time_start
        self.event_time_step_us = step // timedelta(microseconds=1)
        self.max_partition_rows = max_partition_rows

    @property
    def schema(self) -> StructType:
        return RANGE_SCHEMA

    @property
    def bounded(self) -> bool:
        return self.end is not None

    def event_time(self, value: int) -> datetime:
        """The event time of row ``value`` (for ground truths in tests)."""
        return self.event_time_start + timedelta(microseconds=value * self.event_time_step_us)

    def coordinator_provider(self) -> CoordinatorProvider:
        return RangeSplitEnumerator.provider(
            start=self.start,
            end=self.end,
            split_size=self.split_size,
            rows_per_second=self.rows_per_second,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "range",
            "start": self.start,
            "end": self.end,
            "split_size": self.split_size,
            "event_time_start_us": _micros(self.event_time_start),
            "event_time_step_us": self.event_time_step_us,
        }

    def _settings(
        self, coordinator: str, endpoint: str, schema: StructType, attempt: int | None, cores: int
    ) -> ReaderSettings:
        return ReaderSettings(
            coordinator=coordinator,
            endpoint=endpoint,
            kind="range",
            schema_json=schema.jsonValue(),
            attempt=attempt,
            split_size=self.split_size,
            max_splits_per_batch=self.max_splits_per_batch,
            max_partition_weight=self.max_partition_rows,
            open_cost=0,
            min_partitions=cores,
            event_time_start_us=_micros(self.event_time_start),
            event_time_step_us=self.event_time_step_us,
        )

    def __repr__(self) -> str:
        return f"Range({self.start}, {self.end})"


# ---------------------------------------------------------------------- Spark's checkpoint log


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


# ---------------------------------------------------------------------- the driver side


@dataclass(frozen=True, slots=True)
class RestorePoint:
    """A coordinator snapshot and the batch (checkpoint id) it was taken at."""

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
        self._snapshots: list[RestorePoint] = [RestorePoint(NO_CHECKPOINT, None)]
        """The start point, then the newest snapshots taken (ascending)."""
        self._done_through = NO_CHECKPOINT
        """The last batch whose splits are finished in the coordinator."""

    @property
    def name(self) -> str:
        """The coordinator's name: unique per job, used in offsets."""
        return self._name

    @property
    def host(self) -> CoordinatorHost:
        """The host, for ``CoordinatorEndpoint.add``."""
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
        return self._snapshots[-1]

    def _keep(self, snapshot: RestorePoint) -> None:
        # The start point stays; a few recent ones let end_run skip one without a commit entry.
        self._snapshots = [self._snapshots[0], *self._snapshots[1:][-(KEPT_SNAPSHOTS - 1) :]]
        self._snapshots.append(snapshot)

    def start(self, restore: RestorePoint | None = None) -> None:
        """Restore the snapshot (if any) and start the enumerator."""
        with self._lock:
            if restore is not None and restore.data is not None:
                self._host.reset_to_checkpoint(restore.checkpoint_id, restore.data).result(
                    self._timeout
                )
                self._snapshots = [restore]
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
        """The source's streaming DataFrame, reading through this coordinator."""
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
                for point in reversed(self._snapshots)
                if committed is None
                or point.checkpoint_id <= committed
                or point is self._snapshots[0]
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

    def suspend(self) -> None:
        """Assign no new splits (stop at a batch boundary): requests get an empty answer."""
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

    def adopt(self, splits: list[Split]) -> AdoptResult:
        """Hand ``splits`` to the running attempt (``begin_run`` does this from the log)."""
        return self._adopt(self._require_attempt(), splits)

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
                f"source {self._name!r}: the coordinator snapshot is of batch {base}, but the "
                f"query's checkpoint {log.location} has committed only up to batch {last_commit}: "
                "they do not belong together (restore both from the same savepoint)"
            )
        wanted = [batch for batch in offsets_ids if batch > base]
        if last_commit > base and (not wanted or wanted[0] != base + 1):
            raise RuntimeError(
                f"source {self._name!r}: batches {base + 1}..{last_commit} were committed after "
                f"the coordinator snapshot, but the offsets log of {log.location} no longer holds "
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


def await_batch_boundary(
    coordinators: Sequence[SourceCoordinator],
    log: CheckpointLog,
    *,
    timeout: float = 120.0,
    poll: float = 0.05,
) -> int:
    """Wait until a query whose sources are suspended rests at a batch boundary; returns the last
    committed batch id (``NO_CHECKPOINT`` if none).

    DESIGN 11: every planned batch must be committed, and then every source must have answered
    two consecutive requests with nothing (a stateful query may plan one more no-data batch after
    the first, because the watermark moved; if it does, the wait starts over). The last commit is
    handed to ``on_batch_committed`` before returning, so the snapshot matches the boundary even
    if its progress event has not arrived. Then ``query.stop()`` cancels nothing.
    """
    for coordinator in coordinators:
        if not coordinator.state().suspended:
            raise RuntimeError(f"source {coordinator.name!r} is not suspended")
    deadline = time.monotonic() + timeout
    while True:
        planned = max(log.batch_ids("offsets"), default=NO_CHECKPOINT)
        committed = log.last_committed()
        if planned == committed:
            baseline = [c.state().held_requests for c in coordinators]
            while True:
                if max(log.batch_ids("offsets"), default=NO_CHECKPOINT) != planned:
                    break  # a batch (a no-data one, for the watermark) was planned: wait again
                held = [c.state().held_requests for c in coordinators]
                if all(now >= then + 2 for now, then in zip(held, baseline, strict=True)):
                    for coordinator in coordinators:
                        coordinator.on_batch_committed(committed)
                    return committed
                if time.monotonic() >= deadline:
                    break
                time.sleep(poll)
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"no batch boundary within {timeout:.0f} s (planned {planned}, committed "
                f"{committed}): is the query running and are its sources suspended?"
            )
        time.sleep(poll)


def _unique_ids(splits: Iterable[Split]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for split in splits:
        seen.setdefault(split.split_id, None)
    return tuple(seen)
