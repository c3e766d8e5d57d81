"""A driver started by `finishable run` ends with its runner, through its own watchdog.

Real processes stand in for the runner, the driver and a Spark worker; the runner starts the
driver without PR_SET_PDEATHSIG, so what ends the driver here is the watchdog alone (the path of
systems without prctl).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from finishable.driver.runner_watch import RUNNER_PID_ENV, watch_runner
from testcluster.processes import ended, wait_ended

pytestmark = pytest.mark.quick

ROOT = Path(__file__).resolve().parents[2]

DRIVER = """
import os, subprocess, sys, time
from finishable.driver.runner_watch import watch_runner
watch_runner()
pids_file, worker_code, seen_file = sys.argv[1:]
worker = subprocess.Popen([sys.executable, "-c", worker_code, seen_file])  # the driver's group
with open(pids_file + ".tmp", "w") as pids:
    pids.write(f"{os.getpid()} {worker.pid}")
os.replace(pids_file + ".tmp", pids_file)
time.sleep(600)
"""

WORKER = """
import os, sys, time
with open(sys.argv[1] + ".tmp", "w") as seen:
    seen.write(os.environ.get("FINISHABLE_RUNNER_PID", "-"))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""

RUNNER = """
import os, subprocess, sys
driver = subprocess.Popen(
    [sys.executable, "-c", *sys.argv[1:]],
    env={**os.environ, "FINISHABLE_RUNNER_PID": str(os.getpid())},
    start_new_session=True,
)
driver.wait()
"""


def python(
    code: str, *args: str, env: dict[str, str] | None = None, new_session: bool = False
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env,
        cwd=ROOT,
        start_new_session=new_session,
    )


def wait_file(path: Path, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} was not written"
        time.sleep(0.1)
    return path.read_text()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_driver_and_its_group_end_when_the_runner_is_killed(tmp_path: Path) -> None:
    pids_file, seen_file = tmp_path / "pids", tmp_path / "seen"
    runner = python(RUNNER, DRIVER, str(pids_file), WORKER, str(seen_file))
    try:
        driver, worker = map(int, wait_file(pids_file).split())
        # The worker (Spark's JVM, say) does not inherit the runner's pid: it is no driver.
        assert wait_file(seen_file) == "-"
        assert not ended(driver) and not ended(worker)
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait(30)
    wait_ended([driver, worker], 60, "the driver and its worker after their runner was killed")


def test_a_driver_whose_runner_is_already_gone_ends_at_once() -> None:
    code = (
        "from finishable.driver.runner_watch import watch_runner; watch_runner()\n"
        "import time; time.sleep(600)"
    )
    env = {**os.environ, RUNNER_PID_ENV: "1"}  # not its parent: the runner died before it looked
    leader = python(code, env=env, new_session=True)
    assert leader.wait(60) == -signal.SIGKILL, "it ends its own group, itself included"
    member = python(code, env=env)  # in the test's group: it ends only itself
    assert member.wait(60) == 1


def test_without_a_runner_nothing_is_watched(caplog: pytest.LogCaptureFixture) -> None:
    assert watch_runner({}) is None
    environ = {RUNNER_PID_ENV: "not-a-pid"}
    with caplog.at_level(logging.WARNING):
        assert watch_runner(environ) is None
    assert RUNNER_PID_ENV not in environ
    assert "is not a pid" in caplog.text
