"""Split types: immutable, JSON-serialisable units of input with ids that are stable across runs.

A split travels inside Spark's ``InputPartition`` to an executor, so it must carry everything a
reader needs. Its id is a pure function of its contents: re-planning the same input gives the same
ids, which is what lets a restarted query, a restored snapshot and a retried request agree.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from finishable.coordinator._json import JsonFieldError, as_object, get_int, get_str
from finishable.coordinator.errors import EventDecodeError


class Split(ABC):
    """One unit of input that exactly one reader attempt holds at a time."""

    kind: ClassVar[str]

    @property
    @abstractmethod
    def split_id(self) -> str:
        """Stable id: equal contents give equal ids, in every process and run."""

    @abstractmethod
    def fields_json(self) -> dict[str, Any]:
        """The split's own fields (without ``kind`` and ``id``)."""

    @classmethod
    @abstractmethod
    def from_fields(cls, obj: dict[str, Any], where: str) -> Split:
        """Build the split from its JSON fields; raise ``JsonFieldError`` naming a bad field."""

    def to_json(self) -> dict[str, Any]:
        """JSON form: ``{"kind": ..., "id": ..., <fields>}``."""
        return {"kind": self.kind, "id": self.split_id, **self.fields_json()}


_SPLIT_TYPES: dict[str, type[Split]] = {}

S = TypeVar("S", bound=type[Split])


def register_split(cls: S) -> S:
    """Make a split type decodable by ``split_from_json`` under its ``kind``."""
    existing = _SPLIT_TYPES.get(cls.kind)
    if existing is not None and existing is not cls:
        raise ValueError(f"split kind {cls.kind!r} is already registered by {existing.__name__}")
    _SPLIT_TYPES[cls.kind] = cls
    return cls


def split_from_json(value: object, where: str = "split") -> Split:
    """Decode a split; raise ``EventDecodeError`` naming the bad field."""
    try:
        obj = as_object(value, where)
        kind = get_str(obj, "kind", where)
        cls = _SPLIT_TYPES.get(kind)
        if cls is None:
            known = ", ".join(sorted(_SPLIT_TYPES))
            raise JsonFieldError(f"{where}.kind: unknown split kind {kind!r} (known: {known})")
        split = cls.from_fields(obj, where)
        claimed = obj.get("id")
        if claimed is not None and claimed != split.split_id:
            raise JsonFieldError(
                f"{where}.id: {claimed!r} does not match the split's contents "
                f"(expected {split.split_id!r})"
            )
        return split
    except JsonFieldError as error:
        raise EventDecodeError(str(error)) from None


def _digest(*parts: object) -> str:
    text = "\x1f".join(str(part) for part in parts)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


@register_split
@dataclass(frozen=True, slots=True)
class FileSplit(Split):
    """A whole file or a byte range ``[start, start + length)`` of one, addressed by URL.

    The URL is complete (scheme, and any query such as an S3 endpoint) so that an executor opens
    it with ``pyarrow.fs.FileSystem.from_uri`` alone. Readers of line-oriented formats follow the
    Hadoop rule at range borders: skip the partial first line unless ``start == 0`` and read past
    the end to finish the last line.
    """

    kind: ClassVar[str] = "file"

    url: str
    start: int
    length: int
    file_size: int
    _id: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.url:
            raise ValueError("a file split needs a URL")
        if self.start < 0 or self.length < 0 or self.start + self.length > self.file_size:
            raise ValueError(
                f"file split of {self.url!r}: range [{self.start}, {self.start + self.length}) "
                f"is outside the file's {self.file_size} bytes"
            )
        object.__setattr__(self, "_id", "f-" + _digest(self.url, self.start, self.length))

    @property
    def split_id(self) -> str:
        return self._id

    @property
    def end(self) -> int:
        """First byte after the range."""
        return self.start + self.length

    @property
    def whole_file(self) -> bool:
        """True when the split covers the entire file."""
        return self.start == 0 and self.length == self.file_size

    def fields_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "start": self.start,
            "length": self.length,
            "file_size": self.file_size,
        }

    @classmethod
    def from_fields(cls, obj: dict[str, Any], where: str) -> FileSplit:
        try:
            return cls(
                url=get_str(obj, "url", where),
                start=get_int(obj, "start", where),
                length=get_int(obj, "length", where),
                file_size=get_int(obj, "file_size", where),
            )
        except ValueError as error:
            if isinstance(error, JsonFieldError):
                raise
            raise JsonFieldError(f"{where}: {error}") from None


