"""How a job's run ended, for both executors: ``FinishableJob.run`` turns it into the exit code.

The streaming executor and the Batch runtime end the same ways (finished, suspended with a
savepoint, failed), so they share these two types; neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from finishable.api.control import DriverState
from finishable.api.status import SavepointStatus

if TYPE_CHECKING:
    from finishable.driver.streaming.checkpoints import StoredCheckpoint


class JobFailed(RuntimeError):
    """The job cannot go on; the message says why (it is also in the driver's report)."""


class JobSuperseded(JobFailed):
    """A newer driver attempt claimed the job's state: this one stopped without writing more
    (and without a report, which would overwrite its successor's)."""


@dataclass(frozen=True)
class Outcome:
    """How ``run`` ended."""

    state: DriverState
    savepoint: SavepointStatus | None
    last_checkpoint: StoredCheckpoint | None
