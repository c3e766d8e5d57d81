"""The Kafka source a program declares (``sources.Kafka``): topics read as splits of offsets.

Its options take Spark's names and meanings; the coordinator cuts the splits from the offsets it
polls (``coordinator.kafka``) and executors read them (``connectors.kafka_reading``). The catalogue
:mod:`finishable.connectors.sources` lists it with the other sources.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from finishable.api.units import Duration
from finishable.connectors.reading import ReaderSettings
from finishable.connectors.source_base import Source
from finishable.connectors.streaming.source import ALL_AVAILABLE_CAP
from finishable.coordinator.contract import CoordinatorProvider
from finishable.coordinator.kafka import DEFAULT_SPLIT_SIZE as KAFKA_SPLIT_SIZE
from finishable.coordinator.kafka import KafkaSplitEnumerator, admin_poller, parse_offsets

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
