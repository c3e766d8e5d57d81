"""Upgrades: a changed driver spec of a Running job is applied as ``spec.upgradeMode`` says."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from finishable.api.control import DriverState, RequestOutcome, RequestReport
from finishable.api.models import ConditionStatus, ConditionType, Phase
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import SavepointStatus
from finishable.lifecycle.decisions import Action, ActionKind, CheckPod, Decision, PodPhase
from tests.lifecycle.test_phases import Job, kinds

pytestmark = pytest.mark.quick

NEW_PROGRAM: dict[str, Any] = {"file": "job.py", "args": ["--window=2m"]}


def running(**spec: Any) -> Job:
    job = Job(**spec)
    job.run()
    return job


def alive(job: Job, **report: Any) -> Decision:
    return job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING, **report))


def started(decision: Decision) -> Action:
    (start,) = [a for a in decision.actions if a.kind is ActionKind.START_DRIVER]
    return start


def passed_check(job: Job) -> Decision:
    """The upgrade check of the edited spec: asked for, then its pod succeeds."""
    asked = alive(job)
    assert ActionKind.START_UPGRADE_CHECK in kinds(asked)
    assert job.phase is Phase.RUNNING, "the running job goes on while its upgrade is checked"
    assert job.status.upgrade_check is not None
    pod = CheckPod("job-check", job.status.upgrade_check.generation, PodPhase.SUCCEEDED, 0)
    return job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING), check=pod)


def test_the_revision_covers_what_a_driver_is_started_with_and_nothing_else() -> None:
    def revision(**fields: Any) -> str:
        body = {"application": {"file": "job.py"}, **fields}
        return FinishableSparkJobSpec.model_validate(body).revision

    base = revision()
    assert revision(executor={"instances": 2}, application={"file": "job.py", "args": []}) == base
    assert revision(state="Suspended", savepointTriggerNonce=3, stopTimeout="1m") == base
    assert revision(restoreFrom={"savepoint": "sp"}, upgradeMode="stateless") == base
    for changed in (
        {"application": NEW_PROGRAM},
        {"application": {"file": "job.py", "sparkConf": {"spark.sql.shuffle.partitions": "8"}}},
        {"image": "finishable:2"},
        {"executor": {"instances": 3}},
        {"driver": {"memory": "2Gi"}},
        {"imagePullSecrets": ["registry"]},
    ):
        assert revision(**changed) != base, changed


def test_a_started_job_records_the_revision_its_driver_runs() -> None:
    job = running()
    assert job.status.spec_revision == job.spec.revision


def test_savepoint_mode_stops_with_a_savepoint_and_starts_the_new_spec_from_it() -> None:
    job = running()
    old = job.status.spec_revision
    job.edit(application=NEW_PROGRAM)
    sent = passed_check(job)
    assert job.phase is Phase.SAVEPOINTING
    (request,) = [a.request for a in sent.actions if a.kind is ActionKind.SEND_REQUEST]
    assert request is not None and request.action == "stop" and not request.drain
    assert [e.reason for e in sent.events if e.reason == "UpgradeStarted"] == ["UpgradeStarted"]
    assert job.status.spec_revision == old, "the old driver runs until it has stopped"

    done = job.step(
        PodPhase.SUCCEEDED,
        job.report(
            DriverState.SUSPENDED,
            request=RequestReport(id=request.id, outcome=RequestOutcome.COMPLETED),
            savepoint=SavepointStatus(location="cm://job/sp-3", drained=False),
        ),
    )
    assert job.phase is Phase.SUBMITTED, "a stop for an upgrade resumes at once"
    start = started(done)
    assert (start.attempt, start.run, start.restore_from) == (2, 1, "cm://job/sp-3")
    assert ActionKind.DELETE_DRIVER in kinds(done)
    assert job.status.spec_revision == job.spec.revision != old
    assert "starting the upgraded spec from savepoint cm://job/sp-3" in job.status.message
    alive(job)
    assert job.phase is Phase.RUNNING
    alive(job)
    assert job.phase is Phase.RUNNING, "an applied upgrade is not applied again"
    assert job.status.restarts == 0


def test_a_failed_upgrade_stop_keeps_the_old_job_running_until_the_spec_changes_again() -> None:
    job = running()
    job.edit(application=NEW_PROGRAM)
    sent = passed_check(job)
    (request,) = [a.request for a in sent.actions if a.request is not None]
    assert request is not None
    alive(job, request=RequestReport(id=request.id, outcome=RequestOutcome.FAILED, message="x"))
    assert job.phase is Phase.RUNNING
    assert job.condition(ConditionType.DEGRADED)[1] == "StopFailed"
    again = alive(job)
    assert job.phase is Phase.RUNNING and ActionKind.SEND_REQUEST not in kinds(again)
    job.edit(application={"file": "job.py", "args": ["--window=3m"]})
    passed_check(job)
    assert job.phase is Phase.SAVEPOINTING


def test_last_state_mode_replaces_the_driver_of_the_same_run_without_a_stop() -> None:
    job = running(upgradeMode="last-state")
    job.status.restore_from = "cm://job/origin"
    job.edit(application=NEW_PROGRAM)
    decision = passed_check(job)
    assert job.phase is Phase.SUBMITTED
    assert ActionKind.SEND_REQUEST not in kinds(decision)
    assert kinds(decision).index(ActionKind.DELETE_DRIVER) < kinds(decision).index(
        ActionKind.START_DRIVER
    )
    start = started(decision)
    assert (start.attempt, start.run) == (2, 1), "the run's next attempt: its newest checkpoint"
    assert start.restore_from == "cm://job/origin"
    assert job.status.spec_revision == job.spec.revision
    assert job.status.restarts == 0, "an upgrade is not a crash"


def test_stateless_mode_starts_a_new_run_from_nothing() -> None:
    job = running(upgradeMode="stateless", restoreFrom={"savepoint": "cm://job/origin"})
    job.edit(image="finishable:2")
    decision = alive(job)
    assert job.phase is Phase.SUBMITTED
    start = started(decision)
    assert (start.attempt, start.run, start.restore_from) == (2, 2, "")


def test_a_batch_run_defers_an_upgrade_unless_stateless() -> None:
    job = running(mode="Batch", shuffle={"replicas": 2})
    job.edit(application=NEW_PROGRAM)
    decision = alive(job)
    assert job.phase is Phase.RUNNING
    assert ActionKind.START_DRIVER not in kinds(decision)
    status, reason, message = job.condition(ConditionType.DEGRADED)
    assert (status, reason) == (ConditionStatus.TRUE, "UpgradeDeferred")
    assert "spec.upgradeMode: stateless" in message

    job.edit(upgradeMode="stateless", shuffle={"replicas": 3})
    decision = alive(job)
    assert job.phase is Phase.SUBMITTED
    assert kinds(decision)[:2] == [ActionKind.DELETE_DRIVER, ActionKind.DELETE_SHUFFLE]
    assert (started(decision).run, job.status.shuffle_replicas) == (2, 3)


@pytest.mark.parametrize("edit", [{"state": "Suspended"}, {"stopTimeout": "1m"}])
def test_what_the_running_driver_does_not_need_is_no_upgrade(edit: dict[str, Any]) -> None:
    job = running()
    job.edit(**edit)
    decision = alive(job)
    assert not [e for e in decision.events if e.reason == "UpgradeStarted"]


def test_a_job_started_before_revisions_were_recorded_adopts_its_spec() -> None:
    job = running()
    job.status.spec_revision = None
    job.edit(application=NEW_PROGRAM)
    decision = alive(job)
    assert job.phase is Phase.RUNNING and ActionKind.SEND_REQUEST not in kinds(decision)
    assert job.status.spec_revision == job.spec.revision


def test_a_recovered_attempt_runs_the_spec_as_it_is_now() -> None:
    job = running()
    job.edit(application=NEW_PROGRAM)
    job.step(PodPhase.FAILED)
    assert job.phase is Phase.RECOVERING
    job.step(after=timedelta(minutes=5))
    assert job.status.attempt == 2
    assert job.status.spec_revision == job.spec.revision
    alive(job)
    assert job.phase is Phase.RUNNING


def test_a_new_program_that_fails_is_rolled_back_by_setting_the_old_one_again() -> None:
    job = running(recovery={"enabled": False})
    old_program = job.spec.application.model_dump(by_alias=True, mode="json")
    old = job.status.spec_revision
    job.edit(application=NEW_PROGRAM)
    sent = passed_check(job)
    (request,) = [a.request for a in sent.actions if a.request is not None]
    assert request is not None
    job.step(
        PodPhase.SUCCEEDED,
        job.report(
            DriverState.SUSPENDED,
            request=RequestReport(id=request.id, outcome=RequestOutcome.COMPLETED),
            savepoint=SavepointStatus(location="cm://job/sp-9", drained=False),
        ),
    )
    failed = job.report(DriverState.FAILED, message="source 'clicks' does not fit", permanent=True)
    job.step(PodPhase.FAILED, failed)
    assert job.phase is Phase.FAILED

    job.edit(application=old_program)
    start = started(job.step())
    assert job.phase is Phase.SUBMITTED
    assert (start.run, start.attempt, start.restore_from) == (1, 3, "cm://job/sp-9")
    assert job.status.spec_revision == old


def test_an_upgrade_the_check_refuses_leaves_the_old_job_running() -> None:
    job = running()
    old = job.status.spec_revision
    job.edit(application=NEW_PROGRAM)
    asked = alive(job)
    (start,) = [a for a in asked.actions if a.kind is ActionKind.START_UPGRADE_CHECK]
    assert (start.attempt, start.run) == (1, 1), "it reads the running attempt's lineage"
    assert "UpgradeCheckStarted" in [e.reason for e in asked.events]
    check = job.status.upgrade_check
    assert check is not None and check.revision == job.spec.revision
    refused = CheckPod(
        "job-check-2", check.generation, PodPhase.FAILED, 3, "its source 'clicks' changed"
    )
    decision = job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING), check=refused)
    assert job.phase is Phase.RUNNING and job.status.spec_revision == old
    assert ActionKind.SEND_REQUEST not in kinds(decision)
    status, reason, message = job.condition(ConditionType.DEGRADED)
    assert (status, reason) == (ConditionStatus.TRUE, "UpgradeRefused")
    assert "cannot restore the running job's state" in message
    assert "its source 'clicks' changed" in message
    assert ActionKind.DELETE_UPGRADE_CHECK not in kinds(decision), "its pod stays for its log"
    again = alive(job)
    assert job.phase is Phase.RUNNING and ActionKind.START_UPGRADE_CHECK not in kinds(again)
    assert job.condition(ConditionType.DEGRADED)[1] == "UpgradeRefused"

    old_program = {"file": "job.py"}  # set back: nothing to upgrade, nothing refused
    job.edit(application=old_program)
    back = alive(job)
    assert job.status.upgrade_check is None and ActionKind.DELETE_UPGRADE_CHECK in kinds(back)
    assert job.condition(ConditionType.DEGRADED)[0] is ConditionStatus.FALSE


def test_a_check_that_fails_or_hangs_refuses_and_an_edit_checks_again() -> None:
    job = running(upgradeCheck={"timeout": "2m"})
    job.edit(application=NEW_PROGRAM)
    alive(job)
    check = job.status.upgrade_check
    assert check is not None
    crashed = CheckPod("job-check-2", check.generation, PodPhase.FAILED, 1, "ImportError: x")
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING), check=crashed)
    message = job.condition(ConditionType.DEGRADED)[2]
    assert "failed in its upgrade check (exit code 1: ImportError: x)" in message
    assert "kubectl logs job-check-2" in message

    job.edit(application={"file": "job.py", "args": ["--window=5m"]})
    retried = alive(job)
    assert kinds(retried).index(ActionKind.DELETE_UPGRADE_CHECK) < kinds(retried).index(
        ActionKind.START_UPGRADE_CHECK
    )
    fresh = job.status.upgrade_check
    assert fresh is not None and fresh.generation == job.generation != check.generation
    stale = CheckPod("job-check-2", check.generation, PodPhase.FAILED, 1, "ImportError: x")
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING), check=stale)
    assert job.status.upgrade_check is not None
    assert job.status.upgrade_check.state == "Checking", "the old check's pod is not this one"

    pending = CheckPod("job-check-3", fresh.generation, PodPhase.PENDING, None, "ImagePullBackOff")
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING), check=pending)
    assert job.phase is Phase.RUNNING
    hung = job.step(
        PodPhase.RUNNING, job.report(DriverState.RUNNING), after=timedelta(minutes=3), check=pending
    )
    message = job.condition(ConditionType.DEGRADED)[2]
    assert "gave no verdict within spec.upgradeCheck.timeout" in message
    assert "ImagePullBackOff" in message
    assert ActionKind.DELETE_UPGRADE_CHECK in kinds(hung) and job.phase is Phase.RUNNING


def test_only_a_streaming_upgrade_that_restores_state_is_checked() -> None:
    for spec in ({"upgradeMode": "stateless"}, {"upgradeCheck": {"enabled": False}}):
        job = running(**spec)
        job.edit(application=NEW_PROGRAM)
        decision = alive(job)
        assert ActionKind.START_UPGRADE_CHECK not in kinds(decision), spec
        assert job.phase is not Phase.RUNNING, spec
