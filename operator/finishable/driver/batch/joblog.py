"""Batch jobs' event log (FLIP-383) and the pure decisions a driver attempt takes from it.

A Batch job runs as *stages*: each stage materialises one dataset as result partitions, one per
task, on the shuffle servers (the sink stage stages files in the sink instead). The driver appends
to the job event log:

* ``StageInitialized`` when a stage first runs: its kind, decided parallelism and inputs, so a
  later attempt plans the same tasks even if Spark would now decide otherwise;
* ``TaskFinished`` when a task's output is committed: the partitions it wrote (server, checksum),
  rows and bytes, or the file a sink task staged;
* ``TaskReset`` when a new attempt finds a finished task's output lost, or a read task unknown to
  the snapshot it restores: the task is not finished any more (a later snapshot must not revive
  its old ``TaskFinished``);
* ``CoordinatorSnapshot`` of a source's split enumerator, taken with ``NO_CHECKPOINT`` after
  read tasks finished, no more often than ``snapshotMinPause``;
* ``OutputPlanned`` once per sink, before any of its tasks stages: the sink batch the run
  publishes as;
* ``OutputCommitted`` once a sink published the job's output (the final checkpoint commits each
  sink in turn; the job is done when every sink it writes to is).

Recovery (:func:`recover`) replays the log against what survives: a task counts as finished when
its last ``TaskFinished`` is in the log *and* every partition it names is still listed with the
same checksum (or its staged file still exists, or its sink committed already: publishing
cleans the staging up). A read task that finished after the newest
snapshot of its source is reset, since the restored enumerator does not know its splits are done.
:func:`schedule` then walks up from the unfinished sinks with the job graph: only tasks an
unfinished sink still needs run again. No I/O here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from finishable.lifecycle.graph import (
    EdgeKind,
    JobEdge,
    JobGraph,
    JobVertex,
    TaskId,
    tasks_to_restart,
)
from finishable.state.eventlog import JobEvent


class StageKind(StrEnum):
    """What a stage reads and where its output goes."""

    READ = "read"
    """Reads a source's splits (pulled from its coordinator) into a dataset."""
    STAGE = "stage"
    """Computes a dataset from other datasets."""
    SINK = "sink"
    """Stages the job's output in a two-phase sink; published on the final checkpoint."""


@dataclass(frozen=True, slots=True)
class PartitionRef:
    """Where one result partition lives and which commit of it a task made."""

    server: str
    dataset: str
    partition: int
    sha256: str
    rows: int = 0
    bytes: int = 0


@dataclass(frozen=True, slots=True)
class StageInitialized:
    """A stage's decided shape; the first one in the log is authoritative."""

    stage: str
    kind: str
    parallelism: int
    inputs: tuple[str, ...] = ()
    narrow: bool = False
    """Each task reads only the same-numbered partition of its single input (POINTWISE)."""
    source: str | None = None
    """The coordinator a READ stage pulls splits from."""
    attempt: int = 1


@dataclass(frozen=True, slots=True)
class TaskFinished:
    """A task's output is committed (partitions on shuffle servers, or a staged sink file)."""

    stage: str
    task: int
    attempt: int
    task_attempt: int = 0
    rows: int = 0
    bytes: int = 0
    partitions: tuple[PartitionRef, ...] = ()
    staged: dict[str, Any] | None = None
    """A sink task's ``StagedPart`` as JSON."""
    splits: tuple[str, ...] = ()
    """The splits a read task consumed."""


@dataclass(frozen=True, slots=True)
class TaskReset:
    """A driver attempt found a finished task's output lost (or unknown to the snapshot): it is
    not finished any more, whatever a later snapshot says."""

    stage: str
    task: int


@dataclass(frozen=True, slots=True)
class CoordinatorSnapshot:
    """A source enumerator's state (``NO_CHECKPOINT``), base64 of its snapshot bytes."""

    coordinator: str
    data: str
    splits_finished: int = 0


@dataclass(frozen=True, slots=True)
class OutputPlanned:
    """The sink batch this run publishes as: chosen once per run, so every attempt stages for
    the same batch and a publish that crashed is recognised as this run's."""

    sink: str
    batch_id: int


@dataclass(frozen=True, slots=True)
class OutputCommitted:
    """The sink published its part of the job's output: no later attempt publishes it again."""

    sink: str
    rows: int


READ_TASKS_PER_CORE = 16
"""Reader tasks per core of a large read. A crash loses the splits of the tasks running then (a
finished task's are kept): at most ``cores * quota``, about 1/16 of the read. Measured by
benchmarks/batch_crashes.py: 4 per core lost up to 25 % of the input at a crash, 16 at most 7 %."""


