"""Recovery in the phase machine: a lost driver, a driver asked to leave, restart budget, standby.

A crash in any phase goes through ``crash`` (a restart within spec.recovery's budget after a
backoff, else Failed) and ``on_recovering`` waits for the next attempt; a departure (an eviction,
a node drain, a deletion by hand) goes through ``departure``, a planned move that charges no
budget. The budget's arithmetic is :mod:`finishable.lifecycle.budget`.
"""

from __future__ import annotations

from datetime import timedelta

from finishable.api.control import DriverReport, DriverState, is_departure
from finishable.api.models import DepartureReason, JobMode, Phase, Transition
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import DepartureStatus, RecoveryStatus
from finishable.lifecycle.attempts import follow_report, next_attempt, start_driver
from finishable.lifecycle.budget import (
    counted_losses,
    describe_interval,
    restart_backoff,
    restarts_left,
)
from finishable.lifecycle.decisions import DRIVER_PHASES, Action, ActionKind, Event, PodPhase
from finishable.lifecycle.step import Step

P = Phase


def count_restart_budget(step: Step, spec: FinishableSparkJobSpec) -> None:
    """Losses leave the window as time passes: the status shows the budget as it is now."""
    status = step.status
    counted = counted_losses(
        status.recent_losses, step.obs.now, spec.recovery.failure_rate_interval
    )
    status.recent_losses = list(counted)
    alive = spec.recovery.enabled and status.phase is not P.FAILED
    status.restarts_left = restarts_left(counted, spec.recovery.max_attempts) if alive else 0


STANDBY_PHASES = frozenset({P.RUNNING, P.SAVEPOINTING, P.DRAINING, P.FINISHING})
"""Phases in which a job with ``spec.recovery.standby`` keeps a standby driver warm (and while
recovering, until the standby took over). Not while its active driver starts: on a shared node
a second JVM starting beside the first slows both."""


def keep_standby(step: Step, spec: FinishableSparkJobSpec) -> None:
    """A warm standby of the next attempt while the current one runs and the restart budget
    allows a takeover (or one was granted and awaits its backoff); none otherwise (a settled
    job, a spent budget). A job that stops asking for one gets a new attempt (the spec
    changed), whose start ends the standby."""
    status = step.status
    awaiting_takeover = status.phase is P.RECOVERING and status.recovery.next_attempt_at is not None
    budget_left = (status.restarts_left or 0) > 0
    wanted = spec.recovery.standby and (
        awaiting_takeover or (budget_left and status.phase in STANDBY_PHASES)
    )
    if wanted:
        step.act(
            Action(
                ActionKind.START_STANDBY,
                attempt=status.attempt + 1,
                run=status.run,
                restore_from=status.restore_from,
            )
        )
    elif spec.recovery.standby:
        step.act(Action(ActionKind.DELETE_STANDBY, attempt=status.attempt))


def driver_lost(step: Step) -> str | None:
    """Why the current attempt's driver is gone, or None while it lives (or ended cleanly)."""
    pod = step.obs.driver_pod
    report = step.report
    if pod in (PodPhase.PENDING, PodPhase.RUNNING):
        if report is not None and report.state is DriverState.FAILED:
            return f"driver attempt {step.status.attempt} reported failure: {report.message}"
        return None
    if report is not None and report.state in (DriverState.FINISHED, DriverState.SUSPENDED):
        return None
    if report is not None and report.state is DriverState.FAILED and report.message:
        # The driver's own reason (a named input file, say) before the exit code that followed.
        exit_detail = f" ({step.obs.driver_message})" if step.obs.driver_message else ""
        detail = report.message + exit_detail
    else:
        detail = step.obs.driver_message or (report.message if report else "")
    what = {
        PodPhase.ABSENT: "disappeared",
        PodPhase.FAILED: "failed",
        PodPhase.SUCCEEDED: "exited without completing its lifecycle",
    }[pod]
    return f"driver attempt {step.status.attempt} {what}" + (f": {detail}" if detail else "")


LEAVE_MARGIN = timedelta(seconds=30)
"""Beyond a leaving driver's grace period: its pod should be gone by then. One that is not (its
node unreachable) is replaced anyway; the fence keeps it from writing over its successor."""

_END_STATES = frozenset({DriverState.SUSPENDED, DriverState.FINISHED, DriverState.FAILED})


def departure(step: Step, spec: FinishableSparkJobSpec) -> bool:
    """A driver Kubernetes asked to leave (an eviction, a node drain, a deletion by hand) is a
    planned move, not a failure: while it takes its savepoint the job waits; once it left (or
    its grace period ran out) the next attempt starts at once from that savepoint, else from
    the newest checkpoint, without charging the restart budget. True when the step is over."""
    status, now = step.status, step.obs.now
    awaiting_backoff = status.phase is P.RECOVERING and status.recovery.next_attempt_at is not None
    if status.phase not in DRIVER_PHASES or awaiting_backoff:
        return False
    report = step.report
    if report is not None and report.state in _END_STATES:
        return False  # it ended another way first (a stop it was asked for, a failure)
    departed = report is not None and report.state is DriverState.DEPARTED
    leaving = status.departure
    if leaving is None or leaving.attempt != status.attempt:
        seen = step.obs.driver_departure
        if seen is None and not departed:
            return False
        leaving = DepartureStatus(
            attempt=status.attempt,
            reason=seen or DepartureReason.TERMINATED,
            since=now,
            node=step.obs.driver_node,
        )
        status.departure = leaving
        step.begin(Transition.RELOCATION)  # timed from the first sight of it leaving
        where = f" from node {leaving.node}" if leaving.node else ""
        step.events.append(
            Event(
                "Normal",
                "DriverLeaving",
                f"driver attempt {status.attempt} was asked to leave{where} "
                f"({leaving.reason.value}); it takes a savepoint within "
                f"spec.driver.terminationGracePeriod ({spec.driver.termination_grace_period})",
            )
        )
    gone = step.obs.driver_pod not in (PodPhase.PENDING, PodPhase.RUNNING)
    leave_by = (leaving.since or now) + spec.driver.termination_grace_period + LEAVE_MARGIN
    if not (departed or gone or now >= leave_by):
        status.message = f"driver attempt {status.attempt} is leaving ({leaving.reason.value})"
        step.act(Action(ActionKind.REQUEUE, after=leave_by - now))
        return True
    _relocate(step, spec, leaving, report if departed else None)
    return True


