"""Where a sink the program left unset stages: next to the job's state in object storage, the
storage URL's query (an S3 endpoint) kept as the query, never glued to the path."""

from __future__ import annotations

from pathlib import Path

import pytest

from finishable.api.jobconfig import ControlType, JobConfig
from finishable.api.spec import FinishableSparkJobSpec
from finishable.connectors.sinks import TransactionalCallback
from finishable.driver.failures import ProgramError
from finishable.driver.sink_defaults import default_staging

pytestmark = pytest.mark.quick

SINK = TransactionalCallback(lambda batch, rows: None, name="counts")


def config(state_url: str, tmp_path: Path) -> JobConfig:
    spec = FinishableSparkJobSpec.model_validate({"application": {"file": "job.py"}})
    return JobConfig(
        name="clicks",
        spec=spec,
        state_url=state_url,
        work_dir=str(tmp_path / "work"),
        control=ControlType.LOCAL,
    )


@pytest.mark.parametrize(
    ("state", "staging"),
    [
        ("s3://bucket/state", "s3://bucket/state/staging"),
        ("s3://bucket/state/", "s3://bucket/state/staging"),
        (
            "s3://bucket/state?endpoint_override=10.0.0.1%3A9000&scheme=http",
            "s3://bucket/state/staging?endpoint_override=10.0.0.1%3A9000&scheme=http",
        ),
        ("gs://bucket/jobs/clicks", "gs://bucket/jobs/clicks/staging"),
    ],
)
def test_staging_goes_next_to_state_in_object_storage(
    tmp_path: Path, state: str, staging: str
) -> None:
    assert default_staging(config(state, tmp_path), SINK) == staging


def test_staging_is_local_beside_local_state_and_config_maps_need_a_url(tmp_path: Path) -> None:
    assert default_staging(config(str(tmp_path / "state"), tmp_path), SINK) == str(
        tmp_path / "staging"
    )
    with pytest.raises(ProgramError, match="needs staging_url"):
        default_staging(config("configmap:", tmp_path), SINK)
