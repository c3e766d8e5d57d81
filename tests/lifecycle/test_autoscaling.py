"""The autoscaler's decision (lifecycle/autoscaling.py) and the rescale it drives through the
phase machine: stop with savepoint, the next attempt with the new count, resumed from it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from finishable.api.autoscalerspec import AutoscalerSpec
from finishable.api.control import DriverState, RequestOutcome, RequestReport
from finishable.api.models import ConditionType, Phase, Transition
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import LoadReport, SavepointStatus, SourceLoad
from finishable.api.validation import InvalidManifest, parse_spec
from finishable.lifecycle.autoscaling import autoscale, recommend
from finishable.lifecycle.decisions import ActionKind, PodPhase
from tests.lifecycle.test_phases import T0, Job

pytestmark = pytest.mark.quick

SPEC = AutoscalerSpec.model_validate(
    {
        "enabled": True,
        "minExecutors": 1,
        "maxExecutors": 8,
        "targetUtilization": 0.5,
        "tolerance": 0.2,
        "catchUpTime": "100s",
        "metricsWindow": "60s",
        "stabilizationWindow": "60s",
        "cooldown": "300s",
    }
)


def load(busy: float, *sources: SourceLoad) -> LoadReport:
    return LoadReport(
        window_seconds=60, batches=10, busy=busy, rows_per_second=100.0, sources=list(sources)
    )


def files(backlog: int, read: float, arrived: float) -> SourceLoad:
    return SourceLoad(
        name="clicks",
        unit="splits",
        backlog=backlog,
        read_per_second=read,
        arrived_per_second=arrived,
    )


def test_busy_executors_ask_for_more_in_proportion_and_idle_ones_for_fewer() -> None:
    assert recommend(load(0.9), 2, SPEC).executors == 4  # 2 * 0.9 / 0.5 = 3.6
    assert recommend(load(0.1), 4, SPEC).executors == 1  # 0.8
    assert recommend(load(0.0), 4, SPEC).executors == 1  # idle: the fewest
    reason = recommend(load(0.9), 2, SPEC).reason
    assert "busy 90%" in reason and "target 50%" in reason and "recommends 4" in reason


def test_within_the_tolerance_the_count_stays() -> None:
    assert recommend(load(0.55), 2, SPEC).executors == 2  # needs 2.2: within 20%
    assert recommend(load(0.41), 2, SPEC).executors == 2  # needs 1.64
    assert recommend(load(0.39), 2, SPEC).executors == 2  # needs 1.56, rounded up to 2


def test_a_growing_backlog_asks_for_more_and_one_held_back_elsewhere_does_not() -> None:
    # Read 10 files/s, 12 arrive, 100 behind: 12 + 100/100 = 13 wanted, 1.3x the rate.
    behind = recommend(load(0.5, files(100, 10.0, 12.0)), 2, SPEC)
    assert behind.executors == 3  # 2 * 0.5 / 0.5 * 1.3 = 2.6
    assert "source clicks must read 1.30x as fast" in behind.reason
    assert "backlog of 100 splits within 1m40s" in behind.reason
    # The same backlog with executors idle 90% of the time: a limit per batch holds it back.
    assert recommend(load(0.1, files(100, 10.0, 12.0)), 2, SPEC).executors == 1


def test_recommendations_stay_within_the_bounds() -> None:
    assert recommend(load(1.0), 8, SPEC).executors == 8
    narrow = SPEC.model_copy(update={"min_executors": 2, "max_executors": 3})
    assert recommend(load(0.0), 3, narrow).executors == 2


@settings(max_examples=200, deadline=None)
@given(
    busy=st.floats(0, 4),
    current=st.integers(1, 8),
    backlog=st.integers(0, 10_000),
    read=st.floats(0, 1000),
    arrived=st.floats(0, 1000),
)
def test_every_recommendation_is_within_the_bounds_and_more_load_never_asks_for_less(
    busy: float, current: int, backlog: int, read: float, arrived: float
) -> None:
    source = files(backlog, read, arrived)
    executors = recommend(load(busy, source), current, SPEC).executors
    assert SPEC.min_executors <= executors <= SPEC.max_executors
    busier = recommend(load(min(busy * 1.5, 4.0), source), current, SPEC).executors
    assert busier >= executors


def look(
    status: Any, running: int, busy: float | None, at: float
) -> tuple[Any, int | None, timedelta | None]:
    step = autoscale(
        status, SPEC, running, None if busy is None else load(busy), T0 + timedelta(seconds=at)
    )
    return step.status, step.rescale_to, step.look_again_in


def test_a_recommendation_is_applied_once_it_held_for_the_stabilization_window() -> None:
    status, target, _ = look(None, 2, None, 0)
    assert target is None and status.reason.startswith("measuring")
    status, target, again = look(status, 2, 0.9, 10)
    assert target is None and status.recommended == 4 and again == timedelta(seconds=60)
    status, target, _ = look(status, 2, 0.9, 40)
    assert target is None
    status, target, _ = look(status, 2, 0.7, 70)  # 3 now: the window saw 4 and 3
    assert target == 3 and status.executors == 3 and status.rescales == 1
    assert status.last_rescale.from_executors == 2 and status.recommendations == []


def test_a_spike_shorter_than_the_window_rescales_nothing() -> None:
    status, _, _ = look(None, 2, 0.5, 0)
    status, target, _ = look(status, 2, 1.0, 50)  # a spike
    status, target, _ = look(status, 2, 0.5, 70)  # over: the window held 2 throughout
    status, target, _ = look(status, 2, 0.5, 130)
    assert target is None and status.rescales == 0


def test_a_scale_down_goes_to_the_highest_count_the_window_held() -> None:
    status, _, _ = look(None, 6, 0.05, 0)  # 1
    status, _, _ = look(status, 6, 0.3, 30)  # 4
    status, target, _ = look(status, 6, 0.05, 61)
    assert target == 4


def test_no_rescale_within_the_cooldown_of_the_last() -> None:
    status, _, _ = look(None, 2, 0.9, 0)
    status, target, _ = look(status, 2, 0.9, 60)
    assert target == 4
    # The next attempt runs with 4 and is still too busy: it waits out the cooldown.
    status, _, _ = look(status, 4, 0.9, 120)
    status, target, again = look(status, 4, 0.9, 200)
    assert target is None and again == timedelta(seconds=160)
    assert "cooldown" in status.reason
    status, target, _ = look(status, 4, 0.9, 360)
    assert target == 8  # 4 * 0.9 / 0.5 = 7.2


def test_bounds_changed_under_a_running_job_apply_at_once() -> None:
    narrow = SPEC.model_copy(update={"max_executors": 2})
    step = autoscale(None, narrow, 4, None, T0)
    assert step.rescale_to == 2
    assert step.status.last_rescale is not None
    assert "outside spec.autoscaler's bounds [1, 2]" in step.status.last_rescale.reason


def test_bad_settings_are_refused_naming_the_field() -> None:
    base: dict[str, Any] = {"application": {"file": "job.py"}}
    with pytest.raises(InvalidManifest, match=r"minExecutors \(3\) is above maxExecutors \(2\)"):
        parse_spec({**base, "autoscaler": {"enabled": True, "minExecutors": 3, "maxExecutors": 2}})
    with pytest.raises(InvalidManifest, match="idleTimeout: must be longer than zero"):
        parse_spec({**base, "mode": "Batch", "autoscaler": {"enabled": True, "idleTimeout": "0s"}})
    with pytest.raises(InvalidManifest, match="targetUtilization"):
        parse_spec({**base, "autoscaler": {"targetUtilization": 1.5}})


def test_a_new_run_starts_with_the_instances_within_the_bounds() -> None:
    spec = FinishableSparkJobSpec.model_validate(
        {
            "application": {"file": "job.py"},
            "executor": {"instances": 6},
            "autoscaler": {"enabled": True, "maxExecutors": 3},
        }
    )
    assert spec.executors == 3
    assert spec.sized(2).executor.instances == 2
    assert spec.model_copy(update={"autoscaler": AutoscalerSpec()}).sized(2) is not None


AUTOSCALED = {
    "executor": {"instances": 1},
    "autoscaler": {
        "enabled": True,
        "maxExecutors": 3,
        "metricsWindow": "30s",
        "stabilizationWindow": "20s",
        "cooldown": "2m",
    },
}


def test_a_rescale_stops_with_a_savepoint_and_starts_the_next_attempt_with_the_new_count() -> None:
    job = Job(**AUTOSCALED)
    job.run()
    assert job.status.executors == 1
    busy = load(0.95)
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING, load=busy))
    assert job.status.autoscaler is not None and job.status.autoscaler.recommended == 2
    assert job.phase is Phase.RUNNING
    decided = job.step(
        PodPhase.RUNNING, job.report(DriverState.RUNNING, load=busy), after=timedelta(seconds=25)
    )
    assert job.phase is Phase.SAVEPOINTING
    request = next(a.request for a in decided.actions if a.request is not None)
    assert request is not None and request.id.startswith("stop-rescale-")
    assert job.status.transition is not None and job.status.transition.kind is Transition.RESCALE
    assert job.condition(ConditionType.PROGRESSING)[1] == "Rescaling"
    assert [e.reason for e in decided.events if e.reason == "RescaleStarted"] == ["RescaleStarted"]
    assert "rescale from 1 to 2 executors" in decided.events[0].message

    done = job.step(
        PodPhase.SUCCEEDED,
        job.report(
            DriverState.SUSPENDED,
            request=RequestReport(id=request.id, outcome=RequestOutcome.COMPLETED),
            savepoint=SavepointStatus(location="cm://job/sp-3"),
        ),
    )
    assert job.phase is Phase.SUBMITTED and job.status.attempt == 2
    assert job.status.executors == 2 and job.status.restore_from == "cm://job/sp-3"
    start = next(a for a in done.actions if a.kind is ActionKind.START_DRIVER)
    assert start.restore_from == "cm://job/sp-3"
    assert job.spec.sized(job.status.executors).executor.instances == 2
    running = job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING))
    assert job.phase is Phase.RUNNING and job.status.transition is None
    assert [e.message for e in running.events if e.reason == "Rescaled"] == [
        "running with 2 executors after 2s"
    ]
    assert job.status.restarts == 0


def test_a_crashed_rescaled_job_restarts_with_its_count_and_one_without_by_the_spec() -> None:
    job = Job(**AUTOSCALED)
    job.run()
    assert job.status.autoscaler is not None
    job.status.autoscaler.executors = 3
    job.step(PodPhase.FAILED)
    job.step(after=timedelta(minutes=5))
    assert job.status.attempt == 2 and job.status.executors == 3
    plain = Job(executor={"instances": 4})
    plain.run()
    assert plain.status.executors == 4 and plain.status.autoscaler is None
    plain.step(PodPhase.RUNNING, plain.report(DriverState.RUNNING, load=load(1.0)))
    assert plain.status.autoscaler is None


def test_a_batch_job_is_sized_by_sparks_dynamic_allocation_not_by_rescales() -> None:
    job = Job(mode="Batch", executor={"instances": 1}, autoscaler=AUTOSCALED["autoscaler"])
    job.run()
    assert job.status.executors == 1 and job.status.autoscaler is None
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING, load=load(1.0)))
    job.step(PodPhase.RUNNING, job.report(DriverState.RUNNING, load=load(1.0)), after=timedelta(1))
    assert job.phase is Phase.RUNNING and job.status.autoscaler is None
    assert job.spec.sized(5).executor.instances == 1
