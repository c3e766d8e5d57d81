"""One step of the job phase machine: the scratch state one ``next_status`` call carries.

:class:`Step` holds the status as it was and as it becomes, the spec and what was observed, and
collects the step's actions and events; its methods are the moves every handler makes (enter a
phase, begin a transition, send the driver a request). ``stop_failed_recently`` is the one
question two handler families ask of it (a Running job's stop, an upgrade): whether a stop for
this spec failed already. The handlers are :mod:`finishable.lifecycle.phases` and the modules
beside it, by family.
"""

from __future__ import annotations

from finishable.api.control import DriverReport
from finishable.api.models import (
    ConditionStatus,
    ConditionType,
    Phase,
    RequestAction,
    SavepointTrigger,
    Transition,
)
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import ControlRequest, FinishableSparkJobStatus, TransitionStatus
from finishable.lifecycle.decisions import (
    TRANSITIONS,
    Action,
    ActionKind,
    Event,
    IllegalPhaseTransition,
    Observation,
)

P = Phase


class Step:
    """Mutable scratch state of one :func:`next_status` call."""

    def __init__(
        self,
        current: FinishableSparkJobStatus,
        spec: FinishableSparkJobSpec | None,
        observation: Observation,
    ) -> None:
        self.before = current
        self.status = current.model_copy(deep=True)
        self.spec = spec
        self.obs = observation
        self.actions: list[Action] = []
        self.events: list[Event] = []
        self.degraded: tuple[str, str] | None = None  # (reason, message) set in this step

    @property
    def report(self) -> DriverReport | None:
        report = self.obs.report
        if report is None or report.attempt != self.status.attempt:
            return None
        return report

    def move(self, phase: Phase, message: str, *, planned: bool = False) -> None:
        """Enter ``phase``; ``planned``: a move Kubernetes asked for, told as Normal."""
        old = self.status.phase
        if phase is old:
            self.status.message = message
            return
        if phase not in TRANSITIONS[old]:
            raise IllegalPhaseTransition(f"{old.value} -> {phase.value} is not in the table")
        self.status.phase = phase
        self.status.phase_since = self.obs.now
        self.status.message = message
        warn = phase is P.FAILED or (phase is P.RECOVERING and not planned)
        event_type = "Warning" if warn else "Normal"
        self.events.append(
            Event(event_type, "PhaseChanged", f"{old.value} -> {phase.value}: {message}")
        )

    def act(self, action: Action) -> None:
        self.actions.append(action)

    def begin(self, kind: Transition) -> None:
        """A lifecycle transition starts (one under way of the same kind goes on)."""
        current = self.status.transition
        if current is None or current.kind is not kind:
            self.status.transition = TransitionStatus(kind=kind, started_at=self.obs.now)

    def request(self, action: RequestAction, trigger: SavepointTrigger) -> None:
        drain = trigger is SavepointTrigger.DRAIN
        # The id says why: stop-drain-…, stop-upgrade-…, savepoint-periodic-…
        suffix = {
            SavepointTrigger.DRAIN: "-drain",
            SavepointTrigger.UPGRADE: "-upgrade",
            SavepointTrigger.PERIODIC: "-periodic",
            SavepointTrigger.RESCALE: "-rescale",
        }.get(trigger, "")
        request = ControlRequest(
            id=f"{action.value}{suffix}-a{self.status.attempt}-g{self.obs.generation}-"
            f"{int(self.obs.now.timestamp())}",
            attempt=self.status.attempt,
            action=action,
            drain=drain,
            requested_at=self.obs.now,
            trigger=trigger,
        )
        self.status.pending_request = request
        self.act(Action(ActionKind.SEND_REQUEST, attempt=self.status.attempt, request=request))


def stop_failed_recently(step: Step) -> bool:
    """A stop that failed or timed out is retried only after the spec changes again."""
    for condition in step.before.conditions:
        if (
            condition.type is ConditionType.DEGRADED
            and condition.status is ConditionStatus.TRUE
            and condition.reason in ("StopFailed", "StopTimedOut", "SavepointFailed")
            and condition.observed_generation == step.obs.generation
        ):
            step.degraded = (condition.reason, condition.message)
            return True
    return False
