"""The status writer's merge patch, the metrics it moves, and the pure readers of the loop."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from finishable.api.control import DriverReport, DriverState, RequestOutcome, RequestReport
from finishable.api.models import DepartureReason, DesiredState, Phase, dump
from finishable.api.savepointspec import UpgradeCheckSpec
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import (
    CheckpointStatus,
    CoordinatorStatus,
    FinishableSparkJobStatus,
    LoadReport,
    SavepointStatus,
)
from finishable.controller.job.observe import driver_pod_of, parse_report, refine_departure
from finishable.controller.job.reconcile import StatusUnreadable, read_spec, read_status
from finishable.controller.metrics import Metrics
from finishable.controller.status import merge_patch
from finishable.lifecycle.decisions import Observation, PodPhase
from finishable.lifecycle.phases import next_status
from finishable.lifecycle.stopping import request_deadline

pytestmark = pytest.mark.quick

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEY = ("ns", "job")


def test_merge_patch_nulls_what_went_away_and_keeps_what_stayed() -> None:
    old = {"phase": "Running", "pendingRequest": {"id": "r1"}, "recovery": {"reason": "x", "n": 1}}
    new = {"phase": "Suspended", "recovery": {"n": 1}, "savepoint": {"location": "s"}}
    assert merge_patch(old, new) == {
        "phase": "Suspended",
        "pendingRequest": None,
        "recovery": {"reason": None},
        "savepoint": {"location": "s"},
    }
    assert merge_patch(new, new) == {}
    assert merge_patch({"conditions": [1, 2]}, {"conditions": [2]}) == {"conditions": [2]}


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


class Job:
    """The phase machine driven as the operator drives it, with metrics recorded per step."""

    def __init__(self, registry: CollectorRegistry, **spec: Any) -> None:
        self.metrics = Metrics(registry)
        self.spec = FinishableSparkJobSpec.model_validate({"application": {"file": "a.py"}, **spec})
        self.status = FinishableSparkJobStatus()
        self.metrics.track(KEY, self.status)
        self.now = T0
        self.generation = 1

    def step(
        self,
        pod: PodPhase,
        report: DriverReport | None = None,
        after: float = 1.0,
        departure: DepartureReason | None = None,
    ) -> None:
        self.now += timedelta(seconds=after)
        observation = Observation(
            self.now, self.generation, pod, "", report, driver_departure=departure
        )
        decision = next_status(self.status, self.spec, observation)
        deadline = request_deadline(decision.status, self.spec)
        self.metrics.record(
            KEY,
            self.status,
            decision.status,
            self.now,
            shuffle_replicas=2,
            request_deadline=deadline,
        )
        self.status = decision.status

    def report(self, state: DriverState, **fields: Any) -> DriverReport:
        return DriverReport(attempt=self.status.attempt, state=state, **fields)


def test_metrics_follow_the_phases() -> None:
    registry = CollectorRegistry()
    job = Job(registry)
    assert value(registry, "finishable_jobs", phase="Pending") == 1
    job.step(PodPhase.ABSENT)
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING), after=4)
    assert value(registry, "finishable_jobs", phase="Running") == 1
    assert value(registry, "finishable_jobs", phase="Pending") == 0
    submitted = {"from_phase": "Submitted", "to_phase": "Running"}
    assert value(registry, "finishable_phase_transitions_total", **submitted) == 1
    assert value(registry, "finishable_phase_duration_seconds_sum", phase="Submitted") == 4
    for checkpoint in (3, 7):
        report = job.report(DriverState.RUNNING, last_checkpoint=CheckpointStatus(id=checkpoint))
        job.step(PodPhase.RUNNING, report)
    labels = {"namespace": "ns", "job_name": "job"}
    assert value(registry, "finishable_checkpoints_completed_total", **labels) == 5
    # stop with a savepoint: its latency runs from the request to Suspended
    job.spec = job.spec.model_copy(update={"state": DesiredState.SUSPENDED})
    job.generation += 1
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    request = job.status.pending_request
    assert request is not None and request.requested_at is not None
    deadline = request.requested_at + job.spec.stop_timeout
    assert value(registry, "finishable_job_request_deadline_timestamp_seconds", **labels) == (
        deadline.timestamp()
    )
    assert value(registry, "finishable_job_phase", **labels, phase="Savepointing") == 1
    done = job.report(
        DriverState.SUSPENDED,
        savepoint=SavepointStatus(location="sp-1"),
        request=RequestReport(id=request.id, outcome=RequestOutcome.COMPLETED),
    )
    job.step(PodPhase.SUCCEEDED, done, after=9)
    assert job.status.phase is Phase.SUSPENDED
    assert value(registry, "finishable_stop_duration_seconds_sum", drain="false") == 9
    assert value(registry, "finishable_savepoints_completed_total", **labels) == 1
    phases = {
        sample.labels["phase"]
        for family in registry.collect()
        for sample in family.samples
        if sample.name == "finishable_job_phase"
    }
    assert phases == {"Suspended"}, "one series per job: the phase it is in"
    deadline_left = registry.get_sample_value(
        "finishable_job_request_deadline_timestamp_seconds", labels
    )
    assert deadline_left is None, "nothing pending, no deadline"
    job.metrics.forget(KEY)
    suspended = {**labels, "phase": "Suspended"}
    assert registry.get_sample_value("finishable_job_phase", suspended) is None
    assert value(registry, "finishable_jobs", phase="Suspended") == 0


def test_metrics_of_a_batch_recovery() -> None:
    registry = CollectorRegistry()
    job = Job(registry, mode="Batch")
    job.step(PodPhase.ABSENT)
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    job.step(PodPhase.FAILED)
    assert job.status.phase is Phase.RECOVERING
    labels = {"namespace": "ns", "job_name": "job"}
    assert value(registry, "finishable_driver_restarts_total", **labels) == 1
    assert value(registry, "finishable_driver_restarts_left", **labels) == 2
    assert value(registry, "finishable_shuffle_pods_retained", **labels) == 2
    job.step(PodPhase.ABSENT, after=10)  # the backoff passed: attempt 2
    recovered = job.report(DriverState.RUNNING, tasks_skipped=8, tasks_rerun=2)
    job.step(PodPhase.RUNNING, recovered, after=5)
    assert job.status.phase is Phase.RUNNING
    assert value(registry, "finishable_recovery_duration_seconds_sum") == 15
    assert value(registry, "finishable_recovery_tasks_skipped_total", **labels) == 8
    assert value(registry, "finishable_recovery_tasks_rerun_total", **labels) == 2
    assert value(registry, "finishable_shuffle_pods_retained", **labels) == 0


def test_metrics_count_a_departure_by_reason_and_not_as_a_restart() -> None:
    registry = CollectorRegistry()
    job = Job(registry)
    job.step(PodPhase.ABSENT)
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    drain = DepartureReason.NODE_DRAIN
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING), departure=drain)
    job.step(PodPhase.SUCCEEDED, job.report(DriverState.DEPARTED), departure=drain, after=4)
    assert job.status.phase is Phase.RECOVERING
    labels = {"namespace": "ns", "job_name": "job"}
    assert value(registry, "finishable_driver_departures_total", reason="NodeDrain", **labels) == 1
    assert value(registry, "finishable_driver_departures_total", reason="Evicted", **labels) == 0
    assert value(registry, "finishable_driver_restarts_total", **labels) == 0
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING), after=6)
    assert job.status.phase is Phase.RUNNING
    count, seconds = transition_seconds(registry, "relocation")
    assert (count, seconds) == (1, 10)  # from when it was seen leaving


def transition_seconds(registry: CollectorRegistry, transition: str) -> tuple[float, float]:
    """(count, sum) of the transition's histogram."""
    labels = {"transition": transition}
    return (
        value(registry, "finishable_lifecycle_transition_duration_seconds_count", **labels),
        value(registry, "finishable_lifecycle_transition_duration_seconds_sum", **labels),
    )


