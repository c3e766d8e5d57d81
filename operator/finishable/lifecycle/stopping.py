"""Stops and savepoints in the phase machine: a stop or drain to its end, a savepoint, a resume.

A stop with savepoint or drain waits for the driver's answer, its deadline (``request_deadline``:
the request plus spec.stopTimeout, which the operator's alert watches too) or a crash; a savepoint
without stopping (by hand, or periodic) is recorded when the driver answers; a suspended job
resumes from its savepoint (with an upgraded spec, or rescaled, when that is why it stopped).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from finishable.api.control import DriverState, RequestOutcome, RequestReport
from finishable.api.models import DesiredState, Phase, RequestAction, SavepointTrigger, Transition
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import ControlRequest, FinishableSparkJobStatus
from finishable.lifecycle.attempts import start
from finishable.lifecycle.decisions import Action, ActionKind, Event
from finishable.lifecycle.recovery import crash, driver_lost
from finishable.lifecycle.step import Step
from finishable.lifecycle.upgrades import upgrade_pending

P = Phase


def on_suspended(step: Step, spec: FinishableSparkJobSpec) -> None:
    step.act(Action(ActionKind.DELETE_DRIVER, attempt=step.status.attempt))
    if spec.state is DesiredState.SUSPENDED:
        return
    savepoint = step.status.savepoint.location if step.status.savepoint else ""
    how = "to drain it" if spec.state is DesiredState.FINISHED else ""
    upgrade = upgrade_pending(step.status, spec)
    ongoing = step.status.transition
    rescale = ongoing is not None and ongoing.kind is Transition.RESCALE and not upgrade
    what = "starting the upgraded spec" if upgrade else "resuming"
    transition = Transition.UPGRADE if upgrade else Transition.RESUME
    if rescale and step.status.autoscaler is not None:
        what = f"rescaling to {spec.autoscaler.bounded(step.status.autoscaler.executors)} executors"
        transition = Transition.RESCALE
    start(
        step,
        spec,
        savepoint or spec.restore_from.savepoint,
        " ".join(filter(None, [f"{what} from savepoint {savepoint or '(none)'}", how])),
        transition,
    )


def periodic_savepoint(step: Step, spec: FinishableSparkJobSpec) -> bool:
    """spec.savepoints.interval: a savepoint when one is due (True when it was asked for), else
    a wake-up for when it will be. Counted from when the job started running, then from each
    periodic request (a failed one is not retried before the next is due)."""
    status, now = step.status, step.obs.now
    interval = spec.savepoints.interval
    if interval is None:
        status.periodic_savepoint_due = None
        return False
    due = status.periodic_savepoint_due
    if due is None or due > now + interval:  # newly set, or shortened
        due = status.periodic_savepoint_due = now + interval
    if now < due:
        step.act(Action(ActionKind.REQUEUE, after=due - now))
        return False
    status.periodic_savepoint_due = now + interval
    step.request(RequestAction.SAVEPOINT, SavepointTrigger.PERIODIC)
    return True


def await_savepoint(step: Step, spec: FinishableSparkJobSpec, pending: ControlRequest) -> None:
    """A savepoint without stopping: record it when the driver answers."""
    answer = _answer(step, pending)
    if answer is None:
        if _timed_out(step, spec):
            step.act(Action(ActionKind.CANCEL_REQUEST, request=pending))
            step.status.pending_request = None
            step.degraded = ("SavepointFailed", f"savepoint {pending.id} timed out")
        return
    step.status.pending_request = None
    if answer.outcome is RequestOutcome.FAILED:
        step.degraded = ("SavepointFailed", f"savepoint {pending.id} failed: {answer.message}")
    else:
        location = step.status.savepoint.location if step.status.savepoint else ""
        step.events.append(Event("Normal", "SavepointCompleted", f"savepoint at {location}"))


def _answer(step: Step, pending: ControlRequest) -> RequestReport | None:
    report = step.report
    if report is None or report.request is None or report.request.id != pending.id:
        return None
    if report.request.outcome is RequestOutcome.IN_PROGRESS:
        return None
    return report.request


def request_deadline(
    status: FinishableSparkJobStatus, spec: FinishableSparkJobSpec | None
) -> datetime | None:
    """When the pending stop, drain or savepoint must have ended (its request time plus
    spec.stopTimeout), or None with nothing pending: the operator cancels the request then, and an
    alert on this deadline tells that it did not."""
    pending = status.pending_request
    if pending is None or spec is None:
        return None
    started = pending.requested_at or status.phase_since
    return None if started is None else started + spec.stop_timeout


def _timed_out(step: Step, spec: FinishableSparkJobSpec) -> bool:
    deadline = request_deadline(step.status, spec)
    return deadline is not None and step.obs.now > deadline


def on_stopping(step: Step, spec: FinishableSparkJobSpec) -> None:
    """Savepointing or Draining: wait for the driver's answer, the timeout or a crash."""
    pending = step.status.pending_request
    draining = step.status.phase is P.DRAINING
    report = step.report
    answer = _answer(step, pending) if pending is not None else None
    done_state = DriverState.FINISHED if draining else DriverState.SUSPENDED
    completed = (answer is not None and answer.outcome is RequestOutcome.COMPLETED) or (
        report is not None and report.state is done_state
    )
    if completed:
        step.status.pending_request = None
        location = step.status.savepoint.location if step.status.savepoint else "(unknown)"
        if draining:
            step.move(P.FINISHED, f"drained; final savepoint at {location}")
        else:
            step.move(P.SUSPENDED, f"stopped with savepoint at {location}")
            on_suspended(step, spec)
        return
    lost = driver_lost(step)
    if lost is not None:
        crash(step, spec, lost)
        return
    what = "stop with drain" if draining else "stop with savepoint"
    if answer is not None and answer.outcome is RequestOutcome.FAILED:
        step.status.pending_request = None
        step.degraded = ("StopFailed", f"{what} failed: {answer.message}; the job keeps running")
        step.move(P.RUNNING, f"{what} failed")
        return
    if pending is not None and _timed_out(step, spec):
        step.act(Action(ActionKind.CANCEL_REQUEST, request=pending))
        step.status.pending_request = None
        step.degraded = (
            "StopTimedOut",
            f"{what} did not complete within spec.stopTimeout ({spec.stop_timeout}); "
            "it was cancelled and the job keeps running",
        )
        step.move(P.RUNNING, f"{what} timed out")
        return
    deadline = request_deadline(step.status, spec)
    if pending is not None and pending.requested_at is not None and deadline is not None:
        step.act(Action(ActionKind.REQUEUE, after=max(deadline - step.obs.now, timedelta(0))))
