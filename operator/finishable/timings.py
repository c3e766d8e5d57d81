"""Where a driver attempt's time goes: seconds per phase, cheap enough to always record.

A driver attempt adds the seconds of its phases (the Spark session's start, the replay of the
event log, each stage's rounds, the final commit, ...) to a :class:`PhaseTimings`, and logs them as
one line when it ends (``phase timings: {...}``), which is how a benchmark reads them back from a
driver's log (:func:`parse_timings`). Tasks report their own split (seconds waiting for input rows
against seconds writing them out) with their ``task-finished`` call; the driver adds those as
task-seconds, summed over tasks that ran in parallel, so they are kept apart from the wall-clock
phases (:func:`breakdown`).

Phase names: ``<phase>`` for wall-clock seconds of the driver (phases do not overlap, except
that a ``hook.*`` phase runs on the endpoint's threads during a stage); ``tasks.<stage>.<part>``
for task-seconds.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

TIMINGS_MARK = "phase timings:"
"""What starts the log line carrying a driver attempt's phases (JSON follows)."""

TASKS_PREFIX = "tasks."
HOOK_PREFIX = "hook."


class PhaseTimings:
    """Seconds per named phase, added up; thread-safe (task hooks run on the endpoint's threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds: dict[str, float] = {}
        self.started_at = time.time()
        """Wall-clock time (epoch seconds) this attempt started timing."""

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            self._seconds[name] = self._seconds.get(name, 0.0) + seconds

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Adds the seconds of the ``with`` block to ``name`` (also when it raises)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - started)

    def seconds(self) -> dict[str, float]:
        with self._lock:
            return dict(self._seconds)

    def log(self, logger: logging.Logger) -> None:
        """One INFO line with every phase (JSON), for :func:`parse_timings`."""
        document = {
            "started_at": round(self.started_at, 3),
            "logged_at": round(time.time(), 3),
            "phases": self.seconds(),
        }
        logger.info("%s %s", TIMINGS_MARK, json.dumps(document, sort_keys=True))


def parse_timings(lines: Iterable[str]) -> dict[str, Any] | None:
    """The last ``phase timings:`` document in a driver's log lines, or None."""
    found: dict[str, Any] | None = None
    for line in lines:
        _, mark, rest = line.partition(TIMINGS_MARK)
        if mark:
            try:
                document = json.loads(rest)
            except ValueError:
                continue
            if isinstance(document, dict):
                found = document
    return found


def breakdown(phases: Mapping[str, float], wall: float | None = None) -> dict[str, Any]:
    """Phases as a benchmark reports them, rounded to ms.

    ``{"driver": {phase: s, ..., "other": s}, "hooks": {...}, "tasks": {stage: {part: s}}}``:
    ``driver`` holds the wall-clock phases (and, given the ``wall`` seconds of the whole run,
    ``other``: what no phase covers), ``hooks`` the driver's handling of task calls (during the
    stages, on other threads), ``tasks`` the task-seconds each stage's tasks spent per part.
    """
    driver: dict[str, float] = {}
    hooks: dict[str, float] = {}
    tasks: dict[str, dict[str, float]] = {}
    for name, seconds in phases.items():
        if name.startswith(TASKS_PREFIX):
            stage, _, part = name[len(TASKS_PREFIX) :].rpartition(".")
            tasks.setdefault(stage or "?", {})[part] = round(seconds, 3)
        elif name.startswith(HOOK_PREFIX):
            hooks[name[len(HOOK_PREFIX) :]] = round(seconds, 3)
        else:
            driver[name] = round(seconds, 3)
    if wall is not None:
        covered = sum(s for n, s in phases.items() if not n.startswith((TASKS_PREFIX, HOOK_PREFIX)))
        driver["other"] = round(max(0.0, wall - covered), 3)
    result: dict[str, Any] = {"driver": driver}
    if hooks:
        result["hooks"] = hooks
    if tasks:
        result["tasks"] = tasks
    return result


def attempt_breakdown(
    document: Mapping[str, Any], *, spawned_at: float, exited_at: float
) -> dict[str, Any]:
    """A driver process's time from its spawn to its exit (epoch seconds), its logged phases
    (:func:`parse_timings`) in between: ``init`` is the interpreter and the program's imports
    before the job started timing, ``exit`` what followed the log line (stopping Spark, the
    process's end and the runner noticing it)."""
    started, logged = float(document["started_at"]), float(document["logged_at"])
    result = breakdown(document.get("phases", {}), wall=logged - started)
    result["init"] = round(max(0.0, started - spawned_at), 3)
    result["exit"] = round(max(0.0, exited_at - logged), 3)
    return result


def timed_input(batches: Iterable[T], waited: list[float]) -> Iterator[T]:
    """``batches`` as they come, adding the seconds spent waiting for each to ``waited[0]``.

    A task's writer wraps its input in this: the wait is what produced the rows upstream
    (reading, parsing, the JVM's operators, the transfer into this worker), the rest of the
    task's time is its own writing."""
    source = iter(batches)
    while True:
        started = time.perf_counter()
        try:
            item = next(source)
        except StopIteration:
            waited[0] += time.perf_counter() - started
            return
        waited[0] += time.perf_counter() - started
        yield item


def progress_breakdown(durations: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Mean seconds per micro-batch of each ``durationMs`` entry of Spark's query progress.

    ``durations`` holds the ``durationMs`` of each batch that read rows; ``batches`` is their
    count. ``triggerExecution`` is the whole batch; ``latestOffset`` (asking the source for the
    batch's end: a coordinator round trip for a finishable source), ``queryPlanning``,
    ``addBatch`` (reading, processing and the sink's writes and commit), ``walCommit`` and
    ``commitOffsets`` (Spark's offset and commit logs) are parts of it.
    """
    totals: dict[str, float] = {}
    count = 0
    for entry in durations:
        count += 1
        for key, value in entry.items():
            totals[key] = totals.get(key, 0.0) + float(value) / 1000
    result = {key: round(total / max(1, count), 4) for key, total in sorted(totals.items())}
    result["batches"] = count
    return result
