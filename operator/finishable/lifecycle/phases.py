"""The job phase machine (README, *Job phases*): a pure ``next_status``, one handler per phase.

The operator and the local runner both call :func:`next_status` with what they observe (the
driver pod, the driver's report from the ``<job>-state`` ConfigMap or file) and act on the
:class:`~finishable.lifecycle.decisions.Decision` it returns: the new status for the one status
writer, the side effects to perform, and the Kubernetes Events to post. It is level-based: calling
it again with the same inputs yields the same decision, so a restarted operator simply carries on.

What a step reads and returns (and the transition table) is :mod:`finishable.lifecycle.decisions`;
the conditions each step ends with are :mod:`finishable.lifecycle.conditions`. What is left here
is one cohesive thing: the handlers call each other along the transition table (a crash in any
phase goes through ``_crash``, a stop that completes resumes through ``_on_suspended``), so one
module reads as the machine's diagram does.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from finishable.api.control import (
    DriverReport,
    DriverState,
    RequestOutcome,
    RequestReport,
    is_departure,
)
from finishable.api.models import (
    ConditionStatus,
    ConditionType,
    DepartureReason,
    DesiredState,
    JobMode,
    Phase,
    RequestAction,
    RestartFrom,
    SavepointTrigger,
    Transition,
    UpgradeMode,
)
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import (
    AutoscalerStatus,
    ControlRequest,
    DepartureStatus,
    FinishableSparkJobStatus,
    RecoveryStatus,
    TransitionStatus,
)
from finishable.lifecycle.autoscaling import autoscale
from finishable.lifecycle.budget import (
    counted_losses,
    describe_interval,
    restart_backoff,
    restarts_left,
)
from finishable.lifecycle.conditions import conditions_for
from finishable.lifecycle.decisions import (
    DRIVER_PHASES,
    TERMINAL_PHASES,
    TRANSITIONS,
    Action,
    ActionKind,
    Decision,
    Event,
    IllegalPhaseTransition,
    Observation,
    PodPhase,
    illegal_state_change,
    transition_outcome,
)
from finishable.lifecycle.health import STALLED_REASON, checkpoint_health
from finishable.lifecycle.table import LifecycleMode
from finishable.lifecycle.upgradecheck import REFUSED_REASON, check_upgrade, needs_check

P = Phase


class _Step:
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


def next_status(
    current: FinishableSparkJobStatus,
    spec: FinishableSparkJobSpec | None,
    observation: Observation,
) -> Decision:
    """Compute the next status, the actions and the events. Pure: no I/O, no clock."""
    step = _Step(current, spec, observation)
    if spec is None or observation.spec_problems:
        _invalid_spec(step)
    else:
        _absorb_report(step)
        _advance(step, spec)
        _release_shuffle_on_end(step, spec)
        _release_executors_on_end(step)
        _count_restart_budget(step, spec)
        _keep_standby(step, spec)
        step.status.observed_generation = observation.generation
    _settle_transition(step)
    _set_conditions(step)
    return Decision(step.status, tuple(step.actions), tuple(step.events))


# ---------------------------------------------------------------------------------------------
# the steps


def _settle_transition(step: _Step) -> None:
    """A transition that completed or was abandoned in this step is over (metrics time it)."""
    transition = step.status.transition
    if (
        transition is not None
        and transition_outcome(transition.kind, step.before.phase, step.status.phase) is not None
    ):
        step.status.transition = None


def _invalid_spec(step: _Step) -> None:
    problems = "; ".join(step.obs.spec_problems) or "the spec is invalid"
    alive = step.obs.driver_pod in (PodPhase.PENDING, PodPhase.RUNNING)
    if step.status.phase is P.FAILED and step.status.observed_generation == step.obs.generation:
        return  # failed for this very spec, as the status already says: no earlier spec to keep
    if alive or step.status.phase in (P.FINISHED, P.FAILED):
        # Never tear down a running job because of an edit: report it and do nothing.
        step.degraded = ("InvalidSpec", f"the new spec is not applied: {problems}")
        return
    step.move(P.FAILED, f"the spec can never run: {problems}")
    step.status.observed_generation = step.obs.generation


def _absorb_report(step: _Step) -> None:
    """Copy progress from the current attempt's report into the status."""
    report = step.report
    if report is None:
        return
    status = step.status
    if report.lifecycle is not None:
        status.lifecycle = report.lifecycle
    if report.last_checkpoint is not None:
        status.last_checkpoint = report.last_checkpoint
    if report.coordinator is not None:
        status.coordinator = report.coordinator
    if report.queries:
        status.queries = report.queries
    if report.savepoint is not None:
        status.savepoint = report.savepoint
    if report.cluster_partitions:
        status.cluster_partitions = report.cluster_partitions
    if report.tasks_skipped or report.tasks_rerun or report.splits_reread:
        status.recovery.tasks_skipped = report.tasks_skipped
        status.recovery.tasks_rerun = report.tasks_rerun
        status.recovery.splits_reread = report.splits_reread


