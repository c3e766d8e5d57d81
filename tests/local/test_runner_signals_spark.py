"""`finishable run` of an unbounded streaming job, with a real PySpark driver, under SIGTERM and
SIGKILL: SIGTERM suspends it with a savepoint and leaves no process of the driver behind; a
SIGKILLed runner takes its driver and Spark's JVM with it, `finishable stop` then says that
nothing runs the job, and the next run continues exactly once from the last checkpoint.
"""

from __future__ import annotations

import signal
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from testcluster.processes import group_members, wait_ended
from tests.driver.test_streaming_job import Job, ground_truth, published, write_clicks

pytestmark = [
    pytest.mark.full,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    started: list[Job] = []
    yield started
    for job in started:
        job.cleanup()


def running_driver(job: Job) -> dict[int, str]:
    """The processes of the running driver's group once it checkpoints: it, its JVM, workers."""
    job.wait(
        "a checkpoint", lambda s: s.get("phase") == "Running" and bool(s.get("lastCheckpoint"))
    )
    members = group_members(job.driver_pid())
    assert job.driver_pid() in members, members
    assert any("java" in command for command in members.values()), members
    return members


def test_sigterm_suspends_the_job_with_a_savepoint_and_leaves_no_driver(
    tmp_path: Path, jobs: list[Job]
) -> None:
    job = Job(tmp_path, "sigterm")
    jobs.append(job)
    for index in range(3):
        write_clicks(job.input, index)
    job.run()
    members = running_driver(job)
    assert job.runner is not None
    job.runner.send_signal(signal.SIGTERM)
    output = job.finish()  # exit code 0, as after Ctrl-C
    assert "SIGTERM: stopping with a savepoint" in output
    assert "resume with: finishable run" in output
    status = job.status()
    assert status["phase"] == "Suspended", output
    assert status["savepoint"]["location"] and status["savepoint"]["drained"] is False
    wait_ended(list(members), 120, "the driver's processes after SIGTERM")


def test_a_killed_runner_takes_its_driver_and_the_next_run_continues(
    tmp_path: Path, jobs: list[Job]
) -> None:
    job = Job(tmp_path, "sigkill")
    jobs.append(job)
    for index in range(3):
        write_clicks(job.input, index)
    job.run()
    members = running_driver(job)
    assert job.runner is not None
    job.runner.kill()
    job.runner.communicate(timeout=30)
    wait_ended(list(members), 120, "the driver and its JVM after their runner was killed")

    stopped = job.cli("stop", "--timeout", "120")
    assert stopped.returncode == 1
    assert "no `finishable run` runs this job" in stopped.stderr, stopped.stderr
    assert "`finishable run " in stopped.stderr and job.manifest.name in stopped.stderr
    assert "Traceback" not in stopped.stderr

    write_clicks(job.input, 3)
    job.run()
    job.wait("attempt 2 running", lambda s: s.get("attempt") == 2 and s.get("phase") == "Running")
    job.wait_read(4)
    drained = job.cli("stop", "--drain", "--timeout", "180")
    assert drained.returncode == 0, drained.stdout + drained.stderr
    output = job.finish()
    assert "was Running when its runner stopped; recovering" in output
    assert job.status()["phase"] == "Finished"
    assert published(job.output) == Counter(ground_truth(job.input))
