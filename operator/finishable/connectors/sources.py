"""Finishable sources: what a user declares, and how Spark reads it through the coordinator.

A user writes ``sources.Files(url, format=..., schema=...)`` or ``sources.Range(...)``. Each
descriptor knows its schema, whether it is bounded, how to build its split enumerator, and how to
produce a streaming DataFrame read by its own registration of the ``finishable`` Python data source
(``connectors.streaming.source``), a thin client of the coordinator that lives in the driver
process. The driver's handle on that coordinator is ``driver.source_coordinator``; the row a drain
emits is ``sentinel_row``.

This is the catalogue of every source a program can declare: ``Files``, ``Range`` and
``ClusterPartition`` are here, ``Kafka`` in :mod:`finishable.connectors.kafka_source`, and what
they all are (``Source``) in :mod:`finishable.connectors.source_base`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, cast

from pyspark.sql.types import (
    LongType,
    StructField,
    StructType,
    TimestampType,
    _parse_datatype_string,
)

from finishable.api.units import Duration, Quantity
from finishable.connectors.fileformats import (
    FORMATS,
    FileOptions,
    Format,
    SourceOptionError,
    parse_records,
    reader_schema,
)
from finishable.connectors.kafka_source import KAFKA_SCHEMA, Kafka
from finishable.connectors.reading import ReaderSettings
from finishable.connectors.sentinels import SENTINEL_COLUMN, SENTINEL_EVENT_TIME
from finishable.connectors.source_base import Source, _micros, register_data_source, sentinel_row
from finishable.coordinator.contract import CoordinatorProvider
from finishable.coordinator.files import (
    DEFAULT_SPLIT_SIZE,
    FileSplitEnumerator,
    normalize_source_url,
)
from finishable.coordinator.ranges import RangeSplitEnumerator

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from finishable.api.jobconfig import JobConfig
    from finishable.partitions.manifest import Manifest

__all__ = [
    "KAFKA_SCHEMA",
    "RANGE_SCHEMA",
    "SENTINEL_COLUMN",
    "SENTINEL_EVENT_TIME",
    "ClusterPartition",
    "Files",
    "Kafka",
    "Range",
    "Source",
    "register_data_source",
    "sentinel_row",
]


def __dir__() -> list[str]:
    """What a program sees of this module (``dir()``, completion): its API, not its imports."""
    return sorted(__all__)


# ---------------------------------------------------------------------- descriptors


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
    """JSON, CSV, parquet or ORC files under a ``pyarrow.fs`` URL (or a local path), read as
    ``spark.read.options(**options).schema(schema).format(format).load(url)`` reads them.

    ``options`` are Spark's reader options, with Spark's names and defaults (``header`` is false,
    ``mode`` PERMISSIVE, ``sep`` a comma; see ``connectors.fileformats.KNOWN_OPTIONS``): CSV and
    JSON records are parsed by Spark's own parsers. Bounded: the files present at start.
    Unbounded: new files are discovered every ``discovery_interval`` (files must be complete when
    they appear: write, then rename). Files larger than ``split_size`` are read as byte ranges,
    unless they are compressed or an option (``multiLine``, ``lineSep``, a non-ASCII encoding)
    needs whole files. ``pattern`` filters the paths below ``url`` (a glob), as Spark's
    ``pathGlobFilter`` option filters file names. ``on_error="skip"`` (or Spark's
    ``ignoreCorruptFiles``) skips an unreadable split and reports it to the coordinator;
    ``"fail"`` fails the query with an error naming the file.
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
        options: Mapping[str, object] | None = None,
        pattern: str | None = None,
        max_partition_bytes: str | int = "128Mi",
        open_cost: str | int = "4Mi",
    ) -> None:
        if format not in FORMATS:
            raise ValueError(f"unknown source format {format!r} (known: {', '.join(FORMATS)})")
        try:
            self.options = FileOptions.parse(format, options)
        except SourceOptionError as error:
            raise ValueError(f"Files({url!r}): {error}") from None
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
        if format == "orc":  # read whole: pyarrow cannot tell where a byte range's stripes are
            self.split_size = None
        if self.split_size is not None and self.split_size < 1:
            raise ValueError("split_size must be at least one byte")
        self.max_splits_per_batch = max_splits_per_batch
        self.on_error = on_error
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
            split_size=None if self.options.whole_files else self.split_size,
            bounded=self._bounded,
            discovery_interval=self.discovery_interval,
            pattern=self.pattern,
            recursive=self.options.recursive,
            name_glob=self.options.name_glob,
        )

    def reader_schema(self, schema: StructType) -> StructType:
        return reader_schema(schema, self.options)

    def decode(self, frame: DataFrame, schema: StructType) -> DataFrame:
        return parse_records(frame, schema, self.options, keep=(SENTINEL_COLUMN,))

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {
            "kind": "files",
            "url": self.url,
            "format": self.format,
            "schema": self.schema.jsonValue(),
            "bounded": self._bounded,
            "split_size": self.split_size,
            "pattern": self.pattern,
        }
        if self.options.options:  # absent when empty: fingerprints from before options stay valid
            described["options"] = dict(sorted(self.options.options.items()))
        return described

    def _settings(
        self, coordinator: str, endpoint: str, schema: StructType, attempt: int | None, cores: int
    ) -> ReaderSettings:
        return ReaderSettings(
            coordinator=coordinator,
            endpoint=endpoint,
            kind="files",
            schema_json=schema.jsonValue(),
            attempt=attempt,
            format=cast(Format, self.format),
            on_error=cast(Literal["fail", "skip"], self.on_error),
            options=dict(self.options.options),
            root=self.url,
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


class ClusterPartition(Source):
    """A cluster partition an earlier Batch job promoted (``job.stage(name, df, promote=True)``).

    ``partition`` is its id (``cp-...``), ``<job>/<dataset>`` or the dataset name; a name that
    several runs promoted means the newest. ``catalog`` is the partition storage, by default the
    running job's (``spec.clusterPartitions.storage``). The partition is resolved when the job
    reads it: its parquet parts are the splits, pulled through the coordinator like any file
    source, and a partition whose parts are gone is refused before any row is read.
    """

    def __init__(
        self,
        partition: str,
        *,
        catalog: str | None = None,
        max_partition_bytes: str | int = "128Mi",
        open_cost: str | int = "4Mi",
    ) -> None:
        if not isinstance(partition, str) or not partition.strip():
            raise ValueError("ClusterPartition needs the partition's id, <job>/<dataset> or name")
        self.reference = partition.strip()
        self.catalog = catalog
        self.max_partition_bytes = max_partition_bytes
        self.open_cost = open_cost
        self._resolved: tuple[Manifest, Files] | None = None

    def bound(self, config: JobConfig) -> ClusterPartition:
        if self.catalog is not None or config.partition_url is None:
            return self
        return ClusterPartition(
            self.reference,
            catalog=config.partition_url,
            max_partition_bytes=self.max_partition_bytes,
            open_cost=self.open_cost,
        )

    @property
    def manifest(self) -> Manifest:
        """The partition's manifest (resolved once; raises the catalog's lookup errors)."""
        return self._resolve()[0]

    def _resolve(self) -> tuple[Manifest, Files]:
        if self._resolved is None:
            from finishable.partitions.catalog import (  # noqa: PLC0415
                PartitionCatalog,
                PartitionLost,
            )
            from finishable.partitions.manifest import PART_PATTERN  # noqa: PLC0415

            if self.catalog is None:
                raise ValueError(
                    f"ClusterPartition({self.reference!r}) needs a partition storage: pass "
                    "catalog='s3://...' or run it in a job with spec.clusterPartitions.storage"
                )
            catalog = PartitionCatalog(self.catalog)
            try:
                manifest = catalog.get(self.reference)
                health = catalog.health(manifest)
                if health.lost:
                    raise PartitionLost(
                        f"cluster partition {manifest.id} ({manifest.name}) is lost: "
                        f"{len(health.missing)} of its {len(manifest.parts)} part(s) are gone "
                        f"from {catalog.location} (first: {health.missing[0]})"
                    )
                files = Files(
                    catalog.part_url(manifest),
                    format="parquet",
                    schema=StructType.fromJson(manifest.schema),
                    split_size=None,
                    pattern=PART_PATTERN,
                    max_partition_bytes=self.max_partition_bytes,
                    open_cost=self.open_cost,
                )
            finally:
                catalog.close()
            self._resolved = (manifest, files)
        return self._resolved

    @property
    def schema(self) -> StructType:
        return self._resolve()[1].schema

    @property
    def bounded(self) -> bool:
        return True

    def coordinator_provider(self) -> CoordinatorProvider:
        return self._resolve()[1].coordinator_provider()

    def describe(self) -> dict[str, Any]:
        manifest = self.manifest
        return {"kind": "cluster-partition", "id": manifest.id, "checksum": manifest.checksum}

    def _settings(
        self, coordinator: str, endpoint: str, schema: StructType, attempt: int | None, cores: int
    ) -> ReaderSettings:
        return self._resolve()[1]._settings(coordinator, endpoint, schema, attempt, cores)

    def __repr__(self) -> str:
        return f"ClusterPartition({self.reference!r})"


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
