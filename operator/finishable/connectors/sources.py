"""Finishable sources: what a user declares, and how Spark reads it through the coordinator.

A user writes ``sources.Files(url, format=..., schema=...)`` or ``sources.Range(...)``. Each
descriptor knows its schema, whether it is bounded, how to build its split enumerator, and how to
produce a streaming DataFrame read by its own registration of the ``finishable`` Python data source
(``connectors.streaming.source``), a thin client of the coordinator that lives in the driver
process. The driver's handle on that coordinator is ``driver.source_coordinator``; the row a drain
emits is ``sentinel_row``.

One cohesive module: the catalogue of every source a program can declare (``Files``, ``Range``,
``ClusterPartition``, ``Kafka``) and the conversions their rows share.
"""

from __future__ import annotations

import hashlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, cast

from pyspark.sql.types import (
    BinaryType,
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
from finishable.connectors.fileformats import (
    FORMATS,
    FileOptions,
    Format,
    SourceOptionError,
    parse_records,
    reader_schema,
)
from finishable.connectors.reading import ReaderSettings
from finishable.connectors.sentinels import SENTINEL_COLUMN, SENTINEL_EVENT_TIME, SENTINEL_TEXT
from finishable.connectors.streaming.source import (
    ALL_AVAILABLE_CAP,
    data_source_for,
    data_source_name,
)
from finishable.coordinator.contract import CoordinatorProvider
from finishable.coordinator.files import (
    DEFAULT_SPLIT_SIZE,
    FileSplitEnumerator,
    normalize_source_url,
)
from finishable.coordinator.kafka import DEFAULT_SPLIT_SIZE as KAFKA_SPLIT_SIZE
from finishable.coordinator.kafka import KafkaSplitEnumerator, admin_poller, parse_offsets
from finishable.coordinator.ranges import RangeSplitEnumerator

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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


def register_data_source(spark: SparkSession, coordinator: str) -> str:
    """Register the source ``coordinator``'s own data source with the session (once); its name.

    One registration per source, not one for all: see ``data_source_name`` for the Spark race a
    shared registration runs into when two queries start together.
    """
    name = data_source_name(coordinator)
    registered: set[str] = spark.__dict__.setdefault("_finishable_sources_registered", set())
    if name not in registered:
        spark.dataSource.register(data_source_for(coordinator))
        registered.add(name)
    return name


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

    def reader_schema(self, schema: StructType) -> StructType:
        """What the Python reader yields for rows of ``schema`` (``decode`` turns it back)."""
        return schema

    def decode(self, frame: DataFrame, schema: StructType) -> DataFrame:
        """The reader's DataFrame as rows of ``schema`` (what Spark itself must still parse)."""
        del schema
        return frame

    def bound(self, config: JobConfig) -> Source:
        """This source with what the running job supplies (a default location); most need none."""
        del config
        return self

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
        data_source = register_data_source(spark, coordinator)
        schema = _with_marker(self.schema) if sentinel_column else self.schema
        cores = min_partitions or max(1, int(spark.sparkContext.defaultParallelism))
        read_schema = self.reader_schema(schema)
        settings = self._settings(coordinator, endpoint_url, read_schema, attempt, cores)
        frame = (
            spark.readStream.format(data_source)
            .schema(read_schema)
            .options(**settings.to_options(token))
            .load()
        )
        return self.decode(frame, schema)


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


KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), False),
    ]
)
"""Rows of a ``Kafka`` source: Spark's own Kafka source schema (without headers)."""

_KAFKA_OPTIONS = {
    "startingoffsets": "starting_offsets",
    "endingoffsets": "ending_offsets",
    "maxoffsetspertrigger": "max_offsets_per_trigger",
    "maxrecordsperpartition": "max_records_per_partition",
    "failondataloss": "fail_on_data_loss",
}


