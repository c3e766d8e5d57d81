"""The driver processes of a local job: its current attempt's, and a warm standby's.

To ``finishable run`` these are what driver pods are to the operator (and this module what
:mod:`finishable.controller.job.children` is to it): started for an attempt, observed as a pod
phase, promoted from standby when the active driver is lost (``spec.recovery.standby``), and
ended. Each process leads its own process group and never outlives the runner
(:mod:`finishable.local.driver_process`); its pid is kept in ``driver.pid`` or ``standby.pid``
so that the next runner can end one that did.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from finishable.api.jobconfig import (
    ATTEMPT_ENV,
    CONFIG_ENV,
    PREDECESSOR_EXITED_ENV,
    RESTORE_ENV,
    RUN_ENV,
    STANDBY_ENV,
    TOKEN_ENV,
)
from finishable.lifecycle.decisions import Action, PodPhase
from finishable.local.driver_process import DriverProcess
from finishable.local.jobdir import LocalJob, LocalJobError

STANDBY_NICE = 10
"""A local standby driver starts this much nicer than the active one, so that its JVM and Spark
session start on spare CPU first. It helps less than one would hope: on a 2-core machine the
active attempt still ran ~30 % slower while a standby started beside it, at nice 10, 19 or
SCHED_IDLE alike (caches and memory, not CPU time). A promoted standby keeps its priority (an
unprivileged process cannot raise it again), and its own standby goes lower still, down to
STANDBY_MAX_NICE. In a cluster each driver pod has its own resources."""
STANDBY_MAX_NICE = 19

DRIVER_COMMAND = (sys.executable, "-m", "finishable.driver.main", "--keep-cwd")
"""What a local driver process runs: the step every driver takes first (the program and its
dependencies fetched and checked, :mod:`finishable.driver.dependencies.prepare`), then the
program, in the directory ``finishable run`` was started in."""

DRIVER_PID = "driver.pid"
STANDBY_PID = "standby.pid"


@dataclass
class LocalDrivers:
    """A local job's driver processes (``command``: what each runs, :data:`DRIVER_COMMAND`)."""

    local: LocalJob
    command: Sequence[str]
    token: Callable[[], str | None]
    """The shuffle servers' token for a Batch job's drivers, read when a driver starts."""
    say: Callable[[str], None]
    driver: DriverProcess | None = None
    standby: DriverProcess | None = None

    def kill_leftovers(self) -> None:
        """A driver that outlived its runner (one that never reached ``from_env`` where there is
        no PDEATHSIG, or ``OUTLIVE_ENV``) holds the work directory: end it before a new one
        (a standby too, which could otherwise still take an order meant for a new one)."""
        for name, what in ((DRIVER_PID, "driver"), (STANDBY_PID, "standby driver")):
            try:
                pid = int((self.local.directory / name).read_text().split()[-1])
            except (OSError, ValueError, IndexError):
                continue
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            except PermissionError:
                raise LocalJobError(
                    f"a {what} (pid {pid}) of this job runs as another user"
                ) from None
            self.say(f"killed the {what} left running by a previous runner (pid {pid})")

    def observe(self, attempt: int) -> tuple[PodPhase, str]:
        """Driver ``attempt``'s process, as a pod phase would describe it."""
        if self.driver is None or self.driver.attempt != attempt:
            return PodPhase.ABSENT, ""
        return self.driver.observe()

    def alive(self) -> bool:
        return self.driver is not None and self.driver.alive()

    def wait(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if the running driver ends first: a lost driver is
        replaced (by its standby, in a second or so) without waiting out the runner's poll."""
        if self.driver is not None and self.driver.alive():
            self.driver.wait(seconds)
        else:
            time.sleep(seconds)

    def start(self, action: Action) -> None:
        """The driver of ``action.attempt`` (nothing if it runs already)."""
        attempt = action.attempt
        if self.driver is not None:
            if self.driver.attempt == attempt and self.driver.alive():
                return
            self.driver.stop()
        if self.standby is not None and self.standby.attempt <= attempt:
            self.stop_standby()  # a new attempt of its own number, or a newer one: stale
        extra = {PREDECESSOR_EXITED_ENV: "1"} if action.predecessor_exited else {}
        self.driver = self._spawn(action, extra)
        self.say(
            f"driver attempt {attempt} started (pid {self.driver.pid}, log {self.driver.log_path})"
        )

    def take_over(self, action: Action) -> None:
        """The standby of ``action.attempt`` takes over; without one alive, a new driver."""
        standby = self.standby
        current = self.driver
        if current is not None and current.attempt == action.attempt and current.alive():
            return
        if standby is None or standby.attempt != action.attempt or not standby.alive():
            self.start(action)
            return
        if current is not None:
            current.stop()
        self.local.channel.take_over(action.attempt, predecessor_exited=action.predecessor_exited)
        self.driver, self.standby = standby, None
        self._write_pid(DRIVER_PID, standby)
        (self.local.directory / STANDBY_PID).unlink(missing_ok=True)
        self.say(f"standby driver took over as attempt {action.attempt} (pid {standby.pid})")

    def start_standby(self, action: Action) -> None:
        """The standby of ``action.attempt``, and no other."""
        standby = self.standby
        if standby is not None and standby.attempt == action.attempt and standby.alive():
            return
        self.stop_standby()
        nice = min(STANDBY_MAX_NICE, (self.driver.nice if self.driver else 0) + STANDBY_NICE)
        self.standby = self._spawn(action, {STANDBY_ENV: "1"}, pid_file=STANDBY_PID, nice=nice)
        self.say(
            f"standby driver for attempt {action.attempt} started (pid {self.standby.pid}, "
            f"log {self.standby.log_path})"
        )

    def stop_standby(self) -> None:
        if self.standby is None:
            return
        self.standby.stop(grace=0)  # it claimed nothing: nothing of the job to leave consistent
        self.standby = None
        (self.local.directory / STANDBY_PID).unlink(missing_ok=True)

    def stop(self, up_to: int | None = None) -> None:
        """Stop the driver (if of an attempt up to ``up_to``); it may end cleanly first."""
        if self.driver is not None and (up_to is None or self.driver.attempt <= up_to):
            self.driver.stop()

    def kill(self) -> None:
        """SIGKILL the driver's and the standby's process groups."""
        self.stop_standby()
        if self.driver is not None:
            self.driver.kill()

    def _spawn(
        self,
        action: Action,
        extra: dict[str, str],
        *,
        pid_file: str = DRIVER_PID,
        nice: int = 0,
    ) -> DriverProcess:
        """A driver process of ``action.attempt`` (its log ``driver-<attempt>.log``)."""
        local = self.local
        env = {
            **os.environ,
            CONFIG_ENV: str(local.config_file.resolve()),
            RUN_ENV: str(action.run),
            ATTEMPT_ENV: str(action.attempt),
            RESTORE_ENV: action.restore_from,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONUNBUFFERED": "1",
            **extra,
        }
        token = self.token()
        if token is not None:
            env[TOKEN_ENV] = token
        log_path = local.directory / f"driver-{action.attempt}.log"
        process = DriverProcess.spawn(action.attempt, self.command, env, log_path, nice=nice)
        self._write_pid(pid_file, process)
        return process

    def _write_pid(self, name: str, process: DriverProcess) -> None:
        (self.local.directory / name).write_text(f"{process.attempt} {process.pid}\n")
