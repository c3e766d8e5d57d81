"""``finishable run``: the operator's job, done locally for one job.

The runner is to a local job what the operator is to a FinishableSparkJob: it holds the desired
state (the manifest plus the edits of ``finishable stop`` / ``savepoint`` in ``desired.json``),
observes the driver (a child process instead of a pod) and its report, asks the same pure phase
machine (:func:`finishable.lifecycle.phases.next_status`) what to do, does it, and is the one
writer of ``status.json``. So stop, drain, savepoints and crash recovery behave locally exactly
as they will in a cluster, a warm standby driver's takeover included (``local/drivers.py``).

Ctrl-C and SIGTERM (``kill``, a supervisor, a CI job's end) are one request: stop with a
savepoint, as ``finishable stop`` would, and exit once the job is Suspended. The stop is bounded
by ``spec.stopTimeout``, since whoever sends SIGTERM expects the runner to end: when it fails or
times out, or on a second signal, the runner kills the driver's process group and exits 128 +
the signal's number, leaving the job to continue from its last checkpoint at the next run. The
runner holds ``runner.lock`` while it lives (``stop`` tells from it whether anything will act on
a request), and its driver dies with it however the runner dies (``local/driver_process.py``).
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

from finishable.api.control import DriverReport
from finishable.api.jobconfig import (
    ControlType,
    JobConfig,
    write_config,
)
from finishable.api.manifest import FinishableSparkJob
from finishable.api.models import (
    ConditionStatus,
    ConditionType,
    DesiredState,
    JobMode,
    Phase,
    StorageType,
)
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import ControlRequest, FinishableSparkJobStatus
from finishable.lifecycle.decisions import Action, ActionKind, Decision, Observation, PodPhase
from finishable.lifecycle.dispatch import dispatch
from finishable.lifecycle.phases import next_status
from finishable.local.drivers import DRIVER_COMMAND, LocalDrivers
from finishable.local.jobdir import (
    PARTITIONS_DIR,
    SETTLED_PHASES,
    LocalJob,
    LocalJobError,
    describe,
)
from finishable.local.shuffle import LocalShuffle
from finishable.partitions.catalog import PartitionCatalog
from finishable.state.control import ControlChannel
from finishable.state.errors import BackendError

log = logging.getLogger(__name__)

STOP_SIGNALS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}
"""The signals that stop a local job with a savepoint, and how the runner names them."""


def application_path(job: FinishableSparkJob, manifest: Path) -> Path:
    """The program to run locally: paths resolve against the manifest's directory."""
    target = job.spec.application.file
    parts = urlsplit(target)
    if parts.scheme in ("local", "file"):
        path = Path(parts.path)
    elif parts.scheme and len(parts.scheme) > 1:
        raise LocalJobError(
            f"spec.application.file: {target!r} is remote; `finishable run` runs a local "
            "program (a path, file:// or local://)"
        )
    else:
        path = Path(target)
    if not path.is_absolute():
        path = manifest.resolve().parent / path
    if not path.is_file():
        raise LocalJobError(f"spec.application.file: {str(path)!r} does not exist")
    return path


