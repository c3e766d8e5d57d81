"""Upgrades in the phase machine: a changed spec applied to a running job as spec.upgradeMode says.

Savepoint (a stop with savepoint, then the new spec from it), last-state (the next attempt from the
run's newest checkpoint) or stateless (a new run), after a check pod found that the new spec can
restore the job's state where the spec asks for one (:mod:`finishable.lifecycle.upgradecheck`).
"""

from __future__ import annotations

from finishable.api.models import (
    JobMode,
    Phase,
    RequestAction,
    SavepointTrigger,
    Transition,
    UpgradeMode,
)
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import FinishableSparkJobStatus
from finishable.lifecycle.attempts import start
from finishable.lifecycle.decisions import Action, ActionKind, Event
from finishable.lifecycle.step import Step, stop_failed_recently
from finishable.lifecycle.upgradecheck import REFUSED_REASON, check_upgrade, needs_check

P = Phase


def upgrade_pending(status: FinishableSparkJobStatus, spec: FinishableSparkJobSpec) -> bool:
    """The spec asks for another driver than the current attempt runs (a status written before
    revisions were recorded has none: its driver is taken to run the spec as it is)."""
    return status.spec_revision is not None and status.spec_revision != spec.revision


def upgrade(step: Step, spec: FinishableSparkJobSpec) -> bool:
    """Apply a changed spec to a Running job as spec.upgradeMode says; True when it started."""
    status = step.status
    if status.spec_revision is None:
        status.spec_revision = spec.revision
    if not upgrade_pending(status, spec):
        if status.upgrade_check is not None:  # the spec was set back: no check pod is needed
            status.upgrade_check = None
            step.act(Action(ActionKind.DELETE_UPGRADE_CHECK))
        return False
    if stop_failed_recently(step):
        return False
    mode = spec.upgrade_mode
    if spec.mode is JobMode.BATCH and mode is not UpgradeMode.STATELESS:
        step.degraded = (
            "UpgradeDeferred",
            f"spec.upgradeMode {mode.value}: a Batch run keeps the spec it started with (its "
            f"finished tasks were computed by it); the change applies when run {status.run} "
            "restarts, or now as a new run with spec.upgradeMode: stateless",
        )
        return False
    if needs_check(spec) and not _upgrade_checked(step, spec):
        return False
    change = f"upgrade from spec revision {status.spec_revision} to {spec.revision}"
    step.events.append(Event("Normal", "UpgradeStarted", f"{change} ({mode.value})"))
    step.begin(Transition.UPGRADE)
    if mode is UpgradeMode.SAVEPOINT:
        step.request(RequestAction.STOP, SavepointTrigger.UPGRADE)
        step.move(P.SAVEPOINTING, f"{change}: stop with savepoint, then start from it")
        return True
    step.act(Action(ActionKind.DELETE_DRIVER, attempt=status.attempt))
    if mode is UpgradeMode.LAST_STATE:
        # Same run, same restore point: the new attempt resumes from the run's newest checkpoint,
        # fenced against the old driver as a recovered attempt is.
        message = f"{change}: driver attempt {status.attempt + 1} resumes from the last checkpoint"
        start(step, spec, status.restore_from, message, Transition.UPGRADE)
        return True
    status.run += 1
    if spec.mode is JobMode.BATCH:  # the new run gets fresh shuffle pods, as many as asked now
        status.shuffle_replicas = spec.effective_shuffle.replicas
        step.act(Action(ActionKind.DELETE_SHUFFLE))
    stateless = f"{change}: run {status.run} starts from nothing (stateless)"
    start(step, spec, "", stateless, Transition.UPGRADE)
    return True


def _upgrade_checked(step: Step, spec: FinishableSparkJobSpec) -> bool:
    """True once the check pod found that the new spec can restore the running job's state;
    until then (and after a refusal) the running job goes on (lifecycle/upgradecheck.py)."""
    status = step.status
    check = check_upgrade(
        status.upgrade_check,
        step.obs.upgrade_check,
        spec,
        now=step.obs.now,
        generation=step.obs.generation,
    )
    status.upgrade_check = check.status
    if check.delete:
        step.act(Action(ActionKind.DELETE_UPGRADE_CHECK))
    if check.start:
        step.act(
            Action(
                ActionKind.START_UPGRADE_CHECK,
                attempt=status.attempt,
                run=status.run,
                restore_from=status.restore_from,
            )
        )
    if check.event is not None:
        step.events.append(check.event)
    if check.refused:
        step.degraded = (REFUSED_REASON, check.refused)
    if check.look_again_in is not None:
        step.act(Action(ActionKind.REQUEUE, after=check.look_again_in))
    return check.passed
