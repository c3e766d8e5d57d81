"""Two streaming queries in one job, end to end: `finishable run` drives a real PySpark driver.

``multi_query_program.py`` counts clicks per (minute, page) into one sink and a generated range
per minute into another. The job is stopped with a savepoint (one savepoint holding both
queries' cuts), resumed from it with more input, its driver killed (each query recovers from
its own checkpoints), and drained; each sink must then hold exactly the counts pandas computes
from the same input. Programs that feed one source to two queries, or
name two queries alike, are refused with the reason.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
import yaml

from finishable.connectors.sinks import TransactionalFiles
from finishable.driver.streaming.locations import read_snapshot_location
from finishable.driver.streaming.savepoints import decode_savepoint
from finishable.state import CheckpointKind
from tests.driver.test_streaming_job import (
    Job,
    finished_through_the_final_checkpoint,
    ground_truth,
    write_clicks,
)

pytestmark = pytest.mark.full

PROGRAM = Path(__file__).parent / "multi_query_program.py"
SEED_START = datetime(2026, 1, 2, tzinfo=UTC)  # as in multi_query_program.py
SEED_STEP_MS = 10
SEED_ROWS = 30_000
SEED_SPLITS = SEED_ROWS // 1000


def multi_query_job(tmp: Path, name: str, *args: str, max_attempts: int = 8) -> Job:
    """A ``Job`` of the test harness running the two-query program instead."""
    job = Job(tmp, name, max_attempts=max_attempts)
    document = yaml.safe_load(job.manifest.read_text())
    application = document["spec"]["application"]
    application["file"] = str(PROGRAM)
    application["args"] = [f"--input={job.input}", f"--output={job.output}", *args]
    job.manifest.write_text(yaml.safe_dump(document))
    return job


def seed_truth(rows: int) -> Counter[datetime]:
    """Rows per minute window of the range's event time, by pandas."""
    moments = pd.Series(
        [SEED_START + timedelta(milliseconds=SEED_STEP_MS * v) for v in range(rows)]
    )
    counts = moments.dt.floor("min").value_counts()
    return Counter({ts.to_pydatetime(): int(n) for ts, n in counts.items()})


def committed(output: Path, sink: str) -> list[dict[str, object]]:
    table = TransactionalFiles(str(output / sink), format="parquet", name=sink).read_committed()
    return table.to_pylist()


def published_pages(output: Path) -> Counter[tuple[datetime, str]]:
    rows = committed(output, "pages")
    keys = [(row["window_start"].astimezone(UTC), row["page"]) for row in rows]
    duplicates = [key for key, seen in Counter(keys).items() if seen > 1]
    assert not duplicates, f"page windows published twice: {duplicates[:5]}"
    return Counter({key: int(row["count"]) for key, row in zip(keys, rows, strict=True)})


def published_seeds(output: Path, sink: str = "seeds") -> Counter[datetime]:
    """The rows per minute window published into ``sink``; a window published twice fails."""
    rows = committed(output, sink)
    keys = [row["window_start"].astimezone(UTC) for row in rows]
    duplicates = [key for key, seen in Counter(keys).items() if seen > 1]
    assert not duplicates, f"{sink} windows published twice: {duplicates[:5]}"
    return Counter({key: int(row["count"]) for key, row in zip(keys, rows, strict=True)})


QUERIES = ("pages", "seeds")


def checkpointed(job: Job, query: str) -> bool:
    """Whether ``query`` stored a checkpoint, under its own prefix of the job's store."""
    return any("/chk-" in key for key in job.store().backend.list(f"snapshots/queries/{query}/"))


@pytest.fixture
def cleanup() -> Iterator[list[Job]]:
    jobs: list[Job] = []
    yield jobs
    for job in jobs:
        job.cleanup()


