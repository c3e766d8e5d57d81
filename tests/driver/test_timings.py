"""Seconds per phase: adding them up, logging and reading them back, the benchmark's breakdown."""

from __future__ import annotations

import logging

import pytest

from finishable.timings import (
    PhaseTimings,
    attempt_breakdown,
    breakdown,
    parse_timings,
    progress_breakdown,
    timed_input,
)

pytestmark = pytest.mark.quick


def test_phases_add_up_also_when_the_block_raises() -> None:
    timings = PhaseTimings()
    timings.add("commit", 0.25)
    timings.add("commit", 0.5)
    with pytest.raises(RuntimeError), timings.phase("replay"):
        raise RuntimeError("boom")
    seconds = timings.seconds()
    assert seconds["commit"] == pytest.approx(0.75)
    assert seconds["replay"] >= 0.0


def test_the_logged_line_is_read_back_and_the_last_one_wins(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("test-timings")
    first, second = PhaseTimings(), PhaseTimings()
    first.add("replay", 1.0)
    second.add("replay", 2.0)
    with caplog.at_level(logging.INFO, logger="test-timings"):
        first.log(logger)
        second.log(logger)
    lines = ["2026-01-01 INFO x: unrelated", "phase timings: {not json", *caplog.messages]
    document = parse_timings(lines)
    assert document is not None
    assert document["phases"] == {"replay": 2.0}
    assert document["logged_at"] >= document["started_at"]
    assert document["started_at"] == pytest.approx(second.started_at, abs=0.001)
    assert parse_timings(["nothing here"]) is None


def test_breakdown_keeps_task_seconds_and_hooks_apart_from_the_wall_clock() -> None:
    phases = {
        "session_start": 0.0004,
        "replay": 0.5,
        "stage.paid": 3.0,
        "commit": 0.5,
        "hook.task_finished": 0.75,
        "tasks.paid.input": 4.0,
        "tasks.paid.output": 1.0,
        "tasks.sink-out.output": 0.2,
    }
    assert breakdown(phases, wall=5.0) == {
        "driver": {
            "session_start": 0.0,
            "replay": 0.5,
            "stage.paid": 3.0,
            "commit": 0.5,
            "other": 1.0,
        },
        "hooks": {"task_finished": 0.75},
        "tasks": {"paid": {"input": 4.0, "output": 1.0}, "sink-out": {"output": 0.2}},
    }
    # Without the run's wall time there is no "other"; phases beyond it never go negative.
    assert breakdown({"replay": 2.0}) == {"driver": {"replay": 2.0}}
    assert breakdown({"replay": 2.0}, wall=1.0)["driver"]["other"] == 0.0


def test_timed_input_passes_every_item_and_counts_the_wait() -> None:
    waited = [0.0]
    assert list(timed_input(iter([1, 2, 3]), waited)) == [1, 2, 3]
    assert waited[0] >= 0.0


def test_progress_breakdown_is_the_mean_per_batch_in_seconds() -> None:
    durations = [
        {"triggerExecution": 300, "addBatch": 200, "latestOffset": 20},
        {"triggerExecution": 500, "addBatch": 400, "walCommit": 30},
    ]
    assert progress_breakdown(durations) == {
        "addBatch": 0.3,
        "latestOffset": 0.01,
        "triggerExecution": 0.4,
        "walCommit": 0.015,
        "batches": 2,
    }
    assert progress_breakdown([]) == {"batches": 0}


def test_an_attempt_runs_from_its_spawn_to_its_exit() -> None:
    document = {
        "started_at": 1002.0,
        "logged_at": 1010.0,
        "phases": {"session_start": 5.0, "stage.paid": 2.0, "tasks.paid.input": 3.0},
    }
    assert attempt_breakdown(document, spawned_at=1000.0, exited_at=1011.5) == {
        "driver": {"session_start": 5.0, "stage.paid": 2.0, "other": 1.0},
        "tasks": {"paid": {"input": 3.0}},
        "init": 2.0,
        "exit": 1.5,
    }
