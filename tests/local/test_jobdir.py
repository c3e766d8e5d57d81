"""Local job files and the job configuration handed to a driver."""

from __future__ import annotations

from pathlib import Path

import pytest

from finishable.api.jobconfig import JobConfig, JobConfigError, config_from_env, write_config
from finishable.api.models import DesiredState, Phase
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import FinishableSparkJobStatus
from finishable.cli import main
from finishable.local.jobdir import local_job

pytestmark = pytest.mark.quick


def test_unknown_job_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "nosuchjob", "--state-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "no local job 'nosuchjob'" in err and "finishable run" in err
    assert main(["stop", "Bad_Name"]) == 1
    assert "is not a job name" in capsys.readouterr().err


def test_desired_edits_bump_the_generation(tmp_path: Path) -> None:
    job = local_job("clickstream", tmp_path, must_exist=False)
    first = job.edit_desired(state="Running")
    second = job.edit_desired(savepointTriggerNonce=1)
    assert (first.generation, second.generation) == (2, 3)
    assert second.state is DesiredState.RUNNING
    assert second.savepoint_trigger_nonce == 1


def test_status_round_trip_and_stop_timeout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = local_job("clickstream", tmp_path, must_exist=False)
    job.write_status(FinishableSparkJobStatus(phase=Phase.RUNNING, attempt=1))
    status = job.read_status()
    assert status is not None and status.phase is Phase.RUNNING
    with job.runner_lock(tmp_path / "job.yaml"):  # a live runner that never answers
        assert main(["stop", "clickstream", "--state-dir", str(tmp_path), "--timeout", "0.2"]) == 1
    assert "not done within 0.2s" in capsys.readouterr().err
    assert job.read_desired().state is DesiredState.SUSPENDED


def test_a_run_is_keyed_by_the_uid_and_the_run_number(tmp_path: Path) -> None:
    spec = FinishableSparkJobSpec.model_validate({"application": {"file": "a.py"}})
    keys = {
        JobConfig(
            name="clicks", uid=uid, run=run, spec=spec, state_url="s", work_dir="w", control="Local"
        ).run_key
        for uid in ("0c6b2a1e-1111", "9f00aa00-2222")
        for run in (1, 2)
    }
    assert len(keys) == 4, "a new uid or a new run number is a new run"
    job = local_job("clicks", tmp_path, must_exist=False)
    first = job.uid
    assert job.uid == first, "a local job keeps its uid"
    (tmp_path / "clicks" / "uid").unlink()
    assert job.uid != first, "a fresh directory is a new job"


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
    second, _, _ = config_from_env({**env, "FINISHABLE_RUN": "2"})
    assert second.run == 2 and second.run_key == "clickstream-r2"
    with pytest.raises(JobConfigError, match="FINISHABLE_RUN=0 must be 1 or more"):
        config_from_env({**env, "FINISHABLE_RUN": "0"})
    path.write_text("{}")
    with pytest.raises(JobConfigError, match="is invalid"):
        config_from_env(env)
