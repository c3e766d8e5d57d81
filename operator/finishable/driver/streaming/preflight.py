"""The upgrade check: can this program restore the running job's state? (``FINISHABLE_PREFLIGHT``)

The operator runs the new spec's program in a check pod before it stops the running job
(lifecycle/upgradecheck.py). The program declares its sources and sinks as always; ``run()``
then compares them with the newest checkpoint of the running job's lineage, the state the
upgrade would restore (the stop's savepoint has the same sources and sinks), and ends the
process with the verdict: exit code 0, or :data:`PREFLIGHT_REFUSED_EXIT_CODE` with the reason
as the termination message and the last line of the log. Nothing is written to the job's
state: the check claims no attempt (it must not fence the running driver), and its store is
read-only (``state.backends.ReadOnlyBackend``).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import NoReturn

from finishable.api.jobconfig import PREFLIGHT_REFUSED_EXIT_CODE, PREFLIGHT_VERDICT_PREFIX
from finishable.driver.streaming.checkpoints import Fingerprints, newest_checkpoint
from finishable.driver.streaming.savepoints import (
    restore_problems,
)
from finishable.state import (
    CheckpointStore,
)

log = logging.getLogger(__name__)

TERMINATION_LOG = "/dev/termination-log"  # the kubelet's default terminationMessagePath
TERMINATION_MESSAGE_MAX = 4096  # what the kubelet keeps of it


def verdict(store: CheckpointStore, lineage: str, fingerprints: Fingerprints) -> tuple[str, int]:
    """The check's message and exit code against the newest readable checkpoint of
    ``lineage`` (a damaged one is skipped, as a restore would)."""
    newest = newest_checkpoint(store, lineage)
    if newest is not None and newest.savepoint is not None and newest.stored is not None:
        checkpoint = newest.stored.id
        problems = restore_problems(
            newest.savepoint.manifest, sources=fingerprints.sources, sinks=fingerprints.sinks
        )
        if problems:
            return (
                f"checkpoint {checkpoint} of the running job does not match the new program: "
                + "; ".join(problems),
                PREFLIGHT_REFUSED_EXIT_CODE,
            )
        return (
            f"the new program can restore checkpoint {checkpoint} of the running job: its "
            f"{len(fingerprints.sources)} source(s) and {len(fingerprints.sinks)} sink(s) match",
            0,
        )
    return "the running job has no checkpoint yet: there is no state to compare with", 0


def conclude(message: str, code: int) -> NoReturn:
    """End the check pod with its verdict: the termination message, then the log's last line,
    then the exit code. ``os._exit``: nothing (Spark's shutdown logging) may come after it."""
    path = Path(os.environ.get("FINISHABLE_TERMINATION_LOG", TERMINATION_LOG))
    if path.is_file():  # the kubelet makes it; elsewhere the log's last line says it all
        try:
            path.write_text(message[:TERMINATION_MESSAGE_MAX], encoding="utf-8")
        except OSError:
            log.warning("cannot write the termination message to %s", path, exc_info=True)
    sys.stdout.flush()
    outcome = {0: "passed", PREFLIGHT_REFUSED_EXIT_CODE: "refused"}.get(code, "failed")
    sys.stderr.write(f"{PREFLIGHT_VERDICT_PREFIX}{outcome}: {message}\n")  # the log's last line
    sys.stderr.flush()
    os._exit(code)