def _release_shuffle_on_end(step: _Step, spec: FinishableSparkJobSpec) -> None:
    """A Batch job that just ended deletes its shuffle pods now, not on some later reconcile."""
    ended = step.status.phase in TERMINAL_PHASES and step.before.phase is not step.status.phase
    delete = Action(ActionKind.DELETE_SHUFFLE)
    if spec.mode is JobMode.BATCH and ended and delete not in step.actions:
        step.act(delete)


def _release_executors_on_end(step: _Step) -> None:
    """A job whose driver ended (suspended, finished, failed, or lost: recovering) keeps no
    executor pods: Spark deletes them on a clean stop, but a crashed driver's executors exit
    and their pods would stay until its pod is deleted, which a crashed one is not (its log).
    A lost driver's successors keep theirs: a standby's warm executors are what it takes over
    with."""
    phase = step.status.phase
    if phase in (*TERMINAL_PHASES, P.SUSPENDED, P.RECOVERING) and step.before.phase is not phase:
        lost = step.before.attempt if phase is P.RECOVERING else 0
        step.act(Action(ActionKind.DELETE_EXECUTORS, attempt=lost))


def _advance(step: _Step, spec: FinishableSparkJobSpec) -> None:
    phase = step.status.phase
    lifecycle = step.status.lifecycle
    # A Batch job, and a Streaming job whose bounded input ended, finish by themselves.
    input_ended = spec.mode is JobMode.BATCH or (
        lifecycle is not None and lifecycle.mode is LifecycleMode.FINAL_CHECKPOINT
    )
    illegal = illegal_state_change(phase, spec.state, input_ended=input_ended)
    if illegal:
        step.degraded = ("IllegalStateChange", illegal)
    elif spec.restart_nonce != step.status.restart_nonce and phase not in (P.PENDING, P.FAILED):
        step.degraded = (
            "RestartNotApplied",
            f"spec.restartNonce restarts a Failed job; this job is {phase.value}"
            + (
                ", and a Finished job stays finished: create a new job"
                if phase is P.FINISHED
                else ""
            ),
        )
    pinned = step.status.shuffle_replicas
    asked = spec.effective_shuffle.replicas
    batch_running = spec.mode is JobMode.BATCH and phase not in TERMINAL_PHASES
    if batch_running and pinned is not None and asked != pinned:
        step.degraded = (
            "ShuffleReplicasPinned",
            f"spec.shuffle.replicas: {asked} is not applied to run {step.status.run}: its "
            f"partitions are placed on its {pinned} shuffle pods; it applies to the next run "
            "(or set it back to clear this)",
        )
    if _departure(step, spec):
        return
    handler = _HANDLERS[phase]
    handler(step, spec)


def _count_restart_budget(step: _Step, spec: FinishableSparkJobSpec) -> None:
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


def _keep_standby(step: _Step, spec: FinishableSparkJobSpec) -> None:
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


