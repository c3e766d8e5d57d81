"""Prometheus metrics of the operator, derived from the custom resources alone.

Every job figure is derived from the difference between the status before and after one
reconcile (:meth:`Metrics.record`, called by the status writer only), so metrics move exactly
where the phase (or the status) changes and an operator restart neither loses nor double-counts
them: a restarted operator starts from the status stored in the custom resource. Three other
calls keep the series in step with the objects rather than change a figure: a job first seen
(:meth:`Metrics.track`) and a job deleted (:meth:`Metrics.forget`) add or drop its series, and a
FinishableSparkSnapshot created, changed or deleted recounts its job's snapshots
(:meth:`Metrics.snapshot_changed`). One figure counts an act rather than a status: a job deleted
at the end of its time to live (:meth:`Metrics.job_expired`), counted by the process whose DELETE
the API server accepted, so once.
"""

from __future__ import annotations

import contextlib
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from finishable.api.models import (
    ConditionStatus,
    ConditionType,
    DepartureReason,
    Phase,
    Transition,
    UpgradeCheckState,
)
from finishable.api.snapshot import SnapshotState
from finishable.api.status import FinishableSparkJobStatus
from finishable.lifecycle.decisions import transition_outcome
from finishable.lifecycle.health import STALLED_REASON

JobKey = tuple[str, str]
"""(namespace, name) of a job."""

JOB_LABEL = "job_name"
"""The label naming a FinishableSparkJob (as kube-state-metrics names a Kubernetes Job): not
``job``, which Prometheus sets on every series to the scrape job's name."""

_DIRECTIONS = ("up", "down")
_EXPIRING = (Phase.FINISHED, Phase.FAILED)  # the phases a time to live counts from

_DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600)


