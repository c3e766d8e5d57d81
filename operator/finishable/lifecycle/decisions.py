"""What the job phase machine reads and returns, and the rules every step obeys.

:func:`finishable.lifecycle.phases.next_status` takes an :class:`Observation` (the driver pod and
the driver's report, as the operator or the local runner saw them) and returns a
:class:`Decision`: the next status, the :class:`Action` s to perform and the :class:`Event` s to
post. The table of allowed phase changes (:data:`TRANSITIONS`) and which desired-state changes
a phase refuses are here too (the restart budget is :mod:`finishable.lifecycle.budget`), so that
callers and tests can read the machine's contract without its step-by-step logic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from finishable.api.control import DriverReport
from finishable.api.models import DepartureReason, DesiredState, Phase, Transition
from finishable.api.status import ControlRequest, FinishableSparkJobStatus

P = Phase

TRANSITIONS: Mapping[Phase, frozenset[Phase]] = {
    P.PENDING: frozenset({P.SUBMITTED, P.SUSPENDED, P.FAILED}),
    P.SUBMITTED: frozenset({P.RUNNING, P.FINISHING, P.FINISHED, P.RECOVERING, P.FAILED}),
    P.RUNNING: frozenset(
        # Submitted: an upgrade (last-state or stateless) starts a new driver attempt
        {P.SAVEPOINTING, P.DRAINING, P.FINISHING, P.FINISHED, P.RECOVERING, P.FAILED, P.SUBMITTED}
    ),
    P.SAVEPOINTING: frozenset({P.SUSPENDED, P.RUNNING, P.RECOVERING, P.FAILED}),
    P.DRAINING: frozenset({P.FINISHED, P.RUNNING, P.RECOVERING, P.FAILED}),
    P.FINISHING: frozenset({P.FINISHED, P.RECOVERING, P.FAILED}),
    P.RECOVERING: frozenset({P.RUNNING, P.FINISHING, P.FINISHED, P.FAILED}),
    P.SUSPENDED: frozenset({P.SUBMITTED, P.FAILED}),
    P.FINISHED: frozenset(),
    P.FAILED: frozenset({P.PENDING}),
}
"""Every phase change the machine may make; :func:`next_status` never leaves this table."""

TERMINAL_PHASES = frozenset({P.FINISHED, P.FAILED})
STOPPING_PHASES = frozenset({P.SAVEPOINTING, P.DRAINING})
# Phases in which a driver pod of the current attempt is expected to exist and be alive.
DRIVER_PHASES = frozenset(
    {P.SUBMITTED, P.RUNNING, P.SAVEPOINTING, P.DRAINING, P.FINISHING, P.RECOVERING}
)


class PodPhase(StrEnum):
    """The driver pod of the current attempt, as observed (ABSENT: no such pod)."""

    ABSENT = "Absent"
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True)
class CheckPod:
    """The upgrade check pod of the job (spec.upgradeCheck), as observed."""

    name: str
    generation: int  # the spec generation it checks (each check pod has its own)
    phase: PodPhase
    exit_code: int | None = None
    message: str = ""


@dataclass(frozen=True)
class Observation:
    """What the caller saw just now. ``spec_problems`` lists why the spec cannot run, if so."""

    now: datetime
    generation: int
    driver_pod: PodPhase = PodPhase.ABSENT
    driver_message: str = ""
    report: DriverReport | None = None
    spec_problems: tuple[str, ...] = ()
    upgrade_check: CheckPod | None = None
    driver_departure: DepartureReason | None = None
    """The current driver pod is being deleted, not by the operator: why Kubernetes asked it to
    stop (an eviction, a drain, a deletion by hand)."""
    driver_node: str = ""
    """The node the current driver pod runs on (for the departure's record)."""


class ActionKind(StrEnum):
    """Side effects the caller performs; each is idempotent."""

    START_DRIVER = "StartDriver"  # create the children and the driver pod of `attempt` of `run`
    TAKE_OVER = "TakeOver"  # START_DRIVER by promoting `attempt`'s standby, if one is alive
    START_STANDBY = "StartStandby"  # keep a warm standby driver of `attempt` (and no other)
    DELETE_STANDBY = "DeleteStandby"  # delete every standby driver of the job
    SEND_REQUEST = "SendRequest"  # write `request` to <job>-control
    CANCEL_REQUEST = "CancelRequest"  # withdraw the request in <job>-control
    DELETE_DRIVER = "DeleteDriver"  # delete the driver pod(s) and executors
    DELETE_SHUFFLE = "DeleteShuffle"  # delete the shuffle StatefulSet (its data goes)
    DELETE_EXECUTORS = "DeleteExecutors"  # delete the executor pods of attempts <= `attempt`
    # (every one when `attempt` is 0)
    START_UPGRADE_CHECK = "StartUpgradeCheck"  # create the check pod of the spec's revision
    DELETE_UPGRADE_CHECK = "DeleteUpgradeCheck"  # delete the job's check pods (and configs)
    REQUEUE = "Requeue"  # call again after `after` even if nothing changes


@dataclass(frozen=True)
class Action:
    """One side effect with the arguments it needs."""

    kind: ActionKind
    attempt: int = 0
    run: int = 0
    restore_from: str = ""
    request: ControlRequest | None = None
    after: timedelta | None = None
    predecessor_exited: bool = False
    """START_DRIVER, TAKE_OVER: the previous attempt's driver process is known to have exited,
    so no write of it can be in flight and the new one need not wait out the fence's grace."""


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post on the custom resource."""

    type: str  # Normal or Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Decision:
    """The outcome of one step: the next status, what to do, what to tell."""

    status: FinishableSparkJobStatus
    actions: tuple[Action, ...] = ()
    events: tuple[Event, ...] = ()

    @property
    def phase_changed(self) -> bool:
        return any(event.reason == "PhaseChanged" for event in self.events)


class IllegalPhaseTransition(AssertionError):
    """The machine tried a transition outside :data:`TRANSITIONS`: a bug, never a user error."""


def illegal_state_change(
    phase: Phase, desired: DesiredState, *, input_ended: bool = False
) -> str | None:
    """Why ``desired`` cannot be honoured from ``phase``, or None when it can (now or later).

    ``input_ended``: the job finished because its bounded input ended (final checkpoint), which
    is what ``Running`` asks of a bounded job, so staying Finished honours it.
    """
    if phase is P.FINISHED and desired is DesiredState.RUNNING and input_ended:
        return None
    if phase is P.FINISHED and desired is not DesiredState.FINISHED:
        return (
            f"the job is Finished and cannot become {desired.value}; create a new job "
            "(spec.restoreFrom can start it from this job's savepoint)"
        )
    if phase is P.DRAINING and desired is not DesiredState.FINISHED:
        return (
            f"a stop with drain is in progress and cannot be turned into {desired.value}: "
            "event time has been advanced to the end; the job will be Finished"
        )
    if phase is P.FINISHING and desired is DesiredState.SUSPENDED:
        return (
            "the bounded input has ended and the final checkpoint is in progress; "
            "the job can no longer be Suspended and will be Finished"
        )
    return None


_STARTING = frozenset({P.SUBMITTED, P.RECOVERING})
_DRIVER_UP = frozenset({P.RUNNING, P.FINISHING, P.FINISHED})


def transition_outcome(kind: Transition, before: Phase, after: Phase) -> bool | None:
    """Whether a step from ``before`` to ``after`` completed a transition (True), abandoned it
    (False: the job failed, or a stop failed and the job runs on), or left it under way (None)."""
    if after is P.FAILED:
        return False
    if kind is Transition.SUSPEND:
        return True if after is P.SUSPENDED else (False if after is P.RUNNING else None)
    if kind is Transition.DRAIN:
        return True if after is P.FINISHED else (False if after is P.RUNNING else None)
    if before in _STARTING and after in _DRIVER_UP:
        return True
    if before in STOPPING_PHASES and after is P.RUNNING:  # an upgrade's stop failed
        return False
    return None
