"""A driver started by ``finishable run`` ends when its runner is gone, wherever prctl is missing.

The runner is the only thing that acts on ``finishable stop`` and restarts a crashed driver; a
driver that outlives it runs on unsteered and holds the job's work directory. On Linux the runner
already asks the kernel for ``PR_SET_PDEATHSIG`` (``local/driver_process.py``), but that needs
Linux and fires when the *thread* that forked the driver ends, so it is not the whole guarantee.
This watchdog is: it compares ``os.getppid()`` with the runner's pid, which changes only when the
runner *process* is gone (the driver is re-parented to init or a subreaper), on every POSIX
system. It polls instead of waiting for an event because no portable event says "parent gone".

A parent that is gone is not a crash to recover from: the driver ends at once, writes no report,
and takes its process group with it, that is Spark's JVM and its Python workers (the runner gave
the driver a session of its own). Ending the group ourselves is immediate and does not depend on
the JVM noticing that its stdin closed. The next ``finishable run`` continues the job from its
last checkpoint, as after any driver crash.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import MutableMapping

log = logging.getLogger(__name__)

RUNNER_PID_ENV = "FINISHABLE_RUNNER_PID"
"""The pid of the ``finishable run`` that started this driver; unset in a driver pod."""

POLL_SECONDS = 1.0


def watch_runner(environ: MutableMapping[str, str] | None = None) -> threading.Thread | None:
    """End this process (and its group) once the runner named in the environment is gone.

    The variable is removed from the environment so that Spark's JVM and Python workers, which
    inherit it, never take themselves for the runner's driver.
    """
    env = os.environ if environ is None else environ
    text = env.pop(RUNNER_PID_ENV, "").strip()
    if not text:
        return None
    try:
        runner = int(text)
    except ValueError:
        log.warning("%s=%r is not a pid: the driver does not watch it", RUNNER_PID_ENV, text)
        return None
    thread = threading.Thread(
        target=_watch, args=(runner,), name="finishable-runner-watch", daemon=True
    )
    thread.start()
    return thread


def _watch(runner: int) -> None:
    while os.getppid() == runner:
        time.sleep(POLL_SECONDS)
    _end(runner)


def _end(runner: int) -> None:
    log.warning(
        "the runner (pid %d) that started this driver is gone: the driver ends with it "
        "(`finishable run` again continues the job from its last checkpoint)",
        runner,
    )
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    if os.getpgrp() == os.getpid():  # a group of our own: the driver, its JVM, its workers
        os.killpg(os.getpid(), signal.SIGKILL)
    os._exit(1)  # started without a group of its own: only this process is ours to end
