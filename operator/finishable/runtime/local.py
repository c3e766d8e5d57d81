"""Local jobs: where ``finishable run`` keeps a job's state, and steering a running one.

A local job lives in ``<state dir>/<job>/`` (``.finishable/<job>/`` in the working directory by
default): the control channel files, Spark's checkpoint, the snapshot store. ``finishable stop``,
``finishable savepoint`` and ``finishable status`` act on it through the same control channel the
operator uses in a cluster, so both paths exercise the same driver code.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from finishable.api.control import DriverReport, RequestOutcome, RequestReport
from finishable.api.models import ControlRequest, RequestAction, is_valid_job_name
from finishable.runtime.control import LocalControlChannel

DEFAULT_STATE_DIR = Path(".finishable")


class LocalJobError(ValueError):
    """A local job that does not exist or cannot be steered; the message says what to do."""


@dataclass(frozen=True)
class LocalJob:
    """A job's directory and its control channel."""

    name: str
    directory: Path

    @property
    def channel(self) -> LocalControlChannel:
        return LocalControlChannel(self.directory)


def local_job(name: str, state_dir: Path | None = None, *, must_exist: bool = True) -> LocalJob:
    """The local job ``name`` under ``state_dir``; refuses names that are not job names."""
    if not is_valid_job_name(name):
        raise LocalJobError(f"{name!r} is not a job name (metadata.name of a manifest)")
    root = state_dir or DEFAULT_STATE_DIR
    job = LocalJob(name, root / name)
    if must_exist and not job.directory.is_dir():
        raise LocalJobError(
            f"no local job {name!r} under {root}/: start it with `finishable run MANIFEST`"
            + ("" if state_dir else " or pass --state-dir")
        )
    return job


def send_request(job: LocalJob, action: RequestAction, *, drain: bool = False) -> ControlRequest:
    """Write a stop or savepoint request for the job's driver."""
    suffix = "-drain" if drain else ""
    request = ControlRequest(
        id=f"{action.value}{suffix}-{uuid.uuid4().hex[:8]}",
        action=action,
        drain=drain,
        requested_at=datetime.now(UTC),
    )
    job.channel.send(request)
    return request


def wait_for_answer(
    job: LocalJob,
    request: ControlRequest,
    timeout: float,
    *,
    poll: float = 0.2,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> RequestReport | None:
    """The driver's final answer to ``request``, or None when ``timeout`` passes first."""
    deadline = clock() + timeout
    while True:
        report = job.channel.read_report()
        answer = report.request if report is not None else None
        if (
            answer is not None
            and answer.id == request.id
            and answer.outcome is not RequestOutcome.IN_PROGRESS
        ):
            return answer
        if clock() >= deadline:
            return None
        sleep(poll)


def read_report(job: LocalJob) -> DriverReport:
    """The driver's newest report; :class:`LocalJobError` when it has written none yet."""
    report = job.channel.read_report()
    if report is None:
        raise LocalJobError(f"job {job.name!r} has not reported yet (is it starting?)")
    return report


def describe_report(report: DriverReport) -> list[str]:
    """The report as lines for people."""
    lines = [f"state: {report.state.value} (driver attempt {report.attempt})"]
    if report.message:
        lines.append(f"message: {report.message}")
    if report.last_checkpoint is not None:
        lines.append(f"last checkpoint: {report.last_checkpoint.id}")
    if report.savepoint is not None:
        drained = " (drained)" if report.savepoint.drained else ""
        lines.append(f"savepoint: {report.savepoint.location}{drained}")
    if report.coordinator is not None:
        progress = report.coordinator
        lines.append(f"splits: {progress.splits_finished} of {progress.splits_total} finished")
    if report.lifecycle is not None and report.lifecycle.mode is not None:
        lines.append(f"lifecycle: {report.lifecycle.mode.value}")
    if report.tasks_skipped or report.tasks_rerun or report.splits_reread:
        lines.append(
            f"recovery: {report.tasks_skipped} tasks skipped, {report.tasks_rerun} re-run, "
            f"{report.splits_reread} finished splits re-read"
        )
    if report.request is not None:
        answer = report.request
        detail = f": {answer.message}" if answer.message else ""
        lines.append(f"last request: {answer.id} {answer.outcome.value}{detail}")
    return lines
