"""The job phase machine (docs/jobs.md, Job phases): a pure ``next_status``, one handler per phase.

The operator and the local runner both call :func:`next_status` with what they observe (the
driver pod, the driver's report from the ``<job>-state`` ConfigMap or file) and act on the
:class:`~finishable.lifecycle.decisions.Decision` it returns: the new status for the one status
writer, the side effects to perform, and the Kubernetes Events to post. It is level-based: calling
it again with the same inputs yields the same decision, so a restarted operator simply carries on.

What a step reads and returns (and the transition table) is :mod:`finishable.lifecycle.decisions`;
the conditions each step ends with are :mod:`finishable.lifecycle.conditions`. Here are the
steps of a call and the phases with little of their own; the handler families are beside it:
:mod:`~finishable.lifecycle.step` (the scratch state of one call),
:mod:`~finishable.lifecycle.attempts` (starting a driver, following its report),
:mod:`~finishable.lifecycle.recovery` (crashes, departures, the restart budget, the standby),
:mod:`~finishable.lifecycle.stopping` (stops, savepoints, resumes),
:mod:`~finishable.lifecycle.upgrades` and :mod:`~finishable.lifecycle.rescaling`. They call each
other along the transition table (a crash in any phase goes through ``crash``, a stop that
completes resumes through ``on_suspended``), one way: each imports only the families below it.
"""

from __future__ import annotations

from finishable.api.lifecycle import LifecycleMode
from finishable.api.models import (
    DesiredState,
    JobMode,
    Phase,
    RequestAction,
    RestartFrom,
    SavepointTrigger,
    Transition,
)
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import FinishableSparkJobStatus, RecoveryStatus
from finishable.lifecycle.attempts import follow_report, start
from finishable.lifecycle.conditions import conditions_for
from finishable.lifecycle.decisions import (
    TERMINAL_PHASES,
    Action,
    ActionKind,
    Decision,
    Observation,
    PodPhase,
    illegal_state_change,
    transition_outcome,
)
from finishable.lifecycle.health import STALLED_REASON, checkpoint_health
from finishable.lifecycle.recovery import (
    count_restart_budget,
    crash,
    departure,
    driver_awaited,
    driver_lost,
    keep_standby,
    on_recovering,
)
from finishable.lifecycle.rescaling import rescale
from finishable.lifecycle.step import Step, stop_failed_recently
from finishable.lifecycle.stopping import (
    await_savepoint,
    on_stopping,
    on_suspended,
    periodic_savepoint,
)
from finishable.lifecycle.upgrades import upgrade

P = Phase


def next_status(
    current: FinishableSparkJobStatus,
    spec: FinishableSparkJobSpec | None,
    observation: Observation,
) -> Decision:
    """Compute the next status, the actions and the events. Pure: no I/O, no clock."""
    step = Step(current, spec, observation)
    if spec is None or observation.spec_problems:
        _invalid_spec(step)
    else:
        _absorb_report(step)
        _advance(step, spec)
        _release_shuffle_on_end(step, spec)
        _release_executors_on_end(step)
        count_restart_budget(step, spec)
        keep_standby(step, spec)
        step.status.observed_generation = observation.generation
    _settle_transition(step)
    _set_conditions(step)
    return Decision(step.status, tuple(step.actions), tuple(step.events))


# ---------------------------------------------------------------------------------------------
# the steps


def _settle_transition(step: Step) -> None:
    """A transition that completed or was abandoned in this step is over (metrics time it)."""
    transition = step.status.transition
    if (
        transition is not None
        and transition_outcome(transition.kind, step.before.phase, step.status.phase) is not None
    ):
        step.status.transition = None


def _invalid_spec(step: Step) -> None:
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


def _absorb_report(step: Step) -> None:
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


def _release_shuffle_on_end(step: Step, spec: FinishableSparkJobSpec) -> None:
    """A Batch job that just ended deletes its shuffle pods now, not on some later reconcile."""
    ended = step.status.phase in TERMINAL_PHASES and step.before.phase is not step.status.phase
    delete = Action(ActionKind.DELETE_SHUFFLE)
    if spec.mode is JobMode.BATCH and ended and delete not in step.actions:
        step.act(delete)


