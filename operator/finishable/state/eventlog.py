"""The job event log's format and read side: segments, their codec, and validated replay.

The log (FLIP-383) is a sequence of *segment* objects under one prefix on any backend; the writer
(:class:`finishable.state.events.JobEventStore`) appends them, everything else only reads them.
Segment ``<prefix>/seg-000000000042`` is UTF-8 JSON lines::

    {"format":"finishable-job-events","version":1,"segment":42,"first_seq":..,"count":N,..}
    {"type":"TaskFinished","time":1700000000.1,"data":{...}}        N record lines
    {"sha256":"<hex of everything above>","size":<bytes above>}

A long-running job's log is *compacted* (by the writer, with a fold its caller gives it): the
events a replay still needs, up to sequence ``T``, are written as one *base* object
``<prefix>/base-<T>`` (a header with ``through_seq`` and the number of the next segment, one line
per event with its original sequence number and time, and the same footer), then the segments it
replaces are deleted. Replay reads the newest base and the segments from its next segment on,
ignoring older ones (left behind by a compaction cut short), so replay costs what the live state
costs, not the job's whole history.

Backends publish an object atomically, but a segment can still be damaged (a file system without
atomic rename, a truncated copy, a ConfigMap whose parts were lost). ``replay`` checks every
segment and the continuity of sequence numbers; a damaged *last* segment was never acknowledged
(its flush callback never ran), so replay stops cleanly before it with a warning, while a damaged
earlier segment is an ``EventLogCorrupt`` error.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from finishable.state.backends import ObjectBackend, validate_name
from finishable.state.errors import EventLogCorrupt, ObjectCorrupt, ObjectNotFound

log = logging.getLogger(__name__)

SEGMENT_FORMAT = "finishable-job-events"
BASE_FORMAT = "finishable-job-events-base"
SEGMENT_VERSION = 1
FIRST_SEQ = 1

T = TypeVar("T")


def _default(value: Any) -> Any:
    """JSON for the small value types events carry besides plain JSON (shallow, no deepcopy)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable in a job event")


