"""Drain sentinels: the one definition of the artificial row that sources emit and sinks drop.

A drain pushes event time to the end with one artificial row per source (``sources.sentinel_row``
builds it): ``SENTINEL_COLUMN`` set true, event time ``SENTINEL_EVENT_TIME`` and strings
``SENTINEL_TEXT``. Both sinks drop such rows (recognised by any of the three, so a projection that
keeps one still works) and the marker column, so the sentinel never reaches an output; these
constants, ``is_sentinel_row`` and ``sentinel_mask`` are the one definition sources, sinks and tests
share (``finishable.sinks`` exports them to programs). A sentinel cannot be told apart once an
aggregation without event time has absorbed it: feed it only to event-time windowed or stateless
pipelines.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

SENTINEL_COLUMN: Final = "__finishable_sentinel"
"""Boolean column a source adds; true only on the artificial end-of-stream row (a marker of
another type counts when it is not null)."""

SENTINEL_EVENT_TIME: Final = datetime(9990, 1, 1, tzinfo=UTC)
"""Event time of the sentinel row: far past any real data yet below Spark's timestamp maximum,
midnight-aligned so that the start of any minute/hour/day window holding it equals it too."""

SENTINEL_TEXT: Final = "\x00finishable-sentinel"
"""The value of every string column of a sentinel row, the last clue after a projection that
kept neither the marker nor a timestamp."""

SENTINEL_EVENT_TIME_MICROS: Final = (SENTINEL_EVENT_TIME - datetime(1970, 1, 1, tzinfo=UTC)) // (
    timedelta(microseconds=1)
)


def is_sentinel_row(row: Mapping[str, Any] | Any) -> bool:
    """Whether a row (a mapping or a pyspark ``Row``) is a drain sentinel.

    A row is one if its ``SENTINEL_COLUMN`` is true, or, when a projection dropped that column,
    if any top-level timestamp (or a timestamp field of a top-level struct such as ``window``)
    is exactly ``SENTINEL_EVENT_TIME``, or a top-level string is exactly ``SENTINEL_TEXT``.
    """
    values: Mapping[str, Any] = row if isinstance(row, Mapping) else row.asDict()
    if values.get(SENTINEL_COLUMN):
        return True
    for value in values.values():
        candidates = value.values() if isinstance(value, Mapping) else [value]
        if hasattr(value, "asDict"):
            candidates = value.asDict().values()
        for item in candidates:
            if isinstance(item, datetime) and _is_sentinel_time(item):
                return True
        if value == SENTINEL_TEXT:
            return True
    return False


def _is_sentinel_time(value: datetime) -> bool:
    if value.tzinfo is None:
        return value == SENTINEL_EVENT_TIME.replace(tzinfo=None)
    return value == SENTINEL_EVENT_TIME


def _value_hits(column: pa.Array | pa.ChunkedArray) -> pa.Array | None:
    """Where a column holds the sentinel's event time or text; ``None`` for other types."""
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return pc.equal(column, SENTINEL_TEXT)
    return _timestamp_hits(column)


def _timestamp_hits(column: pa.Array | pa.ChunkedArray) -> pa.Array | None:
    if pa.types.is_timestamp(column.type):
        micros = column.cast(pa.timestamp("us", tz=column.type.tz)).cast(pa.int64())
        return pc.equal(micros, SENTINEL_EVENT_TIME_MICROS)
    if pa.types.is_struct(column.type):
        hits = None
        for index, child in enumerate(column.type):
            if pa.types.is_timestamp(child.type):
                found = _timestamp_hits(pc.struct_field(column, [index]))
                hits = found if hits is None else pc.or_(hits, found)
        return hits
    return None


def sentinel_mask(batch: pa.RecordBatch | pa.Table) -> pa.Array | None:
    """True where a row is a drain sentinel (see ``is_sentinel_row``); ``None`` if none can be."""
    mask = None
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if name == SENTINEL_COLUMN:
            hits = column if pa.types.is_boolean(column.type) else pc.is_valid(column)
        else:
            hits = _value_hits(column)
        if hits is None:
            continue
        hits = pc.fill_null(hits, False)
        mask = hits if mask is None else pc.or_(mask, hits)
    return mask


def drop_sentinels(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, int]:
    """The batch without sentinel rows and without the marker column, and how many rows went."""
    mask = sentinel_mask(batch)
    dropped = 0
    if mask is not None:
        dropped = int(pc.sum(mask).as_py() or 0)
        if dropped:
            batch = batch.filter(pc.invert(mask))
    if SENTINEL_COLUMN in batch.schema.names:
        batch = batch.drop_columns([SENTINEL_COLUMN])
    return batch, dropped