def read_shape(
    splits: int,
    cores: int,
    recorded: int | None = None,
    *,
    input_bytes: int | None = None,
    task_bytes: int = 0,
) -> tuple[int, int]:
    """The reader tasks of a bounded read of ``splits`` splits (``input_bytes`` in all, when
    known) on ``cores`` task slots, and the most splits each takes (its quota): small tasks, but
    none below ``task_bytes`` (``spec.recovery.readTaskSize``; 0: no floor) unless that would
    leave a core idle; every split taken by some task. A read an earlier attempt initialized
    keeps its ``recorded`` tasks, whatever the cores are now.

    Why a floor in bytes: each task costs ~0.1 s of its own (its Python reader and writer,
    coordinator calls, an upload, one more partition for the next stage to read), and 16 per core
    made the 450 MB staged benchmark 1.34x slower than 4 per core. A 64 MB task reads for ~2 s
    here (Spark's own file splits are up to 128 MB), so that is ~5 %, and what a crash loses
    stays bounded either way: the running tasks' input, or 1/16 of a larger read.
    """
    cores = max(1, cores)
    most = READ_TASKS_PER_CORE * cores
    if input_bytes is not None and task_bytes > 0:
        most = min(most, max(cores, -(-input_bytes // task_bytes)))
    parallelism = recorded or max(1, min(splits, most))
    return parallelism, max(1, -(-splits // parallelism))


def sink_stage_name(sink: str) -> str:
    """The stage that stages a sink's output (what ``StageInitialized`` names it)."""
    return f"sink-{sink}"


EVENT_TYPES: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        StageInitialized,
        TaskFinished,
        TaskReset,
        CoordinatorSnapshot,
        OutputPlanned,
        OutputCommitted,
    )
}


def decode_event(type_name: str, data: Mapping[str, Any]) -> object | None:
    """The typed event back from the log; ``None`` for a type this version does not know."""
    cls = EVENT_TYPES.get(type_name)
    if cls is None:
        return None
    values = dict(data)
    if cls is TaskFinished:
        values["partitions"] = tuple(PartitionRef(**p) for p in values.get("partitions", ()))
        values["splits"] = tuple(values.get("splits", ()))
    if cls is StageInitialized:
        values["inputs"] = tuple(values.get("inputs", ()))
    known = {f.name for f in dataclasses.fields(cls)}
    typed: object = cls(**{k: v for k, v in values.items() if k in known})
    return typed


# -- replay --------------------------------------------------------------------------------------


@dataclass
class StageRecord:
    """One stage as the log describes it."""

    init: StageInitialized
    finished: dict[int, tuple[int, TaskFinished]] = field(default_factory=dict)
    """task -> (sequence number, the last TaskFinished of it)."""

    @property
    def name(self) -> str:
        return self.init.stage


@dataclass
class JobLog:
    """The replayed log: stages in order, newest snapshot per source, per sink its planned
    batch and whether it published."""

    stages: dict[str, StageRecord] = field(default_factory=dict)
    snapshots: dict[str, tuple[int, CoordinatorSnapshot]] = field(default_factory=dict)
    planned: dict[str, OutputPlanned] = field(default_factory=dict)
    committed: dict[str, OutputCommitted] = field(default_factory=dict)
    last_seq: int = 0


def replay(events: Iterable[tuple[int, object]]) -> JobLog:
    """Fold ``(seq, event)`` pairs, in sequence order, into a :class:`JobLog`."""
    job = JobLog()
    for seq, event in events:
        job.last_seq = max(job.last_seq, seq)
        if isinstance(event, StageInitialized):
            job.stages.setdefault(event.stage, StageRecord(event))
        elif isinstance(event, TaskFinished):
            record = job.stages.get(event.stage)
            if record is not None:
                record.finished[event.task] = (seq, event)
        elif isinstance(event, TaskReset):
            record = job.stages.get(event.stage)
            if record is not None:
                record.finished.pop(event.task, None)
        elif isinstance(event, CoordinatorSnapshot):
            job.snapshots[event.coordinator] = (seq, event)
        elif isinstance(event, OutputPlanned):
            job.planned.setdefault(event.sink, event)
        elif isinstance(event, OutputCommitted):
            job.committed[event.sink] = event
    return job


def live_events(events: Iterable[JobEvent]) -> list[JobEvent]:
    """The events a replay still needs, with their sequence numbers: what compaction keeps.

    ``replay`` of the result equals ``replay`` of ``events``: the first ``StageInitialized`` of
    each stage, each task's last ``TaskFinished`` unless a ``TaskReset`` came after it, each
    source's newest ``CoordinatorSnapshot``, each sink's first ``OutputPlanned`` and last
    ``OutputCommitted``. Events of types this version does not know are kept for the one that
    wrote them.
    """
    stages: dict[str, JobEvent] = {}
    finished: dict[tuple[str, int], JobEvent] = {}
    snapshots: dict[str, JobEvent] = {}
    planned: dict[str, JobEvent] = {}
    committed: dict[str, JobEvent] = {}
    unknown: list[JobEvent] = []
    for event in events:
        typed = decode_event(event.type, event.data)
        if isinstance(typed, StageInitialized):
            stages.setdefault(typed.stage, event)
        elif isinstance(typed, TaskFinished):
            if typed.stage in stages:
                finished[typed.stage, typed.task] = event
        elif isinstance(typed, TaskReset):
            finished.pop((typed.stage, typed.task), None)
        elif isinstance(typed, CoordinatorSnapshot):
            snapshots[typed.coordinator] = event
        elif isinstance(typed, OutputPlanned):
            planned.setdefault(typed.sink, event)
        elif isinstance(typed, OutputCommitted):
            committed[typed.sink] = event
        else:
            unknown.append(event)
    kept = [
        *stages.values(),
        *finished.values(),
        *snapshots.values(),
        *planned.values(),
        *committed.values(),
    ]
    return sorted([*kept, *unknown], key=lambda event: event.seq)


# -- recovery ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Listed:
    """A partition a shuffle server lists: what recovery compares a TaskFinished with."""

    server: str
    sha256: str


@dataclass
class Recovery:
    """What survived a driver crash and what it costs."""

    finished: dict[str, dict[int, TaskFinished]]
    """Per stage, the tasks whose output survived."""
    reset: dict[str, set[int]]
    """Per stage, tasks that had finished but must run again (output lost, or no snapshot)."""
    restore: dict[str, CoordinatorSnapshot | None]
    """Per source, the snapshot to restore its enumerator from (``None``: from scratch)."""
    committed: frozenset[str]
    """The sinks that published already."""
    late: dict[str, dict[int, tuple[str, ...]]] = field(default_factory=dict)
    """Per read stage, the surviving tasks that finished after their source's newest snapshot,
    with the splits they read: the restored enumerator does not know them finished, so the
    driver finishes them there again (a task whose splits cannot be is run again after all)."""

    def finished_tasks(self) -> set[TaskId]:
        return {TaskId(stage, task) for stage, tasks in self.finished.items() for task in tasks}


def recover(
    job: JobLog,
    listed: Mapping[tuple[str, int], Listed],
    staged_exists: Callable[[str, Mapping[str, Any]], bool],
) -> Recovery:
    """Decide which finished tasks survive (FLIP-383 steps 3 and 4, before scheduling).

    ``listed`` maps (dataset, partition) to what the live shuffle servers list;
    ``staged_exists(stage, staged)`` says whether a sink task's staged file is still there. The
    tasks of a sink that published survive without it: its publish cleaned the staging up, and
    a sink publishes once per run. A read task survives once its source has any snapshot: one
    that finished after the newest is ``late``, its splits finished again from its event.
    """
    finished: dict[str, dict[int, TaskFinished]] = {}
    reset: dict[str, set[int]] = {}
    late: dict[str, dict[int, tuple[str, ...]]] = {}
    published = {sink_stage_name(sink) for sink in job.committed}
    for name, record in job.stages.items():
        kept: dict[int, TaskFinished] = {}
        lost: set[int] = set()
        snapshot = job.snapshots.get(record.init.source or "")
        for task, (seq, event) in record.finished.items():
            if record.init.kind == StageKind.SINK:
                survives = name in published or (
                    event.staged is not None and staged_exists(name, event.staged)
                )
            else:
                survives = all(
                    (found := listed.get((p.dataset, p.partition))) is not None
                    and found.sha256 == p.sha256
                    for p in event.partitions
                )
            if survives and record.init.kind == StageKind.READ:
                # Without a snapshot the enumerator lists its input anew, which may have
                # changed: only a snapshot fixes the set of splits the log's ids refer to.
                survives = snapshot is not None
                if snapshot is not None and snapshot[0] < seq:
                    late.setdefault(name, {})[task] = event.splits
            if survives:
                kept[task] = event
            else:
                lost.add(task)
        finished[name] = kept
        reset[name] = lost
    restore: dict[str, CoordinatorSnapshot | None] = {
        source: snapshot for source, (_, snapshot) in job.snapshots.items()
    }
    return Recovery(finished, reset, restore, frozenset(job.committed), late)


# -- scheduling ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StageShape:
    """A stage as the program declares it (the graph's vertex and its inputs)."""

    name: str
    kind: StageKind
    parallelism: int
    inputs: tuple[str, ...] = ()
    narrow: bool = False


def job_graph(stages: Sequence[StageShape]) -> JobGraph:
    """The job graph: a narrow stage reads its input POINTWISE, any other ALL_TO_ALL."""
    vertices = [JobVertex(s.name, s.parallelism) for s in stages]
    edges = [
        JobEdge(source, s.name, EdgeKind.POINTWISE if s.narrow else EdgeKind.ALL_TO_ALL)
        for s in stages
        for source in s.inputs
    ]
    return JobGraph(vertices, edges)


def schedule(stages: Sequence[StageShape], finished: set[TaskId]) -> dict[str, list[int]]:
    """Per stage, the tasks to run, walking up from the unfinished sink tasks (FLIP-383 step 4).

    A stage left out runs nothing: its output survived or nobody unfinished needs it.
    """
    graph = job_graph(stages)
    sizes = {s.name: s.parallelism for s in stages}
    known = {t for t in finished if 0 <= t.subtask < sizes.get(t.vertex, 0)}
    plan: dict[str, list[int]] = {}
    for task in tasks_to_restart(graph, known):
        plan.setdefault(task.vertex, []).append(task.subtask)
    return {name: sorted(tasks) for name, tasks in plan.items()}