def _start_driver(
    step: _Step, kind: ActionKind = ActionKind.START_DRIVER, *, predecessor_exited: bool = False
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


def _next_attempt(step: _Step, spec: FinishableSparkJobSpec, *, after_loss: bool = False) -> None:
    """Ask for the next attempt's driver: its pod is built from the spec as it is now (its
    revision), and periodic savepoints are counted from when it runs. After a driver loss it
    is the standby's to take over, if the job keeps one; a lost driver whose process is seen
    ended (not merely gone from view) cannot write any more."""
    exited = after_loss and step.obs.driver_pod in (PodPhase.FAILED, PodPhase.SUCCEEDED)
    step.status.attempt += 1
    step.status.spec_revision = spec.revision
    _size_attempt(step.status, spec)
    step.status.periodic_savepoint_due = None
    takeover = after_loss and spec.recovery.standby
    kind = ActionKind.TAKE_OVER if takeover else ActionKind.START_DRIVER
    _start_driver(step, kind, predecessor_exited=exited)


def _size_attempt(status: FinishableSparkJobStatus, spec: FinishableSparkJobSpec) -> None:
    """The executors of the attempt about to start: the autoscaler's count (within the bounds
    as they are now), else spec.executor.instances (a Batch job's first count). Its
    recommendations start over: they were measured with the attempt before."""
    autoscaler = spec.autoscaler
    if not autoscaler.enabled or spec.mode is JobMode.BATCH:  # Batch: Spark's dynamic allocation
        status.executors = spec.executors
        return
    scaled = status.autoscaler
    if scaled is None:
        scaled = status.autoscaler = AutoscalerStatus(executors=spec.executors)
    scaled.executors = autoscaler.bounded(scaled.executors)
    scaled.recommendations = []
    scaled.load = None
    status.executors = scaled.executors


def _start(
    step: _Step,
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
    _next_attempt(step, spec)
    step.move(P.SUBMITTED, message)


def _on_pending(step: _Step, spec: FinishableSparkJobSpec) -> None:
    if spec.state is DesiredState.SUSPENDED:
        step.move(P.SUSPENDED, "created suspended; set spec.state: Running to start")
        return
    attempt = step.status.attempt + 1
    step.status.restart_nonce = spec.restart_nonce
    # A new run: its shuffle pods are as many as the spec says now, for the run's whole life.
    batch = spec.mode is JobMode.BATCH
    step.status.shuffle_replicas = spec.effective_shuffle.replicas if batch else None
    _start(step, spec, spec.restore_from.savepoint, f"driver attempt {attempt} submitted")


def _on_failed(step: _Step, spec: FinishableSparkJobSpec) -> None:
    """A changed spec restarts the failed run from its newest checkpoint; a changed
    ``restartNonce`` restarts it from where ``restartFrom`` says."""
    if spec.mode is JobMode.BATCH:
        step.act(Action(ActionKind.DELETE_SHUFFLE))
    status = step.status
    changed = step.obs.generation > step.before.observed_generation
    if not changed or spec.state is DesiredState.SUSPENDED:
        return
    status.restarts = 0
    status.recent_losses = []
    status.recovery = RecoveryStatus()
    if (
        spec.restart_nonce == status.restart_nonce
        or spec.restart_from is RestartFrom.LAST_CHECKPOINT
    ):
        status.restart_nonce = spec.restart_nonce
        step.move(
            P.PENDING, f"the spec changed; run {status.run} continues from its last checkpoint"
        )
        _start(step, spec, status.restore_from, f"driver attempt {status.attempt + 1} submitted")
        return
    status.restart_nonce = spec.restart_nonce
    status.run += 1
    origin = spec.restore_from.savepoint or "nothing"
    step.move(P.PENDING, f"spec.restartNonce changed; run {status.run} starts from {origin}")
    _on_pending(step, spec)


def _on_finished(step: _Step, spec: FinishableSparkJobSpec) -> None:
    step.status.pending_request = None
    if spec.mode is JobMode.BATCH:
        step.act(Action(ActionKind.DELETE_SHUFFLE))


def _on_suspended(step: _Step, spec: FinishableSparkJobSpec) -> None:
    step.act(Action(ActionKind.DELETE_DRIVER, attempt=step.status.attempt))
    if spec.state is DesiredState.SUSPENDED:
        return
    savepoint = step.status.savepoint.location if step.status.savepoint else ""
    how = "to drain it" if spec.state is DesiredState.FINISHED else ""
    upgrade = _upgrade_pending(step.status, spec)
    ongoing = step.status.transition
    rescale = ongoing is not None and ongoing.kind is Transition.RESCALE and not upgrade
    what = "starting the upgraded spec" if upgrade else "resuming"
    transition = Transition.UPGRADE if upgrade else Transition.RESUME
    if rescale and step.status.autoscaler is not None:
        what = f"rescaling to {spec.autoscaler.bounded(step.status.autoscaler.executors)} executors"
        transition = Transition.RESCALE
    _start(
        step,
        spec,
        savepoint or spec.restore_from.savepoint,
        " ".join(filter(None, [f"{what} from savepoint {savepoint or '(none)'}", how])),
        transition,
    )


def _driver_lost(step: _Step) -> str | None:
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


def _departure(step: _Step, spec: FinishableSparkJobSpec) -> bool:
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
    step: _Step,
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
    _next_attempt(step, spec, after_loss=True)
    step.move(P.RECOVERING, f"driver attempt {status.attempt} started after: {reason}")


def _crash(step: _Step, spec: FinishableSparkJobSpec, reason: str) -> None:
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
    _on_recovering(step, spec)


def _on_recovering(step: _Step, spec: FinishableSparkJobSpec) -> None:
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
        _next_attempt(step, spec, after_loss=True)
        step.move(P.RECOVERING, f"driver attempt {status.attempt} started after: {recovery.reason}")
        return
    if _driver_awaited(step, spec):
        return
    if recovery.shuffle_retained_until is not None:
        step.act(Action(ActionKind.REQUEUE, after=recovery.shuffle_retained_until - now))
    _follow_report(step, spec)


def _follow_report(step: _Step, spec: FinishableSparkJobSpec) -> None:
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


def _driver_awaited(step: _Step, spec: FinishableSparkJobSpec) -> bool:
    """While a new attempt starts: re-ask for a missing pod, count a dead one as a crash.

    Returns True when the step is over (the attempt crashed).
    """
    if step.obs.driver_pod is PodPhase.ABSENT and step.report is None:
        _start_driver(step)
        return False
    lost = _driver_lost(step)
    if lost is not None:
        _crash(step, spec, lost)
        return True
    return False


def _on_submitted(step: _Step, spec: FinishableSparkJobSpec) -> None:
    if _driver_awaited(step, spec):
        return
    _follow_report(step, spec)


def _stop_failed_recently(step: _Step) -> bool:
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


def _on_running(step: _Step, spec: FinishableSparkJobSpec) -> None:
    lost = _driver_lost(step)
    if lost is not None:
        _crash(step, spec, lost)
        return
    _follow_report(step, spec)
    if step.status.phase is not P.RUNNING:
        return
    pending = step.status.pending_request
    if pending is not None:
        _await_savepoint(step, spec, pending)
        return
    if spec.state is not DesiredState.RUNNING and not _stop_failed_recently(step):
        drain = spec.state is DesiredState.FINISHED
        trigger = SavepointTrigger.DRAIN if drain else SavepointTrigger.STOP
        step.request(RequestAction.STOP, trigger)
        step.begin(Transition.DRAIN if drain else Transition.SUSPEND)
        if drain:
            step.move(P.DRAINING, "stop with savepoint and drain requested")
        else:
            step.move(P.SAVEPOINTING, "stop with savepoint requested")
        return
    if spec.savepoint_trigger_nonce != step.status.savepoint_trigger_nonce:
        step.status.savepoint_trigger_nonce = spec.savepoint_trigger_nonce
        step.request(RequestAction.SAVEPOINT, SavepointTrigger.MANUAL)
        return
    if _upgrade(step, spec):
        return
    if _rescale(step, spec):
        return
    if _periodic_savepoint(step, spec):
        return
    _watch_checkpoints(step, spec)


def _periodic_savepoint(step: _Step, spec: FinishableSparkJobSpec) -> bool:
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


def _rescale(step: _Step, spec: FinishableSparkJobSpec) -> bool:
    """spec.autoscaler: record what the load asks for; start a rescale (a stop with savepoint,
    then the next attempt with the new count) when the decision says so. True when it started."""
    status = step.status
    if not spec.autoscaler.enabled or spec.mode is not JobMode.STREAMING:
        return False
    report = step.report
    running = status.executors or spec.executors
    decided = autoscale(
        status.autoscaler,
        spec.autoscaler,
        running,
        report.load if report is not None else None,
        step.obs.now,
    )
    status.autoscaler = decided.status
    if decided.look_again_in is not None:
        step.act(Action(ActionKind.REQUEUE, after=decided.look_again_in))
    target = decided.rescale_to
    if target is None:
        return False
    rescale = decided.status.last_rescale
    reason = rescale.reason if rescale is not None else ""
    change = f"rescale from {running} to {target} executors"
    step.events.append(Event("Normal", "RescaleStarted", f"{change}: {reason}"))
    step.begin(Transition.RESCALE)
    step.request(RequestAction.STOP, SavepointTrigger.RESCALE)
    step.move(P.SAVEPOINTING, f"{change}: stop with savepoint, then start with {target}")
    return True


def _upgrade_pending(status: FinishableSparkJobStatus, spec: FinishableSparkJobSpec) -> bool:
    """The spec asks for another driver than the current attempt runs (a status written before
    revisions were recorded has none: its driver is taken to run the spec as it is)."""
    return status.spec_revision is not None and status.spec_revision != spec.revision


def _upgrade(step: _Step, spec: FinishableSparkJobSpec) -> bool:
    """Apply a changed spec to a Running job as spec.upgradeMode says; True when it started."""
    status = step.status
    if status.spec_revision is None:
        status.spec_revision = spec.revision
    if not _upgrade_pending(status, spec):
        if status.upgrade_check is not None:  # the spec was set back: no check pod is needed
            status.upgrade_check = None
            step.act(Action(ActionKind.DELETE_UPGRADE_CHECK))
        return False
    if _stop_failed_recently(step):
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
        _start(step, spec, status.restore_from, message, Transition.UPGRADE)
        return True
    status.run += 1
    if spec.mode is JobMode.BATCH:  # the new run gets fresh shuffle pods, as many as asked now
        status.shuffle_replicas = spec.effective_shuffle.replicas
        step.act(Action(ActionKind.DELETE_SHUFFLE))
    stateless = f"{change}: run {status.run} starts from nothing (stateless)"
    _start(step, spec, "", stateless, Transition.UPGRADE)
    return True


def _upgrade_checked(step: _Step, spec: FinishableSparkJobSpec) -> bool:
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


def _watch_checkpoints(step: _Step, spec: FinishableSparkJobSpec) -> None:
    """Stalled checkpoints make the job Degraded, or replace its driver (lifecycle/health.py)."""
    health = checkpoint_health(step.status, spec, step.obs.now)
    if health.stalled and spec.checkpointing.health.restart_driver:
        step.act(Action(ActionKind.DELETE_DRIVER, attempt=step.status.attempt))
        _crash(step, spec, f"{health.stalled}; the driver is replaced")
        return
    if health.stalled:
        step.degraded = (STALLED_REASON, health.stalled)
    if health.look_again_in is not None:
        step.act(Action(ActionKind.REQUEUE, after=health.look_again_in))


def _await_savepoint(step: _Step, spec: FinishableSparkJobSpec, pending: ControlRequest) -> None:
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


def _answer(step: _Step, pending: ControlRequest) -> RequestReport | None:
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


def _timed_out(step: _Step, spec: FinishableSparkJobSpec) -> bool:
    deadline = request_deadline(step.status, spec)
    return deadline is not None and step.obs.now > deadline


def _on_stopping(step: _Step, spec: FinishableSparkJobSpec) -> None:
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
            _on_suspended(step, spec)
        return
    lost = _driver_lost(step)
    if lost is not None:
        _crash(step, spec, lost)
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


def _on_finishing(step: _Step, spec: FinishableSparkJobSpec) -> None:
    lost = _driver_lost(step)
    if lost is not None:
        _crash(step, spec, lost)
        return
    _follow_report(step, spec)


_HANDLERS = {
    P.PENDING: _on_pending,
    P.SUBMITTED: _on_submitted,
    P.RUNNING: _on_running,
    P.SAVEPOINTING: _on_stopping,
    P.DRAINING: _on_stopping,
    P.FINISHING: _on_finishing,
    P.RECOVERING: _on_recovering,
    P.SUSPENDED: _on_suspended,
    P.FINISHED: _on_finished,
    P.FAILED: _on_failed,
}


def _set_conditions(step: _Step) -> None:
    conditions, events = conditions_for(step.before, step.status, step.obs, step.degraded)
    step.status.conditions = conditions
    step.events.extend(events)
