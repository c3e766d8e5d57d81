"""What a Streaming job's micro-batches cost, measured for the autoscaler (docs/autoscaler.md).

The driver keeps the micro-batches Spark ran (their start, duration and rows, read from each
query's recent progress) and samples its sources' backlog as it reports. Over the autoscaler's
metrics window that gives how busy the batches keep the executors and, per source, how fast input
is read and how fast it arrives. The arithmetic is :func:`load_over`, pure; :class:`LoadMeter`
only collects. Nothing is measured without ``spec.autoscaler``.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from finishable.api.status import LoadReport, SourceLoad
from finishable.coordinator.contract import CoordinatorProgress

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchRun:
    """One micro-batch as Spark's progress tells it (wall-clock seconds)."""

    started: float
    seconds: float
    rows: int


@dataclass(frozen=True)
class SourceSample:
    """A source's backlog and the input it handed out so far, at one moment."""

    unit: str
    backlog: int
    consumed: int


@dataclass(frozen=True)
class Sample:
    at: float
    sources: Mapping[str, SourceSample]


def load_over(
    window: float,
    runs: Iterable[BatchRun],
    first: Sample,
    last: Sample,
    running_since: Iterable[float] = (),
) -> LoadReport | None:
    """The load between two samples of the sources, with the part of each batch that ran after
    ``last.at - window``, and of those still running (``running_since``: when each was first seen
    running; Spark reports a batch only once it ends): None until the samples span ``window``."""
    span = last.at - first.at
    if span < window or span <= 0:
        return None
    since = last.at - window
    counted = [run for run in runs if run.started + run.seconds > since and run.started <= last.at]
    ran = sum(min(run.started + run.seconds, last.at) - max(run.started, since) for run in counted)
    running = sum(max(0.0, last.at - max(since, start)) for start in running_since)
    busy = (ran + running) / window
    sources = []
    for name, now in sorted(last.sources.items()):
        before = first.sources.get(name)
        if before is None or before.unit != now.unit:
            continue
        read = max(0, now.consumed - before.consumed) / span
        growth = (now.backlog - before.backlog) / span
        sources.append(
            SourceLoad(
                name=name,
                unit=now.unit,
                backlog=max(0, now.backlog),
                read_per_second=round(read, 4),
                arrived_per_second=round(max(0.0, read + growth), 4),
            )
        )
    return LoadReport(
        window_seconds=round(span, 3),
        batches=len(counted),
        busy=round(busy, 4),
        rows_per_second=round(sum(run.rows for run in counted) / window, 3),
        sources=sources,
    )


def source_samples(progress: Mapping[str, CoordinatorProgress]) -> dict[str, SourceSample]:
    """Each source's backlog and consumed input, from its coordinator's progress."""
    return {
        name: SourceSample(each.backlog_unit, each.backlog, each.consumed)
        for name, each in progress.items()
    }


class LoadMeter:
    """Collects batches and source samples; :meth:`measure` gives the newest window's load."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._runs: deque[BatchRun] = deque()
        self._samples: deque[Sample] = deque()
        self._seen: dict[str, str] = {}
        """Per query, the start (Spark's timestamp text) of the newest progress taken."""
        self._running_since: dict[str, float] = {}
        """Per query, when the batch it runs now was first seen running."""

    def take_progress(self, query: str, handle: Any, now: float) -> None:
        """The query's micro-batches Spark reported since the last call (its recent progress,
        newest first until one already taken: no JSON, a few py4j calls per new batch), and
        whether a batch with data runs now (a long one would otherwise count only once done)."""
        try:
            progress = handle._jsq.recentProgress()
            status = handle._jsq.status()
            running = bool(status.isTriggerActive() and status.isDataAvailable())
        except Exception as error:  # a stopping query: measured on the next call, or not at all
            log.debug("no progress of %s: %s", query, error)
            return
        seen = self._seen.get(query, "")
        new: list[BatchRun] = []
        for index in range(len(progress) - 1, -1, -1):
            entry = progress[index]
            stamp = str(entry.timestamp())
            if stamp <= seen:
                break
            if not new:
                self._seen[query] = stamp
            started = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
            new.append(BatchRun(started, entry.batchDuration() / 1000, entry.numInputRows()))
        self._runs.extend(reversed(new))
        if new or not running:
            self._running_since.pop(query, None)
        if running:
            self._running_since.setdefault(query, now)

    def measure(self, now: float, sources: Mapping[str, SourceSample]) -> LoadReport | None:
        """Sample the sources at ``now`` (wall-clock seconds) and measure the window behind it."""
        self._samples.append(Sample(now, dict(sources)))
        since = now - self.window
        while len(self._samples) > 2 and self._samples[1].at <= since:
            self._samples.popleft()  # keep one sample at or before the window's start
        self._runs = deque(run for run in self._runs if run.started + run.seconds >= since)
        return load_over(
            self.window,
            self._runs,
            self._samples[0],
            self._samples[-1],
            self._running_since.values(),
        )
