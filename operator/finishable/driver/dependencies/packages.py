"""``packages``: Maven coordinates resolved by Spark's own resolver, checked before the program.

Spark resolves ``spark.jars.packages`` with Ivy when its JVM starts (spark-submit's
``prepareSubmitEnvironment``): the local Maven and Ivy caches, Maven Central and spark-packages,
then ``spark.jars.repositories``, into the cache ``spark.jars.ivy``. Should that fail inside the
program, all pyspark says is that the Java gateway exited, and the driver would be restarted into
the same failure. So the driver runs the same resolution first, in a short spark-submit of an
empty Python file with the same settings: a coordinate no repository has fails the job at once,
naming it (:func:`unresolved`); the program's JVM then resolves from the warm cache in a fraction
of a second. The cache is on the work volume when the job has one, so a later attempt downloads
nothing, and the check is not run again for settings it passed with in that cache (a marker per
settings, ``checked-<sha256>``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from finishable.api.application import redacted
from finishable.driver.dependencies.errors import DriverError, StartRefused
from finishable.driver.dependencies.plan import IVY_KEY, PACKAGES_KEY, REPOSITORIES_KEY

log = logging.getLogger(__name__)

RESOLVE_TIMEOUT_SECONDS = 900
"""Spark's resolver gives up on an unreachable repository by itself; this bounds a stuck one."""
RESOLVER_MEMORY = "256m"
"""The check's JVM heap: resolution needs little, and it must fit beside nothing in the pod."""
PASSED_KEYS = frozenset(
    {
        PACKAGES_KEY,
        REPOSITORIES_KEY,
        IVY_KEY,
        "spark.jars.ivySettings",
        "spark.jars.excludes",
        "spark.driver.extraJavaOptions",
    }
)
"""What the check takes of the driver's settings: the resolver's own and the JVM options a proxy
is configured with."""
_UNRESOLVED = re.compile(
    r"unresolved dependency: ([^#\s]+)#([^;\s]+);([^:\s,\]]+)(?:: ([^,\]\n]+))?"
)
_EMPTY_PROGRAM = "# spark-submit resolves spark.jars.packages before it runs this\n"
_LOG_TAIL_LINES = 30


def unresolved(output: str) -> list[tuple[str, str]]:
    """The coordinates (``group:artifact:version``) spark-submit's output says it could not
    resolve, each with Ivy's reason (``not found``)."""
    found: dict[str, str] = {}
    for group, artifact, version, reason in _UNRESOLVED.findall(output):
        found.setdefault(f"{group}:{artifact}:{version}", reason.strip() or "unresolved")
    return list(found.items())


def unresolved_message(
    missing: Sequence[tuple[str, str]], listed: Sequence[str], repositories: Sequence[str]
) -> str:
    """What the job fails with: each coordinate, whether the spec lists it or it is a dependency
    of one that it lists, and where Spark looked."""
    named = [
        f"{coordinate} ({reason}{'' if coordinate in listed else ', needed by a listed one'})"
        for coordinate, reason in missing
    ]
    where = "the local Maven and Ivy caches, Maven Central, spark-packages"
    listing = ", ".join(redacted(repository) for repository in repositories)
    where += f" and {listing}" if repositories else " (no repositories listed)"
    return (
        f"spec.application.packages: Spark's resolver cannot resolve {', '.join(named)}; "
        f"it searched {where}"
    )


def settings_digest(settings: Mapping[str, str]) -> str:
    """What a passed check is known by: the resolver's settings."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def spark_submit(environ: Mapping[str, str]) -> Path:
    """spark-submit of the Spark the program will use: ``$SPARK_HOME``, else pyspark's own."""
    home = environ.get("SPARK_HOME")
    if not home:
        spec = importlib.util.find_spec("pyspark")
        if spec is None or not spec.submodule_search_locations:
            raise DriverError("spec.application.packages: pyspark is not installed")
        home = next(iter(spec.submodule_search_locations))
    return Path(home) / "bin" / "spark-submit"


def resolve(conf: Mapping[str, str], listed: Sequence[str], environ: Mapping[str, str]) -> None:
    """Resolve ``conf``'s packages as the program's JVM will (see the module docstring)."""
    ivy = Path(conf[IVY_KEY])
    settings = {key: value for key, value in sorted(conf.items()) if key in PASSED_KEYS}
    marker = ivy / f"checked-{settings_digest(settings)}"
    if marker.exists():
        log.info("spec.application.packages: %s resolved before (%s)", conf[PACKAGES_KEY], ivy)
        return
    ivy.mkdir(parents=True, exist_ok=True)
    program = ivy / "resolve-packages.py"
    program.write_text(_EMPTY_PROGRAM)
    command = [str(spark_submit(environ)), "--master", "local[1]"]
    command += ["--driver-memory", RESOLVER_MEMORY]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    env = {**environ, "PYSPARK_PYTHON": environ.get("PYSPARK_PYTHON", sys.executable)}
    started = time.monotonic()
    try:
        done = subprocess.run(
            [*command, str(program)],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RESOLVE_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise DriverError(
            f"spec.application.packages: Spark's resolver did not finish within "
            f"{RESOLVE_TIMEOUT_SECONDS} s"
        ) from None
    except OSError as error:
        raise DriverError(f"spec.application.packages: cannot run spark-submit: {error}") from None
    output = done.stdout + done.stderr
    if done.returncode == 0:
        marker.write_text(json.dumps(settings, sort_keys=True, indent=1) + "\n")
        log.info(
            "spec.application.packages: resolved %s in %.1f s (cache %s)",
            conf[PACKAGES_KEY],
            time.monotonic() - started,
            ivy,
        )
        return
    tail = "\n".join(output.splitlines()[-_LOG_TAIL_LINES:])
    log.error("spark-submit could not resolve %s:\n%s", conf[PACKAGES_KEY], tail)
    missing = unresolved(output)
    if missing:
        repositories = [r for r in conf.get(REPOSITORIES_KEY, "").split(",") if r]
        raise StartRefused(unresolved_message(missing, listed, repositories))
    last = output.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
    raise DriverError(f"spec.application.packages: Spark's resolver failed: {last[0]}")