def test_lifecycle_transitions_are_timed_from_their_start_to_their_aim() -> None:
    registry = CollectorRegistry()
    job = Job(registry)
    job.step(PodPhase.ABSENT)  # Pending -> Submitted: the submission starts
    job.step(PodPhase.RUNNING, job.report(DriverState.STARTING), after=3)
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING), after=4)
    assert transition_seconds(registry, "submission") == (1, 7)
    assert job.status.transition is None

    # an upgrade: stop with savepoint, a new attempt from it, Running with the new spec (timed
    # from its stop: the check before it is lifecycle/upgradecheck.py's, not timed here)
    job.spec = job.spec.model_copy(
        update={
            "application": job.spec.application.model_copy(update={"args": ["--new"]}),
            "upgrade_check": UpgradeCheckSpec(enabled=False),
        }
    )
    job.generation += 1
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    request = job.status.pending_request
    assert request is not None and job.status.phase is Phase.SAVEPOINTING
    done = job.report(
        DriverState.SUSPENDED,
        savepoint=SavepointStatus(location="sp-1"),
        request=RequestReport(id=request.id, outcome=RequestOutcome.COMPLETED),
    )
    job.step(PodPhase.SUCCEEDED, done, after=5)
    assert job.status.phase is Phase.SUBMITTED
    assert transition_seconds(registry, "upgrade") == (0, 0), "under way"
    assert transition_seconds(registry, "resume") == (0, 0), "an upgrade, not a resume"
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING), after=6)
    assert transition_seconds(registry, "upgrade") == (1, 11)

    # a stop that fails is abandoned, not timed; a lost driver's recovery is
    job.spec = job.spec.model_copy(update={"state": DesiredState.SUSPENDED})
    job.generation += 1
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    request = job.status.pending_request
    assert request is not None
    failed = RequestReport(id=request.id, outcome=RequestOutcome.FAILED, message="sink down")
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING, request=failed), after=2)
    assert job.status.phase is Phase.RUNNING and job.status.transition is None
    assert transition_seconds(registry, "suspend") == (0, 0)
    job.step(PodPhase.FAILED)
    assert job.status.phase is Phase.RECOVERING
    job.step(PodPhase.ABSENT, after=10)
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING), after=5)
    assert job.status.phase is Phase.RUNNING
    assert transition_seconds(registry, "recovery") == (1, 15)