def _relocate(
    step: Step,
    spec: FinishableSparkJobSpec,
    leaving: DepartureStatus,
    report: DriverReport | None,
) -> None:
    """The next attempt of a driver that left, from the savepoint it took on its way out (its
    report's) or, without one, from the newest checkpoint of its run: no budget, no backoff."""
    status, now = step.status, step.obs.now
    saved = report.savepoint if report is not None else None
    savepoint = saved.location if saved is not None and is_departure(saved.request_id) else ""
    leaving.savepoint = savepoint
    status.departures += 1
    status.pending_request = None  # a stop it was asked for is asked again of the next attempt
    how = (
        f"after a savepoint at {savepoint}"
        if savepoint
        else "without a savepoint (no time for one): the next attempt resumes from the newest "
        "checkpoint"
    )
    reason = f"driver attempt {status.attempt} left ({leaving.reason.value}) {how}"
    if savepoint:
        status.restore_from = savepoint
    step.begin(Transition.RELOCATION)
    retained = now + spec.effective_shuffle.retain_timeout if spec.mode is JobMode.BATCH else None
    status.recovery = RecoveryStatus(
        reason=reason, driver_lost_at=now, shuffle_retained_until=retained
    )
    step.move(P.RECOVERING, reason, planned=True)
    next_attempt(step, spec, after_loss=True)
    step.move(P.RECOVERING, f"driver attempt {status.attempt} started after: {reason}")


def crash(step: Step, spec: FinishableSparkJobSpec, reason: str) -> None:
    status = step.status
    status.pending_request = None
    report = step.report
    if report is not None and report.state is DriverState.FAILED and report.permanent:
        step.move(
            P.FAILED,
            f"{reason}; not restarted: a restart cannot cure this error. Fix the program or "
            "the spec and apply the job again (a changed spec restarts a Failed job)",
        )
        return
    if not spec.recovery.enabled:
        step.move(P.FAILED, f"{reason}; recovery is disabled")
        return
    now = step.obs.now
    interval = spec.recovery.failure_rate_interval
    counted = counted_losses(status.recent_losses, now, interval)
    if len(counted) >= spec.recovery.max_attempts:
        step.move(
            P.FAILED,
            f"{reason}; all {spec.recovery.max_attempts} restarts allowed by "
            f"spec.recovery.maxAttempts {describe_interval(interval)} are used",
        )
        return
    status.restarts += 1
    status.recent_losses = [*counted, now]
    status.restarts_left = restarts_left(status.recent_losses, spec.recovery.max_attempts)
    retained = None
    if spec.mode is JobMode.BATCH:
        retained = now + spec.effective_shuffle.retain_timeout
    step.begin(Transition.RECOVERY)
    status.recovery = RecoveryStatus(
        reason=reason,
        driver_lost_at=now,
        next_attempt_at=now
        + restart_backoff(len(status.recent_losses), standby=spec.recovery.standby),
        shuffle_retained_until=retained,
    )
    step.move(P.RECOVERING, reason)
    on_recovering(step, spec)


def on_recovering(step: Step, spec: FinishableSparkJobSpec) -> None:
    status = step.status
    recovery = status.recovery
    now = step.obs.now
    if recovery.shuffle_retained_until is not None and now >= recovery.shuffle_retained_until:
        step.act(Action(ActionKind.DELETE_SHUFFLE))
        step.events.append(
            Event(
                "Warning",
                "ShuffleReleased",
                "no driver reconnected before the retain deadline; shuffle pods deleted",
            )
        )
        recovery.shuffle_retained_until = None
    if recovery.next_attempt_at is not None:
        if now < recovery.next_attempt_at:
            step.act(Action(ActionKind.REQUEUE, after=recovery.next_attempt_at - now))
            return
        recovery.next_attempt_at = None
        next_attempt(step, spec, after_loss=True)
        step.move(P.RECOVERING, f"driver attempt {status.attempt} started after: {recovery.reason}")
        return
    if driver_awaited(step, spec):
        return
    if recovery.shuffle_retained_until is not None:
        step.act(Action(ActionKind.REQUEUE, after=recovery.shuffle_retained_until - now))
    follow_report(step, spec)


def driver_awaited(step: Step, spec: FinishableSparkJobSpec) -> bool:
    """While a new attempt starts: re-ask for a missing pod, count a dead one as a crash.

    Returns True when the step is over (the attempt crashed).
    """
    if step.obs.driver_pod is PodPhase.ABSENT and step.report is None:
        start_driver(step)
        return False
    lost = driver_lost(step)
    if lost is not None:
        crash(step, spec, lost)
        return True
    return False
