"""The streaming side of the finishable sources: a Python Data Source whose reader is a thin client.

Nothing here runs in the driver's own Python process (docs/architecture.md, *PySpark facts*): Spark
builds the ``DataSource`` in a worker, runs the stream reader's ``initialOffset``/``latestOffset``/
``partitions`` in one long-lived planner worker per query run, and ``read`` on executors in a fresh
unpickled reader per task. So the reader keeps no state that matters and asks the driver's
coordinator (over its endpoint) for every batch's splits.

Offset format (one JSON object per source and batch, as Spark writes it into ``offsets/<batch>``)::

    {"format": "finishable.splits", "version": 1, "coordinator": "<name>",
     "seq": <n>, "attempt": <attempt that was assigned the splits, or null>,
     "splits": [<split JSON>, ...]}

A batch's end offset *embeds its splits*: ``latestOffset(start)`` asks the coordinator for splits
and returns ``seq = start.seq + 1`` with them, or ``start`` itself when there are none (no new
batch). ``partitions(start, end)`` is then a pure function of the two offsets (the splits of
``end`` if ``end.seq != start.seq``, else nothing), which is what Spark needs when it re-plans an
uncommitted batch from its offsets log after a restart without calling ``latestOffset``. The
driver learns which splits a committed batch consumed from the same offsets (progress event or
offsets log), since the reader's ``commit(end)`` is unreliable.

Partitions: small splits are grouped into one ``InputPartition`` (each Spark task costs tens of
milliseconds), in split order up to a target weight, like Spark's file source. How a partition's
splits are read is shared with the Batch readers (``connectors.reading``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from finishable.connectors.reading import (
    READER_SUBTASK,
    ReaderSettings,
    SplitPartition,
    arrow_schema_of,
    read_partition,
    resolve_attempt,
)
from finishable.coordinator.client import CoordinatorClient
from finishable.coordinator.errors import EventDecodeError
from finishable.coordinator.events import MAX_SPLITS_PER_REQUEST, AddSplits
from finishable.coordinator.splits import (
    FileSplit,
    KafkaSplit,
    RangeSplit,
    SentinelSplit,
    Split,
    split_from_json,
)

logger = logging.getLogger(__name__)

DATA_SOURCE_NAME = "finishable"
OFFSET_FORMAT = "finishable.splits"
OFFSET_VERSION = 1

ALL_AVAILABLE_CAP = 10_000
"""Splits per batch when Spark says 'read all available': keeps one offset (and batch) sane."""


class OffsetFormatError(ValueError):
    """An offset is not one of ours, or belongs to another source."""


# ---------------------------------------------------------------------- offsets


@dataclass(frozen=True, slots=True)
class SplitOffset:
    """A source offset: a batch sequence number and the splits that batch reads."""

    coordinator: str
    seq: int
    attempt: int | None
    splits: tuple[Split, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The JSON object Spark stores in its offsets log."""
        return {
            "format": OFFSET_FORMAT,
            "version": OFFSET_VERSION,
            "coordinator": self.coordinator,
            "seq": self.seq,
            "attempt": self.attempt,
            "splits": [split.to_json() for split in self.splits],
        }

    @classmethod
    def from_json(
        cls, value: Mapping[str, Any] | str, coordinator: str | None = None
    ) -> SplitOffset:
        """Decode an offset (a dict or its JSON text); ``coordinator`` checks whose it is."""
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as error:
                raise OffsetFormatError(f"offset is not JSON: {error}") from None
        if not isinstance(value, Mapping) or value.get("format") != OFFSET_FORMAT:
            raise OffsetFormatError(f"not a finishable source offset: {str(value)[:200]}")
        if value.get("version") != OFFSET_VERSION:
            raise OffsetFormatError(
                f"offset version {value.get('version')!r}; this reader knows {OFFSET_VERSION}"
            )
        name = value.get("coordinator")
        seq = value.get("seq")
        attempt = value.get("attempt")
        items = value.get("splits")
        if not isinstance(name, str) or not name:
            raise OffsetFormatError("offset.coordinator: expected a name")
        if coordinator is not None and name != coordinator:
            raise OffsetFormatError(
                f"the offset belongs to source {name!r}, not {coordinator!r}: is the checkpoint "
                "location shared by two queries, or was the source renamed?"
            )
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise OffsetFormatError("offset.seq: expected a non-negative integer")
        if attempt is not None and (isinstance(attempt, bool) or not isinstance(attempt, int)):
            raise OffsetFormatError("offset.attempt: expected an integer or null")
        if not isinstance(items, list):
            raise OffsetFormatError("offset.splits: expected an array")
        try:
            splits = tuple(
                split_from_json(item, f"offset.splits[{index}]") for index, item in enumerate(items)
            )
        except EventDecodeError as error:
            raise OffsetFormatError(str(error)) from None
        return cls(name, seq, attempt, splits)

    @property
    def has_sentinel(self) -> bool:
        """Whether the batch ending here reads a sentinel split (a drain's artificial row)."""
        return any(isinstance(split, SentinelSplit) for split in self.splits)


