"""``finishable driver``: what the driver pod runs.

It reads the job configuration the operator mounted (``FINISHABLE_JOB_CONFIG``), finds the
user's program (``local:///path`` is a path inside the image; a remote URL is fetched into the
work directory first) and replaces itself with ``python PROGRAM ARGS...``: the program is then
the container's main process and gets its signals directly, and the environment (attempt,
restore pointer, token, Spark's submit arguments) passes through unchanged for
``FinishableJob.from_env()``.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

from finishable.api.jobconfig import PREFLIGHT_ENV, JobConfig, config_from_env

log = logging.getLogger(__name__)

LOCAL_SCHEMES = ("local", "file")
HTTP_SCHEMES = ("http", "https")
FILESYSTEM_SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gs", "hdfs": "hdfs"}
FETCH_TIMEOUT_SECONDS = 60


class DriverError(RuntimeError):
    """The driver cannot start the program; the message names the field and the file."""


class ProgramMissing(DriverError):
    """The program file is not where the spec says: no restart can find it."""


def program_path(config: JobConfig) -> Path:
    """The program to run: a local path, or a copy of a remote one in the work directory."""
    target = config.spec.application.file
    parts = urlsplit(target)
    scheme = parts.scheme if len(parts.scheme) > 1 else ""
    if scheme in LOCAL_SCHEMES:
        path = Path(parts.path)
    elif not scheme:
        path = Path(target)
        if not path.is_absolute() and config.manifest_dir:
            path = Path(config.manifest_dir) / path
    else:
        path = _fetch(target, Path(config.work_dir) / "application")
    if not path.is_file():
        raise ProgramMissing(
            f"spec.application.file: {target!r}: {path} does not exist; local:///path names a "
            "file inside the image"
        )
    return path


def _fetch(url: str, directory: Path) -> Path:
    """Copy a remote program (http, https, s3, s3a, gs, hdfs) to a local file."""
    parts = urlsplit(url)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / (Path(parts.path).name or "main.py")
    try:
        if parts.scheme in HTTP_SCHEMES:
            with (
                urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_SECONDS) as response,
                target.open("wb") as out,
            ):
                shutil.copyfileobj(response, out)
        elif parts.scheme in FILESYSTEM_SCHEMES:
            import pyarrow.fs as pafs  # noqa: PLC0415 - only remote programs need it

            fs, path = pafs.FileSystem.from_uri(
                f"{FILESYSTEM_SCHEMES[parts.scheme]}://{parts.netloc}{parts.path}"
            )
            with fs.open_input_stream(path) as stream, target.open("wb") as out:
                shutil.copyfileobj(stream, out)
        else:
            raise DriverError(f"spec.application.file: {url!r}: cannot fetch {parts.scheme}://")
    except (OSError, ValueError) as error:
        raise DriverError(f"spec.application.file: cannot fetch {url!r}: {error}") from None
    log.info("fetched %s to %s", url, target)
    return target


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


def run_driver(environ: Mapping[str, str] | None = None) -> NoReturn:
    """Replace this process with the user's program (see the module docstring)."""
    env = dict(os.environ if environ is None else environ)
    config, attempt, restore_from = config_from_env(env)
    try:
        program = program_path(config)
    except ProgramMissing as error:
        if env.get(PREFLIGHT_ENV) != "1":  # a check pod must not fail the running attempt
            _report_permanent(config, attempt, str(error))
        raise
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
    os.chdir(program.parent)
    os.execve(command[0], command, driver_environment(env))
