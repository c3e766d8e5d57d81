"""Local jobs: the files of a job run by ``finishable run``, and steering it from another shell.

A local job lives in ``<state dir>/<job>/`` (``.finishable/<job>/`` by default). ``finishable run``
plays the operator there: it reads the desired state, runs the driver process, and keeps the
job's status with the same phase machine the operator uses. The other commands play ``kubectl``:
``finishable stop`` edits the desired state (as ``kubectl patch ... state: Suspended`` would),
``finishable savepoint`` bumps the savepoint nonce, ``finishable status`` reads the status and
the driver's report. Files:

* ``desired.json``  the spec fields a user changes while the job runs, with a generation;
* ``status.json``   the job's status, written only by the runner (one writer);
* ``control.json``, ``state.json``  the control channel between the runner and the driver;
* ``job.json``      the job configuration handed to the driver;
* ``uid``           the job's identity (a uuid), as a custom resource's uid: written when the
  directory is created, so ``--fresh`` (a new directory) is a new job whose state is its own;
* ``runner.lock``   held (``flock``) by the live ``finishable run`` of the job, with its pid and
  manifest. Only a live runner acts on ``stop`` and ``savepoint``, so they check it first; a
  lock is released by the kernel when its holder dies however it dies, and unlike a pid file it
  cannot be mistaken for an unrelated process that reused the pid.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from finishable.api.control import DriverReport
from finishable.api.models import (
    ConditionStatus,
    ConditionType,
    DesiredState,
    Phase,
    is_valid_job_name,
)
from finishable.api.status import FinishableSparkJobStatus
from finishable.state.control import LocalControlChannel

DEFAULT_STATE_DIR = Path(".finishable")
PARTITIONS_DIR = "_partitions"
"""Local cluster partitions, under the state directory (no job name starts with "_")."""
SETTLED_PHASES = frozenset({Phase.SUSPENDED, Phase.FINISHED, Phase.FAILED})
RUNNER_LOCK = "runner.lock"
LOCK_ATTEMPTS = 20
"""How often a starting runner tries the lock, 50 ms apart: a ``finishable stop`` that tests it
holds it for a moment, and must not make the runner take itself for the second one."""


class LocalJobError(ValueError):
    """A local job that does not exist or cannot be steered; the message says what to do."""


@dataclass(frozen=True)
class Desired:
    """The user-editable part of a local job's spec, with the generation of the last edit."""

    generation: int = 1
    state: DesiredState | None = None
    savepoint_trigger_nonce: int | None = None


@dataclass(frozen=True)
class Runner:
    """What the job's ``runner.lock`` says: is a runner holding it, and who held it last."""

    alive: bool
    pid: int | None = None
    manifest: str | None = None


