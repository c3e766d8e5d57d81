"""How long a Finished or Failed job is kept: the deadline, its announcements, and the edits of a
Failed job that restart nothing (lifecycle/ttl.py), without I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from finishable.api.models import Phase
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import FinishableSparkJobStatus
from finishable.api.units import Duration
from finishable.lifecycle.decisions import Decision, Event, Observation, PodPhase
from finishable.lifecycle.phases import next_status
from finishable.lifecycle.ttl import (
    Expiry,
    TimeToLive,
    edits_ttl_only,
    expiry,
    settle,
    spec_hash,
    stamp,
    time_to_live,
)

pytestmark = pytest.mark.quick

T0 = datetime(2026, 12, 7, 19, 0, tzinfo=UTC)
NONE = TimeToLive()


def ttl(finished: str | None = None, failed: str | None = None) -> TimeToLive:
    return TimeToLive(
        None if finished is None else Duration.parse(finished),
        None if failed is None else Duration.parse(failed),
    )


def ended(phase: Phase, since: datetime | None = T0, **fields: Any) -> FinishableSparkJobStatus:
    return FinishableSparkJobStatus(phase=phase, phase_since=since, **fields)


# -- the deadline ---------------------------------------------------------------------------------

F = Phase.FINISHED
AT_ONCE = ttl("0s", "0s")
LATE = timedelta(days=99)

CASES: list[tuple[str, TimeToLive, TimeToLive, FinishableSparkJobStatus, timedelta, Any]] = [
    # (case, the job's own, the operator's, status, now - T0, (at - T0, setting, expired) | None)
    (
        "finished, its own ttl",
        ttl("1h"),
        NONE,
        ended(Phase.FINISHED),
        timedelta(minutes=30),
        (timedelta(hours=1), "ttlAfterFinished 1h", False),
    ),
    (
        "finished, the operator's default",
        NONE,
        ttl("2h"),
        ended(Phase.FINISHED),
        timedelta(minutes=30),
        (timedelta(hours=2), "ttlAfterFinished 2h, the operator's default", False),
    ),
    (
        "the job's own wins over the default, also when shorter",
        ttl("10m"),
        ttl("2h"),
        ended(Phase.FINISHED),
        timedelta(minutes=30),
        (timedelta(minutes=10), "ttlAfterFinished 10m", True),
    ),
    (
        "failed, its own ttl passed",
        ttl(failed="1d"),
        NONE,
        ended(Phase.FAILED),
        timedelta(days=2),
        (timedelta(days=1), "ttlAfterFailed 1d", True),
    ),
    (
        "failed, 0s: at once",
        ttl(failed="0s"),
        NONE,
        ended(Phase.FAILED),
        timedelta(0),
        (timedelta(0), "ttlAfterFailed 0s", True),
    ),
    (
        "exactly at the deadline it has passed",
        ttl("1h"),
        NONE,
        ended(Phase.FINISHED),
        timedelta(hours=1),
        (timedelta(hours=1), "ttlAfterFinished 1h", True),
    ),
    ("finished, only a ttl for failed jobs", ttl(failed="1h"), NONE, ended(F), LATE, None),
    ("failed, only a ttl for finished jobs", ttl("1h"), ttl("1h"), ended(Phase.FAILED), LATE, None),
    ("neither the job nor the operator sets one", NONE, NONE, ended(F), LATE, None),
    ("a suspended job waits for a resume", AT_ONCE, AT_ONCE, ended(Phase.SUSPENDED), LATE, None),
    ("a running job", AT_ONCE, AT_ONCE, ended(Phase.RUNNING), LATE, None),
    ("a restarted job, pending again", AT_ONCE, NONE, ended(Phase.PENDING), LATE, None),
    ("no phaseSince: no clock", AT_ONCE, NONE, ended(F, None), LATE, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("own", "defaults", "status", "elapsed", "wanted"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_the_deadline_is_the_phase_start_plus_the_time_to_live(
    own: TimeToLive,
    defaults: TimeToLive,
    status: FinishableSparkJobStatus,
    elapsed: timedelta,
    wanted: tuple[timedelta, str, bool] | None,
) -> None:
    found = expiry(own, defaults, status, T0 + elapsed)
    if wanted is None:
        assert found is None
        return
    assert found is not None
    after, setting, expired = wanted
    assert (found.at, found.setting, found.expired) == (T0 + after, setting, expired)
    assert found.remaining == max(T0 + after - (T0 + elapsed), timedelta(0))


def test_the_deadline_follows_an_edit_of_the_time_to_live_at_once() -> None:
    status = ended(Phase.FINISHED)
    now = T0 + timedelta(hours=3)
    longer = expiry(ttl("1d"), NONE, status, now)
    shorter = expiry(ttl("2h"), NONE, status, now)
    assert longer is not None and not longer.expired and longer.at == T0 + timedelta(days=1)
    assert shorter is not None and shorter.expired


def test_the_spec_is_read_as_stored_and_a_value_that_is_no_duration_counts_as_unset() -> None:
    assert time_to_live({"ttlAfterFinished": "1h30m", "ttlAfterFailed": "0s"}) == TimeToLive(
        Duration(minutes=90), Duration(0)
    )
    assert time_to_live({"ttlAfterFinished": "an hour", "ttlAfterFailed": 5}) == NONE
    assert time_to_live({}) == time_to_live(None) == NONE


def test_a_time_in_events_is_utc_to_the_second() -> None:
    assert stamp(datetime(2026, 12, 7, 20, 0, 0, 999_000, tzinfo=UTC)) == "2026-12-07T20:00:00Z"


# -- what the status and the Events say -----------------------------------------------------------


def decision_of(status: FinishableSparkJobStatus) -> Decision:
    return Decision(status)


def reasons(decision: Decision) -> list[str]:
    return [event.reason for event in decision.events]


def test_a_new_deadline_is_stored_and_announced_once() -> None:
    found = expiry(ttl("1h"), NONE, ended(Phase.FINISHED), T0)
    assert found is not None
    settled = settle(decision_of(ended(Phase.FINISHED)), ended(Phase.RUNNING), found, {})
    assert settled.status.expires_at == T0 + timedelta(hours=1)
    (event,) = settled.events
    assert (event.type, event.reason) == ("Normal", "TTLScheduled")
    assert event.message == "will be deleted at 2026-12-07T20:00:00Z (ttlAfterFinished 1h)"
    # the next step (or a restarted operator) finds it stored: nothing more to tell
    again = settle(decision_of(settled.status), settled.status, found, {})
    assert again.events == () and again.status.expires_at == found.at


def test_a_moved_deadline_is_announced_again() -> None:
    stored = ended(Phase.FINISHED, expires_at=T0 + timedelta(hours=1))
    found = expiry(ttl("1d"), NONE, stored, T0 + timedelta(minutes=5))
    settled = settle(decision_of(stored), stored, found, {})
    assert reasons(settled) == ["TTLScheduled"]
    assert "2026-12-08T19:00:00Z (ttlAfterFinished 1d)" in settled.events[0].message


def test_a_deadline_already_passed_is_not_announced_the_deletion_tells_it() -> None:
    found = expiry(ttl(failed="0s"), NONE, ended(Phase.FAILED), T0)
    settled = settle(decision_of(ended(Phase.FAILED)), ended(Phase.RUNNING), found, {})
    assert found is not None and found.expired
    assert settled.events == () and settled.status.expires_at == T0


def test_a_withdrawn_time_to_live_keeps_the_job_and_says_so() -> None:
    stored = ended(Phase.FINISHED, expires_at=T0 + timedelta(hours=1))
    settled = settle(decision_of(stored), stored, expiry(NONE, NONE, stored, T0), {})
    assert settled.status.expires_at is None
    assert reasons(settled) == ["TTLCancelled"]


def test_the_phase_machine_s_decision_is_kept_and_not_changed() -> None:
    status = ended(Phase.FINISHED)
    changed = Event("Normal", "PhaseChanged", "Draining -> Finished: drained")
    machine = Decision(status, events=(changed,))
    settled = settle(machine, ended(Phase.DRAINING), expiry(ttl("1h"), NONE, status, T0), {})
    assert reasons(settled) == ["PhaseChanged", "TTLScheduled"]
    assert status.expires_at is None and machine.status is status, "the decision given stays"


def failed_job(**fields: Any) -> dict[str, Any]:
    """A raw spec, as stored, of a job whose first lost driver fails it."""
    return {"application": {"file": "job.py"}, "recovery": {"enabled": False}, **fields}


def run_until_failed(raw: dict[str, Any]) -> FinishableSparkJobStatus:
    """The operator's loop over the phase machine: created, submitted, its driver lost (no
    recovery: Failed), each step settled as the loop settles it."""
    spec = FinishableSparkJobSpec.model_validate(raw)
    status = FinishableSparkJobStatus()
    for pod in (PodPhase.ABSENT, PodPhase.FAILED):
        before = status
        decision = next_status(before, spec, Observation(now=T0, generation=1, driver_pod=pod))
        found = expiry(time_to_live(raw), NONE, decision.status, T0)
        status = settle(decision, before, found, raw).status
    assert status.phase is Phase.FAILED, status.message
    return status


def test_a_failed_job_restarted_leaves_its_clock_behind() -> None:
    raw = failed_job(ttlAfterFailed="1h")
    failed = run_until_failed(raw)
    assert failed.phase_since is not None
    assert failed.expires_at == failed.phase_since + timedelta(hours=1)
    assert failed.failed_spec_hash == spec_hash(raw)
    restarted_raw = {**raw, "restartNonce": 1}
    restarted = FinishableSparkJobSpec.model_validate(restarted_raw)
    assert not edits_ttl_only(failed, restarted_raw, 2)
    decision = next_status(failed, restarted, Observation(now=T0, generation=2))
    found = expiry(time_to_live(restarted_raw), NONE, decision.status, T0 + timedelta(hours=2))
    settled = settle(decision, failed, found, restarted_raw)
    assert settled.status.phase is Phase.SUBMITTED
    assert found is None and settled.status.expires_at is None
    assert settled.status.failed_spec_hash is None
    assert "TTLCancelled" not in reasons(settled), "the phase change tells it"


def test_an_edit_of_a_failed_job_s_time_to_live_alone_restarts_nothing() -> None:
    raw = failed_job(ttlAfterFailed="1h")
    failed = run_until_failed(raw)
    longer = {**raw, "ttlAfterFailed": "7d"}
    assert edits_ttl_only(failed, longer, 2)
    assert edits_ttl_only(failed, {**raw, "ttlAfterFinished": "1h"}, 2)
    assert not edits_ttl_only(failed, {**longer, "stopTimeout": "5m"}, 2), "and something else"
    assert not edits_ttl_only(failed, longer, 1), "no edit since the status was decided"
    assert not edits_ttl_only(ended(Phase.FAILED), longer, 2), "a status of an older operator"
    # the loop decides on the generation the status has: the phase machine sees no edit
    spec = FinishableSparkJobSpec.model_validate(longer)
    later = T0 + timedelta(minutes=10)
    decision = next_status(failed, spec, Observation(now=later, generation=1))
    found = expiry(time_to_live(longer), NONE, decision.status, later)
    settled = settle(decision, failed, found, longer, seen_generation=2)
    assert settled.status.phase is Phase.FAILED and decision.actions == ()
    assert settled.status.observed_generation == 2
    assert failed.phase_since is not None
    assert settled.status.expires_at == failed.phase_since + timedelta(days=7)
    assert reasons(settled) == ["TTLScheduled"]
    assert not edits_ttl_only(settled.status, longer, 2), "seen: the next step sees no edit"


def test_a_failed_job_s_hash_follows_the_spec_it_was_last_decided_on() -> None:
    """A Failed job suspended by an edit (it stays Failed) and set Running again restarts, as
    before: the hash is of the spec of the newest step, not of the one it failed with."""
    raw = failed_job()
    failed = run_until_failed(raw)
    suspended_raw = {**raw, "state": "Suspended"}
    spec = FinishableSparkJobSpec.model_validate(suspended_raw)
    decision = next_status(failed, spec, Observation(now=T0, generation=2))
    settled = settle(decision, failed, None, suspended_raw)
    assert settled.status.phase is Phase.FAILED
    assert not edits_ttl_only(settled.status, raw, 3), "back to Running is an edit"


def test_the_hash_leaves_out_the_ttl_fields_and_nothing_else() -> None:
    base = {"application": {"file": "job.py"}, "state": "Running"}
    assert spec_hash(base) == spec_hash({**base, "ttlAfterFinished": "1h", "ttlAfterFailed": "0s"})
    assert spec_hash(base) != spec_hash({**base, "state": "Finished"})
    assert spec_hash({"b": 1, "a": 2}) == spec_hash({"a": 2, "b": 1})


def test_an_expiry_is_expired_only_without_time_left() -> None:
    assert Expiry(T0, "x", timedelta(0)).expired
    assert not Expiry(T0, "x", timedelta(milliseconds=1)).expired
