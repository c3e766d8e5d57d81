"""The job event store contract, run against every backend, plus its failure policy."""

from __future__ import annotations

import enum
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest

from finishable.state import (
    BackendError,
    EventLogCorrupt,
    EventStoreClosed,
    EventStoreError,
    EventStoreOverflow,
    FlushedSegment,
    JobEventStore,
    LocalDirBackend,
    ObjectBackend,
    read_events,
)
from finishable.state.eventlog import EventLog, JobEvent, encode_base, encode_segment

from .conftest import BackendCase

pytestmark = pytest.mark.quick


class Status(enum.Enum):
    OK = "ok"


@dataclass
class StageInitialized:
    stage: int
    parallelism: int
    inputs: list[str] = field(default_factory=list)


@dataclass
class Finished:
    EVENT_TYPE: ClassVar[str] = "TaskFinished"
    stage: int
    task: int
    status: Status = Status.OK
    partitions: frozenset[str] = frozenset()


def seg(number: int) -> str:
    return f"events/seg-{number:012d}"


def test_append_flush_replay_in_order(case: BackendCase) -> None:
    with JobEventStore(case.backend, flush_interval=60) as store:
        assert store.append(StageInitialized(0, 4, ["s3://in/"])) == 1
        assert store.append(Finished(0, 1, partitions=frozenset({"p1", "p0"}))) == 2
        assert store.append({"type": "Custom", "x": [1, 2]}) == 3
        assert store.append({"y": None}, type="Other") == 4
        store.flush(timeout=10)
        assert store.flushed_seq == 4
        events = list(store.replay())
    assert [(e.seq, e.type) for e in events] == [
        (1, "StageInitialized"),
        (2, "TaskFinished"),
        (3, "Custom"),
        (4, "Other"),
    ]
    assert events[0].as_(StageInitialized) == StageInitialized(0, 4, ["s3://in/"])
    assert events[1].data == {"stage": 0, "task": 1, "status": "ok", "partitions": ["p0", "p1"]}
    assert events[2].data == {"x": [1, 2]}
    assert events[3].data == {"y": None}
    assert all(e.time > 0 for e in events)


def test_size_triggered_flush_writes_several_segments(case: BackendCase) -> None:
    flushed: list[FlushedSegment] = []
    store = JobEventStore(
        case.backend, write_buffer_size=2000, flush_interval=60, on_flush=flushed.append
    )
    try:
        for i in range(300):
            store.append({"type": "Tick", "n": i, "pad": "x" * 40})
        deadline = time.monotonic() + 60
        while store.flushed_seq < 250 and time.monotonic() < deadline:
            time.sleep(0.01)  # no flush() call: only the size trigger can make progress
        assert store.flushed_seq >= 250
    finally:
        store.close()
    assert len(flushed) >= 5
    assert flushed[0].first_seq == 1
    for before, after in itertools.pairwise(flushed):
        assert after.first_seq == before.last_seq + 1
        assert after.segment == before.segment + 1
    assert all(s.size <= 2000 + 400 for s in flushed)  # header and footer on top of the buffer
    assert [e.data["n"] for e in read_events(case.backend)] == list(range(300))


def test_interval_triggered_flush(case: BackendCase) -> None:
    flushed = threading.Event()
    store = JobEventStore(
        case.backend,
        write_buffer_size=10 * 1024 * 1024,
        flush_interval=0.2,
        on_flush=lambda _segment: flushed.set(),
    )
    try:
        started = time.monotonic()
        store.append({"type": "Lonely"})
        assert flushed.wait(10)
        assert time.monotonic() - started >= 0.19
        assert [e.type for e in read_events(case.backend)] == ["Lonely"]
    finally:
        store.close()


def test_reopening_continues_the_log(case: BackendCase) -> None:
    with JobEventStore(case.backend) as first:
        for i in range(5):
            first.append({"type": "A", "i": i})
    second = JobEventStore(case.reopen())
    try:
        assert second.last_seq == 5
        assert second.append({"type": "B"}) == 6
        second.flush(timeout=10)
        assert [(e.seq, e.type) for e in second.replay()] == [
            (1, "A"),
            (2, "A"),
            (3, "A"),
            (4, "A"),
            (5, "A"),
            (6, "B"),
        ]
        assert case.backend.list("events/") == [seg(0), seg(1)]
    finally:
        second.close()


