"""What every declared source is: the ``Source`` contract, its data source, its sentinel row.

Each source of the catalogue (:mod:`finishable.connectors.sources`) is a ``Source``: its schema,
whether it is bounded, its split enumerator, what identifies its input, and the streaming
DataFrame read through its own registration of the ``finishable`` Python data source
(``register_data_source``). ``sentinel_row`` is the row a drain emits for a source's schema.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

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
)

from finishable.connectors.reading import ReaderSettings
from finishable.connectors.sentinels import SENTINEL_COLUMN, SENTINEL_EVENT_TIME, SENTINEL_TEXT
from finishable.connectors.streaming.source import data_source_for, data_source_name
from finishable.coordinator.contract import CoordinatorProvider

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from finishable.api.jobconfig import JobConfig


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
