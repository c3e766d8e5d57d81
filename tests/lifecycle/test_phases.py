"""The job phase machine: every transition of the phase table, refused changes, crashes."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from finishable.api.control import DriverReport, DriverState, RequestOutcome, RequestReport
from finishable.api.models import ConditionStatus, ConditionType, DepartureReason, Phase
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import (
    CheckpointStatus,
    ClusterPartitionStatus,
    FinishableSparkJobStatus,
    SavepointStatus,
)
from finishable.lifecycle.budget import restart_backoff
from finishable.lifecycle.decisions import (
    TRANSITIONS,
    ActionKind,
    CheckPod,
    Decision,
    Observation,
    PodPhase,
)
from finishable.lifecycle.phases import next_status

pytestmark = pytest.mark.quick

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def make_spec(**fields: Any) -> FinishableSparkJobSpec:
    return FinishableSparkJobSpec.model_validate({"application": {"file": "job.py"}, **fields})


class Job:
    """Drives the machine the way the operator does: feed observations, keep the status."""

    def __init__(self, **spec_fields: Any) -> None:
        self.spec = make_spec(**spec_fields)
        self.status = FinishableSparkJobStatus()
        self.now = T0
        self.generation = 1
        self.decisions: list[Decision] = []

    def edit(self, **spec_fields: Any) -> None:
        data = self.spec.model_dump(by_alias=True, mode="json")
        data.update(spec_fields)
        self.spec = FinishableSparkJobSpec.model_validate(data)
        self.generation += 1

    def step(
        self,
        pod: PodPhase = PodPhase.ABSENT,
        report: DriverReport | None = None,
        *,
        after: timedelta = timedelta(seconds=1),
        problems: tuple[str, ...] = (),
        check: CheckPod | None = None,
        departure: DepartureReason | None = None,
        node: str = "",
    ) -> Decision:
        self.now += after
        decision = next_status(
            self.status,
            None if problems else self.spec,
            Observation(
                now=self.now,
                generation=self.generation,
                driver_pod=pod,
                report=report,
                spec_problems=problems,
                upgrade_check=check,
                driver_departure=departure,
                driver_node=node,
            ),
        )
        self.status = decision.status
        self.decisions.append(decision)
        return decision

    def report(self, state: DriverState, **fields: Any) -> DriverReport:
        return DriverReport(attempt=self.status.attempt, state=state, **fields)

    def run(self) -> None:
        self.step()
        self.step(PodPhase.RUNNING, self.report(DriverState.RUNNING))
        assert self.status.phase is Phase.RUNNING

    @property
    def phase(self) -> Phase:
        return self.status.phase

    def condition(self, kind: ConditionType) -> tuple[ConditionStatus, str, str]:
        found = next(c for c in self.status.conditions if c.type is kind)
        return found.status, found.reason, found.message


def kinds(decision: Decision) -> list[ActionKind]:
    return [action.kind for action in decision.actions]


def test_create_submit_run() -> None:
    job = Job(restoreFrom={"savepoint": "s3://b/sp-1"})
    first = job.step()
    assert job.phase is Phase.SUBMITTED
    assert job.status.attempt == 1
    (start,) = first.actions
    assert start.kind is ActionKind.START_DRIVER and start.attempt == 1
    assert start.restore_from == "s3://b/sp-1"
    assert first.events[0].message.startswith("Pending -> Submitted")
    job.step(PodPhase.PENDING)
    assert job.phase is Phase.SUBMITTED
    job.step(PodPhase.RUNNING, job.report(DriverState.STARTING))
    assert job.phase is Phase.SUBMITTED
    job.step(
        PodPhase.RUNNING,
        job.report(DriverState.RUNNING, last_checkpoint=CheckpointStatus(id=4, location="cp/4")),
    )
    assert job.phase is Phase.RUNNING
    assert job.status.last_checkpoint is not None and job.status.last_checkpoint.id == 4
    assert job.condition(ConditionType.READY)[0] is ConditionStatus.TRUE
    assert job.status.observed_generation == 1


def test_created_suspended_waits() -> None:
    job = Job(state="Suspended")
    decision = job.step()
    assert job.phase is Phase.SUSPENDED
    assert ActionKind.START_DRIVER not in kinds(decision)
    job.edit(state="Running")
    job.step()
    assert job.phase is Phase.SUBMITTED


def test_missing_driver_pod_is_asked_for_again_while_submitted() -> None:
    job = Job()
    job.step()
    again = job.step(PodPhase.ABSENT)
    assert job.phase is Phase.SUBMITTED
    assert kinds(again) == [ActionKind.START_DRIVER]
    assert again.actions[0].attempt == 1


def test_stop_with_savepoint_then_resume() -> None:
    job = Job()
    job.run()
    job.edit(state="Suspended")
    sent = job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.phase is Phase.SAVEPOINTING
    (request,) = [a for a in sent.actions if a.kind is ActionKind.SEND_REQUEST]
    assert request.request is not None and request.request.action == "stop"
    assert not request.request.drain
    request_id = request.request.id
    # The operator restarts here: the same status and observation send nothing twice.
    again = job.step(
        PodPhase.RUNNING,
        job.report(
            DriverState.STOPPING,
            request=RequestReport(id=request_id, outcome=RequestOutcome.IN_PROGRESS),
        ),
    )
    assert ActionKind.SEND_REQUEST not in kinds(again)
    assert job.phase is Phase.SAVEPOINTING
    done = job.step(
        PodPhase.SUCCEEDED,
        job.report(
            DriverState.SUSPENDED,
            request=RequestReport(id=request_id, outcome=RequestOutcome.COMPLETED),
            savepoint=SavepointStatus(location="cm://clickstream/sp-7", drained=False),
        ),
    )
    assert job.phase is Phase.SUSPENDED
    assert job.status.savepoint is not None
    assert job.status.savepoint.location == "cm://clickstream/sp-7"
    assert ActionKind.DELETE_DRIVER in kinds(done)
    assert job.status.pending_request is None
    assert job.condition(ConditionType.READY)[0] is ConditionStatus.FALSE
    job.edit(state="Running")
    resumed = job.step()
    assert job.phase is Phase.SUBMITTED
    start = next(a for a in resumed.actions if a.kind is ActionKind.START_DRIVER)
    assert start.attempt == 2
    assert start.restore_from == "cm://clickstream/sp-7"
    assert job.status.restarts == 0


def test_stop_with_drain_finishes() -> None:
    job = Job()
    job.run()
    job.edit(state="Finished")
    sent = job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.phase is Phase.DRAINING
    request = next(a.request for a in sent.actions if a.request is not None)
    assert request is not None and request.drain
    job.step(
        PodPhase.SUCCEEDED,
        job.report(
            DriverState.FINISHED,
            request=RequestReport(id=request.id, outcome=RequestOutcome.COMPLETED),
            savepoint=SavepointStatus(location="sp-final", drained=True),
        ),
    )
    assert job.phase is Phase.FINISHED
    assert job.status.savepoint is not None and job.status.savepoint.drained
    assert job.condition(ConditionType.PROGRESSING)[0] is ConditionStatus.FALSE


def test_bounded_input_final_checkpoint() -> None:
    job = Job()
    job.run()
    job.step(PodPhase.RUNNING, job.report(DriverState.FINISHING))
    assert job.phase is Phase.FINISHING
    job.step(PodPhase.SUCCEEDED, job.report(DriverState.FINISHED))
    assert job.phase is Phase.FINISHED


def test_a_finished_batch_run_lists_the_cluster_partitions_it_promoted() -> None:
    job = Job()
    job.run()
    promoted = ClusterPartitionStatus(id="cp-1", name="etl/totals", rows=500, bytes=9000)
    job.step(PodPhase.SUCCEEDED, job.report(DriverState.FINISHED, cluster_partitions=[promoted]))
    assert job.phase is Phase.FINISHED
    assert job.status.cluster_partitions == [promoted]
    job.step(PodPhase.SUCCEEDED, job.report(DriverState.FINISHED))  # a later report keeps them
    assert job.status.cluster_partitions == [promoted]


def test_fast_bounded_job_finishes_from_submitted() -> None:
    job = Job()
    job.step()
    job.step(PodPhase.SUCCEEDED, job.report(DriverState.FINISHED))
    assert job.phase is Phase.FINISHED


def test_savepoint_trigger_nonce() -> None:
    job = Job()
    job.run()
    job.edit(savepointTriggerNonce=1)
    sent = job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    request = next(a.request for a in sent.actions if a.request is not None)
    assert request is not None and request.action == "savepoint"
    assert job.phase is Phase.RUNNING
    quiet = job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert ActionKind.SEND_REQUEST not in kinds(quiet)
    done = job.step(
        PodPhase.RUNNING,
        job.report(
            DriverState.RUNNING,
            request=RequestReport(id=request.id, outcome=RequestOutcome.COMPLETED),
            savepoint=SavepointStatus(location="sp-3"),
        ),
    )
    assert job.status.pending_request is None
    assert any(e.reason == "SavepointCompleted" for e in done.events)
    assert job.status.savepoint is not None and job.status.savepoint.location == "sp-3"
    assert job.status.savepoint_trigger_nonce == 1


def test_streaming_crash_recovers_with_backoff() -> None:
    job = Job()
    job.run()
    lost = job.step(PodPhase.FAILED)
    assert job.phase is Phase.RECOVERING
    assert job.status.restarts == 1
    assert job.status.recovery.driver_lost_at == job.now
    assert job.status.recovery.shuffle_retained_until is None
    requeue = next(a for a in lost.actions if a.kind is ActionKind.REQUEUE)
    assert requeue.after == restart_backoff(1)
    assert any(e.type == "Warning" for e in lost.events)
    started = job.step(PodPhase.FAILED, after=restart_backoff(1))
    assert kinds(started) == [ActionKind.START_DRIVER]
    assert job.status.attempt == 2
    job.step(PodPhase.PENDING)
    # A report of the dead attempt does not count.
    job.step(PodPhase.RUNNING, DriverReport(attempt=1, state=DriverState.RUNNING))
    assert job.phase is Phase.RECOVERING
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.phase is Phase.RUNNING


def test_a_standby_is_kept_while_the_driver_runs_and_takes_over_at_once() -> None:
    job = Job(recovery={"standby": True, "maxAttempts": 2})
    submitted = job.step()
    assert ActionKind.START_STANDBY not in kinds(submitted), "not while the driver starts"
    running = job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    (standby,) = [a for a in running.actions if a.kind is ActionKind.START_STANDBY]
    assert (standby.attempt, standby.run) == (2, 1)

    lost = job.step(PodPhase.FAILED)  # the process exited: the first loss is taken over now
    takeover = next(a for a in lost.actions if a.kind is ActionKind.TAKE_OVER)
    assert (takeover.attempt, takeover.predecessor_exited) == (2, True)
    assert ActionKind.START_DRIVER not in kinds(lost)
    assert ActionKind.REQUEUE not in kinds(lost), "no backoff before a warm standby takes over"
    assert (job.phase, job.status.attempt, job.status.restarts) == (Phase.RECOVERING, 2, 1)
    executors = next(a for a in lost.actions if a.kind is ActionKind.DELETE_EXECUTORS)
    assert executors.attempt == 1, "only the lost attempt's executors go, not the standby's"
    assert ActionKind.START_STANDBY not in kinds(lost), "no new standby while it recovers"

    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.phase is Phase.RUNNING
    assert [a.attempt for a in job.decisions[-1].actions if a.kind is ActionKind.START_STANDBY] == [
        3
    ]

    # A second loss within the window backs off as a first one without a standby would, and
    # the standby stays wanted until it takes over; a lost pod that is gone from view (not
    # seen to exit) leaves its successor the fence's grace to wait out.
    second = job.step(PodPhase.ABSENT)
    assert next(a for a in second.actions if a.kind is ActionKind.REQUEUE).after == restart_backoff(
        1
    )
    assert [a.attempt for a in second.actions if a.kind is ActionKind.START_STANDBY] == [3]
    later = job.step(PodPhase.ABSENT, after=restart_backoff(1))
    takeover = next(a for a in later.actions if a.kind is ActionKind.TAKE_OVER)
    assert (takeover.attempt, takeover.predecessor_exited) == (3, False)

    # The budget is spent: a takeover would be refused, so no standby is kept.
    spent = job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.status.restarts_left == 0
    assert ActionKind.START_STANDBY not in kinds(spent)
    assert [a.attempt for a in spent.actions if a.kind is ActionKind.DELETE_STANDBY] == [3]


def test_a_settled_job_keeps_no_standby_and_a_job_without_one_hears_nothing_of_it() -> None:
    job = Job(recovery={"standby": True})
    job.run()
    finished = job.step(PodPhase.SUCCEEDED, job.report(DriverState.FINISHED))
    assert job.phase is Phase.FINISHED
    assert ActionKind.DELETE_STANDBY in kinds(finished)
    plain = Job()
    plain.run()
    plain.step(PodPhase.FAILED)
    standby_kinds = {ActionKind.START_STANDBY, ActionKind.DELETE_STANDBY, ActionKind.TAKE_OVER}
    assert not standby_kinds & {k for d in plain.decisions for k in kinds(d)}


def test_batch_crash_keeps_shuffle_until_the_deadline() -> None:
    job = Job(mode="Batch", shuffle={"retainTimeout": "1m"})
    job.run()
    lost = job.step(PodPhase.ABSENT)
    assert job.phase is Phase.RECOVERING
    assert job.status.recovery.shuffle_retained_until == job.now + timedelta(minutes=1)
    assert ActionKind.DELETE_SHUFFLE not in kinds(lost)
    job.step(PodPhase.ABSENT, after=restart_backoff(1))
    assert job.status.attempt == 2
    # The new driver never comes up: the deadline passes and the shuffle pods go.
    expired = job.step(PodPhase.PENDING, after=timedelta(minutes=2))
    assert ActionKind.DELETE_SHUFFLE in kinds(expired)
    assert any(e.reason == "ShuffleReleased" for e in expired.events)
    assert job.status.recovery.shuffle_retained_until is None
    later = job.step(PodPhase.PENDING)
    assert ActionKind.DELETE_SHUFFLE not in kinds(later)


def test_batch_reconnect_in_time_clears_the_deadline() -> None:
    job = Job(mode="Batch")
    job.run()
    job.step(PodPhase.FAILED)
    job.step(PodPhase.FAILED, after=restart_backoff(1))
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING, tasks_skipped=8, tasks_rerun=2))
    assert job.phase is Phase.RUNNING
    assert job.status.recovery.shuffle_retained_until is None
    assert job.status.recovery.tasks_skipped == 8
    assert job.status.recovery.tasks_rerun == 2


def test_attempts_exhausted_fail_the_job() -> None:
    job = Job(recovery={"maxAttempts": 1})
    job.run()
    job.step(PodPhase.FAILED)
    job.step(PodPhase.FAILED, after=restart_backoff(1))
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    job.step(PodPhase.FAILED)
    assert job.phase is Phase.FAILED
    assert "maxAttempts" in job.status.message
    assert job.condition(ConditionType.READY)[0] is ConditionStatus.FALSE


def crash_and_recover(job: Job, after: timedelta = timedelta(seconds=1)) -> timedelta:
    """One driver loss ``after`` since the last step, and the restart that follows; returns the
    backoff the machine chose."""
    job.step(PodPhase.FAILED, after=after)
    assert job.phase is Phase.RECOVERING, job.status.message
    recovery = job.status.recovery
    assert recovery.next_attempt_at is not None and recovery.driver_lost_at is not None
    backoff = recovery.next_attempt_at - recovery.driver_lost_at
    job.step(PodPhase.FAILED, after=backoff)
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.phase is Phase.RUNNING
    return backoff


def test_losses_older_than_the_failure_rate_interval_count_for_nothing() -> None:
    job = Job(recovery={"maxAttempts": 2, "failureRateInterval": "10m"})
    job.run()
    assert job.status.restarts_left == 2
    assert crash_and_recover(job) == restart_backoff(1)
    assert crash_and_recover(job) == restart_backoff(2)
    assert job.status.restarts_left == 0
    # Calm for longer than the interval: both losses leave the window, the budget is whole again.
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING), after=timedelta(minutes=11))
    assert job.status.restarts_left == 2 and job.status.recent_losses == []
    # ... and the backoff starts short again.
    assert crash_and_recover(job) == restart_backoff(1)
    assert crash_and_recover(job) == restart_backoff(2)
    assert job.status.restarts == 4
    job.step(PodPhase.FAILED)
    assert job.phase is Phase.FAILED
    assert "failureRateInterval (10m)" in job.status.message
    assert job.status.restarts_left == 0


def test_a_zero_interval_counts_every_loss_of_the_run() -> None:
    job = Job(recovery={"maxAttempts": 1, "failureRateInterval": "0s"})
    job.run()
    crash_and_recover(job)
    job.step(PodPhase.FAILED, after=timedelta(days=30))
    assert job.phase is Phase.FAILED
    assert "whole life" in job.status.message


def test_a_permanent_failure_fails_the_job_without_a_restart() -> None:
    job = Job()
    job.run()
    report = job.report(
        DriverState.FAILED, message="AnalysisException: `pgae` cannot be resolved", permanent=True
    )
    decision = job.step(PodPhase.FAILED, report)
    assert job.phase is Phase.FAILED
    assert ActionKind.START_DRIVER not in kinds(decision)
    assert job.status.restarts == 0
    assert "pgae" in job.status.message and "not restarted" in job.status.message
    # The same report without the mark goes through the restart budget.
    other = Job()
    other.run()
    other.step(PodPhase.FAILED, other.report(DriverState.FAILED, message="executor lost"))
    assert other.phase is Phase.RECOVERING


def test_recovery_disabled_fails_at_once() -> None:
    job = Job(recovery={"enabled": False})
    job.run()
    job.step(PodPhase.FAILED)
    assert job.phase is Phase.FAILED
    assert "recovery is disabled" in job.status.message


def test_crash_while_savepointing_recovers_then_stops_again() -> None:
    job = Job()
    job.run()
    job.edit(state="Suspended")
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.phase is Phase.SAVEPOINTING
    job.step(PodPhase.FAILED)
    assert job.phase is Phase.RECOVERING
    assert job.status.pending_request is None
    job.step(PodPhase.FAILED, after=restart_backoff(1))
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.phase is Phase.RUNNING
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.phase is Phase.SAVEPOINTING


def test_stop_timeout_cancels_and_keeps_running() -> None:
    job = Job(stopTimeout="1m")
    job.run()
    job.edit(state="Suspended")
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    waiting = job.step(PodPhase.RUNNING, job.report(DriverState.STOPPING))
    assert any(a.kind is ActionKind.REQUEUE for a in waiting.actions)
    timed_out = job.step(
        PodPhase.RUNNING, job.report(DriverState.STOPPING), after=timedelta(minutes=2)
    )
    assert job.phase is Phase.RUNNING
    assert ActionKind.CANCEL_REQUEST in kinds(timed_out)
    status, reason, message = job.condition(ConditionType.DEGRADED)
    assert (status, reason) == (ConditionStatus.TRUE, "StopTimedOut")
    assert "stopTimeout (1m)" in message
    assert any(e.reason == "StopTimedOut" for e in timed_out.events)
    # Not retried until the spec changes again.
    quiet = job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.phase is Phase.RUNNING and ActionKind.SEND_REQUEST not in kinds(quiet)
    assert job.condition(ConditionType.DEGRADED)[0] is ConditionStatus.TRUE
    job.edit(stopTimeout="5m")
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.phase is Phase.SAVEPOINTING
    assert job.condition(ConditionType.DEGRADED)[0] is ConditionStatus.FALSE


def test_failed_stop_keeps_running_and_says_why() -> None:
    job = Job()
    job.run()
    job.edit(state="Finished")
    sent = job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    request = next(a.request for a in sent.actions if a.request is not None)
    assert request is not None
    job.step(
        PodPhase.RUNNING,
        job.report(
            DriverState.RUNNING,
            request=RequestReport(
                id=request.id, outcome=RequestOutcome.FAILED, message="sink unreachable"
            ),
        ),
    )
    assert job.phase is Phase.RUNNING
    assert "sink unreachable" in job.condition(ConditionType.DEGRADED)[2]


def test_finished_refuses_to_be_suspended() -> None:
    job = Job()
    job.run()
    job.step(PodPhase.SUCCEEDED, job.report(DriverState.FINISHED))
    assert job.phase is Phase.FINISHED
    job.edit(state="Suspended")
    refused = job.step(PodPhase.SUCCEEDED)
    assert job.phase is Phase.FINISHED
    assert refused.actions == ()
    status, reason, message = job.condition(ConditionType.DEGRADED)
    assert (status, reason) == (ConditionStatus.TRUE, "IllegalStateChange")
    assert "Finished and cannot become Suspended" in message
    assert [e.reason for e in refused.events] == ["IllegalStateChange"]
    # The warning is posted once, not on every reconcile.
    assert job.step(PodPhase.SUCCEEDED).events == ()
    job.edit(state="Running")
    assert job.step(PodPhase.SUCCEEDED).actions == ()
    assert job.phase is Phase.FINISHED


def test_drain_cannot_be_undone() -> None:
    job = Job()
    job.run()
    job.edit(state="Finished")
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    job.edit(state="Running")
    job.step(PodPhase.RUNNING, job.report(DriverState.STOPPING))
    assert job.phase is Phase.DRAINING
    assert job.condition(ConditionType.DEGRADED)[1] == "IllegalStateChange"


def test_finishing_cannot_be_suspended() -> None:
    job = Job()
    job.run()
    job.step(PodPhase.RUNNING, job.report(DriverState.FINISHING))
    job.edit(state="Suspended")
    decision = job.step(PodPhase.RUNNING, job.report(DriverState.FINISHING))
    assert job.phase is Phase.FINISHING
    assert ActionKind.SEND_REQUEST not in kinds(decision)
    assert "final checkpoint" in job.condition(ConditionType.DEGRADED)[2]


def test_suspended_and_then_finished_resumes_to_drain() -> None:
    job = Job(state="Suspended")
    job.step()
    job.edit(state="Finished")
    job.step()
    assert job.phase is Phase.SUBMITTED
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.phase is Phase.DRAINING


def test_invalid_spec_fails_a_new_job_and_a_fix_restarts_it() -> None:
    job = Job()
    job.step(problems=("spec.state: 'Paused' is not one of ...",))
    assert job.phase is Phase.FAILED
    assert "Paused" in job.status.message
    job.generation += 1
    job.step()
    assert job.phase is Phase.SUBMITTED
    assert job.status.attempt == 1


def test_a_job_refused_at_creation_is_not_told_of_a_new_spec_later() -> None:
    """Failed for the spec it was created with, the job has no earlier spec: the next steps
    on the same generation say nothing of a "new spec not applied"."""
    job = Job()
    problems = ("spec.state: 'Paused' is not one of ...",)
    job.step(problems=problems)
    later = [job.step(problems=problems) for _ in range(2)]
    assert job.phase is Phase.FAILED
    assert [e.message for d in later for e in d.events] == []
    assert all(c.reason != "InvalidSpec" for c in job.status.conditions)


def test_invalid_edit_of_a_running_job_changes_nothing() -> None:
    job = Job()
    job.run()
    decision = job.step(PodPhase.RUNNING, problems=("spec.stopTimeout: bad",))
    assert job.phase is Phase.RUNNING
    assert decision.actions == ()
    assert job.condition(ConditionType.DEGRADED)[1] == "InvalidSpec"


def test_succeeded_pod_without_a_final_report_is_a_crash() -> None:
    job = Job()
    job.run()
    job.step(PodPhase.SUCCEEDED, job.report(DriverState.RUNNING))
    assert job.phase is Phase.RECOVERING
    assert "exited without completing its lifecycle" in job.status.recovery.reason


def test_transition_table_matches_the_design() -> None:
    assert TRANSITIONS[Phase.RUNNING] >= {
        Phase.SAVEPOINTING,
        Phase.DRAINING,
        Phase.FINISHING,
        Phase.RECOVERING,
    }
    assert TRANSITIONS[Phase.SAVEPOINTING] >= {Phase.SUSPENDED}
    assert TRANSITIONS[Phase.SUSPENDED] == {Phase.SUBMITTED, Phase.FAILED}
    assert TRANSITIONS[Phase.DRAINING] >= {Phase.FINISHED}
    assert TRANSITIONS[Phase.FINISHING] >= {Phase.FINISHED}
    assert TRANSITIONS[Phase.RECOVERING] >= {Phase.RUNNING, Phase.FAILED}
    assert TRANSITIONS[Phase.FINISHED] == frozenset()
    assert set(TRANSITIONS) == set(Phase)


observations = st.tuples(
    st.sampled_from(list(PodPhase)),
    st.none() | st.sampled_from(list(DriverState)),
    st.sampled_from([None, *RequestOutcome]),
    st.sampled_from(["Running", "Suspended", "Finished", "upgrade", None]),
    st.integers(min_value=0, max_value=400),
    st.booleans(),
    st.none() | st.sampled_from(list(DepartureReason)),
)


@settings(max_examples=300, deadline=None)
@given(
    mode=st.sampled_from(["Streaming", "Batch"]),
    upgrade_mode=st.sampled_from(["savepoint", "last-state", "stateless"]),
    steps=st.lists(observations, max_size=40),
)
def test_random_observations_stay_in_the_table(
    mode: str, upgrade_mode: str, steps: list[Any]
) -> None:
    job = Job(mode=mode, stopTimeout="2m", upgradeMode=upgrade_mode)
    for index, step in enumerate(steps):
        pod, driver_state, outcome, desired, seconds, same_attempt, departure = step
        if desired == "upgrade":  # a new program: spec.upgradeMode applies it to a running job
            job.edit(application={"file": "job.py", "args": [str(index)]})
        elif desired is not None and desired != job.spec.state.value:
            job.edit(state=desired)
        report = None
        if driver_state is not None:
            pending = job.status.pending_request
            request = (
                RequestReport(id=pending.id, outcome=outcome)
                if pending is not None and outcome is not None
                else None
            )
            attempt = job.status.attempt if same_attempt else max(0, job.status.attempt - 1)
            report = DriverReport(attempt=attempt, state=driver_state, request=request)
        before = job.phase
        decision = job.step(pod, report, after=timedelta(seconds=seconds), departure=departure)
        after = job.phase
        assert (
            after is before
            or after in TRANSITIONS[before]
            or any(e.reason == "PhaseChanged" for e in decision.events)
        )
        for event in decision.events:
            if event.reason == "PhaseChanged":
                old, new = event.message.split(":")[0].split(" -> ")
                assert Phase(new) in TRANSITIONS[Phase(old)]
        assert len(job.status.recent_losses) <= job.spec.recovery.max_attempts
        assert all(job.now - loss < timedelta(hours=1) for loss in job.status.recent_losses)
        if job.phase in (Phase.FINISHED, Phase.FAILED):
            assert ActionKind.START_DRIVER not in kinds(decision)
            assert job.status.pending_request is None or job.phase is Phase.FAILED


def test_a_batch_job_finishing_while_desired_running_is_not_degraded() -> None:
    job = Job(mode="Batch")
    job.run()
    done = job.step(PodPhase.SUCCEEDED, job.report(DriverState.FINISHED))
    assert job.phase is Phase.FINISHED
    assert ActionKind.DELETE_SHUFFLE in kinds(done)
    job.step()
    assert all(c.reason != "IllegalStateChange" for c in job.status.conditions)


def _fail(job: Job) -> None:
    """Run the job, resume it from a savepoint, then let it fail for good."""
    job.run()
    job.status.restore_from = "file:///sp/sp-7.blob"
    job.step(PodPhase.FAILED, job.report(DriverState.FAILED, message="boom"))
    assert job.phase is Phase.FAILED, job.status.message


def _started(decision: Decision) -> Any:
    (start,) = [a for a in decision.actions if a.kind is ActionKind.START_DRIVER]
    return start


def test_a_job_starts_as_run_one_and_its_driver_knows_it() -> None:
    job = Job()
    decision = job.step()
    assert job.status.run == 1
    assert _started(decision).run == 1


def test_a_spec_change_restarts_a_failed_run_from_its_last_checkpoint() -> None:
    job = Job(recovery={"enabled": False})
    _fail(job)
    job.edit(stopTimeout="5m")
    decision = job.step()
    assert job.phase is Phase.SUBMITTED
    start = _started(decision)
    assert (start.run, start.attempt) == (1, 2), "the same run, its next attempt"
    assert start.restore_from == "file:///sp/sp-7.blob", "the run's own lineage, not spec's"


def test_restart_nonce_from_scratch_starts_the_next_run() -> None:
    job = Job(recovery={"enabled": False}, restoreFrom={"savepoint": "file:///sp/given.blob"})
    _fail(job)
    job.edit(restartNonce=1, restartFrom="Scratch")
    decision = job.step()
    assert job.phase is Phase.SUBMITTED
    start = _started(decision)
    assert (start.run, start.attempt) == (2, 2)
    assert start.restore_from == "file:///sp/given.blob", "a new run starts from spec.restoreFrom"
    assert job.status.restart_nonce == 1
    assert job.status.restarts == 0
    assert "run 2" in job.decisions[-1].events[0].message


def test_restart_nonce_from_last_checkpoint_keeps_the_run() -> None:
    job = Job(recovery={"enabled": False})
    _fail(job)
    job.edit(restartNonce=4)
    start = _started(job.step())
    assert (start.run, start.restore_from) == (1, "file:///sp/sp-7.blob")


def test_restart_nonce_outside_failed_is_reported_not_applied() -> None:
    job = Job()
    job.run()
    job.edit(restartNonce=1)
    decision = job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.phase is Phase.RUNNING
    assert not [a for a in decision.actions if a.kind is ActionKind.START_DRIVER]
    assert job.condition(ConditionType.DEGRADED)[1] == "RestartNotApplied"
    assert job.status.run == 1


def test_a_new_job_created_with_a_restart_nonce_is_not_degraded() -> None:
    job = Job(restartNonce=3)
    job.run()
    assert job.condition(ConditionType.DEGRADED)[0] is not ConditionStatus.TRUE


def test_a_batch_run_keeps_the_shuffle_pods_it_started_with() -> None:
    """Partitions are placed by shuffle pod: an edit of replicas is refused for the running run,
    with a condition that says so, and applies to the next run."""
    job = Job(mode="Batch", recovery={"enabled": False}, shuffle={"replicas": 2})
    job.run()
    assert job.status.shuffle_replicas == 2
    job.edit(shuffle={"replicas": 5})
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.status.shuffle_replicas == 2
    status, reason, message = job.condition(ConditionType.DEGRADED)
    assert (status, reason) == (ConditionStatus.TRUE, "ShuffleReplicasPinned")
    assert "spec.shuffle.replicas: 5" in message and "2 shuffle pods" in message
    job.edit(shuffle={"replicas": 2})
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.condition(ConditionType.DEGRADED)[0] is not ConditionStatus.TRUE
    # A new run takes the spec's number.
    job.edit(shuffle={"replicas": 3})
    job.step(PodPhase.FAILED)
    assert job.phase is Phase.FAILED
    job.edit(restartNonce=1, restartFrom="Scratch")
    job.step()
    assert (job.status.run, job.status.shuffle_replicas) == (2, 3)


def test_a_streaming_job_pins_no_shuffle_pods() -> None:
    job = Job()
    job.run()
    assert job.status.shuffle_replicas is None


def _stop(job: Job, state: str, driver_state: DriverState) -> Decision:
    """Ask a running job to stop (``spec.state``), and let its driver complete the request."""
    job.edit(state=state)
    sent = job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    request = next(a.request for a in sent.actions if a.request is not None)
    assert request is not None
    return job.step(
        PodPhase.SUCCEEDED,
        job.report(
            driver_state,
            request=RequestReport(id=request.id, outcome=RequestOutcome.COMPLETED),
            savepoint=SavepointStatus(location="sp", drained=state == "Finished"),
        ),
    )


def test_an_ended_driver_leaves_no_executor_pods() -> None:
    """Suspended, Finished, Failed and a lost driver each delete the job's executor pods once:
    Spark deletes them on a clean stop, not when its driver is killed."""
    suspended, finished, failed, lost = Job(), Job(), Job(recovery={"enabled": False}), Job()
    for job in (suspended, finished, failed, lost):
        job.run()
        assert ActionKind.DELETE_EXECUTORS not in kinds(job.decisions[-1])
    endings = {
        Phase.SUSPENDED: (suspended, _stop(suspended, "Suspended", DriverState.SUSPENDED)),
        Phase.FINISHED: (finished, _stop(finished, "Finished", DriverState.FINISHED)),
        Phase.FAILED: (failed, failed.step(PodPhase.FAILED)),
        Phase.RECOVERING: (lost, lost.step(PodPhase.FAILED)),
    }
    for phase, (job, ended) in endings.items():
        assert job.phase is phase, (phase, job.status.message)
        assert ActionKind.DELETE_EXECUTORS in kinds(ended), phase
        assert ActionKind.DELETE_EXECUTORS not in kinds(job.step(PodPhase.ABSENT)), phase
