"""Driver attempts in the phase machine: the next attempt's driver, a new or resumed run, a report.

Every handler family that starts a driver (a submission, a resume, an upgrade, a recovery) goes
through ``next_attempt``, so an attempt is numbered, sized and asked for in one place;
``follow_report`` moves the job as the current attempt reports (Running, Finishing, Finished).
"""

from __future__ import annotations

from finishable.api.control import DriverState
from finishable.api.models import Phase, Transition
from finishable.api.spec import FinishableSparkJobSpec
from finishable.lifecycle.decisions import Action, ActionKind, Event, PodPhase
from finishable.lifecycle.rescaling import size_attempt
from finishable.lifecycle.step import Step

P = Phase


def start_driver(
    step: Step, kind: ActionKind = ActionKind.START_DRIVER, *, predecessor_exited: bool = False
) -> None:
    """Ask for the current attempt's driver (an idempotent create, so safe to repeat)."""
    step.act(
        Action(
            kind,
            attempt=step.status.attempt,
            run=step.status.run,
            restore_from=step.status.restore_from,
            predecessor_exited=predecessor_exited,
        )
    )


def next_attempt(step: Step, spec: FinishableSparkJobSpec, *, after_loss: bool = False) -> None:
    """Ask for the next attempt's driver: its pod is built from the spec as it is now (its
    revision), and periodic savepoints are counted from when it runs. After a driver loss it
    is the standby's to take over, if the job keeps one; a lost driver whose process is seen
    ended (not merely gone from view) cannot write any more."""
    exited = after_loss and step.obs.driver_pod in (PodPhase.FAILED, PodPhase.SUCCEEDED)
    step.status.attempt += 1
    step.status.spec_revision = spec.revision
    size_attempt(step.status, spec)
    step.status.periodic_savepoint_due = None
    takeover = after_loss and spec.recovery.standby
    kind = ActionKind.TAKE_OVER if takeover else ActionKind.START_DRIVER
    start_driver(step, kind, predecessor_exited=exited)


def start(
    step: Step,
    spec: FinishableSparkJobSpec,
    restore_from: str,
    message: str,
    transition: Transition = Transition.SUBMISSION,
) -> None:
    """A new attempt: of a new run, or of this run resumed (from its savepoint or checkpoint)."""
    step.begin(transition)
    step.status.run = max(step.status.run, 1)
    step.status.pending_request = None
    step.status.restore_from = restore_from
    step.status.savepoint_trigger_nonce = spec.savepoint_trigger_nonce
    next_attempt(step, spec)
    step.move(P.SUBMITTED, message)


def follow_report(step: Step, spec: FinishableSparkJobSpec) -> None:
    """Running, Finishing, Finished as the current attempt reports them."""
    report = step.report
    if report is None:
        return
    if report.state is DriverState.FINISHED:
        step.move(P.FINISHED, "the job finished: sinks committed the last data")
    elif report.state is DriverState.FINISHING:
        step.move(P.FINISHING, "bounded input ended; waiting for the final checkpoint")
    elif report.state is DriverState.RUNNING and step.status.phase in (P.SUBMITTED, P.RECOVERING):
        recovered = step.status.phase is P.RECOVERING
        step.move(P.RUNNING, f"driver attempt {step.status.attempt} is running")
        transition = step.status.transition
        if transition is not None and transition.kind is Transition.RESCALE:
            seconds = (step.obs.now - transition.started_at).total_seconds()
            step.events.append(
                Event(
                    "Normal",
                    "Rescaled",
                    f"running with {step.status.executors} executors after {seconds:.0f}s",
                )
            )
        if recovered:
            step.status.recovery.shuffle_retained_until = None
