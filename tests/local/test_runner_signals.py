"""`finishable run` under Ctrl-C, SIGTERM and SIGKILL, with the stand-in driver (no Spark).

SIGTERM is Ctrl-C: a stop with savepoint, bounded by ``spec.stopTimeout``, then the driver is
killed. A runner killed outright takes its driver with it, and `finishable stop` on a job that no
runner runs says so at once instead of waiting for an answer that cannot come.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from finishable.cli import main
from testcluster.processes import start_runner, wait_ended
from tests.local.test_runner import attempts, manifest, wait_phase, wait_status

pytestmark = pytest.mark.quick


@pytest.fixture
def runners() -> Iterator[list[subprocess.Popen[str]]]:
    """Runners a failed test left running are killed (their drivers die with them)."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for runner in started:
        if runner.poll() is None:
            runner.kill()
            runner.communicate(timeout=300)


def driver_pid(state: Path) -> int:
    return int((state / "fake" / "driver.pid").read_text().split()[1])


def job_file(state: Path, name: str) -> dict[str, object]:
    return json.loads((state / "fake" / name).read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_and_sigterm_stop_the_job_with_a_savepoint(
    tmp_path: Path, runners: list[subprocess.Popen[str]], signum: signal.Signals
) -> None:
    state = tmp_path / "state"
    runner = start_runner(manifest(tmp_path), state)
    runners.append(runner)
    wait_phase(state, "Running")
    driver = driver_pid(state)
    runner.send_signal(signum)
    output, _ = runner.communicate(timeout=300)
    assert runner.returncode == 0, output
    assert "stopping with a savepoint, within spec.stopTimeout (10m)" in output
    assert "resume with: finishable run" in output
    status = job_file(state, "status.json")
    assert status["phase"] == "Suspended", output
    assert status["savepoint"], output
    wait_ended([driver], 60, "the driver of a suspended job")


def test_a_stop_that_outlasts_stop_timeout_kills_the_driver(
    tmp_path: Path, runners: list[subprocess.Popen[str]]
) -> None:
    state = tmp_path / "state"
    runner = start_runner(manifest(tmp_path, "--ignore-requests", stopTimeout="2s"), state)
    runners.append(runner)
    wait_phase(state, "Running")
    driver = driver_pid(state)
    runner.send_signal(signal.SIGTERM)
    output, _ = runner.communicate(timeout=300)
    assert runner.returncode == 128 + signal.SIGTERM, output
    assert "the stop did not complete within spec.stopTimeout (2s): killing the driver" in output
    assert "continues it from its last checkpoint" in output
    wait_ended([driver], 60, "the driver of a stop that timed out")
    # The stop was given up, not left pending: the next run continues instead of stopping.
    assert job_file(state, "desired.json")["state"] == "Running"


def test_a_second_signal_kills_the_driver_at_once(
    tmp_path: Path, runners: list[subprocess.Popen[str]]
) -> None:
    state = tmp_path / "state"
    runner = start_runner(manifest(tmp_path, "--ignore-requests"), state)
    runners.append(runner)
    wait_phase(state, "Running")
    driver = driver_pid(state)
    runner.send_signal(signal.SIGTERM)
    wait_phase(state, "Savepointing")
    runner.send_signal(signal.SIGINT)
    output, _ = runner.communicate(timeout=300)
    assert runner.returncode == 128 + signal.SIGINT, output
    assert "Ctrl-C again: killing the driver" in output
    wait_ended([driver], 60, "the driver after a second signal")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_runner_takes_its_driver_and_stop_says_nothing_runs_the_job(
    tmp_path: Path, runners: list[subprocess.Popen[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path = manifest(tmp_path)
    state = tmp_path / "state"
    runner = start_runner(path, state)
    runners.append(runner)
    wait_phase(state, "Running")
    driver = driver_pid(state)
    runner.kill()
    runner.communicate(timeout=300)
    # The stand-in never calls FinishableJob.from_env, so only the kernel can end it.
    wait_ended([driver], 60, "the driver of a SIGKILLed runner")

    # A stop that no runner will carry out is refused at once (within --timeout, it would say
    # "not done within"), names the command that continues the job, and records nothing.
    stop = ["stop", "fake", "--state-dir", str(state), "--timeout", "60"]
    assert main(stop) == 1
    err = capsys.readouterr().err
    assert "no `finishable run` runs this job (its runner ended while it was Running)" in err
    assert "Run `finishable run " in err and f"{path.name} --state-dir {state}`" in err
    assert "Traceback" not in err
    assert job_file(state, "desired.json")["state"] == "Running"
    assert main(["savepoint", "fake", "--state-dir", str(state)]) == 1
    assert "nothing would act on `finishable savepoint fake`" in capsys.readouterr().err
    assert main(["status", "fake", "--state-dir", str(state)]) == 0
    assert "runner: none" in capsys.readouterr().out

    # The next run continues the job (a new attempt), and stop works again.
    again = start_runner(path, state)
    runners.append(again)
    wait_status(state, lambda s: s.get("attempt") == 2 and s.get("phase") == "Running")
    assert main(stop) == 0
    assert "phase: Suspended" in capsys.readouterr().out
    output, _ = again.communicate(timeout=300)
    assert again.returncode == 0, output
    assert "was Running when its runner stopped; recovering" in output


def test_a_job_has_one_runner(
    tmp_path: Path, runners: list[subprocess.Popen[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path = manifest(tmp_path)
    state = tmp_path / "state"
    runner = start_runner(path, state)
    runners.append(runner)
    wait_phase(state, "Running")
    assert main(["run", str(path), "--state-dir", str(state)]) == 1
    err = capsys.readouterr().err
    assert f"already run by another `finishable run` (pid {runner.pid})" in err
    assert [attempt for attempt, _ in attempts(state)] == ["1"], "its driver was left alone"
    assert main(["stop", "fake", "--state-dir", str(state), "--timeout", "60"]) == 0
    output, _ = runner.communicate(timeout=300)
    assert runner.returncode == 0, output
