"""`finishable run` as a real process: the local operator loop with a stand-in driver.

The runner is the operator's phase machine run locally; these tests drive it the way a user does
(`finishable run`, `stop`, `savepoint`, `status`, `run --resume`) and kill its driver with SIGKILL.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from finishable.cli import main
from testcluster.processes import start_runner

pytestmark = pytest.mark.quick

FAKE_DRIVER = Path(__file__).with_name("fake_driver.py")


def manifest(tmp_path: Path, *args: str, **spec: object) -> Path:
    document = {
        "apiVersion": "finishable.dev/v1alpha1",
        "kind": "FinishableSparkJob",
        "metadata": {"name": "fake"},
        "spec": {"application": {"file": str(FAKE_DRIVER), "args": list(args)}, **spec},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def wait_status(
    state_dir: Path, accept: Callable[[dict[str, object]], bool], timeout: float = 300
) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    status_file = state_dir / "fake" / "status.json"
    while time.monotonic() < deadline:
        if status_file.exists():
            try:
                status = json.loads(status_file.read_text())
            except json.JSONDecodeError:
                status = {}
            if accept(status):
                return status  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise AssertionError(f"status not reached; status: {status_file.read_text()}")


def wait_phase(state_dir: Path, phase: str, timeout: float = 300) -> dict[str, object]:
    return wait_status(state_dir, lambda status: status.get("phase") == phase, timeout)


def attempts(state_dir: Path) -> list[list[str]]:
    lines = (state_dir / "fake" / "attempts.log").read_text().splitlines()
    return [line.split(" ", 1) for line in lines]


def test_run_stop_resume_drain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = manifest(tmp_path)
    state = tmp_path / "state"
    runner = start_runner(path, state)
    wait_phase(state, "Running")
    assert main(["savepoint", "fake", "--state-dir", str(state), "--timeout", "30"]) == 0
    assert "savepoint:" in capsys.readouterr().out
    assert main(["stop", "fake", "--state-dir", str(state), "--timeout", "30"]) == 0
    assert "phase: Suspended" in capsys.readouterr().out
    output, _ = runner.communicate(timeout=120)
    assert runner.returncode == 0, output
    assert "resume with: finishable run" in output
    suspended = json.loads((state / "fake" / "status.json").read_text())
    savepoint = suspended["savepoint"]["location"]

    resumed = start_runner(path, state, "--resume")
    wait_phase(state, "Running")
    assert attempts(state)[-1] == ["2", savepoint]
    assert main(["status", "fake", "--json", "--state-dir", str(state)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["phase"] == "Running" and document["driver"]["attempt"] == 2
    assert main(["stop", "fake", "--drain", "--state-dir", str(state), "--timeout", "30"]) == 0
    output, _ = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, output
    finished = json.loads((state / "fake" / "status.json").read_text())
    assert finished["phase"] == "Finished"
    assert finished["savepoint"]["drained"] is True


def test_a_time_to_live_means_nothing_locally_the_finished_job_stays(tmp_path: Path) -> None:
    """spec.ttlAfterFinished is the operator's: the runner runs the same manifest and keeps
    the job's directory, which `run --fresh` clears."""
    path = manifest(tmp_path, ttlAfterFinished="0s", ttlAfterFailed="0s")
    state = tmp_path / "state"
    runner = start_runner(path, state)
    wait_phase(state, "Running")
    assert main(["stop", "fake", "--drain", "--state-dir", str(state), "--timeout", "30"]) == 0
    output, _ = runner.communicate(timeout=120)
    assert runner.returncode == 0, output
    finished = json.loads((state / "fake" / "status.json").read_text())
    assert finished["phase"] == "Finished" and "expiresAt" not in finished
    assert "TTL" not in output


def test_driver_killed_is_recovered(tmp_path: Path) -> None:
    path = manifest(tmp_path, "--crash-at", "5")
    state = tmp_path / "state"
    runner = start_runner(path, state)
    # Recovering can be brief under load, so wait for the second attempt and read
    # the transition from the runner's own progress output afterwards.
    running = wait_status(state, lambda s: s.get("phase") == "Running" and s.get("attempt") == 2)
    assert running["restarts"] == 1
    assert [attempt for attempt, _ in attempts(state)] == ["1", "2"]
    assert main(["stop", "fake", "--drain", "--state-dir", str(state), "--timeout", "30"]) == 0
    output, _ = runner.communicate(timeout=120)
    assert runner.returncode == 0, output
    assert "-> Recovering" in output
    assert "killed by signal 9" in output


def test_second_run_of_a_suspended_job_needs_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    job_dir = state / "fake"
    job_dir.mkdir(parents=True)
    (job_dir / "status.json").write_text(json.dumps({"phase": "Suspended", "attempt": 1}))
    assert main(["run", str(manifest(tmp_path)), "--state-dir", str(state)]) == 1
    assert "--resume" in capsys.readouterr().err


def test_bad_application(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = manifest(tmp_path)
    document = yaml.safe_load(missing.read_text())
    document["spec"]["application"]["file"] = "nowhere.py"
    missing.write_text(yaml.safe_dump(document))
    assert main(["run", str(missing), "--state-dir", str(tmp_path / "s")]) == 1
    assert "spec.application.file" in capsys.readouterr().err