def initial_offset(coordinator: str) -> SplitOffset:
    """The offset before the first batch: no splits."""
    return SplitOffset(coordinator, 0, None, ())


def batch_splits(start: SplitOffset, end: SplitOffset) -> tuple[Split, ...]:
    """The splits the batch ``(start, end]`` reads: ``end``'s, unless no new batch was planned."""
    if start.coordinator != end.coordinator:
        raise OffsetFormatError(
            f"start and end offsets of different sources ({start.coordinator!r}, "
            f"{end.coordinator!r})"
        )
    if end.seq == start.seq:
        return ()
    return end.splits


def find_offset(lines: Sequence[str], coordinator: str) -> SplitOffset | None:
    """Our source's offset among the per-source lines of a Spark offsets log entry."""
    for line in lines:
        text = line.strip()
        if not text.startswith("{"):
            continue  # "-": a source without an offset in this batch
        try:
            document = json.loads(text)
        except json.JSONDecodeError:
            continue
        if (
            isinstance(document, dict)
            and document.get("format") == OFFSET_FORMAT
            and document.get("coordinator") == coordinator
        ):
            return SplitOffset.from_json(document)
    return None


def max_splits_for(limit: ReadLimit, settings: ReaderSettings) -> int:
    """How many splits one batch may take under Spark's read limit.

    ``ReadMaxFiles`` counts splits; rows and bytes are translated through the split size; 'all
    available' is capped at ``ALL_AVAILABLE_CAP`` (more batches, never a giant offset).
    """
    default = settings.max_splits_per_batch
    wanted: int
    if isinstance(limit, ReadAllAvailable):
        wanted = ALL_AVAILABLE_CAP
    elif isinstance(limit, ReadMaxFiles):
        wanted = limit.max_files
    elif (
        isinstance(limit, ReadMaxRows)
        and settings.kind in ("range", "kafka")
        and settings.split_size
    ):
        wanted = limit.max_rows // settings.split_size
    elif isinstance(limit, ReadMaxBytes) and settings.kind == "files" and settings.split_size:
        wanted = limit.max_bytes // settings.split_size
    else:
        wanted = default
    return max(1, min(wanted, MAX_SPLITS_PER_REQUEST))


# ---------------------------------------------------------------------- partitions


def split_weight(split: Split, open_cost: int) -> int:
    """The cost of reading a split: bytes of a file range, rows of a range, plus an open cost."""
    if isinstance(split, FileSplit):
        return split.length + open_cost
    if isinstance(split, RangeSplit):
        return split.rows + open_cost
    if isinstance(split, KafkaSplit):
        return split.records + open_cost
    return 1 + open_cost


