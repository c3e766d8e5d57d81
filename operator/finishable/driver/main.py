"""``finishable driver``: what the driver pod runs.

It reads the job configuration the operator mounted (``FINISHABLE_JOB_CONFIG``), has the
program and its dependencies fetched and checked (:mod:`finishable.driver.dependencies.prepare`:
``local:///path`` is a path inside the image, a remote URL is fetched into the work directory)
and replaces itself with ``python PROGRAM ARGS...``: the program is then the container's main
process and gets its signals directly, and the environment (attempt, restore pointer, token,
Spark's submit arguments, with what the dependencies add) passes through for
``FinishableJob.from_env()``. In a pod the program starts in its own directory; ``finishable
run`` starts its drivers as ``python -m finishable.driver.main --keep-cwd``, the same step in the
directory the user ran it from.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from finishable.api.jobconfig import PREFLIGHT_ENV, JobConfig, JobConfigError, config_from_env
from finishable.driver.dependencies.errors import DriverError, StartRefused
from finishable.driver.dependencies.prepare import prepare

log = logging.getLogger(__name__)


def driver_command(config: JobConfig, program: Path) -> list[str]:
    return [sys.executable, str(program), *config.spec.application.args]


def driver_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The pod's environment, plus the interpreter Spark's Python workers must use."""
    return {
        **environ,
        "PYSPARK_PYTHON": environ.get("PYSPARK_PYTHON", sys.executable),
        "PYSPARK_DRIVER_PYTHON": environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
        "PYTHONUNBUFFERED": "1",
    }


def _report_permanent(config: JobConfig, attempt: int, message: str) -> None:
    """Tell the operator that this attempt failed in a way no restart cures, so the job fails
    at once with the reason instead of restarting into the same error."""
    from finishable.api.control import DriverReport, DriverState  # noqa: PLC0415
    from finishable.driver.job import open_control  # noqa: PLC0415 - pyspark: only on failure

    report = DriverReport(
        attempt=attempt, state=DriverState.FAILED, message=message, permanent=True
    )
    try:
        open_control(config).write_report(report)
    except Exception:  # the exit code still tells the operator that the attempt failed
        log.warning("cannot write the driver report", exc_info=True)


def run_driver(environ: Mapping[str, str] | None = None, *, keep_cwd: bool = False) -> NoReturn:
    """Replace this process with the user's program (see the module docstring)."""
    env = dict(os.environ if environ is None else environ)
    config, attempt, restore_from = config_from_env(env)
    try:
        prepared = prepare(config, env)
    except StartRefused as error:
        if env.get(PREFLIGHT_ENV) != "1":  # a check pod must not fail the running attempt
            _report_permanent(config, attempt, str(error))
        raise
    program = prepared.program
    command = driver_command(config, program)
    log.info(
        "job %s attempt %d%s: %s",
        config.name,
        attempt,
        f" from {restore_from}" if restore_from else "",
        " ".join(command),
    )
    sys.stdout.flush()
    sys.stderr.flush()
    if not keep_cwd:
        os.chdir(program.parent)
    os.execve(command[0], command, driver_environment({**env, **prepared.environment}))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m finishable.driver.main``: the drivers of ``finishable run``."""
    parser = argparse.ArgumentParser(prog="python -m finishable.driver.main")
    parser.add_argument(
        "--keep-cwd",
        action="store_true",
        help="start the program in this directory, not in its own",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        run_driver(keep_cwd=args.keep_cwd)
    except (JobConfigError, DriverError) as error:
        sys.stderr.write(f"{error}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
