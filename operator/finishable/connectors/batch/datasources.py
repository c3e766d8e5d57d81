"""The Spark side of Batch jobs: reader tasks, stage writers and stage readers.

Like the streaming source (docs/architecture.md, *PySpark facts*), none of this runs in the
driver's Python process: the readers' ``partitions()`` run once when a DataFrame is loaded,
``read()`` and the writers on executors. So the DataFrames a program builds have a fixed number of
*slots* (Spark partitions), and the driver tells each run of a stage which task every slot is
through the Spark local property ``finishable.round`` (JSON: stage, round, driver attempt, the
tasks to run, the read quota, the shuffle servers). A slot without a task in this round reads and
writes nothing, so re-running three tasks of a stage costs three tasks.

* Reader slots (``finishable_read__<name>``): become subtask ``tasks[slot]``; pull splits one at a
  time from the driver's coordinator (``RequestSplit``) up to the round's quota, so tasks stay
  small and a crash loses little, and tell the driver when they read their whole share
  (``task-read``); every split read is appended to ``$FINISHABLE_SPLIT_AUDIT`` when that is set
  (how tests count re-reads at the readers).
* Stage writers (``mapInArrow``): stream the task's rows as one Arrow IPC partition to a shuffle
  server, then tell the driver (``task-finished``), which logs ``TaskFinished`` and finishes the
  splits: a split counts as finished only once its rows are committed.
* Sink writers: stage one file per task in the two-phase sink; the driver publishes them all on
  the final checkpoint.
* Stage readers (``finishable_stage__<name>``): one slot per result partition; the partition's
  location comes from the driver (``locations``) when the task runs.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from finishable.connectors.driver_calls import post_json
from finishable.connectors.reading import (
    ReaderSettings,
    SplitPartition,
    arrow_schema_of,
    read_partition,
)
from finishable.connectors.sink_store import SinkStore
from finishable.connectors.staging import TaskIdentity, stage_batches, staged_to_json
from finishable.coordinator.events import AddSplits, NoMoreSplits
from finishable.coordinator.splits import SentinelSplit
from finishable.shuffle.client import ShuffleClient
from finishable.shuffle.streams import ipc_chunks
from finishable.timings import timed_input

log = logging.getLogger(__name__)

ROUND_PROPERTY = "finishable.round"
AUDIT_ENV = "FINISHABLE_SPLIT_AUDIT"
SUMMARY_SCHEMA = "task long, rows long, bytes long"
_SAFE = re.compile(r"[^A-Za-z0-9_]")


class BatchTaskError(RuntimeError):
    """A batch task cannot go on (no round, the driver refused it, a partition is missing)."""


def format_name(kind: str, name: str) -> str:
    """A data source short name unique to one read or dataset (shows in Spark's plans)."""
    digest = zlib.crc32(name.encode("utf-8")) & 0xFFFF
    return f"finishable_{kind}__{_SAFE.sub('_', name)}_{digest:04x}"


def coordinator_attempt(driver_attempt: int, round_number: int, task_attempt: int) -> int:
    """A coordinator attempt number unique per driver attempt, round and Spark task attempt."""
    return (driver_attempt * 100_000 + round_number) * 10 + min(task_attempt, 9)


# -- the round ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Round:
    """What the driver asks of the slots of one stage run (a Spark local property)."""

    stage: str
    round: int
    attempt: int
    tasks: list[int]
    servers: list[str]
    quota: int = 0
    narrow: bool = False
    run: int = 1

    def to_property(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def current(cls) -> Round:
        context = TaskContext.get()
        raw = context.getLocalProperty(ROUND_PROPERTY) if context is not None else None
        if not raw:
            raise BatchTaskError(
                "this task runs outside a finishable batch round: run Batch DataFrames through "
                "job.stage()/job.write() and job.run(), not with actions of their own"
            )
        return cls(**json.loads(raw))

    def task_of_slot(self, slot: int, *, slotted: bool) -> int | None:
        """The task this slot runs: ``tasks[slot]`` for reader slots, ``slot`` if listed else."""
        if slotted:
            return self.tasks[slot] if slot < len(self.tasks) else None
        return slot if slot in self.tasks else None


# -- talking to the driver ------------------------------------------------------------------------


@dataclass(frozen=True)
class RuntimeClient:
    """Calls ``POST /v1/runtime/{action}`` on the driver's endpoint; retries while unreachable."""

    url: str
    token: str
    timeout: float = 300.0
    connect_retries: float = 60.0

    def call(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        return post_json(
            f"{self.url}/v1/runtime/{action}",
            self.token,
            body,
            timeout=self.timeout,
            connect_retries=self.connect_retries,
            refused=lambda code, text: BatchTaskError(
                f"the driver refused {action}: HTTP {code}: {text}"
            ),
            unreachable=lambda error: BatchTaskError(
                f"the driver at {self.url} did not answer {action}: {error}"
            ),
        )


# -- reading a source -----------------------------------------------------------------------------


class _Slot(InputPartition):
    def __init__(self, slot: int) -> None:
        super().__init__(slot)
        self.slot = slot


class BatchSourceReader(DataSourceReader):
    """Reader slots: each becomes a subtask of its round and pulls splits up to the quota."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        del schema  # the settings carry it
        self.settings, self.token = ReaderSettings.from_options(options)
        self.read_name = options["read"]
        self.slots = int(options["slots"])
        self.runtime = RuntimeClient(self.settings.endpoint, self.token)

    def partitions(self) -> list[InputPartition]:
        return [_Slot(slot) for slot in range(self.slots)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        plan = Round.current()
        context = TaskContext.get()
        assert context is not None  # Round.current() checked
        slot = partition.value
        subtask = plan.task_of_slot(slot, slotted=True)
        if subtask is None:
            return
        attempt = coordinator_attempt(plan.attempt, plan.round, context.attemptNumber())
        started = self.runtime.call(
            "task-start", {"stage": plan.stage, "task": subtask, "attempt": attempt}
        )
        if started.get("committed"):
            return  # Spark re-ran a task whose output the driver already committed
        client = self.settings.client(self.token)
        target = arrow_schema_of(self.settings.schema)
        audit = os.environ.get(AUDIT_ENV)
        read = 0
        try:
            while read < max(1, plan.quota):
                events = client.request_splits(self.settings.coordinator, subtask, attempt, 1)
                splits = [s for e in events if isinstance(e, AddSplits) for s in e.splits]
                for split in splits:
                    if audit and not isinstance(split, SentinelSplit):
                        _audit(audit, plan, subtask, attempt, split.split_id)
                    yield from read_partition(
                        SplitPartition(slot, (split,), attempt), self.settings, self.token, target
                    )
                read += len(splits)
                if any(isinstance(e, NoMoreSplits) for e in events):
                    break
                if not splits:
                    # Suspended: the task ends (failing it would make Spark cancel the tasks
                    # still running) without reporting its share read, so the driver commits
                    # none of it; its splits go back to the pool when it runs again.
                    log.info("read %r is suspended: subtask %d stops", self.read_name, subtask)
                    return
        finally:
            client.close()
        # Only here, once Spark asked for more after the last row: the whole share was read.
        # A task Spark cancels mid-read (a sibling failed, its executor went) never gets here,
        # and what its writer saw as the end of its input is refused (driver/batch/hook.py).
        self.runtime.call(
            "task-read", {"stage": plan.stage, "task": subtask, "attempt": attempt, "splits": read}
        )


def _audit(path: str, plan: Round, subtask: int, attempt: int, split_id: str) -> None:
    line = json.dumps(
        {
            "stage": plan.stage,
            "attempt": plan.attempt,
            "subtask": subtask,
            "split": split_id,
            "at": round(time.time(), 3),
        }
    )
    with open(path, "a", encoding="utf-8") as out:  # one short append: atomic on POSIX
        out.write(line + "\n")


def _source_class(
    kind: str,
    name: str,
    schema: StructType,
    reader: Callable[[Mapping[str, str], StructType], DataSourceReader],
) -> type[DataSource]:
    """A data source class of its own per read or dataset, so Spark's plans name it."""
    short = format_name(kind, name)
    schema_json = schema.json()

    class _Source(DataSource):
        @classmethod
        def name(cls) -> str:
            return short

        def schema(self) -> StructType:
            return StructType.fromJson(json.loads(schema_json))

        def reader(self, schema: StructType) -> DataSourceReader:
            return reader(self.options, schema)

    _Source.__name__ = _Source.__qualname__ = f"Source_{short}"
    return _Source


def read_source_class(read_name: str, schema: StructType) -> type[DataSource]:
    """Reader slots of one source read."""
    return _source_class("read", read_name, schema, BatchSourceReader)


# -- reading a staged dataset ---------------------------------------------------------------------


class StageReader(DataSourceReader):
    """One slot per result partition; where it lives is asked from the driver at read time."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.target = arrow_schema_of(schema)
        self.dataset = options["dataset"]
        self.slots = int(options["slots"])
        self.runtime = RuntimeClient(options["endpoint"], options["token"])
        self.token = options["token"]

    def partitions(self) -> list[InputPartition]:
        return [_Slot(slot) for slot in range(self.slots)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        plan = Round.current()
        slot = partition.value
        if plan.narrow and slot not in plan.tasks:
            return  # a narrow stage re-runs only some tasks: skip the others' input
        where = self.runtime.call("locations", {"dataset": self.dataset, "partition": slot})
        server = where.get("server")
        if not server:
            raise BatchTaskError(
                f"partition {slot} of dataset {self.dataset!r} has no location: its stage did "
                "not finish"
            )
        client = ShuffleClient(server, self.token)
        for batch in client.get(self.dataset, slot):
            # Spark hands mapInArrow timestamps in the session's zone and wants UTC back: the
            # same instants, another label (a cast of metadata only).
            yield batch if batch.schema == self.target else batch.cast(self.target)


def stage_source_class(dataset: str, schema: StructType) -> type[DataSource]:
    """One slot per result partition of a staged dataset."""
    return _source_class("stage", dataset, schema, StageReader)


# -- writers (mapInArrow functions) ---------------------------------------------------------------

ArrowFunction = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def _summary(task: int, rows: int, size: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"task": [task], "rows": [rows], "bytes": [size]},
        schema=pa.schema([("task", pa.int64()), ("rows", pa.int64()), ("bytes", pa.int64())]),
    )


def shuffle_server_for(servers: list[str], dataset: str, partition: int) -> str:
    """The server a partition goes to: a stable hash over this round's live servers."""
    if not servers:
        raise BatchTaskError("no shuffle server is available to this round")
    return servers[zlib.crc32(f"{dataset}/{partition}".encode()) % len(servers)]


def _this_task(plan: Round, *, slotted: bool) -> tuple[int, TaskContext] | None:
    """The task this Spark task runs in the round (``None``: an idle slot) and its context."""
    context = TaskContext.get()
    assert context is not None  # Round.current() found the property in it
    task = plan.task_of_slot(context.partitionId(), slotted=slotted)
    return None if task is None else (task, context)


def _finished(
    endpoint: str,
    token: str,
    plan: Round,
    *,
    task: int,
    context: TaskContext,
    rows: int,
    size: int,
    **output: Any,
) -> pa.RecordBatch:
    """Tell the driver the task's output is committed; the summary row the task returns."""
    RuntimeClient(endpoint, token).call(
        "task-finished",
        {
            "stage": plan.stage,
            "task": task,
            "round": plan.round,
            "attempt": coordinator_attempt(plan.attempt, plan.round, context.attemptNumber()),
            "task_attempt": context.attemptNumber(),
            "rows": rows,
            "bytes": size,
            **output,
        },
    )
    return _summary(task, rows, size)


def stage_writer(
    endpoint: str, token: str, dataset: str, schema: bytes, *, slotted: bool
) -> ArrowFunction:
    """Uploads the task's rows as one result partition, uncommitted, then reports the task: the
    driver commits the upload of the one attempt it accepts (a late or duplicate attempt's is
    never committed, and the server drops it once idle)."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        plan = Round.current()
        this = _this_task(plan, slotted=slotted)
        if this is None:
            return
        task, context = this
        started, waited = time.perf_counter(), [0.0]
        batches = timed_input(batches, waited)
        first = next(batches, None)
        arrow_schema = (
            first.schema if first is not None else pa.ipc.read_schema(pa.py_buffer(schema))
        )
        rows = [0]
        stream = _counted(batches if first is None else _chain(first, batches), rows)
        server = shuffle_server_for(plan.servers, dataset, task)
        label = f"a{plan.attempt}-r{plan.round}-t{context.attemptNumber()}"
        uploaded = ShuffleClient(server, token).upload(
            dataset, task, label, ipc_chunks(arrow_schema, stream), epoch=(plan.run, plan.attempt)
        )
        upload = {"server": server, "dataset": dataset, "partition": task, "id": uploaded.id}
        timings = _split(started, waited[0])
        yield _finished(
            endpoint,
            token,
            plan,
            task=task,
            context=context,
            rows=rows[0],
            size=uploaded.bytes,
            upload=upload,
            timings=timings,
        )

    return write


def _split(started: float, waited: float) -> dict[str, float]:
    """A writer task's seconds: waiting for its input rows, and writing them (the rest)."""
    total = time.perf_counter() - started
    return {"input": round(waited, 4), "output": round(max(0.0, total - waited), 4)}


def _counted(batches: Iterator[pa.RecordBatch], rows: list[int]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        rows[0] += batch.num_rows
        yield batch


def sink_writer(
    endpoint: str, token: str, sink_url: str, sink_name: str, file_format: str, *, batch_id: int
) -> ArrowFunction:
    """Stages the task's rows as one file of the two-phase sink, for sink batch ``batch_id``
    (the one the run publishes as), then reports the task."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        plan = Round.current()
        this = _this_task(plan, slotted=False)
        if this is None:
            return
        task, context = this
        identity = TaskIdentity(
            batch_id=batch_id,
            partition=task,
            task_attempt_id=context.taskAttemptId(),
            attempt=context.attemptNumber(),
        )
        started, waited = time.perf_counter(), [0.0]
        part = stage_batches(
            SinkStore(sink_url, sink_name),
            identity,
            timed_input(batches, waited),
            file_format,
            lambda b: (b, 0),
        )
        timings = _split(started, waited[0])
        yield _finished(
            endpoint,
            token,
            plan,
            task=task,
            context=context,
            rows=part.rows,
            size=part.size,
            staged=staged_to_json(part),
            timings=timings,
        )

    return write


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest
