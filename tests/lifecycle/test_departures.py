"""A driver Kubernetes asks to leave (eviction, node drain, deletion) is a planned move: the job
waits while it takes its savepoint, then starts the next attempt at once from it, and the
restart budget is not charged (issue: node drains are planned, not failures)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from finishable.api.control import DriverState, departure_request
from finishable.api.models import DepartureReason, Phase, Transition
from finishable.api.status import SavepointStatus
from finishable.lifecycle.budget import restart_backoff
from finishable.lifecycle.decisions import ActionKind, PodPhase
from finishable.lifecycle.recovery import LEAVE_MARGIN
from tests.lifecycle.test_phases import Job, kinds

pytestmark = pytest.mark.quick

EVICTED = DepartureReason.EVICTED


def departure_savepoint(job: Job, location: str = "file:///sp/sp-9.blob") -> SavepointStatus:
    request = departure_request(job.status.attempt, job.now)
    return SavepointStatus(location=location, request_id=request.id, id=9)


def test_an_evicted_driver_takes_its_savepoint_and_the_next_attempt_starts_from_it() -> None:
    job = Job(recovery={"maxAttempts": 1})
    job.run()
    leaving = job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING), departure=EVICTED)
    assert job.phase is Phase.RUNNING and job.status.attempt == 1
    assert "leaving (Evicted)" in job.status.message
    assert [e.reason for e in leaving.events] == ["DriverLeaving"]
    assert job.status.departure is not None and job.status.departure.reason is EVICTED
    assert ActionKind.START_DRIVER not in kinds(leaving)

    savepoint = departure_savepoint(job)
    left = job.step(
        PodPhase.RUNNING, job.report(DriverState.DEPARTED, savepoint=savepoint), departure=EVICTED
    )
    assert job.phase is Phase.RECOVERING
    assert job.status.attempt == 2 and job.status.restore_from == savepoint.location
    (start,) = [a for a in left.actions if a.kind is ActionKind.START_DRIVER]
    assert start.restore_from == savepoint.location
    assert job.status.restarts == 0 and job.status.recent_losses == []
    assert job.status.restarts_left == 1  # the budget is untouched
    assert job.status.departures == 1
    assert job.status.departure is not None
    assert job.status.departure.savepoint == savepoint.location
    assert job.status.transition is not None
    assert job.status.transition.kind is Transition.RELOCATION
    moved = [e for e in left.events if e.reason == "PhaseChanged"]
    assert moved and all(e.type == "Normal" for e in moved)

    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.phase is Phase.RUNNING and job.status.transition is None
    # And a real crash afterwards still has the whole budget.
    job.step(PodPhase.FAILED)
    assert job.phase is Phase.RECOVERING and job.status.restarts == 1


def test_a_driver_with_no_time_for_a_savepoint_resumes_from_its_checkpoints_at_once() -> None:
    job = Job(driver={"terminationGracePeriod": "30s"})
    job.run()
    job.status.restore_from = "file:///sp/origin.blob"
    job.step(PodPhase.RUNNING, departure=DepartureReason.NODE_DRAIN, node="node-2")
    assert job.status.departure is not None and job.status.departure.node == "node-2"
    # Killed after its grace period, before any report: the pod is gone.
    gone = job.step(PodPhase.ABSENT, after=timedelta(seconds=31))
    assert job.phase is Phase.RECOVERING and job.status.attempt == 2
    assert job.status.restore_from == "file:///sp/origin.blob"  # same lineage: newest checkpoint
    assert job.status.recovery.next_attempt_at is None  # no backoff
    assert ActionKind.START_DRIVER in kinds(gone)
    assert job.status.restarts == 0 and job.status.departures == 1
    assert "without a savepoint" in job.status.recovery.reason


def test_a_leaving_driver_whose_pod_never_goes_is_replaced_after_its_grace() -> None:
    job = Job(driver={"terminationGracePeriod": "20s"})
    job.run()
    first = job.step(PodPhase.RUNNING, departure=DepartureReason.NODE_LOST)
    requeue = next(a for a in first.actions if a.kind is ActionKind.REQUEUE)
    assert requeue.after == timedelta(seconds=20) + LEAVE_MARGIN
    job.step(PodPhase.RUNNING, departure=DepartureReason.NODE_LOST, after=timedelta(seconds=10))
    assert job.phase is Phase.RUNNING
    job.step(PodPhase.RUNNING, departure=DepartureReason.NODE_LOST, after=timedelta(seconds=45))
    assert job.phase is Phase.RECOVERING and job.status.attempt == 2
    assert job.status.restarts == 0


def test_a_sigterm_seen_only_in_the_report_is_a_departure_too() -> None:
    """The local runner (and an operator that missed the terminating pod) sees only the
    driver's report: it left, named Terminated."""
    job = Job()
    job.run()
    savepoint = departure_savepoint(job)
    job.step(PodPhase.SUCCEEDED, job.report(DriverState.DEPARTED, savepoint=savepoint))
    assert job.phase is Phase.RECOVERING and job.status.attempt == 2
    assert job.status.departure is not None
    assert job.status.departure.reason is DepartureReason.TERMINATED
    assert job.status.restarts == 0