@register_split
@dataclass(frozen=True, slots=True)
class RangeSplit(Split):
    """Generated rows with ids ``[start, end)``: a source for tests and benchmarks."""

    kind: ClassVar[str] = "range"

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise ValueError(f"range split [{self.start}, {self.end}) is empty")

    @property
    def split_id(self) -> str:
        return f"r-{self.start}-{self.end}"

    @property
    def rows(self) -> int:
        """Number of rows in the range."""
        return self.end - self.start

    def fields_json(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end}

    @classmethod
    def from_fields(cls, obj: dict[str, Any], where: str) -> RangeSplit:
        start = get_int(obj, "start", where)
        end = get_int(obj, "end", where)
        if end <= start:
            raise JsonFieldError(f"{where}: range [{start}, {end}) is empty")
        return cls(start=start, end=end)


@register_split
@dataclass(frozen=True, slots=True)
class KafkaSplit(Split):
    """The records of one Kafka topic partition with offsets ``[start, end)``.

    Offsets are not dense (transaction markers, aborted records under ``read_committed``,
    compaction), so ``end - start`` bounds the number of records; a reader is done when its
    position reaches ``end``, not when it has seen ``end - start`` records.
    """

    kind: ClassVar[str] = "kafka"

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.end <= self.start or self.start < 0 or self.partition < 0:
            raise ValueError(
                f"kafka split {self.topic}-{self.partition} [{self.start}, {self.end}) is empty "
                "or negative"
            )

    @property
    def split_id(self) -> str:
        return "k-" + _digest(self.topic, self.partition, self.start, self.end)

    @property
    def records(self) -> int:
        """At most this many records (offsets of markers and dropped records included)."""
        return self.end - self.start

    def fields_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "start": self.start,
            "end": self.end,
        }

    @classmethod
    def from_fields(cls, obj: dict[str, Any], where: str) -> KafkaSplit:
        topic = get_str(obj, "topic", where)
        partition = get_int(obj, "partition", where)
        start = get_int(obj, "start", where)
        end = get_int(obj, "end", where)
        if end <= start or start < 0 or partition < 0:
            raise JsonFieldError(f"{where}: kafka offsets [{start}, {end}) of {topic}-{partition}")
        return cls(topic=topic, partition=partition, start=start, end=end)


@register_split
@dataclass(frozen=True, slots=True)
class SentinelSplit(Split):
    """One artificial row, with a far-future event time, that ends event time for a drain.

    Spark never advances the watermark on stop, so a drain (and a bounded source's final
    checkpoint) feeds this split through the source: its row moves the watermark, and the next
    no-data batch fires every open window. ``row`` maps column names to JSON values (timestamps as
    microseconds since the epoch, dates as days); ``token`` tells drains apart (the request id).
    Readers and sinks recognise the row by this split kind in the batch's offset and by the
    reserved values the runtime put in it. An unfinished sentinel is never part of a snapshot: a
    restart either replays it from the query's offsets log or the drain emits it again.
    """

    kind: ClassVar[str] = "sentinel"

    token: str
    row_json: str
    """The row as canonical JSON (sorted keys), so the split stays hashable and its id stable."""
    _id: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.token:
            raise ValueError("a sentinel split needs a token")
        try:
            row = json.loads(self.row_json)
        except json.JSONDecodeError as error:
            raise ValueError(f"sentinel row is not JSON: {error}") from None
        if not isinstance(row, dict) or not row:
            raise ValueError("a sentinel row must be a non-empty JSON object of column values")
        canonical = json.dumps(row, sort_keys=True, separators=(",", ":"))
        object.__setattr__(self, "row_json", canonical)
        object.__setattr__(self, "_id", "s-" + _digest(self.token, canonical))

    @classmethod
    def of(cls, token: str, row: dict[str, Any]) -> SentinelSplit:
        """A sentinel split carrying ``row`` (column name to JSON value)."""
        return cls(token=token, row_json=json.dumps(row, sort_keys=True))

    @property
    def split_id(self) -> str:
        return self._id

    @property
    def row(self) -> dict[str, Any]:
        """The row: column name to JSON value."""
        value: dict[str, Any] = json.loads(self.row_json)
        return value

    def fields_json(self) -> dict[str, Any]:
        return {"token": self.token, "row": self.row}

    @classmethod
    def from_fields(cls, obj: dict[str, Any], where: str) -> SentinelSplit:
        token = get_str(obj, "token", where)
        row = obj.get("row")
        if not isinstance(row, dict) or not row:
            raise JsonFieldError(f"{where}.row: expected a non-empty object of column values")
        try:
            return cls.of(token, row)
        except (TypeError, ValueError) as error:
            raise JsonFieldError(f"{where}: {error}") from None