def test_torn_last_segment_is_skipped_then_removed(
    case: BackendCase, caplog: pytest.LogCaptureFixture
) -> None:
    with JobEventStore(case.backend) as store:
        store.append({"type": "Kept", "n": 1})
        store.flush(timeout=10)
        store.append({"type": "Kept", "n": 2})
    full = encode_segment(2, 3, [b'{"type":"Lost","time":1.0,"data":{}}\n'], "crashed")
    case.backend.put(seg(2), full[: len(full) // 2])  # a writer died in the middle
    with caplog.at_level(logging.WARNING, logger="finishable.state.eventlog"):
        events = list(read_events(case.backend))
    assert [e.data["n"] for e in events] == [1, 2]
    assert "is torn" in caplog.text
    with JobEventStore(case.backend) as reopened:  # recovery removes the torn segment
        assert reopened.last_seq == 2
        reopened.append({"type": "Kept", "n": 3})
    assert [e.data["n"] for e in read_events(case.backend)] == [1, 2, 3]
    assert case.backend.list("events/") == [seg(0), seg(1), seg(2)]


def test_torn_earlier_segment_is_an_error(case: BackendCase) -> None:
    with JobEventStore(case.backend) as store:
        for n in range(3):
            store.append({"type": "E", "n": n})
            store.flush(timeout=10)
    damaged = bytearray(case.backend.get(seg(1)))
    damaged[len(damaged) // 2] ^= 0x01
    case.backend.put(seg(1), bytes(damaged))
    with pytest.raises(EventLogCorrupt, match="not the last one"):
        list(read_events(case.backend))


def test_missing_middle_segment_is_an_error(case: BackendCase) -> None:
    with JobEventStore(case.backend) as store:
        for n in range(3):
            store.append({"type": "E", "n": n})
            store.flush(timeout=10)
    case.backend.delete(seg(1))
    with pytest.raises(EventLogCorrupt, match="expected 2"):
        list(read_events(case.backend))


def test_large_segments(case: BackendCase) -> None:
    """Segments above 1 MiB (events of 300 KB): split over ConfigMaps, single objects elsewhere."""
    blob = "z" * 300_000
    with JobEventStore(case.backend, write_buffer_size=3 * 1024 * 1024, flush_interval=60) as s:
        for i in range(8):
            s.append({"type": "Big", "i": i, "blob": blob})
    events = list(read_events(case.backend))
    assert [e.data["i"] for e in events] == list(range(8))
    assert all(e.data["blob"] == blob for e in events)


def test_concurrent_appenders_get_distinct_ordered_sequence_numbers(case: BackendCase) -> None:
    store = JobEventStore(case.backend, write_buffer_size=4096, flush_interval=0.05)
    results: dict[int, list[int]] = {}

    def run(thread: int) -> None:
        results[thread] = [store.append({"type": "T", "t": thread, "k": k}) for k in range(200)]

    threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store.close()
    assert sorted(s for seqs in results.values() for s in seqs) == list(range(1, 801))
    for seqs in results.values():
        assert seqs == sorted(seqs)
    events = list(read_events(case.backend))
    assert [e.seq for e in events] == list(range(1, 801))
    by_thread: dict[int, list[int]] = {}
    for event in events:
        by_thread.setdefault(event.data["t"], []).append(event.data["k"])
    assert all(ks == list(range(200)) for ks in by_thread.values())


# -- policy tests (backend-independent, on a local directory) ----------------------------------


class SwitchableBackend(ObjectBackend):
    """A real local backend whose writes can be made to fail, as if the storage went away."""

    def __init__(self, root: Path) -> None:
        self.inner = LocalDirBackend(root)
        self.down = threading.Event()
        self.put_calls = 0

    def put(self, name: str, data: bytes) -> None:
        self.put_calls += 1
        if self.down.is_set():
            raise BackendError("storage unreachable (test)")
        self.inner.put(name, data)

    def get(self, name: str) -> bytes:
        return self.inner.get(name)

    def list(self, prefix: str = "") -> list[str]:
        return self.inner.list(prefix)

    def delete(self, name: str) -> None:
        self.inner.delete(name)

    def location(self, name: str = "") -> str:
        return self.inner.location(name)


def test_backend_down_appends_keep_buffering_then_flush_after_recovery(tmp_path: Path) -> None:
    backend = SwitchableBackend(tmp_path)
    backend.down.set()
    store = JobEventStore(backend, write_buffer_size=512, flush_interval=0.02, max_retry_delay=0.05)
    try:
        started = time.perf_counter()
        for i in range(500):
            store.append({"type": "E", "i": i})
        # never waited on the failing storage: waiting out one retry each would take 25 s
        assert time.perf_counter() - started < 10.0
        with pytest.raises(EventStoreError, match="timed out"):
            store.flush(timeout=0.3)
        assert store.flushed_seq == 0
        retrying_until = time.monotonic() + 60
        while backend.put_calls < 2:  # it keeps retrying
            assert time.monotonic() < retrying_until, "the store gave up on the storage"
            time.sleep(0.01)
        assert isinstance(store.last_error, BackendError)
        backend.down.clear()
        store.flush(timeout=10)
        assert store.healthy
    finally:
        store.close()
    assert [e.data["i"] for e in read_events(backend)] == list(range(500))


def test_overflow_refuses_appends_and_keeps_a_prefix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = SwitchableBackend(tmp_path)
    backend.down.set()
    store = JobEventStore(
        backend,
        write_buffer_size=1024,
        max_buffer_bytes=4096,
        flush_interval=0.02,
        max_retry_delay=0.05,
    )
    accepted = 0
    with (
        caplog.at_level(logging.ERROR),
        pytest.raises(EventStoreOverflow, match="max_buffer_bytes=4096"),
    ):
        for i in range(10_000):
            store.append({"type": "E", "i": i})
            accepted += 1
    assert 0 < accepted < 10_000
    assert not store.healthy
    with pytest.raises(EventStoreOverflow):  # sticky: no hole in the log
        store.append({"type": "E", "i": -1})
    backend.down.clear()
    store.close()  # what was accepted still becomes durable
    assert [e.data["i"] for e in read_events(backend)] == list(range(accepted))
    assert "buffer full" in caplog.text


def test_close_times_out_when_the_backend_stays_down(tmp_path: Path) -> None:
    backend = SwitchableBackend(tmp_path)
    backend.down.set()
    store = JobEventStore(backend, flush_interval=0.01, max_retry_delay=0.02)
    store.append({"type": "E"})
    with pytest.raises(EventStoreError, match="1 events are not durable"):
        store.close(timeout=0.3)


def test_api_errors(tmp_path: Path) -> None:
    store = JobEventStore(LocalDirBackend(tmp_path))
    with pytest.raises(ValueError, match="'type'"):
        store.append({"no_type": 1})
    with pytest.raises(TypeError, match="not JSON serialisable"):
        store.append({"type": "X", "bad": object()})
    with pytest.raises(ValueError, match="Out of range float"):
        store.append({"type": "X", "nan": float("nan")})
    with pytest.raises(TypeError, match="dataclass instance or a mapping"):
        store.append("just a string")
    assert store.last_seq == 0  # refused events take no sequence number
    store.close()
    store.close()  # idempotent
    with pytest.raises(EventStoreClosed):
        store.append({"type": "Late"})
    with pytest.raises(ValueError, match="write_buffer_size"):
        JobEventStore(LocalDirBackend(tmp_path), write_buffer_size=0)
    with pytest.raises(ValueError, match="max_buffer_bytes"):
        JobEventStore(LocalDirBackend(tmp_path), write_buffer_size=10, max_buffer_bytes=5)


def test_empty_log_replays_nothing(tmp_path: Path) -> None:
    assert list(read_events(LocalDirBackend(tmp_path))) == []
    with JobEventStore(LocalDirBackend(tmp_path)) as store:
        assert store.last_seq == 0
        store.flush(timeout=1)  # nothing to wait for
    assert LocalDirBackend(tmp_path).list() == []


# -- compaction ----------------------------------------------------------------------------------


def newest_per_key(events: list[JobEvent]) -> list[JobEvent]:
    """A fold like the Batch runtime's: only the newest event of each key is still needed."""
    newest = {event.data["key"]: event for event in events}
    return sorted(newest.values(), key=lambda event: event.seq)


def test_compaction_replaces_the_history_by_the_live_events(case: BackendCase) -> None:
    store = JobEventStore(
        case.backend, flush_interval=60, compact=newest_per_key, compact_after_segments=3
    )
    for round_ in range(10):
        for key in range(4):
            store.append({"type": "Put", "key": key, "round": round_})
        store.flush(timeout=30)  # one segment per round
    store.close()
    # Compacted after segments 3, 6 and 9: the base holds round 8, the last segment round 9.
    replayed = list(read_events(case.backend))
    assert [(e.data["key"], e.data["round"]) for e in replayed] == [
        *((k, 8) for k in range(4)),
        *((k, 9) for k in range(4)),
    ]
    assert [e.seq for e in replayed] == list(range(33, 41))
    log = EventLog(case.backend)
    assert log.base_seqs() == [36]
    assert log.segment_numbers() == [9], "the replaced segments are gone"

    # A new writer continues the sequence after the base and the segments after it.
    again = JobEventStore(case.reopen(), compact=newest_per_key, compact_after_segments=3)
    assert again.append({"type": "Put", "key": 0, "round": 10}) == 41
    again.close()
    replayed = list(read_events(case.backend))
    assert [(e.seq, e.data["round"]) for e in replayed][-2:] == [(40, 9), (41, 10)]


def test_a_compaction_cut_short_replays_each_event_once(case: BackendCase) -> None:
    with JobEventStore(case.backend, flush_interval=60) as store:
        for round_ in range(3):
            store.append({"type": "Put", "key": 0, "round": round_})
            store.flush(timeout=30)
    events = list(read_events(case.backend))
    # The base is written, the writer dies before deleting the segments it replaces.
    log = EventLog(case.backend)
    case.backend.put(log.base_name(3), encode_base(3, 3, newest_per_key(events)))
    assert [(e.seq, e.data["round"]) for e in read_events(case.backend)] == [(3, 2)]
    with JobEventStore(case.reopen()) as store:
        assert store.append({"type": "Put", "key": 1, "round": 3}) == 4
    assert [e.seq for e in read_events(case.backend)] == [3, 4]
