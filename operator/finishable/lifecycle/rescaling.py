"""The autoscaler's side of the phase machine: when a running job rescales, and each attempt's size.

:mod:`finishable.lifecycle.autoscaling` recommends (pure arithmetic on the driver's load reports);
here its decision becomes a rescale of the job, a stop with savepoint and then the next attempt
with the new count (``rescale``), and every new attempt is given its executors (``size_attempt``),
as Flink keeps its autoscaler beside the operator rather than in it.
"""

from __future__ import annotations

from finishable.api.models import JobMode, Phase, RequestAction, SavepointTrigger, Transition
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import AutoscalerStatus, FinishableSparkJobStatus
from finishable.lifecycle.autoscaling import autoscale
from finishable.lifecycle.decisions import Action, ActionKind, Event
from finishable.lifecycle.step import Step

P = Phase


def size_attempt(status: FinishableSparkJobStatus, spec: FinishableSparkJobSpec) -> None:
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


def rescale(step: Step, spec: FinishableSparkJobSpec) -> bool:
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
