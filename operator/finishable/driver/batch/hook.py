"""The calls a Batch job's tasks make to the driver: ``/v1/runtime/{action}`` on the endpoint.

A reader task announces its start (its subtask's earlier attempts are failed and the subtask is
reset, so it reads from scratch); every task reports its finish (its splits are finished in the
enumerator, its partitions and staged file logged as ``TaskFinished``); a stage task asks where
a partition of its input lives.
"""

from __future__ import annotations

from typing import Any

from finishable.coordinator.contract import NO_CHECKPOINT
from finishable.coordinator.events import SplitFinished
from finishable.driver.batch.core import DeclaredStage, RuntimeCore
from finishable.driver.batch.plan import PartitionRef, TaskFinished


class TaskHookMixin(RuntimeCore):
    """Answers the runtime calls of tasks (the endpoint's runtime hook)."""

    def _hook(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        if action == "task-start":
            return self._task_start(body)
        if action == "task-finished":
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
            live = host.live_attempts().result(30).get(subtask, [])
            for old in live:
                host.execution_attempt_failed(subtask, old, None).result(30)
            if live:
                host.subtask_reset(subtask, NO_CHECKPOINT).result(30)
            host.execution_attempt_ready(subtask, attempt).result(30)
        return {"ok": True}

    def _task_finished(self, body: dict[str, Any]) -> dict[str, Any]:
        stage = self._stage_named(body.get("stage"))
        task, attempt = int(body["task"]), int(body["attempt"])
        splits: tuple[str, ...] = ()
        with self._lock:
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
                partitions=tuple(PartitionRef(**p) for p in body.get("partitions", ())),
                staged=body.get("staged"),
                splits=splits,
            )
            self.events.append(event, type="TaskFinished")
            stage.finished[task] = event
            if stage.read is not None:
                self._snapshot(stage.read)
        self._report_progress(stage)
        return {"ok": True}

    def _locations(self, body: dict[str, Any]) -> dict[str, Any]:
        stage = self._stage_named(body.get("dataset"))
        event = stage.finished.get(int(body.get("partition", -1)))
        if event is None or not event.partitions:
            return {"server": None}
        return {"server": event.partitions[0].server, "sha256": event.partitions[0].sha256}
