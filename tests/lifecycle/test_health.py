"""The checkpoint-progress health check, through the phase machine (pure, no I/O)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from finishable.api.control import DriverReport, DriverState
from finishable.api.models import ConditionStatus, ConditionType, Phase
from finishable.api.status import CheckpointStatus, CoordinatorStatus, QueryStatus
from finishable.lifecycle.decisions import ActionKind, PodPhase
from tests.lifecycle.test_phases import Job, kinds

pytestmark = pytest.mark.quick

UNREAD = CoordinatorStatus(splits_total=10, splits_finished=4)
IDLE = CoordinatorStatus(splits_total=10, splits_finished=10)


def running(**spec: object) -> Job:
    job = Job(checkpointing={"interval": "10s", **spec})
    job.run()
    return job


def checkpoint(job: Job, batch: int) -> CheckpointStatus:
    return CheckpointStatus(id=batch, location=f"cp/{batch}", time=job.now)


def test_no_checkpoint_for_the_allowed_intervals_with_unread_input_is_degraded() -> None:
    job = running(health={"maxMissedIntervals": 3})
    report = job.report(DriverState.RUNNING, last_checkpoint=checkpoint(job, 7), coordinator=UNREAD)
    quiet = job.step(PodPhase.RUNNING, report)
    requeue = next(a for a in quiet.actions if a.kind is ActionKind.REQUEUE)
    assert requeue.after == timedelta(seconds=30) - timedelta(seconds=1)  # checks at the deadline
    assert job.condition(ConditionType.DEGRADED)[0] is ConditionStatus.FALSE

    stalled = job.step(PodPhase.RUNNING, report, after=timedelta(seconds=31))
    status, reason, message = job.condition(ConditionType.DEGRADED)
    assert (status, reason) == (ConditionStatus.TRUE, "CheckpointsStalled")
    assert "no checkpoint completed for 32s (checkpoint 7 is the newest)" in message
    assert "maxMissedIntervals (3) intervals of 10s, while 6 split(s) wait" in message
    assert any(e.type == "Warning" for e in stalled.events)
    assert job.phase is Phase.RUNNING and ActionKind.DELETE_DRIVER not in kinds(stalled)

    fresh = job.report(DriverState.RUNNING, last_checkpoint=checkpoint(job, 8), coordinator=UNREAD)
    job.step(PodPhase.RUNNING, fresh, after=timedelta(0))
    assert job.condition(ConditionType.DEGRADED)[:2] == (ConditionStatus.FALSE, "AsExpected")


def test_an_idle_source_is_never_stalled() -> None:
    job = running(health={"maxMissedIntervals": 3})
    report = job.report(DriverState.RUNNING, last_checkpoint=checkpoint(job, 7), coordinator=IDLE)
    job.step(PodPhase.RUNNING, report, after=timedelta(hours=5))
    assert job.condition(ConditionType.DEGRADED)[0] is ConditionStatus.FALSE


def test_a_job_of_several_queries_is_watched_query_by_query() -> None:
    job = running(health={"maxMissedIntervals": 3})
    newest = {"counts": checkpoint(job, 0), "pages": checkpoint(job, 0)}

    def report(*checkpointing: str, pages_unread: int = 0) -> DriverReport:
        for name in checkpointing:
            newest[name] = checkpoint(job, newest[name].id + 1)
        queries = [
            QueryStatus(name="counts", last_checkpoint=newest["counts"], splits_total=9),
            QueryStatus(
                name="pages",
                last_checkpoint=newest["pages"],
                splits_total=5 + pages_unread,
                splits_finished=5,
            ),
        ]
        return job.report(
            DriverState.RUNNING,
            last_checkpoint=max(newest.values(), key=lambda c: c.time or job.now),
            coordinator=CoordinatorStatus(splits_total=14 + pages_unread, splits_finished=5),
            queries=queries,
        )

    # "pages" has read all its input and is idle for ten minutes while "counts" checkpoints
    for _ in range(60):
        job.step(PodPhase.RUNNING, report("counts"), after=timedelta(seconds=10))
    assert job.condition(ConditionType.DEGRADED)[0] is ConditionStatus.FALSE
    assert [q.name for q in job.status.queries] == ["counts", "pages"]

    # "counts" stops checkpointing with its input waiting, while "pages" gets input and
    # checkpoints: the job's newest checkpoint stays fresh, yet the job is stalled
    for _ in range(4):
        job.step(PodPhase.RUNNING, report("pages", pages_unread=2), after=timedelta(seconds=10))
    status, reason, message = job.condition(ConditionType.DEGRADED)
    assert (status, reason) == (ConditionStatus.TRUE, "CheckpointsStalled"), message
    assert message.startswith("query counts: no checkpoint completed for 50s (checkpoint 60 is")
    assert "while 9 split(s) wait" in message


def test_an_attempt_without_a_checkpoint_counts_from_when_it_ran() -> None:
    job = running(health={"maxMissedIntervals": 2})
    report = job.report(DriverState.RUNNING, coordinator=UNREAD)
    job.step(PodPhase.RUNNING, report, after=timedelta(seconds=15))
    assert job.condition(ConditionType.DEGRADED)[0] is ConditionStatus.FALSE
    job.step(PodPhase.RUNNING, report, after=timedelta(seconds=10))
    assert "no checkpoint is the newest" in job.condition(ConditionType.DEGRADED)[2]


def test_restart_driver_replaces_a_stalled_driver_through_the_budget() -> None:
    job = running(health={"maxMissedIntervals": 2, "restartDriver": True})
    report = job.report(DriverState.RUNNING, last_checkpoint=checkpoint(job, 3), coordinator=UNREAD)
    replaced = job.step(PodPhase.RUNNING, report, after=timedelta(seconds=25))
    assert kinds(replaced)[0] is ActionKind.DELETE_DRIVER
    assert job.phase is Phase.RECOVERING
    assert job.status.restarts == 1
    assert "the driver is replaced" in job.status.recovery.reason


def test_the_check_is_off_at_zero_and_for_batch_jobs() -> None:
    off = running(health={"maxMissedIntervals": 0})
    report = off.report(DriverState.RUNNING, coordinator=UNREAD)
    decision = off.step(PodPhase.RUNNING, report, after=timedelta(days=1))
    assert off.condition(ConditionType.DEGRADED)[0] is ConditionStatus.FALSE
    assert ActionKind.REQUEUE not in kinds(decision)
    batch = Job(mode="Batch")
    batch.run()
    batch.step(
        PodPhase.RUNNING,
        batch.report(DriverState.RUNNING, coordinator=UNREAD),
        after=timedelta(days=1),
    )
    assert batch.condition(ConditionType.DEGRADED)[0] is ConditionStatus.FALSE