class _Interrupted(KeyboardInterrupt):
    """A second Ctrl-C or SIGTERM: the driver is killed now."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass(frozen=True)
class _SignalStop:
    """The stop with savepoint a first Ctrl-C or SIGTERM asked for, and how long it may take."""

    signum: int
    deadline: float
    generation: int
    edited: bool
    previous: DesiredState | None
    """The desired state before the signal, put back if the stop is given up."""


@dataclass
class LocalRunner:
    """Runs one manifest locally until the job is Finished, Suspended or Failed."""

    job: FinishableSparkJob
    manifest: Path
    state_dir: Path
    out: TextIO = field(default_factory=lambda: sys.stdout)
    poll_seconds: float = 0.5
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    drivers: LocalDrivers | None = None
    """The driver processes: the current attempt's and a standby (made by ``run``)."""
    _signals: int = 0
    _signalled: int | None = None
    _signal_stop: _SignalStop | None = None
    _last_progress: str = ""

    @property
    def shuffle(self) -> LocalShuffle | None:
        """A Batch job's local shuffle servers (the StatefulSet of a cluster)."""
        if self.job.spec.mode is not JobMode.BATCH:
            return None
        shuffle = self.job.spec.effective_shuffle
        return LocalShuffle(
            self.local.directory / "shuffle",
            self.job.metadata.name,
            shuffle.replicas,
            str(shuffle.retain_timeout),
        )

    @property
    def local(self) -> LocalJob:
        return LocalJob(self.job.metadata.name, self.state_dir / self.job.metadata.name)

    # -- entry point ------------------------------------------------------------------------

    def run(self, *, resume: bool = False, fresh: bool = False) -> int:
        """Run to a settled phase; the exit code is 0 for Finished or Suspended, 1 for Failed,
        128 + the signal's number when a Ctrl-C or SIGTERM ended it by killing the driver."""
        application_path(self.job, self.manifest)  # a local program, there: said at once
        shuffle = self.shuffle
        self.drivers = LocalDrivers(
            self.local,
            DRIVER_COMMAND,
            token=lambda: shuffle.token if shuffle is not None else None,
            say=self._say,
        )
        with self.local.runner_lock(self.manifest):
            status = self._prepare(resume=resume, fresh=fresh)
            if self.shuffle is not None and status.phase not in SETTLED_PHASES:
                self.shuffle.ensure()
                self._release_partitions(expired=True)
            self._write_config()
            previous = {signum: signal.signal(signum, self._on_signal) for signum in STOP_SIGNALS}
            try:
                return self._loop(status)
            except _Interrupted as interrupted:
                name = STOP_SIGNALS.get(signal.Signals(interrupted.signum), "a signal")
                return self._give_up(interrupted.signum, f"{name} again")
            finally:
                for signum, handler in previous.items():
                    signal.signal(signum, handler)
                self.drivers.stop_standby()
                self.drivers.stop()

    def _prepare(self, *, resume: bool, fresh: bool) -> FinishableSparkJobStatus:
        local = self.local
        self._drivers.kill_leftovers()
        if fresh and local.directory.exists():
            if self.shuffle is not None:
                self.shuffle.stop()
            local.clear()
        status = local.read_status()
        if status is None:
            local.directory.mkdir(parents=True, exist_ok=True)
            local.edit_desired(state=self.job.spec.state.value)
            return FinishableSparkJobStatus()
        name = self.job.metadata.name
        if status.phase is Phase.SUSPENDED:
            if not resume:
                raise LocalJobError(
                    f"job {name!r} is suspended at {local.directory}: resume it with "
                    "`finishable run FILE --resume`, or start over with --fresh"
                )
            local.edit_desired(state=DesiredState.RUNNING.value)
            self._say(f"resuming {name} from its savepoint")
            return status
        if status.phase in (Phase.FINISHED, Phase.FAILED):
            raise LocalJobError(
                f"job {name!r} already ended {status.phase.value} at {local.directory}; "
                "start it again with --fresh"
            )
        # A runner that died left the job mid-flight: its driver is gone, which is a crash.
        self._say(f"{name} was {status.phase.value} when its runner stopped; recovering")
        return status

    def _write_config(self, executors: int | None = None) -> None:
        """The driver's configuration; ``executors``: the next attempt's (the autoscaler's)."""
        local = self.local
        config = JobConfig(
            name=self.job.metadata.name,
            uid=local.uid,
            spec=self.job.spec.sized(executors),
            state_url=self._state_url(),
            work_dir=str((local.directory / "work").resolve()),
            control=ControlType.LOCAL,
            control_dir=str(local.directory.resolve()),
            manifest_dir=str(self.manifest.resolve().parent),
            shuffle_urls=self.shuffle.urls() if self.shuffle is not None else [],
            partition_url=self.partition_url() if self.shuffle is not None else None,
        )
        write_config(config, local.config_file)

    def _state_url(self) -> str:
        """``spec.checkpointing.storage`` when it names a directory or a bucket, else the job's
        own directory (a ConfigMap store needs a cluster). State outside the job directory
        outlives ``--fresh``, which is safe: a fresh job has a new uid, so a new run key."""
        storage = self.job.spec.checkpointing.storage
        if storage.type is StorageType.OBJECT_STORE and storage.url:
            return storage.url
        if storage.type is StorageType.LOCAL and storage.url:
            return self._local_path(storage.url)
        return str((self.local.directory / "state").resolve())

    def partition_url(self) -> str:
        """``spec.clusterPartitions.storage``, else ``<state dir>/_partitions``: shared by the
        local jobs of a state directory, so a later job reads what an earlier one promoted."""
        storage = self.job.spec.cluster_partitions.storage
        if storage is None:
            return str((self.state_dir / PARTITIONS_DIR).resolve())
        scheme = urlsplit(storage).scheme
        if scheme in ("", "file", "local") or len(scheme) == 1:
            return self._local_path(storage)
        return storage

    def _local_path(self, url: str) -> str:
        """A directory URL or path, relative ones against the manifest's directory."""
        path = Path(urlsplit(url).path if url.startswith(("file:", "local:")) else url)
        return str((self.manifest.resolve().parent / path.expanduser()).resolve())

    # -- the reconcile loop -----------------------------------------------------------------

    def _loop(self, status: FinishableSparkJobStatus) -> int:
        local = self.local
        while True:
            self._stop_on_signal()
            desired = local.read_desired()
            spec = self._spec(desired.state, desired.savepoint_trigger_nonce)
            pod, message = self._observe_driver(status)
            observation = Observation(
                now=self.clock(),
                generation=desired.generation,
                driver_pod=pod,
                driver_message=message,
                report=local.channel.read_report(),
            )
            decision = next_status(status, spec, observation)
            self._tell_stage_progress(observation.report)
            self._perform(decision)
            self._supervise_shuffle(decision.status)
            self._tell(status, decision)
            status = decision.status
            local.write_status(status)
            if status.phase in SETTLED_PHASES and not self._drivers.alive():
                return self._farewell(status)
            stuck = self._signal_stop_stuck(status)
            if stuck is not None and self._signal_stop is not None:
                return self._give_up(self._signal_stop.signum, stuck)
            self._drivers.wait(self.poll_seconds)

    def _spec(self, state: DesiredState | None, nonce: int | None) -> FinishableSparkJobSpec:
        update: dict[str, object] = {}
        if state is not None:
            update["state"] = state
        if nonce is not None:
            update["savepoint_trigger_nonce"] = nonce
        return self.job.spec.model_copy(update=update)

    def _observe_driver(self, status: FinishableSparkJobStatus) -> tuple[PodPhase, str]:
        """The current attempt's driver process, as a pod phase would describe it."""
        return self._drivers.observe(status.attempt)

    @property
    def _drivers(self) -> LocalDrivers:
        assert self.drivers is not None, "made when run() starts"
        return self.drivers

    def _perform(self, decision: Decision) -> None:
        starts = (ActionKind.START_DRIVER, ActionKind.TAKE_OVER)
        if self.job.spec.autoscaler.enabled and any(a.kind in starts for a in decision.actions):
            self._write_config(decision.status.executors)  # a rescale's count, in local[N]
        effects = LocalEffects(self._drivers, self.local.channel, self.shuffle, self._say)
        for action in decision.actions:
            dispatch(action, effects)

    def _supervise_shuffle(self, status: FinishableSparkJobStatus) -> None:
        """Restart dead shuffle servers while a driver may need them (StatefulSet semantics)."""
        shuffle = self.shuffle
        if shuffle is None or status.phase in SETTLED_PHASES:
            return
        for index in shuffle.restart_dead():
            self._say(f"shuffle server {index} was gone: started again on its port and data")

    # -- talking to the user ----------------------------------------------------------------

    def _tell(self, before: FinishableSparkJobStatus, decision: Decision) -> None:
        after = decision.status
        for event in decision.events:
            self._say(f"{event.reason}: {event.message}")
        old_checkpoint = before.last_checkpoint.id if before.last_checkpoint else None
        new_checkpoint = after.last_checkpoint.id if after.last_checkpoint else None
        if new_checkpoint is not None and new_checkpoint != old_checkpoint:
            progress = after.coordinator
            splits = (
                f", splits {progress.splits_finished}/{progress.splits_total}"
                if progress.splits_total
                else ""
            )
            self._say(f"checkpoint {new_checkpoint}{splits}")

    def _tell_stage_progress(self, report: DriverReport | None) -> None:
        """A Batch driver's stage progress, once per change the runner's polls see."""
        line = stage_progress(report)
        if line is not None and line != self._last_progress:
            self._last_progress = line
            self._say(line)

    def _farewell(self, status: FinishableSparkJobStatus) -> int:
        shuffle = self.shuffle
        if shuffle is not None and status.phase in (Phase.FINISHED, Phase.FAILED):
            shuffle.stop()  # what the operator's DeleteShuffle does when the job ends
        if shuffle is not None and status.phase is Phase.FAILED:
            self._release_partitions(failed_run=status.run)
        for line in describe(status, self.local.channel.read_report()):
            self._say(line)
        if status.phase is Phase.SUSPENDED:
            self._say(f"resume with: finishable run {self.manifest} --resume")
        return 1 if status.phase is Phase.FAILED else 0

    def _release_partitions(self, *, expired: bool = False, failed_run: int | None = None) -> None:
        """FLIP-67's releases that fall to the runner: partitions whose time to live ran out,
        and what a failed run staged for promotion (a failed job promotes nothing)."""
        try:
            catalog = PartitionCatalog(self.partition_url())
        except BackendError as error:
            self._say(f"cluster partitions: {error}")
            return
        try:
            for partition_id in catalog.expire(self.clock()) if expired else []:
                self._say(f"cluster partition {partition_id} expired and was released")
            if failed_run is not None:
                discarded = catalog.discard_staged(self.local.uid.lower(), failed_run)
                if discarded:
                    self._say(f"the failed run promotes nothing: released {', '.join(discarded)}")
        except BackendError as error:
            self._say(f"cluster partitions: {error}")
        finally:
            catalog.close()

    def _say(self, text: str) -> None:
        stamp = self.clock().strftime("%H:%M:%S")
        self.out.write(f"{stamp} {self.job.metadata.name}: {text}\n")
        self.out.flush()

    # -- Ctrl-C and SIGTERM -----------------------------------------------------------------

    def _on_signal(self, signum: int, frame: object) -> None:
        """First Ctrl-C or SIGTERM: the loop stops the job with a savepoint. Second: kill.

        The handler only takes note: the loop may be writing to the terminal or a job file, and
        neither may be re-entered from here.
        """
        self._signals += 1
        if self._signals == 1:
            self._signalled = signum
        elif self._signals == 2:
            raise _Interrupted(signum)

    def _stop_on_signal(self) -> None:
        """Ask for the stop with savepoint a first signal wants, once, as `finishable stop` does
        (a stop or drain the user asked for already is left alone); it may take stopTimeout."""
        if self._signalled is None or self._signal_stop is not None:
            return
        signum = self._signalled
        local = self.local
        desired = local.read_desired()
        previous = desired.state
        edited = previous in (None, DesiredState.RUNNING)
        if edited:
            desired = local.edit_desired(state=DesiredState.SUSPENDED.value)
        timeout = self.job.spec.stop_timeout
        self._signal_stop = _SignalStop(
            signum=signum,
            deadline=time.monotonic() + timeout.total_seconds(),
            generation=desired.generation,
            edited=edited,
            previous=previous,
        )
        name = STOP_SIGNALS.get(signal.Signals(signum), "a signal")
        self._say(
            f"{name}: stopping with a savepoint, within spec.stopTimeout ({timeout}) "
            f"({name} again to kill the driver)"
        )

    def _signal_stop_stuck(self, status: FinishableSparkJobStatus) -> str | None:
        """Why the stop a signal asked for will not end the job, if it will not."""
        stop = self._signal_stop
        if stop is None or status.phase in SETTLED_PHASES:
            return None
        timed_out = (
            f"the stop did not complete within spec.stopTimeout ({self.job.spec.stop_timeout})"
        )
        for condition in status.conditions:
            if (
                condition.type is ConditionType.DEGRADED
                and condition.status is ConditionStatus.TRUE
                and (condition.observed_generation or 0) >= stop.generation
            ):
                if condition.reason == "StopTimedOut":
                    return timed_out
                if condition.reason == "StopFailed":
                    return f"the stop failed ({condition.message})"
        return timed_out if time.monotonic() >= stop.deadline else None

    def _give_up(self, signum: int, why: str) -> int:
        """End without a savepoint: kill the driver's group and leave the job as it is, so the
        next run continues it from its last checkpoint (and does not stop it right away)."""
        self._say(f"{why}: killing the driver")
        self._drivers.kill()
        stop = self._signal_stop
        if stop is not None and stop.edited:
            self.local.edit_desired(state=stop.previous.value if stop.previous else None)
        self._say(
            f"the job was not stopped; `finishable run {self.manifest}` continues it from its "
            "last checkpoint"
        )
        return 128 + signum