# One encoder, built once: json.dumps with options builds a new encoder on every call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_default)
encode_json = _ENCODER.encode
"""Compact JSON of one line of the log, with the small value types events carry besides JSON."""


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One replayed event: its sequence number, type name, payload and append time (epoch s)."""

    seq: int
    type: str
    data: dict[str, Any]
    time: float

    def as_(self, cls: Callable[..., T]) -> T:
        """Rebuild the typed event, e.g. ``event.as_(TaskFinished)`` (keyword construction)."""
        return cls(**self.data)


# -- segment codec ------------------------------------------------------------------------------


class TornSegment(Exception):
    """A segment fails validation; whether that is fatal depends on where it sits."""


@dataclass(frozen=True, slots=True)
class Segment:
    number: int
    first_seq: int
    records: list[bytes]


def encode_segment(number: int, first_seq: int, records: list[bytes], writer: str) -> bytes:
    """Header line, the record lines as appended, footer with the sha256 of all of it."""
    header = {
        "format": SEGMENT_FORMAT,
        "version": SEGMENT_VERSION,
        "segment": number,
        "first_seq": first_seq,
        "count": len(records),
        "writer": writer,
        "created_at": time.time(),
    }
    return _framed(header, records)


@dataclass(frozen=True, slots=True)
class Base:
    """A compacted log: the events still needed, up to ``through_seq``."""

    through_seq: int
    next_segment: int
    events: list[JobEvent]


def encode_base(through_seq: int, next_segment: int, events: list[JobEvent]) -> bytes:
    header = {
        "format": BASE_FORMAT,
        "version": SEGMENT_VERSION,
        "through_seq": through_seq,
        "next_segment": next_segment,
        "count": len(events),
        "created_at": time.time(),
    }
    lines = [
        (
            encode_json({"seq": e.seq, "type": e.type, "time": e.time, "data": e.data}) + "\n"
        ).encode()
        for e in events
    ]
    return _framed(header, lines)


def decode_base(raw: bytes) -> Base:
    lines = _framed_lines(raw)
    try:
        header = _header(lines, BASE_FORMAT)
        records = [json.loads(line) for line in lines[1:]]
        events = [
            JobEvent(int(r["seq"]), str(r["type"]), dict(r["data"]), float(r["time"]))
            for r in records
        ]
        if len(events) != int(header["count"]):
            raise ValueError(f"{len(events)} events, the header says {header['count']}")
        return Base(int(header["through_seq"]), int(header["next_segment"]), events)
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise TornSegment(f"bad base ({exc})") from None


def _framed_lines(raw: bytes) -> list[bytes]:
    """The lines above the checksum footer, checked against it (``TornSegment`` if not)."""
    if not raw.endswith(b"\n"):
        raise TornSegment("it does not end with a newline")
    cut = raw.rfind(b"\n", 0, len(raw) - 1) + 1
    body, footer_line = raw[:cut], raw[cut:]
    try:
        footer = json.loads(footer_line)
        expected_sha, expected_size = str(footer["sha256"]), int(footer["size"])
    except (ValueError, KeyError, TypeError) as exc:
        raise TornSegment(f"no valid footer ({exc})") from None
    if len(body) != expected_size or hashlib.sha256(body).hexdigest() != expected_sha:
        raise TornSegment("its sha256 or size does not match the footer")
    return body.split(b"\n")[:-1]


def _framed(header: dict[str, Any], lines: list[bytes]) -> bytes:
    body = b"".join([encode_json(header).encode(), b"\n", *lines])
    footer = encode_json({"sha256": hashlib.sha256(body).hexdigest(), "size": len(body)})
    return body + footer.encode() + b"\n"


def _header(lines: list[bytes], kind: str) -> dict[str, Any]:
    header = json.loads(lines[0])
    if header.get("format") != kind or header.get("version") != SEGMENT_VERSION:
        raise ValueError(f"unknown format {header.get('format')!r} v{header.get('version')!r}")
    return dict(header)


def decode_segment(number: int, raw: bytes) -> Segment:
    """Validate framing, checksum and count; raise ``TornSegment`` saying what is wrong."""
    lines = _framed_lines(raw)
    try:
        header = _header(lines, SEGMENT_FORMAT)
        if int(header["segment"]) != number:
            raise ValueError(f"its header says segment {header['segment']}")
        first_seq, count = int(header["first_seq"]), int(header["count"])
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise TornSegment(f"bad header ({exc})") from None
    records = lines[1:]
    if len(records) != count:
        raise TornSegment(f"{len(records)} records, the header says {count}")
    return Segment(number, first_seq, records)


def _decode_record(segment: Segment, index: int) -> JobEvent:
    try:
        record = json.loads(segment.records[index])
        return JobEvent(
            seq=segment.first_seq + index,
            type=str(record["type"]),
            data=dict(record["data"]),
            time=float(record["time"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        # The checksum matched, so the writer itself wrote this: not a tear, a real corruption.
        raise EventLogCorrupt(
            f"segment {segment.number}: record {segment.first_seq + index} is unreadable: {exc}"
        ) from exc


class EventLog:
    """Read side of the log: listing and validated replay of segments under one prefix."""

    def __init__(self, backend: ObjectBackend, *, prefix: str = "events") -> None:
        self.backend = backend
        self.prefix = validate_name(prefix)
        self._pattern = re.compile(rf"{re.escape(self.prefix)}/seg-(\d+)")
        self._base_pattern = re.compile(rf"{re.escape(self.prefix)}/base-(\d+)")

    def segment_name(self, number: int) -> str:
        return f"{self.prefix}/seg-{number:012d}"

    def base_name(self, through_seq: int) -> str:
        return f"{self.prefix}/base-{through_seq:012d}"

    def base_seqs(self) -> list[int]:
        """The ``through_seq`` of every base object, ascending."""
        found = (self._base_pattern.fullmatch(n) for n in self.backend.list(self.prefix + "/base-"))
        return sorted(int(match.group(1)) for match in found if match)

    def read_base(self) -> Base | None:
        """The newest base, or None; a damaged one is ``EventLogCorrupt``: the segments it
        replaced are gone."""
        seqs = self.base_seqs()
        if not seqs:
            return None
        name = self.base_name(seqs[-1])
        try:
            return decode_base(self.backend.get(name))
        except (TornSegment, ObjectNotFound, ObjectCorrupt) as exc:
            raise EventLogCorrupt(
                f"the compacted event log {self.backend.location(name)} is unreadable ({exc})"
            ) from None

    def segment_numbers(self) -> list[int]:
        numbers = []
        for name in self.backend.list(self.prefix + "/seg-"):
            match = self._pattern.fullmatch(name)
            if match:
                numbers.append(int(match.group(1)))
        return sorted(numbers)

    def read_segment(self, number: int) -> Segment:
        name = self.segment_name(number)
        try:
            raw = self.backend.get(name)
        except ObjectNotFound as exc:
            raise TornSegment(f"it vanished ({exc})") from None
        except ObjectCorrupt as exc:
            raise TornSegment(str(exc)) from None
        return decode_segment(number, raw)

    def replay(self) -> Iterator[JobEvent]:
        """Every durable event still needed, in sequence order: the newest base's, then the
        segments' after it; stops cleanly before a torn last segment."""
        base = self.read_base()
        expected = FIRST_SEQ
        numbers = self.segment_numbers()
        if base is not None:
            yield from base.events
            expected = base.through_seq + 1
            numbers = [n for n in numbers if n >= base.next_segment]
        for position, number in enumerate(numbers):
            try:
                segment = self.read_segment(number)
            except TornSegment as exc:
                if position == len(numbers) - 1:
                    log.warning(
                        "the last event segment %s is torn (%s); replay stops before it",
                        self.backend.location(self.segment_name(number)),
                        exc,
                    )
                    return
                raise EventLogCorrupt(
                    f"event segment {self.backend.location(self.segment_name(number))} is damaged "
                    f"({exc}) and is not the last one: the log cannot be replayed past it"
                ) from None
            if segment.first_seq != expected:
                raise EventLogCorrupt(
                    f"event segment {number} starts at sequence {segment.first_seq}, expected "
                    f"{expected}: a segment before it is missing"
                )
            for index in range(len(segment.records)):
                yield _decode_record(segment, index)
            expected = segment.first_seq + len(segment.records)


def read_events(backend: ObjectBackend, *, prefix: str = "events") -> Iterator[JobEvent]:
    """Replay a log without opening it for writing (no recovery side effects)."""
    return EventLog(backend, prefix=prefix).replay()
