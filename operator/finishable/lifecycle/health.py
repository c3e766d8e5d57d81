"""Checkpoint progress as a health check, as the Flink Kubernetes operator has it.

A streaming driver can stay alive while it makes no progress: a query stuck on a sink, a store
that stopped answering, a JVM in endless garbage collection. Its pod looks fine; only the absence
of checkpoints tells. A Running job whose newest checkpoint is older than
``spec.checkpointing.health.maxMissedIntervals`` checkpoint intervals is stalled, and the status
says so (Degraded, reason ``CheckpointsStalled``); with ``restartDriver`` the driver is replaced,
as after a crash, through the restart budget.

A query only checkpoints when it has input (each committed micro-batch is a checkpoint), so an
idle source must not look stalled: the check counts only while the driver's last report shows
unread splits (discovered and not finished). The clock starts at the newest checkpoint, or when
the job entered Running if this attempt has none yet. A job of several queries is watched query
by query, each with its own checkpoints and its own sources' splits.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from finishable.api.models import JobMode, Phase
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import CheckpointStatus, FinishableSparkJobStatus
from finishable.api.units import Duration

STALLED_REASON = "CheckpointsStalled"
"""The Degraded condition's reason for stalled checkpoints (and the metric's)."""


@dataclass(frozen=True)
class CheckpointHealth:
    """The verdict at one moment: stalled (with why), or when to look again (None: never)."""

    stalled: str = ""
    look_again_in: timedelta | None = None


def checkpoint_health(
    status: FinishableSparkJobStatus, spec: FinishableSparkJobSpec, now: datetime
) -> CheckpointHealth:
    """Whether a Running streaming job's checkpoints stalled. Pure: ``now`` is given.

    A job of several queries is watched query by query (``status.queries``): one query stuck
    while the others checkpoint is stalled too, and an idle query is not.
    """
    missed = spec.checkpointing.health.max_missed_intervals
    if spec.mode is not JobMode.STREAMING or status.phase is not Phase.RUNNING or missed == 0:
        return CheckpointHealth()
    progress = status.coordinator
    watched = [
        (f"query {q.name}: ", q.last_checkpoint, q.splits_total - q.splits_finished)
        for q in status.queries
    ] or [("", status.last_checkpoint, progress.splits_total - progress.splits_finished)]
    verdicts = [
        _health(what, checkpoint, unread, running_since=status.phase_since, spec=spec, now=now)
        for what, checkpoint, unread in watched
    ]
    stalled = next((verdict for verdict in verdicts if verdict.stalled), None)
    if stalled is not None:
        return stalled
    waits = [v.look_again_in for v in verdicts if v.look_again_in is not None]
    return CheckpointHealth(look_again_in=min(waits) if waits else None)


def _health(
    what: str,
    checkpoint: CheckpointStatus | None,
    unread: int,
    *,
    running_since: datetime | None,
    spec: FinishableSparkJobSpec,
    now: datetime,
) -> CheckpointHealth:
    """The verdict on one query's (or the job's) newest checkpoint."""
    missed = spec.checkpointing.health.max_missed_intervals
    interval: timedelta = spec.checkpointing.interval
    allowed = interval * missed
    since = checkpoint.time if checkpoint is not None and checkpoint.time else None
    if since is None or (running_since is not None and since < running_since):
        since = running_since  # nothing of this attempt yet: count from when it ran
    if since is None:
        return CheckpointHealth()
    waited = now - since
    if waited <= allowed:
        return CheckpointHealth(look_again_in=allowed - waited)
    if unread <= 0:
        return CheckpointHealth(look_again_in=interval)  # idle: nothing to checkpoint
    last = f"checkpoint {checkpoint.id}" if checkpoint is not None else "no checkpoint"
    return CheckpointHealth(
        stalled=(
            f"{what}no checkpoint completed for {Duration.parse(waited)} ({last} is the newest), "
            f"more than spec.checkpointing.health.maxMissedIntervals ({missed}) intervals of "
            f"{spec.checkpointing.interval}, while {unread} split(s) wait to be read"
        ),
        look_again_in=interval,
    )
