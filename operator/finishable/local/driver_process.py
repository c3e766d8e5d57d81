"""The driver of a local job as a child process of ``finishable run``, which it never outlives.

The driver runs in a session of its own, so that the terminal's Ctrl-C reaches only the runner
(which stops the job with a savepoint) and so that the driver, Spark's JVM and its Python workers
form one process group the runner can end together. A driver must not outlive its runner: nothing
else acts on ``finishable stop``, and the next ``finishable run`` would find a stranger in the
job's work directory. Two mechanisms see to it:

* on Linux the kernel kills the driver when the runner dies (``PR_SET_PDEATHSIG``, set between
  fork and exec). It fires when the *thread* that forked the driver ends, not the process, so
  it is only asked for when the runner forks from its main thread, whose end is the runner's;
* everywhere, the driver watches its parent pid (``driver/runner_watch.py``, started by
  ``FinishableJob.from_env``) and ends its whole group when the runner is gone.

Spark's JVM exits by itself when the Python driver dies (it reads its stdin, a pipe from the
driver, until end of file); the watchdog and the runner's kill end the group without waiting
for that.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from finishable.driver.runner_watch import RUNNER_PID_ENV
from finishable.lifecycle.decisions import PodPhase

STOP_GRACE_SECONDS = 10.0

OUTLIVE_ENV = "FINISHABLE_DRIVER_OUTLIVES_RUNNER"
"""``1``: the driver may outlive a killed runner, as a driver pod outlives an operator that lost
it. Only tests that play a partitioned node want this (the fencing of a stale driver)."""

_PR_SET_PDEATHSIG = 1


@dataclass
class DriverProcess:
    """One driver attempt as a child process, leading its own process group."""

    attempt: int
    process: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]
    nice: int = 0
    """How much lower than the runner's its CPU priority is (a standby's: see the runner)."""

    @classmethod
    def spawn(
        cls,
        attempt: int,
        command: Sequence[str],
        env: Mapping[str, str],
        log_path: Path,
        *,
        nice: int = 0,
    ) -> DriverProcess:
        """Start the driver; it ends with this process (see the module's docstring)."""
        environment = dict(env)
        preexec: Callable[[], None] | None = None
        if environment.get(OUTLIVE_ENV) != "1":
            environment[RUNNER_PID_ENV] = str(os.getpid())
            preexec = _die_with_parent(os.getpid())
        if nice:
            preexec = _niced(nice, preexec)
        log_file = log_path.open("ab")
        try:
            process = subprocess.Popen(
                list(command),
                cwd=Path.cwd(),  # relative paths in args mean what they mean to the user
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the runner; the group is the driver's
                preexec_fn=preexec,  # noqa: PLW1509 - main thread only; the child calls prctl
            )
        except BaseException:
            log_file.close()
            raise
        return cls(attempt, process, log_path, log_file, nice)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait(self, seconds: float) -> None:
        """Wait until the driver ends, at most ``seconds``."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(seconds)

    def observe(self) -> tuple[PodPhase, str]:
        """The driver as a pod's phase would describe it, and why it ended."""
        code = self.process.poll()
        if code is None:
            return PodPhase.RUNNING, ""
        if code == 0:
            return PodPhase.SUCCEEDED, ""
        if code < 0:
            return PodPhase.FAILED, f"killed by signal {-code}; see {self.log_path}"
        return PodPhase.FAILED, f"exit code {code}; see {self.log_path}"

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Terminate the driver; kill its whole group when it does not end within ``grace``."""
        if self.process.poll() is None:
            if grace > 0:
                self.process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(grace)
            if self.process.poll() is None:
                self.kill()
        self.log_file.close()

    def kill(self) -> None:
        """SIGKILL the driver's group at once: the driver, Spark's JVM and its Python workers.

        The group is the driver's own (a new session), so its id is the driver's pid, and it
        cannot be reused while any member, even a zombie, is left.
        """
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


def _niced(increment: int, then: Callable[[], None] | None) -> Callable[[], None]:
    """A preexec that lowers the child's CPU priority (its JVM and workers inherit it)."""

    def preexec() -> None:
        os.nice(increment)
        if then is not None:
            then()

    return preexec


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """What the child runs between fork and exec so the kernel kills it when ``parent`` dies.

    None where that is not available (not Linux), or would be wrong: PDEATHSIG follows the
    forking thread, so from any thread but the main one the driver would die with that thread.
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    prctl = _prctl()
    if prctl is None:
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request: too late for it
            os._exit(1)

    return preexec


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up before any fork (a child must not load libraries)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
    function.restype = ctypes.c_int
    prctl: Callable[..., int] = function
    return prctl