def test_driver_pod_observation() -> None:
    failed = {
        "metadata": {"name": "j-driver-2", "labels": {"finishable.dev/attempt": "2"}},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
            ],
        },
    }
    pod = driver_pod_of(failed)
    assert (pod.name, pod.attempt, pod.phase) == ("j-driver-2", 2, PodPhase.FAILED)
    assert pod.message == "exit code 137 (OOMKilled)"
    assert not pod.alive
    unknown = driver_pod_of(
        {"metadata": {"name": "p", "deletionTimestamp": "t"}, "status": {"phase": "Unknown"}}
    )
    assert unknown.phase is PodPhase.RUNNING and unknown.deleting and not unknown.alive


def disrupted(reason: str | None, *, deleting: bool = True) -> dict[str, object]:
    conditions = [{"type": "Ready", "status": "True"}]
    if reason is not None:
        conditions.append({"type": "DisruptionTarget", "status": "True", "reason": reason})
    meta: dict[str, object] = {"name": "j-driver-1", "labels": {"finishable.dev/attempt": "1"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"nodeName": "node-2"},
        "status": {"phase": "Running", "conditions": conditions},
    }


@pytest.mark.parametrize(
    ("reason", "departure"),
    [
        ("EvictionByEvictionAPI", DepartureReason.EVICTED),
        ("TerminationByKubelet", DepartureReason.EVICTED),
        ("PreemptionByScheduler", DepartureReason.PREEMPTED),
        ("DeletionByTaintManager", DepartureReason.NODE_LOST),
        ("SomethingNewer", DepartureReason.EVICTED),
        (None, DepartureReason.POD_DELETED),
    ],
)
def test_a_deleted_driver_pod_says_why_kubernetes_asked_it_to_leave(
    reason: str | None, departure: DepartureReason
) -> None:
    pod = driver_pod_of(disrupted(reason))
    assert pod.departure is departure and pod.node == "node-2"
    assert driver_pod_of(disrupted(reason, deleting=False)).departure is None


def test_an_eviction_from_a_cordoned_node_is_a_drain() -> None:
    cordoned = {"metadata": {"name": "node-2"}, "spec": {"unschedulable": True}}
    assert refine_departure(DepartureReason.EVICTED, cordoned) is DepartureReason.NODE_DRAIN
    assert refine_departure(DepartureReason.EVICTED, {"spec": {}}) is DepartureReason.EVICTED
    assert refine_departure(DepartureReason.EVICTED, None) is DepartureReason.EVICTED
    deleted = DepartureReason.POD_DELETED
    assert refine_departure(deleted, cordoned) is deleted  # by hand, whatever the node