class Metrics:
    """The operator's metrics in one registry (the process-wide one when serving)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        per_job = ["namespace", JOB_LABEL]
        self.jobs = Gauge("finishable_jobs", "Jobs per phase.", ["phase"], registry=registry)
        self.transitions = Counter(
            "finishable_phase_transitions",
            "Phase changes of jobs.",
            ["from_phase", "to_phase"],
            registry=registry,
        )
        self.time_in_phase = Histogram(
            "finishable_phase_duration_seconds",
            "How long a job stayed in a phase, observed when it left it.",
            ["phase"],
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        self.lifecycle_transition = Histogram(
            "finishable_lifecycle_transition_duration_seconds",
            "How long a completed lifecycle transition took: submission, resume and upgrade "
            "(to Running), suspend (to Suspended), drain (to Finished), recovery (a lost driver "
            "to Running).",
            ["transition"],
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        self.upgrade_checks = Counter(
            "finishable_upgrade_checks",
            "Upgrade checks by outcome: passed (the upgrade went on) or refused (the job ran on "
            "unchanged).",
            ["outcome"],
            registry=registry,
        )
        self.checkpoints = Counter(
            "finishable_checkpoints_completed", "Completed checkpoints.", per_job, registry=registry
        )
        self.savepoints = Counter(
            "finishable_savepoints_completed", "Completed savepoints.", per_job, registry=registry
        )
        self.stop_latency = Histogram(
            "finishable_stop_duration_seconds",
            "From a stop request to Suspended (drain=false) or Finished (drain=true).",
            ["drain"],
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        self.driver_restarts = Counter(
            "finishable_driver_restarts",
            "Driver attempts started after a crash.",
            per_job,
            registry=registry,
        )
        self.driver_departures = Counter(
            "finishable_driver_departures",
            "Driver attempts Kubernetes asked to leave (eviction, node drain, deletion) and the "
            "next attempt replaced, by reason; not charged to the restart budget.",
            [*per_job, "reason"],
            registry=registry,
        )
        self.recovery_duration = Histogram(
            "finishable_recovery_duration_seconds",
            "From losing a driver to Running again.",
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        self.tasks_skipped = Counter(
            "finishable_recovery_tasks_skipped",
            "Finished tasks a recovered batch driver did not run again.",
            per_job,
            registry=registry,
        )
        self.tasks_rerun = Counter(
            "finishable_recovery_tasks_rerun",
            "Tasks a recovered batch driver ran again.",
            per_job,
            registry=registry,
        )
        self.shuffle_retained = Gauge(
            "finishable_shuffle_pods_retained",
            "Shuffle pods kept for a lost driver's successor, until the retain deadline.",
            per_job,
            registry=registry,
        )
        self.restarts_left = Gauge(
            "finishable_driver_restarts_left",
            "Driver losses the job survives now: spec.recovery.maxAttempts minus the losses "
            "within spec.recovery.failureRateInterval.",
            per_job,
            registry=registry,
        )
        self.last_checkpoint = Gauge(
            "finishable_last_checkpoint_timestamp_seconds",
            "When the newest checkpoint completed (Unix time): alert on "
            "time() - this, which grows between reconciles.",
            per_job,
            registry=registry,
        )
        self.checkpoints_stalled = Gauge(
            "finishable_checkpoints_stalled",
            "1 while the job is Degraded because no checkpoint completed for "
            "spec.checkpointing.health.maxMissedIntervals intervals with input unread.",
            per_job,
            registry=registry,
        )
        self.job_phase = Gauge(
            "finishable_job_phase",
            "1 for the phase each job is in (one series per job): alert on a Failed job.",
            [*per_job, "phase"],
            registry=registry,
        )
        self.phase_since = Gauge(
            "finishable_job_phase_since_timestamp_seconds",
            "When each job entered its current phase (Unix time).",
            per_job,
            registry=registry,
        )
        self.request_deadline = Gauge(
            "finishable_job_request_deadline_timestamp_seconds",
            "When the pending stop, drain or savepoint must have ended (its request plus "
            "spec.stopTimeout; Unix time); no series while nothing is pending.",
            per_job,
            registry=registry,
        )
        self.executors = Gauge(
            "finishable_executors",
            "The executor pods the current driver attempt was started with.",
            per_job,
            registry=registry,
        )
        self.executors_recommended = Gauge(
            "finishable_executors_recommended",
            "spec.autoscaler: the executors the newest load asks for (no series before its "
            "first full metrics window).",
            per_job,
            registry=registry,
        )
        self.utilization = Gauge(
            "finishable_autoscaler_utilization",
            "spec.autoscaler: the share of the metrics window the micro-batches kept the "
            "executors busy, as the newest load says.",
            per_job,
            registry=registry,
        )
        self.rescales = Counter(
            "finishable_rescales",
            "Rescales the autoscaler started, by direction (up, down).",
            [*per_job, "direction"],
            registry=registry,
        )
        self.snapshots = Gauge(
            "finishable_snapshots",
            "FinishableSparkSnapshots per job and state (Pending, InProgress, Completed, "
            "Failed, Abandoned).",
            [*per_job, "state"],
            registry=registry,
        )
        self.jobs_expired = Counter(
            "finishable_jobs_expired",
            "Finished and Failed jobs deleted at the end of their time to live "
            "(spec.ttlAfterFinished, spec.ttlAfterFailed or the operator's default), by the "
            "job's namespace and phase.",
            ["namespace", "phase"],
            registry=registry,
        )
        self._snapshots: dict[tuple[str, str], tuple[str, SnapshotState]] = {}
        """(namespace, snapshot name) -> (job name, state): what the gauge counts."""
        self._phases: dict[JobKey, Phase] = {}
        self._jobs_per_phase: dict[Phase, int] = dict.fromkeys(Phase, 0)
        # Series that exist from the start at 0: Prometheus' rate() and increase() see the first
        # observation only as a change from an earlier sample.
        for phase in Phase:
            self.jobs.labels(phase.value).set(0)
            self.time_in_phase.labels(phase.value)
        for drain in ("true", "false"):
            self.stop_latency.labels(drain)
        for transition in Transition:
            self.lifecycle_transition.labels(transition.value)
        for outcome in (UpgradeCheckState.PASSED, UpgradeCheckState.REFUSED):
            self.upgrade_checks.labels(outcome.value.lower())
        self._per_job_counters = (
            self.checkpoints,
            self.savepoints,
            self.driver_restarts,
            self.tasks_skipped,
            self.tasks_rerun,
        )

    def track(self, key: JobKey, status: FinishableSparkJobStatus) -> None:
        """Count a job in its current phase (a job seen for the first time by this process), and
        start its counters at 0."""
        self._set_phase(key, status)
        for counter in self._per_job_counters:
            counter.labels(*key)
        for reason in DepartureReason:
            self.driver_departures.labels(*key, reason.value)
        for direction in _DIRECTIONS:
            self.rescales.labels(*key, direction)
        for phase in _EXPIRING:
            self.jobs_expired.labels(key[0], phase.value)

    def job_expired(self, key: JobKey, phase: Phase) -> None:
        """The operator deleted the job when its time to live in ``phase`` ended."""
        self.jobs_expired.labels(key[0], phase.value).inc()

    def forget(self, key: JobKey) -> None:
        """The job is gone: drop it from the per-phase count and its per-job series."""
        phase = self._phases.pop(key, None)
        if phase is not None:
            self._count(phase, -1)
        for metric in (
            *self._per_job_counters,
            self.shuffle_retained,
            self.restarts_left,
            self.last_checkpoint,
            self.checkpoints_stalled,
            self.phase_since,
            self.request_deadline,
            self.executors,
            self.executors_recommended,
            self.utilization,
        ):
            with contextlib.suppress(KeyError):
                metric.remove(*key)
        for direction in _DIRECTIONS:
            with contextlib.suppress(KeyError):
                self.rescales.remove(*key, direction)
        for reason in DepartureReason:
            with contextlib.suppress(KeyError):
                self.driver_departures.remove(*key, reason.value)
        if phase is not None:
            with contextlib.suppress(KeyError):
                self.job_phase.remove(*key, phase.value)

    def snapshot_changed(
        self, namespace: str, name: str, job: str, state: SnapshotState | None
    ) -> None:
        """A snapshot was created or changed (``state``) or deleted (None): count its job's
        snapshots per state again (every state, so a count that drops to 0 says so)."""
        old = self._snapshots.pop((namespace, name), None)
        if state is not None:
            self._snapshots[namespace, name] = (job, state)
        for affected in {job, *([old[0]] if old else [])}:
            counts = dict.fromkeys(SnapshotState, 0)
            for (space, _), (owner, held) in self._snapshots.items():
                if space == namespace and owner == affected:
                    counts[held] += 1
            for each, count in counts.items():
                self.snapshots.labels(namespace, affected, each.value).set(count)

    def record(
        self,
        key: JobKey,
        before: FinishableSparkJobStatus,
        after: FinishableSparkJobStatus,
        now: datetime,
        *,
        shuffle_replicas: int,
        request_deadline: datetime | None = None,
    ) -> None:
        """Everything one reconcile changed."""
        self._set_phase(key, after)
        if request_deadline is None:
            with contextlib.suppress(KeyError):
                self.request_deadline.remove(*key)
        else:
            self.request_deadline.labels(*key).set(request_deadline.timestamp())
        if after.phase is not before.phase:
            self._record_transition(before, after, now)
        self._record_lifecycle_transition(before, after, now)
        self._record_progress(key, before, after)
        self._record_upgrade_check(before, after)
        self._record_scale(key, before, after)
        retained = after.recovery.shuffle_retained_until is not None
        self.shuffle_retained.labels(*key).set(shuffle_replicas if retained else 0)
        if after.restarts_left is not None:
            self.restarts_left.labels(*key).set(after.restarts_left)
        checkpoint = after.last_checkpoint
        if checkpoint is not None and checkpoint.time is not None:
            self.last_checkpoint.labels(*key).set(checkpoint.time.timestamp())
        stalled = any(
            c.type is ConditionType.DEGRADED
            and c.status is ConditionStatus.TRUE
            and c.reason == STALLED_REASON
            for c in after.conditions
        )
        self.checkpoints_stalled.labels(*key).set(1 if stalled else 0)

    def _record_transition(
        self, before: FinishableSparkJobStatus, after: FinishableSparkJobStatus, now: datetime
    ) -> None:
        self.transitions.labels(before.phase.value, after.phase.value).inc()
        if before.phase_since is not None:
            self.time_in_phase.labels(before.phase.value).observe(
                max(0.0, (now - before.phase_since).total_seconds())
            )
        stopped = {(Phase.SAVEPOINTING, Phase.SUSPENDED), (Phase.DRAINING, Phase.FINISHED)}
        if (before.phase, after.phase) in stopped:
            request = before.pending_request
            started = request.requested_at if request and request.requested_at else None
            started = started or before.phase_since
            if started is not None:
                drain = "true" if before.phase is Phase.DRAINING else "false"
                self.stop_latency.labels(drain).observe(max(0.0, (now - started).total_seconds()))
        lost_at = before.recovery.driver_lost_at
        if before.phase is Phase.RECOVERING and after.phase is Phase.RUNNING and lost_at:
            self.recovery_duration.observe(max(0.0, (now - lost_at).total_seconds()))

    def _record_lifecycle_transition(
        self, before: FinishableSparkJobStatus, after: FinishableSparkJobStatus, now: datetime
    ) -> None:
        ongoing = before.transition
        if ongoing is None or after.transition == ongoing:
            return
        if transition_outcome(ongoing.kind, before.phase, after.phase):
            seconds = max(0.0, (now - ongoing.started_at).total_seconds())
            self.lifecycle_transition.labels(ongoing.kind.value).observe(seconds)

    def _record_progress(
        self, key: JobKey, before: FinishableSparkJobStatus, after: FinishableSparkJobStatus
    ) -> None:
        old_checkpoint = before.last_checkpoint.id if before.last_checkpoint else None
        new_checkpoint = after.last_checkpoint.id if after.last_checkpoint else None
        if new_checkpoint is not None and new_checkpoint != old_checkpoint:
            gained = new_checkpoint - old_checkpoint if old_checkpoint is not None else 1
            self.checkpoints.labels(*key).inc(gained if gained > 0 else 1)
        old_savepoint = before.savepoint.location if before.savepoint else None
        new_savepoint = after.savepoint.location if after.savepoint else None
        if new_savepoint and new_savepoint != old_savepoint:
            self.savepoints.labels(*key).inc()
        if after.restarts > before.restarts:
            self.driver_restarts.labels(*key).inc(after.restarts - before.restarts)
        if after.departures > before.departures and after.departure is not None:
            reason = after.departure.reason.value
            self.driver_departures.labels(*key, reason).inc(after.departures - before.departures)
        for counter, old, new in (
            (self.tasks_skipped, before.recovery.tasks_skipped, after.recovery.tasks_skipped),
            (self.tasks_rerun, before.recovery.tasks_rerun, after.recovery.tasks_rerun),
        ):
            if new > old:
                counter.labels(*key).inc(new - old)

    def _record_upgrade_check(
        self, before: FinishableSparkJobStatus, after: FinishableSparkJobStatus
    ) -> None:
        check, old = after.upgrade_check, before.upgrade_check
        if check is None or check.state is UpgradeCheckState.CHECKING:
            return
        if old is None or (old.generation, old.state) != (check.generation, check.state):
            self.upgrade_checks.labels(check.state.value.lower()).inc()

    def _record_scale(
        self, key: JobKey, before: FinishableSparkJobStatus, after: FinishableSparkJobStatus
    ) -> None:
        if after.executors is not None:
            self.executors.labels(*key).set(after.executors)
        scaled, old = after.autoscaler, before.autoscaler
        if scaled is None:
            return
        rescale = scaled.last_rescale
        if rescale is not None and scaled.rescales > (old.rescales if old is not None else 0):
            up = rescale.to_executors > rescale.from_executors
            self.rescales.labels(*key, "up" if up else "down").inc()
        if scaled.recommended is None or scaled.load is None:
            for gauge in (self.executors_recommended, self.utilization):
                with contextlib.suppress(KeyError):
                    gauge.remove(*key)
        else:
            self.executors_recommended.labels(*key).set(scaled.recommended)
            self.utilization.labels(*key).set(scaled.load.busy)

    def _set_phase(self, key: JobKey, status: FinishableSparkJobStatus) -> None:
        phase = status.phase
        if status.phase_since is not None:
            self.phase_since.labels(*key).set(status.phase_since.timestamp())
        previous = self._phases.get(key)
        if previous is phase:
            return
        if previous is not None:
            self._count(previous, -1)
            with contextlib.suppress(KeyError):
                self.job_phase.remove(*key, previous.value)
        self._phases[key] = phase
        self._count(phase, +1)
        self.job_phase.labels(*key, phase.value).set(1)

    def _count(self, phase: Phase, change: int) -> None:
        self._jobs_per_phase[phase] += change
        self.jobs.labels(phase.value).set(self._jobs_per_phase[phase])