def test_a_savepoint_of_another_request_is_not_taken_for_the_departure_one() -> None:
    job = Job()
    job.run()
    job.status.restore_from = "file:///sp/origin.blob"
    older = SavepointStatus(location="file:///sp/manual.blob", request_id="savepoint-a1-g1-5")
    job.step(PodPhase.SUCCEEDED, job.report(DriverState.DEPARTED, savepoint=older))
    assert job.status.restore_from == "file:///sp/origin.blob"
    assert job.status.departure is not None and job.status.departure.savepoint == ""


def savepointing() -> Job:
    """A running job asked to stop with a savepoint, its driver not answered yet."""
    job = Job()
    job.run()
    job.edit(state="Suspended")
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.phase is Phase.SAVEPOINTING
    return job


def test_a_stop_that_completes_while_the_pod_is_deleted_is_a_stop() -> None:
    job = savepointing()
    request = job.status.pending_request
    assert request is not None
    saved = SavepointStatus(location="file:///sp/stop.blob", request_id=request.id)
    job.step(PodPhase.RUNNING, departure=DepartureReason.POD_DELETED)
    job.step(PodPhase.RUNNING, job.report(DriverState.SUSPENDED, savepoint=saved))
    assert job.phase is Phase.SUSPENDED and job.status.departures == 0


def test_a_pending_stop_is_asked_again_of_the_next_attempt() -> None:
    job = savepointing()
    job.step(PodPhase.RUNNING, departure=EVICTED)
    job.step(PodPhase.SUCCEEDED, job.report(DriverState.DEPARTED), departure=EVICTED)
    assert job.phase is Phase.RECOVERING and job.status.pending_request is None
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    asked = job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.phase is Phase.SAVEPOINTING
    assert ActionKind.SEND_REQUEST in kinds(asked)


def test_a_batch_driver_that_left_keeps_its_shuffle_pods() -> None:
    job = Job(mode="Batch", shuffle={"retainTimeout": "1m"})
    job.run()
    left = job.step(PodPhase.SUCCEEDED, job.report(DriverState.DEPARTED), departure=EVICTED)
    assert job.phase is Phase.RECOVERING and job.status.attempt == 2
    assert ActionKind.DELETE_SHUFFLE not in kinds(left)
    assert job.status.recovery.shuffle_retained_until == job.now + timedelta(minutes=1)
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING, tasks_skipped=6))
    assert job.phase is Phase.RUNNING and job.status.recovery.tasks_skipped == 6


def test_a_driver_deleted_after_a_crash_was_counted_is_no_departure() -> None:
    """The operator's own deletions come while the job waits out a crash's backoff."""
    job = Job()
    job.run()
    job.step(PodPhase.RUNNING, job.report(DriverState.FAILED, message="boom"))
    assert job.phase is Phase.RECOVERING and job.status.restarts == 1
    job.step(PodPhase.RUNNING, departure=DepartureReason.POD_DELETED, after=timedelta(seconds=0))
    assert job.status.departures == 0 and job.status.departure is None
    job.step(PodPhase.ABSENT, after=restart_backoff(1))
    assert job.status.attempt == 2 and job.status.departures == 0