def test_two_queries_stop_with_one_savepoint_resume_and_drain_exactly_once(
    tmp_path: Path, cleanup: list[Job]
) -> None:
    job = multi_query_job(tmp_path, "twoqueries", f"--seed-rows={SEED_ROWS}")
    cleanup.append(job)
    for index in range(4):
        write_clicks(job.input, index)
    job.run()
    job.wait_read(4 + 6)
    job.wait("both queries checkpointed", lambda _: all(checkpointed(job, q) for q in QUERIES))
    # the status shows each query's own newest checkpoint and input (the health check's view)
    job.wait(
        "each query's checkpoint in the status",
        lambda s: (
            sorted(q["name"] for q in s.get("queries", []) if q.get("lastCheckpoint"))
            == sorted(QUERIES)
        ),
    )
    taken = job.cli("savepoint", "--timeout", "180")  # without stopping: both queries in it
    assert taken.returncode == 0, taken.stdout + taken.stderr + job.driver_logs()
    running = decode_savepoint(
        read_snapshot_location(job.status()["savepoint"]["location"], job.store())[0]
    )
    assert set(running.manifest.queries) == set(QUERIES) and not running.manifest.drained
    assert job.status()["phase"] == "Running"
    stopped = job.cli("stop", "--timeout", "180")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr + job.driver_logs()
    assert "Suspended" in job.finish()

    # One savepoint holds both queries' cuts; each query checkpointed under its own prefix.
    status = job.status()
    location = status["savepoint"]["location"]
    savepoint = decode_savepoint(read_snapshot_location(location, job.store())[0])
    assert savepoint.composite and set(savepoint.queries) == {"pages", "seeds"}
    assert all(part is not None for part in savepoint.queries.values()), savepoint.manifest
    assert job.store().ids(CheckpointKind.CHECKPOINT) == []
    assert {task["name"] for task in status["lifecycle"]["tasks"]} >= {"sink pages", "sink seeds"}

    # What fired before the stop is exact in both sinks; the open windows did not fire.
    pages_truth = Counter(ground_truth(job.input))
    before = published_pages(job.output)
    assert before and all(pages_truth[key] == count for key, count in before.items())
    seeds_before = published_seeds(job.output)
    assert set(seeds_before) < set(seed_truth(SEED_ROWS)), "the last seed window is open"
    assert all(seed_truth(SEED_ROWS)[key] == n for key, n in seeds_before.items())

    # Resume from that savepoint with more clicks, then drain: both sinks exactly the truth.
    for index in range(4, 7):
        write_clicks(job.input, index)
    read = int(status["coordinator"]["splitsFinished"])
    job.run("--resume")
    job.wait_read(read + 3, newer_than=int(status["attempt"]))
    # A driver crash: the next attempt restores each query from its own newest checkpoint.
    killed = job.kill_driver()
    job.wait(
        "the next attempt",
        lambda s: s.get("attempt", 0) > killed and s.get("phase") == "Running",
    )
    job.wait_read(7 + SEED_SPLITS)
    drained = job.cli("stop", "--drain", "--timeout", "180")
    assert drained.returncode == 0, drained.stdout + drained.stderr + job.driver_logs()
    job.finish()
    status = job.status()
    assert status["phase"] == "Finished" and status["savepoint"]["drained"] is True
    assert all(task["taskStatus"] == "CLOSED" for task in status["lifecycle"]["tasks"])
    assert published_pages(job.output) == Counter(ground_truth(job.input))
    assert published_seeds(job.output) == seed_truth(SEED_ROWS)
    final = decode_savepoint(
        read_snapshot_location(status["savepoint"]["location"], job.store())[0]
    )
    assert final.manifest.drained and set(final.manifest.queries) == {"pages", "seeds"}


def test_two_bounded_queries_end_finished_through_one_final_checkpoint(
    tmp_path: Path, cleanup: list[Job]
) -> None:
    job = multi_query_job(tmp_path, "bounded", "--bounded", "--seed-rows=8000")
    cleanup.append(job)
    for index in range(3):
        write_clicks(job.input, index)
    job.run()
    finished_through_the_final_checkpoint(job)
    # The last windows of each query are only published by the final checkpoint's batches.
    assert published_pages(job.output) == Counter(ground_truth(job.input))
    assert published_seeds(job.output) == seed_truth(8000)


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("shared", "the source 'clicks' feeds the queries 'pages' and 'seeds'"),
        ("duplicate", "two queries are named 'pages'"),
    ],
)
def test_a_source_fed_to_two_queries_or_two_queries_named_alike_are_refused(
    tmp_path: Path, cleanup: list[Job], mode: str, reason: str
) -> None:
    job = multi_query_job(tmp_path, mode, f"--mode={mode}", max_attempts=1)
    cleanup.append(job)
    write_clicks(job.input, 0)
    job.run()
    assert job.runner is not None
    output, _ = job.runner.communicate(timeout=600)
    status = job.status()
    assert job.runner.returncode == 1, output
    assert status["phase"] == "Failed" and reason in status["message"], status
    assert "ProgramError" in status["message"] or "not restarted" in status["message"], status
    with contextlib.suppress(OSError, ValueError):
        os.killpg(job.driver_pid(), signal.SIGKILL)
