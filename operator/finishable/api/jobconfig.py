"""The job configuration handed to a driver: by the operator (a ConfigMap) or by ``finishable run``.

It is the whole contract between whoever starts a driver and the runtime inside it:
``FinishableJob.from_env()`` reads it from the file named by ``FINISHABLE_JOB_CONFIG``, so a
user's program needs nothing else. The run number, the attempt number and the restore pointer
change per driver attempt and come from the environment too, so one config document serves every
attempt.

A run is identified by the custom resource's uid and its run number (:attr:`JobConfig.run_key`):
the job event log, checkpoints and enumerator states are keyed by it, and a sink records it
with what it publishes, so a job deleted and applied again under the same name (a new uid), or
restarted from scratch (the next run number), shares no state with what ran before.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path

from pydantic import Field, ValidationError

from finishable.api.models import ApiModel
from finishable.api.spec import FinishableSparkJobSpec

CONFIG_ENV = "FINISHABLE_JOB_CONFIG"
ATTEMPT_ENV = "FINISHABLE_ATTEMPT"
RUN_ENV = "FINISHABLE_RUN"
RESTORE_ENV = "FINISHABLE_RESTORE_FROM"
FENCE_GRACE_ENV = "FINISHABLE_FENCE_GRACE_SECONDS"
TOKEN_ENV = "FINISHABLE_TOKEN"
PREFLIGHT_ENV = "FINISHABLE_PREFLIGHT"
"""Set to 1 in an upgrade check pod: the program is checked against the job's state, not run."""
PREDECESSOR_EXITED_ENV = "FINISHABLE_PREDECESSOR_EXITED"
"""Set to 1 when the previous attempt's driver process was seen to end: no write of it can be in
flight, so the new attempt does not wait out the fence's grace before it reads the state."""
STANDBY_ENV = "FINISHABLE_STANDBY"
"""Set to 1 for a standby driver (spec.recovery.standby): it starts Spark, then waits for the
order to take over as its attempt before it claims or reads anything of the job."""
PREFLIGHT_REFUSED_EXIT_CODE = 3
"""A check pod's exit code when the program cannot restore the job's state (the reason is the
last line of its log and its termination message)."""
PREFLIGHT_VERDICT_PREFIX = "upgrade check "
"""How the check's last log line starts: ``upgrade check passed: ...``, ``... refused: ...`` (the
state does not fit) or ``... failed: ...`` (the program did not get as far as the check)."""
POD_IP_ENV = "FINISHABLE_POD_IP"
"""The driver pod's IP (the downward API's status.podIP): Spark's and the endpoint's address."""
ENDPOINT_BIND_ENV = "FINISHABLE_ENDPOINT_BIND"
"""Address the driver endpoint binds (default 127.0.0.1; 0.0.0.0 in a pod)."""
ENDPOINT_HOST_ENV = "FINISHABLE_ENDPOINT_HOST"
"""Host executors reach the driver endpoint at (the driver pod's IP in a cluster)."""


class ControlType(StrEnum):
    """Where the control channel lives."""

    CONFIG_MAP = "ConfigMap"
    LOCAL = "Local"


class JobConfig(ApiModel):
    """Everything a driver needs to run one job."""

    name: str = Field(description="The job's name (metadata.name).")
    namespace: str | None = Field(default=None, description="Namespace, in a cluster.")
    uid: str | None = Field(
        default=None, description="The custom resource's uid (owner refs, run identity)."
    )
    run: int = Field(default=1, ge=1, description="The run number (status.run).")
    spec: FinishableSparkJobSpec = Field(description="The job's spec, defaults filled in.")
    state_url: str = Field(
        description=(
            "The checkpoint store: 'configmap:' (the job's namespace), an object store URL, or a "
            "local directory."
        )
    )
    work_dir: str = Field(
        description="A local directory for Spark's checkpoint and scratch files of this driver."
    )
    control: ControlType = Field(description="Where the control channel lives.")
    control_dir: str | None = Field(
        default=None, description="For a Local control channel: its directory."
    )
    shuffle_urls: list[str] = Field(
        default_factory=list,
        description="Batch: the shuffle servers' base URLs (one per shuffle pod or local server).",
    )
    partition_url: str | None = Field(
        default=None,
        description=(
            "Batch: the partition storage promoted datasets become cluster partitions in "
            "(None: the job cannot promote)."
        ),
    )
    manifest_dir: str | None = Field(
        default=None,
        description="Directory of the manifest; relative application paths resolve against it.",
    )

    @property
    def job_key(self) -> str:
        """The identity of the job (its uid, locally its name), usable in a state object name."""
        return (self.uid or self.name).lower()

    @property
    def run_key(self) -> str:
        """The identity of this run, usable as a segment of a state object name."""
        return f"{self.job_key}-r{self.run}"


class JobConfigError(ValueError):
    """The driver was started without a usable job configuration."""


def write_config(config: JobConfig, path: Path) -> None:
    """Write the config where a driver will find it (atomically: temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(
        config.model_dump_json(by_alias=True, exclude_none=True, indent=2), encoding="utf-8"
    )
    os.replace(temporary, path)


def read_config(path: Path) -> JobConfig:
    """Read a config file; :class:`JobConfigError` names the file and the problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise JobConfigError(f"cannot read the job configuration {path}: {error}") from None
    try:
        return JobConfig.model_validate_json(text)
    except ValidationError as error:
        raise JobConfigError(f"the job configuration {path} is invalid: {error}") from None


def config_from_env(environ: dict[str, str] | None = None) -> tuple[JobConfig, int, str]:
    """The config (with this run's number), the attempt number and the restore pointer of this
    driver process."""
    env = dict(os.environ if environ is None else environ)
    location = env.get(CONFIG_ENV)
    if not location:
        raise JobConfigError(
            f"{CONFIG_ENV} is not set: start the program with `finishable run MANIFEST` "
            "(or through the operator), which hands it the job configuration"
        )
    config = read_config(Path(location))
    attempt = _positive_number(env, ATTEMPT_ENV, 1)
    run = _positive_number(env, RUN_ENV, config.run)
    return config.model_copy(update={"run": run}), attempt, env.get(RESTORE_ENV, "")


def _positive_number(env: dict[str, str], key: str, default: int) -> int:
    text = env.get(key)
    if text is None:
        return default
    try:
        number = int(text)
    except ValueError:
        raise JobConfigError(f"{key}={text!r} is not a number") from None
    if number < 1:
        raise JobConfigError(f"{key}={number} must be 1 or more")
    return number