def group_splits(
    splits: Sequence[Split], *, max_weight: int, open_cost: int = 0, min_partitions: int = 1
) -> list[tuple[Split, ...]]:
    """Group splits into partitions, in order: a group closes once it reaches the target weight.

    The target follows Spark's file source, ``min(max_weight, max(open_cost, total /
    min_partitions))``, so a small batch still spreads over the cores (at most
    ``min_partitions`` groups below ``max_weight``) while many tiny splits share a task. No group
    grows past ``max_weight`` unless one split alone is heavier. Deterministic: the same splits give
    the same groups.
    """
    if not splits:
        return []
    weights = [split_weight(split, open_cost) for split in splits]
    per_core = -(-sum(weights) // max(1, min_partitions))
    target = max(1, min(max_weight, max(open_cost, per_core)))
    groups: list[tuple[Split, ...]] = []
    current: list[Split] = []
    current_weight = 0
    for split, weight in zip(splits, weights, strict=True):
        if current and current_weight + weight > max_weight:
            groups.append(tuple(current))
            current, current_weight = [], 0
        current.append(split)
        current_weight += weight
        if current_weight >= target:
            groups.append(tuple(current))
            current, current_weight = [], 0
    if current:
        groups.append(tuple(current))
    return groups


# ---------------------------------------------------------------------- the data source


class FinishableStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Thin client of the driver's coordinator: offsets embed the splits of each batch."""

    def __init__(self, settings: ReaderSettings, token: str, schema: StructType) -> None:
        self._settings = settings
        self._token = token
        self._schema = schema
        self._client: CoordinatorClient | None = None
        self._attempt: int | None = None
        self._target: pa.Schema | None = None

    # -- planner worker

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        return initial_offset(self._settings.coordinator).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        return ReadMaxFiles(self._settings.max_splits_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        # The coordinator decides what exists; a held or empty answer ends an availableNow run.
        logger.info("%s: availableNow run", self._settings.coordinator)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        settings = self._settings
        current = SplitOffset.from_json(start, settings.coordinator)
        attempt = self._run_attempt()
        replies = self._coordinator().request_splits(
            settings.coordinator, READER_SUBTASK, attempt, max_splits_for(limit, settings)
        )
        splits = tuple(
            split for reply in replies if isinstance(reply, AddSplits) for split in reply.splits
        )
        if not splits:
            return start
        end = SplitOffset(settings.coordinator, current.seq + 1, attempt, splits)
        logger.debug(
            "%s: batch seq %d gets %d split(s)", settings.coordinator, end.seq, len(splits)
        )
        return end.to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[SplitPartition]:
        settings = self._settings
        splits = batch_splits(
            SplitOffset.from_json(start, settings.coordinator),
            SplitOffset.from_json(end, settings.coordinator),
        )
        groups = group_splits(
            splits,
            max_weight=settings.max_partition_weight,
            open_cost=settings.open_cost,
            min_partitions=settings.min_partitions,
        )
        return [SplitPartition(index, group, self._attempt) for index, group in enumerate(groups)]

    def commit(self, end: dict[str, Any]) -> None:
        # Unreliable as 'batch complete' (docs/architecture.md, *PySpark facts*): the driver
        # finishes splits on commits/N.
        logger.debug("%s: Spark committed up to seq %s", self._settings.coordinator, end.get("seq"))

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- executors

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SplitPartition):
            raise TypeError(f"expected a SplitPartition, got {type(partition).__name__}")
        if self._target is None:
            self._target = arrow_schema_of(self._schema)
        return read_partition(partition, self._settings, self._token, self._target)

    # -- helpers

    def _coordinator(self) -> CoordinatorClient:
        if self._client is None:
            self._client = self._settings.client(self._token)
        return self._client

    def _run_attempt(self) -> int:
        if self._attempt is None:
            self._attempt = resolve_attempt(self._coordinator(), self._settings)
        return self._attempt

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        state["_target"] = None
        return state


class FinishableDataSource(DataSource):
    """The ``finishable`` Python data source; its options come from a source descriptor.

    Each source registers its own subclass (``data_source_for``), not this class.
    """

    @classmethod
    def name(cls) -> str:
        return DATA_SOURCE_NAME

    def schema(self) -> StructType:
        settings, _ = ReaderSettings.from_options(self.options)
        return settings.schema

    def streamReader(self, schema: StructType) -> FinishableStreamReader:  # noqa: N802
        settings, token = ReaderSettings.from_options(self.options)
        return FinishableStreamReader(settings, token, schema)


def data_source_name(coordinator: str) -> str:
    """The name the source ``coordinator`` is registered under: one registration per source.

    Spark 4 gives each registered Python data source one environment map, which every function
    made from the registration shares and every task of a query over it serializes. A query's
    stream-source runner adds keys to that map the first time it starts. A second query over the
    same registration could serialize the map at that moment and send a torn copy to its executor
    (``java.io.OptionalDataException``; seen once, under load, with two queries starting
    together). With one registration per source, the only query that serializes a source's map is
    the one whose runner writes to it, and its runner starts before its first task. Deterministic,
    so a restarted driver registers the same names.
    """
    readable = re.sub(r"[^0-9A-Za-z_]", "_", coordinator)[:40]
    digest = hashlib.sha256(coordinator.encode("utf-8")).hexdigest()[:8]
    return f"{DATA_SOURCE_NAME}_{readable}_{digest}"


def data_source_for(coordinator: str) -> type[FinishableDataSource]:
    """A ``FinishableDataSource`` subclass registered as ``data_source_name(coordinator)``."""
    registered = data_source_name(coordinator)

    def name(cls: type[FinishableDataSource]) -> str:
        del cls
        return registered

    return type(
        f"FinishableDataSource_{registered}",
        (FinishableDataSource,),
        {"name": classmethod(name), "__module__": __name__},
    )
