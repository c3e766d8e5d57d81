"""The job event store (FLIP-383): buffered, ordered, durable append of job events.

``append`` serialises the event, gives it the next sequence number and puts it in an in-memory
buffer: no I/O, so the driver's scheduling thread never waits on storage. A flusher thread of its
own writes the buffer out as one *segment* object when it reaches ``write_buffer_size`` bytes or
when its oldest event has waited ``flush_interval`` seconds, one segment at a time, in order, so
the durable log is always a prefix of what was appended. The segments' format and the replay that
reads them back are in :mod:`finishable.state.eventlog`. Opening a store for writing removes a
damaged last segment, so the next segment does not bury it in the middle of the log.

Given a ``compact`` fold, the flusher compacts the log every ``compact_after_segments``
segments: the events the fold keeps, with their sequence numbers, become one base object and the
segments they replace are deleted (:mod:`finishable.state.eventlog` has the format). A write
refused by a fence (``Fenced``) fails the store for good: a superseded driver writes nothing more.

Backend down: the flusher retries the same segment with exponential backoff (up to
``max_retry_delay``), logging warnings, while ``append`` keeps buffering. Memory is bounded by
``max_buffer_bytes`` (buffered plus in flight). When an append would cross it, ``append`` raises
``EventStoreOverflow`` and the store stays failed for appends from then on: accepting later
events after dropping one would let a replay rebuild a state that never existed, whereas a log
that is a prefix only makes recovery re-run more tasks. Events accepted before the overflow are
still flushed once the backend is back. ``append`` never blocks on I/O and never drops silently.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from finishable.state.backends import ObjectBackend
from finishable.state.errors import (
    EventLogCorrupt,
    EventStoreClosed,
    EventStoreError,
    EventStoreOverflow,
    Fenced,
    ObjectTooLarge,
)
from finishable.state.eventlog import (
    FIRST_SEQ,
    EventLog,
    JobEvent,
    TornSegment,
    encode_base,
    encode_json,
    encode_segment,
)

log = logging.getLogger(__name__)

DEFAULT_WRITE_BUFFER_SIZE = 1024 * 1024
DEFAULT_FLUSH_INTERVAL = 1.0
DEFAULT_MAX_BUFFER_BYTES = 64 * 1024 * 1024
DEFAULT_COMPACT_AFTER_SEGMENTS = 64
"""With a ``compact`` fold, the log is compacted after this many segments since the last time."""


@dataclass(frozen=True, slots=True)
class FlushedSegment:
    """What ``on_flush`` is told after a segment became durable."""

    segment: int
    name: str
    first_seq: int
    last_seq: int
    size: int


def event_type_name(event: object) -> str:
    """A dataclass event's type: its ``EVENT_TYPE`` class attribute, else its class name."""
    return str(getattr(type(event), "EVENT_TYPE", type(event).__name__))


def _split_event(event: object, type_name: str | None) -> tuple[str, Any]:
    if dataclasses.is_dataclass(event) and not isinstance(event, type):
        return type_name or event_type_name(event), event
    if isinstance(event, Mapping):
        if type_name is not None:
            return type_name, event if isinstance(event, dict) else dict(event)
        event_type = event.get("type")
        if not isinstance(event_type, str) or not event_type:
            raise ValueError("a mapping event needs a non-empty string 'type' key (or type=...)")
        return event_type, {k: v for k, v in event.items() if k != "type"}
    raise TypeError(f"an event is a dataclass instance or a mapping, got {type(event).__name__}")


# -- the writer ---------------------------------------------------------------------------------


