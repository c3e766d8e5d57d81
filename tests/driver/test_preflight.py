"""The upgrade check (``FINISHABLE_PREFLIGHT=1``): a user's program, run as the check pod runs
it, against the state of a job that really ran. It gives its verdict by exit code and last log
line and writes nothing to the job's state."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from finishable.api.jobconfig import (
    ATTEMPT_ENV,
    CONFIG_ENV,
    PREFLIGHT_ENV,
    PREFLIGHT_REFUSED_EXIT_CODE,
    RESTORE_ENV,
    RUN_ENV,
)
from finishable.state import CheckpointKind
from tests.driver.test_streaming_job import PROGRAM, ROOT, Job, cleanup, write_clicks

pytestmark = pytest.mark.full

__all__ = ["cleanup"]  # the fixture, used by name


def state_files(job: Job) -> dict[str, tuple[int, int]]:
    """Every file of the job's state with its size and modification time."""
    root = job.state / job.name / "state"
    return {
        str(path.relative_to(root)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in root.rglob("*")
        if path.is_file()
    }


def check(job: Job, termination_log: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The program with ``args`` run as a check pod runs it, for run 1's running attempt."""
    termination_log.write_text("")
    env = {
        **os.environ,
        CONFIG_ENV: str(job.state / job.name / "job.json"),
        RUN_ENV: "1",
        ATTEMPT_ENV: "1",
        RESTORE_ENV: "",
        PREFLIGHT_ENV: "1",
        "FINISHABLE_TERMINATION_LOG": str(termination_log),
    }
    command = [sys.executable, str(PROGRAM), f"--input={job.input}", f"--output={job.output}"]
    return subprocess.run(
        [*command, *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    return [line for line in result.stderr.splitlines() if line.strip()][-1]


def test_the_check_passes_the_same_sources_and_refuses_a_changed_program(
    tmp_path: Path, cleanup: list[Job]
) -> None:
    job = Job(tmp_path, "checked", "--bounded")
    cleanup.append(job)
    for index in range(2):
        write_clicks(job.input, index)
    job.run()
    job.finish()
    checkpoints = job.store().list(CheckpointKind.CHECKPOINT)
    newest = checkpoints[-1].id
    before = state_files(job)
    verdict = tmp_path / "termination-log"

    same = check(job, verdict, "--bounded")
    assert same.returncode == 0, same.stderr[-3000:]
    assert last_line(same).startswith(
        f"upgrade check passed: the new program can restore checkpoint {newest} of the running job"
    )
    assert "restore checkpoint" in verdict.read_text()

    # Another source: the state has none of it, and the running job's source is still there.
    seeded = check(job, verdict, "--bounded", "--seed-rows=100")
    assert seeded.returncode == PREFLIGHT_REFUSED_EXIT_CODE, seeded.stderr[-3000:]
    assert last_line(seeded) == (
        f"upgrade check refused: checkpoint {newest} of the running job does not match the "
        "new program: this job's source 'seeds' is not in it"
    )
    assert verdict.read_text() == last_line(seeded).removeprefix("upgrade check refused: ")

    # The same source read differently (unbounded): its fingerprint changed.
    changed = check(job, verdict)
    assert changed.returncode == PREFLIGHT_REFUSED_EXIT_CODE, changed.stderr[-3000:]
    assert "the source 'clicks' changed since it was taken" in last_line(changed)

    # A program that cannot even declare its job fails the check with its error, last.
    broken = check(job, verdict, "--bounded", "--format=nosuch")
    assert broken.returncode == 1, broken.stderr[-3000:]
    assert last_line(broken) == (
        "upgrade check failed: ValueError: unknown source format 'nosuch' (known: json, csv, "
        "parquet, orc)"
    )

    assert state_files(job) == before, "a check writes nothing to the job's state"
