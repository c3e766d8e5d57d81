"""The autoscaler's decision (spec.autoscaler, docs/autoscaler.md): pure, like the phase machine.

:func:`recommend` turns one load report into the executors the job needs. The model is Flink's
autoscaler's, for one operator, the whole job: the executors read ``read`` units per second while
busy ``busy`` of the time, so at the target utilization ``t`` they can take ``read / busy * t``
per executor-share; a source needs its arrival rate plus its backlog spread over the catch-up
time. So the need is ``current * busy / t`` (the busy time alone), times ``wanted / read`` of the
source furthest behind when that is more than 1. Executors that are idle do not get more by
having more of them, so a backlog held back by something other than the executors (a source's
limit per batch) asks for no more of them.

:func:`autoscale` paces the recommendations: it applies one only when it held for the
stabilization window (a scale-up to the lowest count recommended within it, a scale-down to the
highest, as Kubernetes' HPA stabilizes) and the cooldown since the last rescale passed. Bounds
changed under a running job apply at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from finishable.api.autoscalerspec import AutoscalerSpec
from finishable.api.status import (
    AutoscalerStatus,
    LoadReport,
    RecommendationStatus,
    RescaleStatus,
)

MIN_READ_PER_SECOND = 1e-6
MAX_FACTOR = 1000.0
"""Beyond any bound: a source far behind asks for the most executors, not for infinity."""


@dataclass(frozen=True)
class Recommendation:
    executors: int
    reason: str


@dataclass(frozen=True)
class AutoscaleStep:
    """The autoscaler's status after one look, and the rescale to start (None: none)."""

    status: AutoscalerStatus
    rescale_to: int | None = None
    look_again_in: timedelta | None = None


def recommend(load: LoadReport, current: int, spec: AutoscalerSpec) -> Recommendation:
    """The executors ``load`` asks for, measured with ``current`` of them (see the module)."""
    target = spec.target_utilization
    need = current * load.busy / target
    reason = (
        f"micro-batches kept {current} executor(s) busy {load.busy:.0%} of the last "
        f"{load.window_seconds:.0f}s (target {target:.0%})"
    )
    catch_up = spec.catch_up_time.total_seconds()
    behind = None
    for source in load.sources:
        if source.read_per_second < MIN_READ_PER_SECOND:
            continue  # nothing read: no rate to scale from (the busy time still counts)
        wanted = source.arrived_per_second + source.backlog / catch_up
        factor = min(wanted / source.read_per_second, MAX_FACTOR)
        if factor > 1 and (behind is None or factor > behind[0]):
            behind = (factor, source.name, source.backlog, source.unit)
    if behind is not None and need > 0:
        factor, name, backlog, unit = behind
        need *= factor
        reason += (
            f"; source {name} must read {factor:.2f}x as fast to keep up and clear its "
            f"backlog of {backlog} {unit} within {spec.catch_up_time}"
        )
    if abs(need - current) <= spec.tolerance * current:
        executors = spec.bounded(current)
    else:
        executors = spec.bounded(max(1, math.ceil(need - 1e-9)))
    return Recommendation(executors, f"{reason}: needs {need:.2f}, recommends {executors}")


def autoscale(
    status: AutoscalerStatus | None,
    spec: AutoscalerSpec,
    running: int,
    load: LoadReport | None,
    now: datetime,
) -> AutoscaleStep:
    """One look at a Running job that runs ``running`` executors: the autoscaler's new status
    and the rescale it starts, if any. ``load`` is the current attempt's newest (None before
    its first full window)."""
    current = (status or AutoscalerStatus(executors=running)).model_copy(deep=True)
    if spec.bounded(running) != running:
        target = spec.bounded(running)
        reason = (
            f"{running} executor(s) is outside spec.autoscaler's bounds "
            f"[{spec.min_executors}, {spec.max_executors}]"
        )
        return _rescale(current, running, target, reason, now)
    if load is None:
        current.reason = (
            f"measuring: the driver reports its load once it has run spec.autoscaler."
            f"metricsWindow ({spec.metrics_window})"
        )
        return AutoscaleStep(current)
    recommendation = recommend(load, running, spec)
    current.load = load
    current.recommended = recommendation.executors
    current.reason = recommendation.reason
    current.recommendations = _within_window(
        current.recommendations, recommendation.executors, now, spec.stabilization_window
    )
    window_start = now - spec.stabilization_window
    first = current.recommendations[0].since
    if first > window_start:
        return AutoscaleStep(current, look_again_in=first - window_start)
    counts = [each.executors for each in current.recommendations]
    if min(counts) > running:
        target = min(counts)
    elif max(counts) < running:
        target = max(counts)
    else:
        return AutoscaleStep(current)
    last = current.last_rescale
    if last is not None and now < last.started_at + spec.cooldown:
        current.reason += (
            f"; waiting for spec.autoscaler.cooldown ({spec.cooldown}) after the last rescale"
        )
        return AutoscaleStep(current, look_again_in=last.started_at + spec.cooldown - now)
    held = f"held for {spec.stabilization_window}: {recommendation.reason}"
    return _rescale(current, running, target, held, now)


def _rescale(
    status: AutoscalerStatus, running: int, target: int, reason: str, now: datetime
) -> AutoscaleStep:
    status.executors = target
    status.rescales += 1
    status.last_rescale = RescaleStatus(
        started_at=now, from_executors=running, to_executors=target, reason=reason
    )
    status.recommendations = []
    return AutoscaleStep(status, rescale_to=target)


def _within_window(
    history: list[RecommendationStatus], executors: int, now: datetime, window: timedelta
) -> list[RecommendationStatus]:
    """``history`` with ``executors`` recommended now, trimmed to the entries that cover the
    window: those made within it and the newest one made before it (which held at its start)."""
    entries = list(history)
    if not entries or entries[-1].executors != executors:
        entries.append(RecommendationStatus(since=now, executors=executors))
    start = now - window
    older = [index for index, each in enumerate(entries) if each.since <= start]
    return entries[older[-1] :] if older else entries