def test_readers_name_the_field() -> None:
    spec, problems = read_spec(
        "ok", {"application": {"file": "a.py"}, "executor": {"instances": 0}}
    )
    assert spec is None
    assert problems and problems[0].startswith("spec.executor.instances:")
    spec, problems = read_spec("x" * 41, {"application": {"file": "a.py"}})
    assert spec is None and problems[0].startswith("metadata.name:")
    spec, problems = read_spec("ok", {"application": {"file": "a.py"}})
    assert spec is not None and problems == ()
    assert parse_report("not json") is None
    assert parse_report(DriverReport(attempt=1, state=DriverState.RUNNING).model_dump_json())
    stored = dump(FinishableSparkJobStatus(phase=Phase.RUNNING, attempt=2))
    assert read_status({**stored, "kopf": {"progress": {}}}).attempt == 2
    with pytest.raises(StatusUnreadable):
        read_status({"phase": "Sideways"})


def test_metrics_of_stalled_checkpoints() -> None:
    registry = CollectorRegistry()
    job = Job(registry, checkpointing={"interval": "10s", "health": {"maxMissedIntervals": 2}})
    labels = {"namespace": "ns", "job_name": "job"}
    job.step(PodPhase.ABSENT)
    done = CheckpointStatus(id=3, location="cp/3", time=job.now)
    unread = CoordinatorStatus(splits_total=5, splits_finished=1)
    report = job.report(DriverState.RUNNING, last_checkpoint=done, coordinator=unread)
    job.step(PodPhase.RUNNING, report)
    assert value(registry, "finishable_last_checkpoint_timestamp_seconds", **labels) == (
        done.time.timestamp() if done.time else -1
    )
    assert value(registry, "finishable_checkpoints_stalled", **labels) == 0
    job.step(PodPhase.RUNNING, report, after=30)
    assert value(registry, "finishable_checkpoints_stalled", **labels) == 1
    newer = CheckpointStatus(id=4, location="cp/4", time=job.now)
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING, last_checkpoint=newer))
    assert value(registry, "finishable_checkpoints_stalled", **labels) == 0


def test_no_metric_label_collides_with_the_labels_prometheus_sets_on_scrape() -> None:
    """A metric label ``job`` or ``instance`` would be renamed ``exported_job`` on scrape, or
    (with honorLabels) replace the scrape job, which breaks ``up{job=...}`` and alerts on it."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    before, after = FinishableSparkJobStatus(), FinishableSparkJobStatus(restarts=1)
    metrics.record(KEY, before, after, T0, shuffle_replicas=1)
    labels = {name for family in registry.collect() for s in family.samples for name in s.labels}
    assert "job_name" in labels and "namespace" in labels
    assert not labels & {"job", "instance"}


def test_metrics_of_a_rescale() -> None:
    registry = CollectorRegistry()
    autoscaler = {
        "enabled": True,
        "maxExecutors": 3,
        "metricsWindow": "30s",
        "stabilizationWindow": "10s",
    }
    job = Job(registry, executor={"instances": 1}, autoscaler=autoscaler)
    job.step(PodPhase.ABSENT)
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert value(registry, "finishable_executors", namespace="ns", job_name="job") == 1
    assert (
        registry.get_sample_value(
            "finishable_executors_recommended", {"namespace": "ns", "job_name": "job"}
        )
        is None
    ), "no recommendation before the first full window"
    busy = LoadReport(window_seconds=30, batches=12, busy=0.9, rows_per_second=50.0)
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING, load=busy))
    assert value(registry, "finishable_executors_recommended", namespace="ns", job_name="job") == 2
    assert (
        value(registry, "finishable_autoscaler_utilization", namespace="ns", job_name="job") == 0.9
    )
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING, load=busy), after=11)
    request = job.status.pending_request
    assert request is not None and job.status.phase is Phase.SAVEPOINTING
    labels = {"namespace": "ns", "job_name": "job"}
    assert value(registry, "finishable_rescales_total", direction="up", **labels) == 1
    assert value(registry, "finishable_rescales_total", direction="down", **labels) == 0
    done = job.report(
        DriverState.SUSPENDED,
        savepoint=SavepointStatus(location="sp-1"),
        request=RequestReport(id=request.id, outcome=RequestOutcome.COMPLETED),
    )
    job.step(PodPhase.SUCCEEDED, done, after=4)
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING), after=20)
    assert value(registry, "finishable_executors", **labels) == 2
    assert transition_seconds(registry, "rescale") == (1, 24)
    assert transition_seconds(registry, "resume") == (0, 0), "a rescale, not a resume"
    job.metrics.forget(KEY)
    assert registry.get_sample_value("finishable_executors", labels) is None