class Kafka(Source):
    """Records of Kafka topics (named, or every topic matching ``pattern``), each partition a
    sequence of splits a coordinator cuts from the offsets it polls (FLIP-27).

    Options take Spark's names and meanings (``startingOffsets``, ``endingOffsets``,
    ``maxOffsetsPerTrigger``, ``maxRecordsPerPartition``, ``failOnDataLoss``, and ``kafka.*``
    for the client, in librdkafka's names), as keywords or in ``options``. With
    ``ending_offsets`` the source is bounded (a Batch job, or a stream that ends with a final
    checkpoint). Records are read ``read_committed``: a transaction's records appear once it
    commits, never if it aborts.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        topics: str | list[str] | None = None,
        pattern: str | None = None,
        starting_offsets: object = None,
        ending_offsets: object = None,
        max_offsets_per_trigger: int | None = None,
        max_records_per_partition: int | None = None,
        fail_on_data_loss: bool | None = None,
        discovery_interval: str | timedelta = "1s",
        options: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
            raise ValueError(
                f"bootstrap_servers={bootstrap_servers!r}: expected brokers as 'host:port,...'"
            )
        names = [topics] if isinstance(topics, str) else list(topics or [])
        if (not names) == (pattern is None):
            raise ValueError(
                "a Kafka source reads either topics=... or pattern=... (Spark's subscribe or "
                f"subscribePattern), got topics={topics!r} and pattern={pattern!r}"
            )
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(
                    f"pattern={pattern!r} is not a regular expression: {error}"
                ) from None
        given: dict[str, object] = {
            "starting_offsets": starting_offsets,
            "ending_offsets": ending_offsets,
            "max_offsets_per_trigger": max_offsets_per_trigger,
            "max_records_per_partition": max_records_per_partition,
            "fail_on_data_loss": fail_on_data_loss,
        }
        client: dict[str, str] = {}
        for key, value in (options or {}).items():
            if key.startswith("kafka."):
                client[key.removeprefix("kafka.")] = str(value)
                continue
            name = _KAFKA_OPTIONS.get(key.lower())
            if name is None:
                accepted = ", ".join(sorted(["kafka.*", *_KAFKA_OPTIONS.values()]))
                raise ValueError(
                    f"options[{key!r}]: not a Kafka source option (accepted: {accepted})"
                )
            if given[name] is not None:
                raise ValueError(f"options[{key!r}] and {name}= both set: give it once")
            given[name] = value
        self.bootstrap_servers = bootstrap_servers
        self.topics = sorted(set(names))
        self.pattern = pattern
        self.starting_offsets = parse_offsets(
            given["starting_offsets"] or "latest", "startingOffsets"
        )
        ending = given["ending_offsets"]
        self.ending_offsets = None if ending is None else parse_offsets(ending, "endingOffsets")
        self.max_offsets_per_trigger = _positive(
            given["max_offsets_per_trigger"], "maxOffsetsPerTrigger"
        )
        records = _positive(given["max_records_per_partition"], "maxRecordsPerPartition")
        self.split_size = records or KAFKA_SPLIT_SIZE
        self.fail_on_data_loss = _flag(given["fail_on_data_loss"], "failOnDataLoss", default=True)
        self.discovery_interval = (
            discovery_interval
            if isinstance(discovery_interval, timedelta)
            else Duration.parse(discovery_interval)
        )
        self.client_options = client

    @property
    def schema(self) -> StructType:
        return KAFKA_SCHEMA

    @property
    def bounded(self) -> bool:
        return self.ending_offsets is not None

    def _matches(self) -> Callable[[str], bool]:
        if self.pattern is not None:
            compiled = re.compile(self.pattern)
            return lambda topic: compiled.fullmatch(topic) is not None
        wanted = set(self.topics)
        return lambda topic: topic in wanted

    def coordinator_provider(self) -> CoordinatorProvider:
        bootstrap, client, matches = (
            self.bootstrap_servers,
            dict(self.client_options),
            self._matches(),
        )
        return KafkaSplitEnumerator.provider(
            lambda: admin_poller(bootstrap, client, matches),
            identity=self._identity(),
            starting_offsets=self.starting_offsets,
            ending_offsets=self.ending_offsets,
            split_size=self.split_size,
            max_offsets_per_trigger=self.max_offsets_per_trigger,
            discovery_interval=self.discovery_interval.total_seconds(),
        )

    def _identity(self) -> dict[str, Any]:
        """What the input is; not the brokers or the client's settings (brokers move,
        credentials rotate, and the records are the same)."""
        return {
            "topics": self.topics,
            "pattern": self.pattern,
            "starting_offsets": self.starting_offsets,
            "ending_offsets": self.ending_offsets,
        }

    def describe(self) -> dict[str, Any]:
        return {"kind": "kafka", **self._identity(), "split_size": self.split_size}

    def _settings(
        self, coordinator: str, endpoint: str, schema: StructType, attempt: int | None, cores: int
    ) -> ReaderSettings:
        return ReaderSettings(
            coordinator=coordinator,
            endpoint=endpoint,
            kind="kafka",
            schema_json=schema.jsonValue(),
            attempt=attempt,
            on_error="fail" if self.fail_on_data_loss else "skip",
            options=dict(self.client_options),
            split_size=self.split_size,
            max_splits_per_batch=ALL_AVAILABLE_CAP,  # the coordinator keeps maxOffsetsPerTrigger
            max_partition_weight=self.split_size,
            open_cost=0,
            min_partitions=cores,
            bootstrap_servers=self.bootstrap_servers,
        )

    def __repr__(self) -> str:
        what = f"pattern={self.pattern!r}" if self.pattern else f"topics={self.topics!r}"
        return f"Kafka({self.bootstrap_servers!r}, {what})"


def _positive(value: object, name: str) -> int | None:
    if value is None:
        return None
    try:
        number = int(str(value))
    except ValueError:
        number = 0
    if number < 1 or isinstance(value, bool):
        raise ValueError(f"{name}={value!r}: expected a positive number of offsets")
    return number


def _flag(value: object, name: str, *, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ValueError(f"{name}={value!r}: expected true or false")