def _release_executors_on_end(step: Step) -> None:
    """A job whose driver ended (suspended, finished, failed, or lost: recovering) keeps no
    executor pods: Spark deletes them on a clean stop, but a crashed driver's executors exit
    and their pods would stay until its pod is deleted, which a crashed one is not (its log).
    A lost driver's successors keep theirs: a standby's warm executors are what it takes over
    with."""
    phase = step.status.phase
    if phase in (*TERMINAL_PHASES, P.SUSPENDED, P.RECOVERING) and step.before.phase is not phase:
        lost = step.before.attempt if phase is P.RECOVERING else 0
        step.act(Action(ActionKind.DELETE_EXECUTORS, attempt=lost))


def _advance(step: Step, spec: FinishableSparkJobSpec) -> None:
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
    if departure(step, spec):
        return
    handler = _HANDLERS[phase]
    handler(step, spec)


def _on_pending(step: Step, spec: FinishableSparkJobSpec) -> None:
    if spec.state is DesiredState.SUSPENDED:
        step.move(P.SUSPENDED, "created suspended; set spec.state: Running to start")
        return
    attempt = step.status.attempt + 1
    step.status.restart_nonce = spec.restart_nonce
    # A new run: its shuffle pods are as many as the spec says now, for the run's whole life.
    batch = spec.mode is JobMode.BATCH
    step.status.shuffle_replicas = spec.effective_shuffle.replicas if batch else None
    start(step, spec, spec.restore_from.savepoint, f"driver attempt {attempt} submitted")


def _on_failed(step: Step, spec: FinishableSparkJobSpec) -> None:
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
        start(step, spec, status.restore_from, f"driver attempt {status.attempt + 1} submitted")
        return
    status.restart_nonce = spec.restart_nonce
    status.run += 1
    origin = spec.restore_from.savepoint or "nothing"
    step.move(P.PENDING, f"spec.restartNonce changed; run {status.run} starts from {origin}")
    _on_pending(step, spec)


def _on_finished(step: Step, spec: FinishableSparkJobSpec) -> None:
    step.status.pending_request = None
    if spec.mode is JobMode.BATCH:
        step.act(Action(ActionKind.DELETE_SHUFFLE))


def _on_submitted(step: Step, spec: FinishableSparkJobSpec) -> None:
    if driver_awaited(step, spec):
        return
    follow_report(step, spec)


def _on_running(step: Step, spec: FinishableSparkJobSpec) -> None:
    lost = driver_lost(step)
    if lost is not None:
        crash(step, spec, lost)
        return
    follow_report(step, spec)
    if step.status.phase is not P.RUNNING:
        return
    pending = step.status.pending_request
    if pending is not None:
        await_savepoint(step, spec, pending)
        return
    if spec.state is not DesiredState.RUNNING and not stop_failed_recently(step):
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
    if upgrade(step, spec):
        return
    if rescale(step, spec):
        return
    if periodic_savepoint(step, spec):
        return
    _watch_checkpoints(step, spec)


def _watch_checkpoints(step: Step, spec: FinishableSparkJobSpec) -> None:
    """Stalled checkpoints make the job Degraded, or replace its driver (lifecycle/health.py)."""
    health = checkpoint_health(step.status, spec, step.obs.now)
    if health.stalled and spec.checkpointing.health.restart_driver:
        step.act(Action(ActionKind.DELETE_DRIVER, attempt=step.status.attempt))
        crash(step, spec, f"{health.stalled}; the driver is replaced")
        return
    if health.stalled:
        step.degraded = (STALLED_REASON, health.stalled)
    if health.look_again_in is not None:
        step.act(Action(ActionKind.REQUEUE, after=health.look_again_in))


def _on_finishing(step: Step, spec: FinishableSparkJobSpec) -> None:
    lost = driver_lost(step)
    if lost is not None:
        crash(step, spec, lost)
        return
    follow_report(step, spec)


_HANDLERS = {
    P.PENDING: _on_pending,
    P.SUBMITTED: _on_submitted,
    P.RUNNING: _on_running,
    P.SAVEPOINTING: on_stopping,
    P.DRAINING: on_stopping,
    P.FINISHING: _on_finishing,
    P.RECOVERING: on_recovering,
    P.SUSPENDED: on_suspended,
    P.FINISHED: _on_finished,
    P.FAILED: _on_failed,
}


def _set_conditions(step: Step) -> None:
    conditions, events = conditions_for(step.before, step.status, step.obs, step.degraded)
    step.status.conditions = conditions
    step.events.extend(events)