@dataclass(frozen=True)
class LocalEffects:
    """The phase machine's actions done on this machine (:mod:`finishable.lifecycle.dispatch`)."""

    drivers: LocalDrivers
    channel: ControlChannel
    shuffle: LocalShuffle | None
    say: Callable[[str], None]

    def start_driver(self, action: Action) -> None:
        self.drivers.start(action)

    def take_over(self, action: Action) -> None:
        self.drivers.take_over(action)

    def start_standby(self, action: Action) -> None:
        self.drivers.start_standby(action)

    def delete_standby(self, action: Action) -> None:
        self.drivers.stop_standby()

    def send_request(self, request: ControlRequest) -> None:
        self.channel.send(request)

    def cancel_request(self, request: ControlRequest) -> None:
        self.channel.cancel(request.id)

    def delete_driver(self, action: Action) -> None:
        self.drivers.stop(up_to=action.attempt)

    def delete_shuffle(self, action: Action) -> None:
        if self.shuffle is not None:
            self.shuffle.stop()
            self.say("shuffle servers stopped and their partitions deleted")

    def delete_executors(self, action: Action) -> None:
        """Spark's executors run inside the driver process here (``local[N]``): they go with it."""

    def start_upgrade_check(self, action: Action) -> None:
        """Never asked: a local job's spec has one revision (upgrades are the operator's)."""
        log.warning("an upgrade check was asked of a local job; local jobs are not upgraded")

    def delete_upgrade_check(self, action: Action) -> None:
        """Nothing to delete: no check pod ever runs here."""

    def requeue(self, action: Action) -> None:
        """The runner's loop polls anyway."""


def stage_progress(report: DriverReport | None) -> str | None:
    """What the runner says of a Batch driver's report of its stage progress ("attempt 2: stage
    paid: 3/8 tasks done"), or None for any other report. Best effort: the driver reports at most
    twice a second and its next report replaces this one, so a poll may miss a stage."""
    if report is None or not report.message.startswith("stage "):
        return None
    return f"attempt {report.attempt}: {report.message}"
