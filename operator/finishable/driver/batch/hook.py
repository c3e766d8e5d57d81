"""The calls a Batch job's tasks make to the driver: ``/v1/runtime/{action}`` on the endpoint.

A reader task announces its start (its subtask's earlier attempts are failed and the subtask is
reset, so it reads from scratch; a task already committed reads nothing, its splits staying
finished) and the end of its share (``task-read``); every task reports its finish (its splits
are finished in the enumerator, its partitions and staged file logged as ``TaskFinished``); a
stage task asks where a partition of its input lives.

The driver is the commit coordinator of task attempts: a stage task uploads its partition
uncommitted and the driver commits it only for the one attempt it accepts per task and round,
which for a reader task must still be live in its source's coordinator and must have read its
share to the end. A late attempt (whose splits were handed to a later one), a duplicate
(speculation) or a reader that stopped short is refused and its upload never becomes the
partition, so whatever attempts race, each split's rows are in the output once. Stopping short is
what a suspended reader does, and what a writer sees as the end of its input when Spark cancels
its task (a sibling failed): Python's end of input looks the same either way.
"""

from __future__ import annotations

import logging
from typing import Any

from finishable.coordinator.contract import NO_CHECKPOINT
from finishable.coordinator.events import SplitFinished
from finishable.driver.batch.core import DeclaredStage, RuntimeCore
from finishable.driver.batch.joblog import PartitionRef, TaskFinished
from finishable.timings import TASKS_PREFIX

log = logging.getLogger(__name__)


class TaskHookMixin(RuntimeCore):
    """Answers the runtime calls of tasks (the endpoint's runtime hook)."""

    def _hook(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        if action == "task-start":
            with self.timings.phase("hook.task_start"):
                return self._task_start(body)
        if action == "task-read":
            return self._task_read(body)
        if action == "task-finished":
            with self.timings.phase("hook.task_finished"):
                return self._task_finished(body)
        if action == "locations":
            return self._locations(body)
        raise ValueError(f"unknown runtime action {action!r}")

    def _stage_named(self, name: object) -> DeclaredStage:
        stage = next((s for s in self._stages if s.name == name), None)
        if stage is None:
            raise ValueError(f"no stage named {name!r} in this job")
        return stage

    def _task_start(self, body: dict[str, Any]) -> dict[str, Any]:
        stage = self._stage_named(body.get("stage"))
        if stage.read is None:
            raise ValueError(f"stage {stage.name!r} reads no source")
        subtask, attempt = int(body["task"]), int(body["attempt"])
        host = stage.read.coordinator.host
        with self._lock:
            if subtask in stage.finished:
                # Spark runs a committed task again when its executor went away before the
                # task's result reached Spark: its splits stay finished (their rows are in the
                # committed partition) and this attempt reads nothing.
                log.info(
                    "stage %s: task %d is committed; attempt %d reads nothing",
                    stage.name,
                    subtask,
                    attempt,
                )
                return {"ok": True, "committed": True}
            live = host.live_attempts().result(30).get(subtask, [])
            for old in live:
                host.execution_attempt_failed(subtask, old, None).result(30)
            if live:
                host.subtask_reset(subtask, NO_CHECKPOINT).result(30)
            host.execution_attempt_ready(subtask, attempt).result(30)
        return {"ok": True}

    def _task_read(self, body: dict[str, Any]) -> dict[str, Any]:
        stage = self._stage_named(body.get("stage"))
        with self._lock:
            self._read_to_the_end.add((stage.name, int(body["task"]), int(body["attempt"])))
        return {"ok": True}

    def _task_finished(self, body: dict[str, Any]) -> dict[str, Any]:
        stage = self._stage_named(body.get("stage"))
        task, attempt = int(body["task"]), int(body["attempt"])
        round_number = int(body.get("round", -1))
        splits: tuple[str, ...] = ()
        with self._lock:
            refusal = self._refusal(stage, task, attempt, round_number)
            if refusal is not None:
                log.warning("stage %s: %s; its output is not committed", stage.name, refusal)
                return {"ok": False, "refused": refusal}
            partitions = self._commit_upload(body.get("upload"))
            self._accepted[stage.name, task] = (round_number, attempt)
            if stage.read is not None:
                host = stage.read.coordinator.host
                view = host.inspect(lambda c: c.assignment_view()).result(30)  # type: ignore[attr-defined]
                splits = tuple(sorted(view.held.get((task, attempt), ())))
                if splits:
                    host.handle_event_from_operator(task, attempt, SplitFinished(splits)).result(30)
            event = TaskFinished(
                stage=stage.name,
                task=task,
                attempt=self.attempt,
                task_attempt=int(body.get("task_attempt", 0)),
                rows=int(body.get("rows", 0)),
                bytes=int(body.get("bytes", 0)),
                partitions=partitions,
                staged=body.get("staged"),
                splits=splits,
            )
            self.events.append(event, type="TaskFinished")
            stage.finished[task] = event
            self._add_task_timings(stage.name, body.get("timings"))
            if stage.read is not None:
                self._snapshot(stage.read)
        self._report_progress(stage)
        return {"ok": True}

    def _add_task_timings(self, stage: str, timings: object) -> None:
        """The accepted attempt's seconds per part (``finishable.timings``), as task-seconds."""
        if isinstance(timings, dict):
            for part, seconds in timings.items():
                if isinstance(seconds, int | float):
                    self.timings.add(f"{TASKS_PREFIX}{stage}.{part}", float(seconds))

    def _refusal(
        self, stage: DeclaredStage, task: int, attempt: int, round_number: int
    ) -> str | None:
        """Why this attempt's output must not be committed, or None to commit it."""
        accepted = self._accepted.get((stage.name, task))
        if accepted is not None and accepted[0] == round_number:
            return (
                f"task {task} of round {round_number} was committed by attempt {accepted[1]}; "
                f"attempt {attempt} is a duplicate"
            )
        if stage.read is not None:
            live = stage.read.coordinator.host.live_attempts().result(30).get(task, [])
            if attempt not in live:
                return (
                    f"attempt {attempt} of task {task} is no longer live: a later attempt "
                    "took over its splits"
                )
            if (stage.name, task, attempt) not in self._read_to_the_end:
                return (
                    f"attempt {attempt} of task {task} did not read its share to the end "
                    "(suspended, or its Spark task was cancelled): its output is partial"
                )
        return None

    def _commit_upload(self, upload: dict[str, Any] | None) -> tuple[PartitionRef, ...]:
        """Commit the accepted attempt's upload on its server (fenced by this driver's epoch)."""
        if not upload:
            return ()
        server = str(upload["server"])
        info = self.shuffle.client(server).commit(
            str(upload["dataset"]),
            int(upload["partition"]),
            str(upload["id"]),
            epoch=(self.config.run, self.attempt),
        )
        reference = PartitionRef(
            server, info.dataset, info.partition, info.sha256, info.rows, info.bytes
        )
        return (reference,)

    def _locations(self, body: dict[str, Any]) -> dict[str, Any]:
        stage = self._stage_named(body.get("dataset"))
        event = stage.finished.get(int(body.get("partition", -1)))
        if event is None or not event.partitions:
            return {"server": None}
        return {"server": event.partitions[0].server, "sha256": event.partitions[0].sha256}