class JobEventStore:
    """Buffered, ordered, durable append of job events. Thread-safe.

    Opening recovers the log: it finds the next segment and sequence numbers and removes a torn
    last segment left by a crashed writer (this is the only I/O outside the flusher thread).
    """

    def __init__(
        self,
        backend: ObjectBackend,
        *,
        prefix: str = "events",
        write_buffer_size: int = DEFAULT_WRITE_BUFFER_SIZE,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES,
        max_retry_delay: float = 5.0,
        on_flush: Callable[[FlushedSegment], None] | None = None,
        compact: Callable[[list[JobEvent]], list[JobEvent]] | None = None,
        compact_after_segments: int = DEFAULT_COMPACT_AFTER_SEGMENTS,
    ) -> None:
        if write_buffer_size <= 0:
            raise ValueError(f"write_buffer_size={write_buffer_size} must be positive")
        if flush_interval <= 0:
            raise ValueError(f"flush_interval={flush_interval} must be positive")
        if max_buffer_bytes < write_buffer_size:
            raise ValueError(
                f"max_buffer_bytes={max_buffer_bytes} is below "
                f"write_buffer_size={write_buffer_size}"
            )
        self.log = EventLog(backend, prefix=prefix)
        self.backend = backend
        self.write_buffer_size = write_buffer_size
        self.flush_interval = flush_interval
        self.max_buffer_bytes = max_buffer_bytes
        self.max_retry_delay = max_retry_delay
        self.on_flush = on_flush
        self.compact = compact
        self.compact_after_segments = compact_after_segments
        self.writer_id = uuid.uuid4().hex[:12]
        self._segments_since_base = 0

        self._next_segment, self._next_seq = self._recover()
        self._flushed_seq = self._next_seq - 1

        lock = threading.Lock()
        self._wake = threading.Condition(lock)  # appenders and flush() -> flusher
        self._done = threading.Condition(lock)  # flusher -> flush() and close() waiters
        self._buffer: list[bytes] = []
        self._buffered_bytes = 0
        self._pending_bytes = 0  # buffered + in flight: what max_buffer_bytes bounds
        self._oldest = 0.0  # monotonic time of the oldest buffered event
        self._size_signalled = False
        self._flush_requested = False
        self._closing = False
        self._abandoned = threading.Event()
        self._failure: EventStoreError | None = None  # fatal: nothing more can be written
        self._overflow: EventStoreOverflow | None = None  # sticky: appends refused
        self.last_error: BaseException | None = None

        self._thread = threading.Thread(
            target=self._run, name=f"job-event-flusher-{self.log.prefix}", daemon=True
        )
        self._thread.start()

    # -- recovery -----------------------------------------------------------------------------

    def _recover(self) -> tuple[int, int]:
        base = self.log.read_base()
        first_segment, first_seq = (
            (0, FIRST_SEQ)
            if base is None
            else (
                base.next_segment,
                base.through_seq + 1,
            )
        )
        numbers = [n for n in self.log.segment_numbers() if n >= first_segment]
        self._segments_since_base = len(numbers)
        if not numbers:
            return first_segment, first_seq
        last = numbers[-1]
        try:
            segment = self.log.read_segment(last)
        except TornSegment as exc:
            name = self.log.segment_name(last)
            log.warning(
                "removing the torn last event segment %s (%s): it was never acknowledged",
                self.backend.location(name),
                exc,
            )
            self.backend.delete(name)
            if len(numbers) == 1:
                return last, first_seq
            previous = numbers[-2]
            try:
                segment = self.log.read_segment(previous)
            except TornSegment as inner:
                raise EventLogCorrupt(
                    f"event segments {previous} and {last} are both damaged ({inner})"
                ) from None
            return previous + 1, segment.first_seq + len(segment.records)
        return last + 1, segment.first_seq + len(segment.records)

    # -- appending ----------------------------------------------------------------------------

    def append(self, event: object, *, type: str | None = None) -> int:
        """Buffer one event and return its sequence number. Never waits on I/O.

        ``event`` is a dataclass instance (type: its ``EVENT_TYPE`` or class name) or a mapping
        with a ``"type"`` key, or any mapping with ``type=`` given. Raises ``TypeError`` or
        ``ValueError`` for an event that is not JSON, ``EventStoreOverflow`` when the buffer cap
        is hit, ``EventStoreClosed`` after ``close``.
        """
        type_name, data = _split_event(event, type)
        record = (
            encode_json({"type": type_name, "time": time.time(), "data": data}) + "\n"
        ).encode()
        size = len(record)
        with self._wake:
            if self._closing:
                raise EventStoreClosed("the job event store is closed")
            if self._failure is not None:
                raise EventStoreError(
                    f"the job event store has failed: {self._failure}"
                ) from self._failure
            if self._overflow is not None:
                raise EventStoreOverflow(str(self._overflow))
            if self._pending_bytes + size > self.max_buffer_bytes:
                self._overflow = EventStoreOverflow(
                    f"job event buffer full: {self._pending_bytes} bytes pending, cap "
                    f"max_buffer_bytes={self.max_buffer_bytes}; the backend "
                    f"{self.backend.location(self.log.prefix)} is not keeping up "
                    f"(last error: {self.last_error!r}); events from sequence {self._next_seq} "
                    "on are refused so the durable log stays a prefix"
                )
                log.error("%s", self._overflow)
                raise self._overflow
            seq = self._next_seq
            self._next_seq = seq + 1
            if not self._buffer:
                self._oldest = time.monotonic()
                self._wake.notify()
            self._buffer.append(record)
            self._buffered_bytes += size
            self._pending_bytes += size
            if self._buffered_bytes >= self.write_buffer_size and not self._size_signalled:
                self._size_signalled = True
                self._wake.notify()
        return seq

    def flush(self, timeout: float | None = None) -> None:
        """Block until every event appended before this call is durable."""
        with self._wake:
            target = self._next_seq - 1
            if self._flushed_seq >= target:
                return
            self._flush_requested = True
            self._wake.notify()
            deadline = None if timeout is None else time.monotonic() + timeout
            while self._flushed_seq < target:
                if self._failure is not None:
                    raise EventStoreError(f"flush failed: {self._failure}") from self._failure
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise EventStoreError(
                        f"flush timed out after {timeout}s with {target - self._flushed_seq} "
                        f"events not yet durable (last error: {self.last_error!r})"
                    )
                self._done.wait(remaining)

    def close(self, timeout: float | None = 30.0) -> None:
        """Flush what was appended and stop the flusher; raise if events could not be written."""
        with self._wake:
            if self._closing and not self._thread.is_alive():
                return
            self._closing = True
            self._wake.notify()
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._abandoned.set()
            with self._wake:
                self._wake.notify()
                lost = self._next_seq - 1 - self._flushed_seq
            raise EventStoreError(
                f"closing the job event store timed out after {timeout}s: {lost} events are not "
                f"durable (last error: {self.last_error!r})"
            )
        if self._failure is not None:
            raise EventStoreError(f"the job event store failed: {self._failure}") from self._failure

    def replay(self) -> Iterator[JobEvent]:
        """Durable events in order (flush first to include your own recent appends)."""
        return self.log.replay()

    # -- introspection ------------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        """Sequence number of the last accepted event (``FIRST_SEQ - 1`` if none)."""
        return self._next_seq - 1

    @property
    def flushed_seq(self) -> int:
        """Every event up to this sequence number is durable."""
        return self._flushed_seq

    @property
    def healthy(self) -> bool:
        return self._failure is None and self._overflow is None

    # -- the flusher thread -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._wake:
                while True:
                    if self._buffer:
                        age = time.monotonic() - self._oldest
                        if (
                            self._buffered_bytes >= self.write_buffer_size
                            or self._flush_requested
                            or self._closing
                            or age >= self.flush_interval
                        ):
                            break
                        self._wake.wait(self.flush_interval - age)
                    elif self._closing or self._abandoned.is_set():
                        self._done.notify_all()
                        return
                    else:
                        self._flush_requested = False
                        self._wake.wait()
                batch = self._buffer
                first_seq = self._next_seq - len(batch)
                self._buffer = []
                self._buffered_bytes = 0
                self._size_signalled = False
                self._flush_requested = False
            if not self._write_batch(batch, first_seq):
                return
            if self.compact is not None and (
                self._segments_since_base >= self.compact_after_segments
            ):
                self._compact(self.compact)

    def _write_batch(self, batch: list[bytes], first_seq: int) -> bool:
        """Write ``batch`` as segments of at most ``write_buffer_size``; False: stop the thread."""
        start = 0
        while start < len(batch):
            end, size = start + 1, len(batch[start])  # at least one record per segment
            while end < len(batch) and size + len(batch[end]) <= self.write_buffer_size:
                size += len(batch[end])
                end += 1
            records = batch[start:end]
            number = self._next_segment
            name = self.log.segment_name(number)
            seq = first_seq + start
            data = encode_segment(number, seq, records, self.writer_id)
            if not self._put_with_retry(name, data):
                return False
            self._next_segment = number + 1
            self._segments_since_base += 1
            last_seq = seq + len(records) - 1
            with self._wake:
                self._flushed_seq = last_seq
                self._pending_bytes -= size
                self._done.notify_all()
            if self.on_flush is not None:
                try:
                    self.on_flush(FlushedSegment(number, name, seq, last_seq, len(data)))
                except Exception:
                    log.exception("the on_flush callback failed for segment %s", name)
            start = end
        return True

    def _compact(self, fold: Callable[[list[JobEvent]], list[JobEvent]]) -> None:
        """Replace the segments flushed so far by one base of the events ``fold`` keeps.

        Runs on the flusher thread, the log's only writer, so everything up to
        ``_flushed_seq`` is in segments below ``_next_segment`` and nothing else is written
        meanwhile. A failure leaves the log as it was (longer, still whole) and is retried after
        as many segments again.
        """
        self._segments_since_base = 0
        through, next_segment = self._flushed_seq, self._next_segment
        try:
            events = list(self.log.replay())
            kept = sorted(fold(events), key=lambda event: event.seq)
            self.backend.put(self.log.base_name(through), encode_base(through, next_segment, kept))
            for seq in self.log.base_seqs():
                if seq < through:
                    self.backend.delete(self.log.base_name(seq))
            replaced = [n for n in self.log.segment_numbers() if n < next_segment]
            for number in replaced:
                self.backend.delete(self.log.segment_name(number))
        except Fenced as exc:
            with self._wake:
                self._failure = EventStoreError(f"compaction refused: {exc}")
                self._failure.__cause__ = exc
                self._done.notify_all()
            return
        except Exception as exc:
            log.warning("compacting the job event log failed, it stays as it is: %s", exc)
            return
        log.info(
            "compacted the job event log through sequence %d: %d of %d event(s) kept, %d "
            "segment(s) replaced",
            through,
            len(kept),
            len(events),
            len(replaced),
        )

    def _put_with_retry(self, name: str, data: bytes) -> bool:
        delay = 0.05
        failures = 0
        while True:
            try:
                self.backend.put(name, data)
            except (ObjectTooLarge, Fenced) as exc:
                with self._wake:
                    self._failure = EventStoreError(f"segment {name} can never be written: {exc}")
                    self._failure.__cause__ = exc
                    self._done.notify_all()
                log.error("%s", self._failure)
                return False
            except Exception as exc:
                failures += 1
                self.last_error = exc
                if failures == 1 or failures % 10 == 0:
                    log.warning(
                        "writing event segment %s failed %d time(s), retrying: %s",
                        self.backend.location(name),
                        failures,
                        exc,
                    )
                if self._abandoned.wait(delay):
                    return False
                delay = min(delay * 2, self.max_retry_delay)
            else:
                if failures:
                    log.info("wrote event segment %s after %d failure(s)", name, failures)
                return True

    def __enter__(self) -> JobEventStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"JobEventStore({self.backend!r}, prefix={self.log.prefix!r})"
