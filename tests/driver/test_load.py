"""The driver's load measure for the autoscaler (driver/streaming/load.py): busy time from the
micro-batches Spark ran, read and arrival rates from the sources' backlog."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from finishable.driver.streaming.load import BatchRun, LoadMeter, Sample, SourceSample, load_over

pytestmark = pytest.mark.quick

T = 1_800_000_000.0


def sample(at: float, backlog: int, consumed: int) -> Sample:
    return Sample(T + at, {"clicks": SourceSample("splits", backlog, consumed)})


def test_busy_is_the_share_of_the_window_spent_in_batches() -> None:
    runs = [BatchRun(T + 5, 10.0, 100), BatchRun(T + 30, 5.0, 50), BatchRun(T - 20, 9.0, 1)]
    load = load_over(60.0, runs, sample(0, 10, 0), sample(60, 16, 30))
    assert load is not None
    assert load.busy == 0.25 and load.batches == 2 and load.rows_per_second == 2.5
    (clicks,) = load.sources
    assert (clicks.backlog, clicks.read_per_second, clicks.arrived_per_second) == (16, 0.5, 0.6)


def test_a_batch_still_running_at_the_end_counts_up_to_it() -> None:
    load = load_over(60.0, [BatchRun(T + 50, 30.0, 0)], sample(0, 0, 0), sample(60, 0, 0))
    assert load is not None and load.busy == pytest.approx(10 / 60, abs=1e-3)


def test_nothing_is_reported_before_the_window_is_full() -> None:
    assert load_over(60.0, [], sample(0, 0, 0), sample(59, 0, 0)) is None


def test_a_shrinking_backlog_arrives_slower_than_it_is_read() -> None:
    load = load_over(10.0, [], sample(0, 100, 0), sample(10, 50, 60))
    assert load is not None
    (clicks,) = load.sources
    assert (clicks.read_per_second, clicks.arrived_per_second) == (6.0, 1.0)


@dataclass
class Progress:
    """What the meter reads of Spark's StreamingQueryProgress (its Java object's methods)."""

    stamp: str
    millis: int
    rows: int

    def timestamp(self) -> str:
        return self.stamp

    def batchDuration(self) -> int:  # noqa: N802 - Spark's name
        return self.millis

    def numInputRows(self) -> int:  # noqa: N802 - Spark's name
        return self.rows


class Query:
    """What the meter reads of a StreamingQuery's Java object: its progress and its status."""

    def __init__(self) -> None:
        self.progress: list[Progress] = []
        self.running = False
        self._jsq = self

    def recentProgress(self) -> list[Progress]:  # noqa: N802 - Spark's name
        return self.progress

    def status(self) -> Query:
        return self

    def isTriggerActive(self) -> bool:  # noqa: N802 - Spark's name
        return self.running

    def isDataAvailable(self) -> bool:  # noqa: N802 - Spark's name
        return self.running


def test_the_meter_takes_each_batch_once_and_keeps_only_the_window() -> None:
    meter = LoadMeter(window=20.0)
    query = Query()
    start = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    query.progress = [Progress("2027-01-15T08:00:01.000Z", 2000, 10)]
    meter.take_progress("q", query, start + 2)
    first = {"clicks": SourceSample("splits", 5, 0)}
    assert meter.measure(start + 2, first) is None
    query.progress.append(Progress("2027-01-15T08:00:12.500Z", 4000, 30))
    meter.take_progress("q", query, start + 22)
    meter.take_progress("q", query, start + 22)  # nothing new: nothing twice
    load = meter.measure(start + 22, {"clicks": SourceSample("splits", 1, 8)})
    assert load is not None
    # The window is the 20 s before the sample: of the batch from 08:00:01 to :03, 1 s counts.
    assert (load.batches, load.busy, load.rows_per_second) == (2, 0.25, 2.0)
    assert load.sources[0].read_per_second == 0.4
    query.progress.append(Progress("2027-01-15T08:00:30.000Z", 1000, 5))
    meter.take_progress("q", query, start + 40)
    later = meter.measure(start + 40, {"clicks": SourceSample("splits", 1, 9)})
    assert later is not None and later.batches == 1  # the first two ended before the window


def test_a_batch_still_running_counts_from_when_it_was_first_seen() -> None:
    """Spark reports a batch once it ends: a long one (a backlog after a restart) must not look
    like idle executors meanwhile."""
    meter = LoadMeter(window=20.0)
    query = Query()
    start = 1_800_000_000.0
    sources = {"clicks": SourceSample("splits", 200, 0)}
    meter.take_progress("q", query, start)
    assert meter.measure(start, sources) is None
    query.running = True
    meter.take_progress("q", query, start + 5)
    meter.take_progress("q", query, start + 15)  # the same batch: still from 5
    load = meter.measure(start + 25, sources)
    assert load is not None and (load.batches, load.busy) == (0, 1.0)
    query.running = False
    query.progress.append(Progress("2027-01-15T08:00:05.000Z", 21_000, 900))
    meter.take_progress("q", query, start + 27)
    done = meter.measure(start + 27, sources)
    assert done is not None and (done.batches, done.busy) == (1, 0.95)  # 19 s of it in the window


def test_the_meter_reads_a_real_querys_progress(spark: Any, tmp_path: Path) -> None:
    """Spark's own StreamingQuery: its Java progress and status, as the driver reads them."""
    stream = spark.readStream.format("rate").option("rowsPerSecond", 200).load()
    handle = (
        stream.writeStream.format("memory")
        .queryName("metered")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while sum(1 for p in handle.recentProgress if p.numInputRows) < 3:
            assert time.monotonic() < deadline, "the query ran no batches"
            time.sleep(0.1)
        first = min(p.timestamp for p in handle.recentProgress)
        started = datetime.fromisoformat(first.replace("Z", "+00:00")).timestamp()
        meter = LoadMeter(window=10.0)
        meter.measure(started - 1, {})
        now = started + 10
        meter.take_progress("metered", handle, now)
        load = meter.measure(now, {})
    finally:
        handle.stop()
    assert load is not None and load.batches >= 3, load
    assert 0 < load.busy <= 1 and load.rows_per_second > 0, load