@dataclass(frozen=True)
class LocalJob:
    """A job's directory and the files in it."""

    name: str
    directory: Path

    @property
    def channel(self) -> LocalControlChannel:
        return LocalControlChannel(self.directory)

    @property
    def status_file(self) -> Path:
        return self.directory / "status.json"

    @property
    def desired_file(self) -> Path:
        return self.directory / "desired.json"

    @property
    def config_file(self) -> Path:
        return self.directory / "job.json"

    @property
    def lock_file(self) -> Path:
        return self.directory / RUNNER_LOCK

    @property
    def uid(self) -> str:
        """The job's identity; created on first use, like the uid of a custom resource."""
        path = self.directory / "uid"
        try:
            return path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            uid = str(uuid.uuid4())
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(uid + "\n", encoding="utf-8")
            return uid

    # -- the runner's lock ------------------------------------------------------------------

    @contextlib.contextmanager
    def runner_lock(self, manifest: Path) -> Iterator[None]:
        """Hold the job as its one runner while the block runs; refuse if another holds it."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            if not _try_lock(fd, fcntl.LOCK_EX, LOCK_ATTEMPTS):
                other = self.runner()
                who = f" (pid {other.pid})" if other.pid else ""
                raise LocalJobError(
                    f"job {self.name!r} is already run by another `finishable run`{who} at "
                    f"{self.directory}: steer it with `finishable stop {self.name}`, or end that "
                    "runner first"
                )
            record = {"pid": os.getpid(), "manifest": str(manifest.resolve())}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(record).encode(), 0)
            yield
        finally:
            os.close(fd)  # releases the lock; the file stays, with the last runner's record

    def runner(self) -> Runner:
        """Whether a live ``finishable run`` holds the job, and the last runner's record."""
        try:
            fd = os.open(self.lock_file, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return Runner(alive=False)
        with os.fdopen(fd, "rb") as handle:
            alive = not _try_lock(fd, fcntl.LOCK_SH, 1)  # a free lock is released on close
            try:
                record = json.loads(handle.read() or b"{}")
            except ValueError:
                record = {}
        pid = record.get("pid") if isinstance(record, dict) else None
        manifest = record.get("manifest") if isinstance(record, dict) else None
        return Runner(
            alive=alive,
            pid=pid if isinstance(pid, int) else None,
            manifest=manifest if isinstance(manifest, str) else None,
        )

    def clear(self) -> None:
        """Remove the job's files (``--fresh``), all but the lock its runner holds."""
        for entry in self.directory.iterdir():
            if entry.name == RUNNER_LOCK:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()

    # -- desired state (written by the steering commands) ---------------------------------

    def read_desired(self) -> Desired:
        document = _read_json(self.desired_file)
        state = document.get("state")
        nonce = document.get("savepointTriggerNonce")
        return Desired(
            generation=int(document.get("generation", 1)),
            state=DesiredState(state) if state else None,
            savepoint_trigger_nonce=int(nonce) if nonce is not None else None,
        )

    def edit_desired(self, **changes: Any) -> Desired:
        """Apply a change the way ``kubectl patch`` does: a new generation."""
        current = _read_json(self.desired_file)
        updated = {**current, **changes, "generation": int(current.get("generation", 1)) + 1}
        _write_json(self.desired_file, updated)
        return self.read_desired()

    # -- status (written by the runner only) ------------------------------------------------

    def read_status(self) -> FinishableSparkJobStatus | None:
        document = _read_json(self.status_file)
        if not document:
            return None
        try:
            return FinishableSparkJobStatus.model_validate(document)
        except ValidationError:
            return None

    def write_status(self, status: FinishableSparkJobStatus) -> None:
        _write_json(
            self.status_file, status.model_dump(mode="json", by_alias=True, exclude_none=True)
        )


def _try_lock(fd: int, kind: int, attempts: int) -> bool:
    """Take ``flock`` ``kind`` on ``fd`` without blocking; False if another process holds it."""
    for attempt in range(attempts):
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
        except BlockingIOError:
            if attempt + 1 < attempts:
                time.sleep(0.05)
            continue
        return True
    return False


def _read_json(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}


def _write_json(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(document, indent=2), encoding="utf-8")
    os.replace(temporary, path)


def local_job(name: str, state_dir: Path | None = None, *, must_exist: bool = True) -> LocalJob:
    """The local job ``name`` under ``state_dir``; refuses names that are not job names."""
    if not is_valid_job_name(name):
        raise LocalJobError(f"{name!r} is not a job name (metadata.name of a manifest)")
    root = state_dir or DEFAULT_STATE_DIR
    job = LocalJob(name, root / name)
    if must_exist and not job.status_file.is_file():
        raise LocalJobError(
            f"no local job {name!r} under {root}/: start it with `finishable run MANIFEST`"
            + ("" if state_dir else " or pass --state-dir")
        )
    return job


def wait_for(
    job: LocalJob,
    settled: Callable[[FinishableSparkJobStatus], bool],
    timeout: float,
    *,
    poll: float = 0.2,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> FinishableSparkJobStatus | None:
    """The job's status once ``settled`` says so, or None when ``timeout`` passes first."""
    deadline = clock() + timeout
    while True:
        status = job.read_status()
        if status is not None and settled(status):
            return status
        if clock() >= deadline:
            return None
        sleep(poll)


def nothing_runs(
    job: LocalJob,
    runner: Runner,
    status: FinishableSparkJobStatus | None,
    command: str,
    state_dir: str | None,
    *,
    recorded: bool = False,
) -> str:
    """Why ``command`` on a job without a live ``finishable run`` would wait forever, and what
    to do instead: only the runner acts on requests, as only the operator acts on a spec.

    ``recorded``: the request is in ``desired.json`` already (its runner ended while it waited),
    so the next run carries it out.
    """
    phase = status.phase if status is not None else None
    run = run_command(runner, state_dir)
    if recorded:
        return (
            f"{job.name}: its `finishable run` ended before {command} was done (the job was "
            f"{phase.value if phase else 'not started'}): `{run}` continues it from its last "
            "checkpoint and then carries out the request"
        )
    if phase is Phase.SUSPENDED:
        return (
            f"{job.name}: the job is Suspended and no `finishable run` runs it, so nothing would "
            f"act on {command}: resume it with `{run} --resume`, then repeat {command}"
        )
    if phase in (Phase.FINISHED, Phase.FAILED):
        return (
            f"{job.name}: the job ended {phase.value} and no `finishable run` runs it, so "
            f"nothing would act on {command} (`{run} --fresh` starts it again)"
        )
    was = f" (its runner ended while it was {phase.value})" if phase is not None else ""
    return (
        f"{job.name}: no `finishable run` runs this job{was}, so nothing would act on "
        f"{command}. Run `{run}` to continue it from its last checkpoint, then repeat {command}"
    )


def run_command(runner: Runner, state_dir: str | None) -> str:
    """The ``finishable run`` that continues a job: its last runner's manifest, if recorded."""
    manifest = "MANIFEST"
    if runner.manifest:
        relative = os.path.relpath(runner.manifest)
        manifest = runner.manifest if relative.startswith("..") else relative
    return f"finishable run {manifest}" + (f" --state-dir {state_dir}" if state_dir else "")


def degraded(status: FinishableSparkJobStatus, generation: int) -> str | None:
    """The Degraded message set for ``generation`` (a failed or refused request), if any."""
    for condition in status.conditions:
        if (
            condition.type is ConditionType.DEGRADED
            and condition.status is ConditionStatus.TRUE
            and condition.observed_generation == generation
        ):
            return condition.message
    return None


def report_document(job: LocalJob) -> dict[str, Any]:
    """What ``finishable status --json`` prints: the phase and the driver's newest report."""
    status = job.read_status()
    report = job.channel.read_report()
    document: dict[str, Any] = {}
    if status is not None:
        document["phase"] = status.phase.value
        document["message"] = status.message
        document["attempt"] = status.attempt
        document["restarts"] = status.restarts
        document["restartsLeft"] = status.restarts_left
        document["departures"] = status.departures
        if status.departure is not None:
            document["departure"] = status.departure.model_dump(
                mode="json", by_alias=True, exclude_none=True
            )
        document["recovery"] = status.recovery.model_dump(
            mode="json", by_alias=True, exclude_none=True
        )
    if report is not None:
        document["driver"] = report.model_dump(mode="json", by_alias=True, exclude_none=True)
    return document


def describe(status: FinishableSparkJobStatus, report: DriverReport | None) -> list[str]:
    """The status and the report as lines for people."""
    lines = [f"phase: {status.phase.value} (attempt {status.attempt}): {status.message}"]
    if status.last_checkpoint is not None:
        lines.append(f"last checkpoint: {status.last_checkpoint.id}")
    if status.savepoint is not None:
        drained = " (drained)" if status.savepoint.drained else ""
        lines.append(f"savepoint: {status.savepoint.location}{drained}")
    progress = status.coordinator
    if progress.splits_total:
        lines.append(f"splits: {progress.splits_finished} of {progress.splits_total} finished")
    if status.lifecycle.mode is not None:
        lines.append(f"lifecycle: {status.lifecycle.mode.value}")
    recovery = status.recovery
    if status.restarts:
        lines.append(
            f"recovery: {status.restarts} driver restarts; {recovery.tasks_skipped} tasks "
            f"skipped, {recovery.tasks_rerun} re-run, {recovery.splits_reread} splits re-read"
            + ("" if status.restarts_left is None else f"; {status.restarts_left} restarts left")
        )
    departure = status.departure
    if status.departures and departure is not None:
        origin = departure.savepoint or "its newest checkpoint"
        lines.append(
            f"departures: {status.departures} (not charged to the restart budget); the last: "
            f"attempt {departure.attempt} left ({departure.reason.value}), resumed from {origin}"
        )
    for condition in status.conditions:
        if condition.type is ConditionType.DEGRADED and condition.status is ConditionStatus.TRUE:
            lines.append(f"degraded: {condition.message}")
    if report is not None and report.message:
        lines.append(f"driver: {report.message}")
    return lines
