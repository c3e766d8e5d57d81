"""The step before a driver's program starts: its file and dependencies fetched, checked, handed on.

One function for every driver: ``finishable driver`` in a pod, an upgrade check pod (so a wrong
digest or an unresolvable package refuses the upgrade before the running job is stopped) and the
drivers of ``finishable run``. It returns the program's file and what its environment gains:
``PYSPARK_SUBMIT_ARGS`` with Spark's settings for the dependencies and ``PYTHONPATH`` with a
Python environment's site-packages and the Python files. A job with no dependencies gets nothing
but its program.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

from finishable import __version__
from finishable.api.jobconfig import JobConfig
from finishable.driver.dependencies import fetch, packages, plan, pyenv
from finishable.driver.dependencies.errors import StartRefused

DEPENDENCIES_DIR = "dependencies"
"""In the job's work directory: on the work volume when the job has one, so shared by its
attempts; else in the driver pod (the local job's directory for ``finishable run``)."""
IVY_DIR = "ivy"


@dataclass(frozen=True)
class Prepared:
    """What the program is started with."""

    program: Path
    environment: dict[str, str] = field(default_factory=dict)
    """Variables to set in the program's environment (on top of the driver's)."""


def running_versions() -> dict[str, str]:
    """The versions an archived environment must not shadow (pyenv.SHADOW_CHECKED)."""
    return {"finishable-spark-operator": __version__, "pyspark": version("pyspark")}


def prepare(config: JobConfig, environ: Mapping[str, str]) -> Prepared:
    """Fetch and check the program and its dependencies (see the module docstring); a
    :class:`StartRefused` when no restart could cure what is wrong."""
    application = config.spec.application
    root = Path(config.work_dir) / DEPENDENCIES_DIR
    program, *listed = plan.dependencies(application)
    program_file = fetch.materialize(program, root, config.manifest_dir).path
    if not listed and not application.packages:
        return Prepared(program_file)
    local = [_local(dependency, root, config.manifest_dir) for dependency in listed]
    _check_environments(local)
    submit_args = environ.get(plan.SUBMIT_ARGS_ENV)
    conf = {**application.spark_conf, **plan.submitted_conf(submit_args)}
    launch = plan.launch(
        local,
        application,
        conf,
        ivy_dir=root / IVY_DIR,
        in_driver=plan.executors_in_driver(conf, environ),
    )
    if application.packages:
        packages.resolve({**conf, **launch.conf}, application.packages, environ)
    environment = {plan.SUBMIT_ARGS_ENV: plan.with_conf(submit_args, launch.conf)}
    if launch.python_path:
        existing = environ.get("PYTHONPATH")
        environment["PYTHONPATH"] = plan.python_path(launch.python_path, existing)
    return Prepared(program_file, environment)


def _local(dependency: plan.Dependency, root: Path, manifest_dir: str | None) -> plan.Local:
    fetched = fetch.materialize(dependency, root, manifest_dir)
    if dependency.field != "archives":
        return plan.Local(dependency, fetched.path)
    unpacked = fetch.unpack(dependency, fetched, root)
    try:
        environment = pyenv.python_env_in(unpacked)
    except ValueError as error:
        raise StartRefused(f"{dependency.where}: {error}") from None
    return plan.Local(dependency, fetched.path, environment)


def _check_environments(local: list[plan.Local]) -> None:
    """Refuse environments that cannot be layered over this image (pyenv's checks)."""
    python = (sys.version_info.major, sys.version_info.minor)
    running = running_versions()
    problems: list[str] = []
    envs: list[str] = []
    for item in local:
        if item.environment is not None:
            where = item.dependency.where
            envs.append(where)
            problems += pyenv.env_problems(where, item.environment, python=python, running=running)
    if (several := pyenv.single_env_problem(envs)) is not None:
        problems.append(several)
    if problems:
        raise StartRefused("; ".join(problems))
