"""Periodic savepoints (``spec.savepoints.interval``) and why each savepoint request was sent."""

from __future__ import annotations

from datetime import timedelta

import pytest

from finishable.api.control import DriverState, RequestOutcome, RequestReport
from finishable.api.models import Phase, RequestAction, SavepointTrigger
from finishable.api.status import ControlRequest, SavepointStatus
from finishable.api.validation import InvalidManifest, parse_spec
from finishable.lifecycle.decisions import ActionKind, Decision, PodPhase
from tests.lifecycle.test_phases import Job

pytestmark = pytest.mark.quick


def alive(job: Job, after: timedelta = timedelta(seconds=1), **report: object) -> Decision:
    return job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING, **report), after=after)


def sent(decision: Decision) -> ControlRequest | None:
    requests = [a.request for a in decision.actions if a.kind is ActionKind.SEND_REQUEST]
    return requests[0] if requests else None


def wake_up(decision: Decision) -> timedelta | None:
    after = [a.after for a in decision.actions if a.kind is ActionKind.REQUEUE and a.after]
    return min(after) if after else None


def answer(job: Job, request: ControlRequest, location: str) -> None:
    alive(
        job,
        request=RequestReport(id=request.id, outcome=RequestOutcome.COMPLETED),
        savepoint=SavepointStatus(location=location, request_id=request.id),
    )


def test_a_savepoint_is_taken_every_interval_while_running() -> None:
    job = Job(savepoints={"interval": "10m"})
    job.run()
    first = alive(job)
    assert sent(first) is None
    due_at = job.status.periodic_savepoint_due
    assert due_at is not None
    waited = due_at - job.now
    assert timedelta(minutes=9) < waited <= timedelta(minutes=10)
    woken = wake_up(first)
    assert woken is not None and woken <= waited, "the loop wakes up by then"

    due = alive(job, after=waited)
    request = sent(due)
    assert request is not None
    assert (request.action, request.trigger) == (RequestAction.SAVEPOINT, SavepointTrigger.PERIODIC)
    assert request.id.startswith("savepoint-periodic-a1-")
    assert job.phase is Phase.RUNNING
    answer(job, request, "cm://job/sp-1")
    assert job.status.savepoint is not None and job.status.savepoint.location == "cm://job/sp-1"
    assert job.status.pending_request is None

    again = alive(job, after=timedelta(minutes=5))
    assert sent(again) is None
    again = alive(job, after=timedelta(minutes=5))
    assert sent(again) is not None, "the next one an interval after the last request"


def test_no_interval_no_periodic_savepoint() -> None:
    job = Job()
    job.run()
    decision = alive(job, after=timedelta(days=30))
    assert sent(decision) is None and job.status.periodic_savepoint_due is None


def test_a_shortened_interval_applies_at_once_and_a_new_attempt_counts_afresh() -> None:
    job = Job(savepoints={"interval": "1h"})
    job.run()
    alive(job)
    job.edit(savepoints={"interval": "1m"})
    waited = wake_up(alive(job))
    assert waited is not None and waited <= timedelta(minutes=1)
    job.edit(state="Suspended")
    stop = sent(alive(job))
    assert stop is not None and stop.trigger is SavepointTrigger.STOP
    assert job.phase is Phase.SAVEPOINTING
    job.step(
        PodPhase.SUCCEEDED,
        job.report(
            DriverState.SUSPENDED,
            request=RequestReport(id=stop.id, outcome=RequestOutcome.COMPLETED),
            savepoint=SavepointStatus(location="cm://job/sp-stop"),
        ),
        after=timedelta(hours=2),
    )
    job.edit(state="Running")
    job.step()
    assert job.status.periodic_savepoint_due is None
    first = alive(job)
    assert sent(first) is None, "no savepoint the moment a resumed job runs"


def test_a_manual_savepoint_in_flight_delays_the_periodic_one() -> None:
    job = Job(savepoints={"interval": "1m"})
    job.run()
    alive(job)
    job.edit(savepointTriggerNonce=1)
    manual = sent(alive(job))
    assert manual is not None and manual.trigger is SavepointTrigger.MANUAL
    assert sent(alive(job, after=timedelta(minutes=2))) is None, "one request at a time"
    answer(job, manual, "cm://job/sp-manual")
    periodic = sent(alive(job))
    assert periodic is not None and periodic.trigger is SavepointTrigger.PERIODIC


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        (
            {"mode": "Batch", "savepoints": {"interval": "5m"}},
            "spec.savepoints",
            "a Batch job takes no savepoints",
        ),
        (
            {"mode": "Batch", "savepoints": {"history": {"maxCount": 3}}},
            "spec.savepoints",
            "a Batch job takes no savepoints",
        ),
        ({"savepoints": {"interval": "0s"}}, "spec.savepoints.interval", "longer than zero"),
        (
            {"savepoints": {"history": {"maxCount": 0}}},
            "spec.savepoints.history.maxCount",
            "greater than or equal to 1",
        ),
        (
            {"savepoints": {"history": {"maxAge": "0s"}}},
            "spec.savepoints.history.maxAge",
            "longer than zero",
        ),
    ],
)
def test_a_savepoints_spec_that_cannot_work_is_refused_naming_the_field(
    spec: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(InvalidManifest) as refused:
        parse_spec({"application": {"file": "job.py"}, **spec})
    text = str(refused.value)
    assert field in text and words in text, text
