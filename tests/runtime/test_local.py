"""`finishable stop`, `savepoint` and `status` on a local job; the test plays the driver."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from finishable.api.control import DriverReport, DriverState, RequestOutcome, RequestReport
from finishable.api.jobconfig import (
    JobConfig,
    JobConfigError,
    config_from_env,
    write_config,
)
from finishable.api.models import CheckpointStatus, FinishableSparkJobSpec, SavepointStatus
from finishable.cli import main
from finishable.runtime.control import LocalControlChannel


def driver_answers(
    directory: Path, state: DriverState, outcome: RequestOutcome
) -> threading.Thread:
    """A fake driver: waits for a request, answers it the way a real driver reports."""

    def run() -> None:
        channel = LocalControlChannel(directory)
        for _ in range(200):
            request = channel.read_request()
            if request is not None:
                channel.write_report(
                    DriverReport(
                        attempt=1,
                        state=state,
                        savepoint=SavepointStatus(
                            location=f"{directory}/sp-1", drained=request.drain
                        ),
                        request=RequestReport(id=request.id, outcome=outcome, message="sp-1"),
                    )
                )
                return
            threading.Event().wait(0.02)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "clickstream"
    directory.mkdir()
    LocalControlChannel(directory).write_report(
        DriverReport(attempt=1, state=DriverState.RUNNING, last_checkpoint=CheckpointStatus(id=7))
    )
    return directory


def test_stop_with_drain_waits_for_the_answer(
    job_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    driver = driver_answers(job_dir, DriverState.FINISHED, RequestOutcome.COMPLETED)
    code = main(
        ["stop", "clickstream", "--drain", "--state-dir", str(job_dir.parent), "--timeout", "10"]
    )
    driver.join()
    assert code == 0
    out = capsys.readouterr().out
    assert "stop with savepoint and drain requested" in out
    assert "stop with savepoint and drain completed: sp-1" in out
    request = LocalControlChannel(job_dir).read_request()
    assert request is not None and request.drain


def test_savepoint_failure_exits_1(job_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    driver = driver_answers(job_dir, DriverState.RUNNING, RequestOutcome.FAILED)
    code = main(["savepoint", "clickstream", "--state-dir", str(job_dir.parent), "--timeout", "10"])
    driver.join()
    assert code == 1
    assert "savepoint failed: sp-1" in capsys.readouterr().out


def test_no_answer_in_time(job_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["stop", "clickstream", "--state-dir", str(job_dir.parent), "--timeout", "0.1"]) == 1
    )
    assert "no answer within 0.1s" in capsys.readouterr().err


def test_status_human_and_json(job_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "clickstream", "--state-dir", str(job_dir.parent)]) == 0
    out = capsys.readouterr().out
    assert "state: RUNNING (driver attempt 1)" in out
    assert "last checkpoint: 7" in out
    assert main(["status", "clickstream", "--json", "--state-dir", str(job_dir.parent)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["lastCheckpoint"]["id"] == 7
    assert document["state"] == "RUNNING"


def test_unknown_job_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "nosuchjob", "--state-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "no local job 'nosuchjob'" in err and "finishable run" in err
    assert main(["stop", "Bad_Name"]) == 1
    assert "is not a job name" in capsys.readouterr().err


def test_job_config_round_trip(tmp_path: Path) -> None:
    config = JobConfig(
        name="clickstream",
        spec=FinishableSparkJobSpec.model_validate({"application": {"file": "a.py"}}),
        state_url=str(tmp_path / "state"),
        work_dir=str(tmp_path / "work"),
        control="Local",
        control_dir=str(tmp_path),
    )
    path = tmp_path / "job.json"
    write_config(config, path)
    env = {
        "FINISHABLE_JOB_CONFIG": str(path),
        "FINISHABLE_ATTEMPT": "3",
        "FINISHABLE_RESTORE_FROM": "sp-1",
    }
    assert config_from_env(env) == (config, 3, "sp-1")
    with pytest.raises(JobConfigError, match="FINISHABLE_JOB_CONFIG is not set"):
        config_from_env({})
    with pytest.raises(JobConfigError, match="'x' is not a number"):
        config_from_env({**env, "FINISHABLE_ATTEMPT": "x"})
    path.write_text("{}")
    with pytest.raises(JobConfigError, match="is invalid"):
        config_from_env(env)
