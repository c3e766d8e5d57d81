"""Python environments shipped as archives, and whether one fits the image it is layered over.

A packed virtualenv or conda env (``lib/python3.X/site-packages`` at the archive's top) is not run
with its own interpreter: the image's interpreter is itself a virtualenv, which cannot be nested,
so the env's ``bin/python`` would see neither ``finishable`` nor ``pyspark`` unless it carried both.
Its site-packages goes first on the Python path instead (:mod:`.plan`), over the image's. That
only works for an env built for the image's Python minor version, and an env that carries its own
``pyspark`` or ``finishable-spark-operator`` of another version would shadow the running ones in
the program and the tasks: both are refused here, naming both versions. :func:`python_env_in`
reads an unpacked archive; the checks are pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

SHADOW_CHECKED = ("pyspark", "finishable-spark-operator")
"""Distributions an env must not carry in another version than the running one."""
_PYTHON_DIR = re.compile(r"python(\d+)\.(\d+)")
_DISTRIBUTION = re.compile(r"(?P<name>[^-]+)-(?P<version>[^-]+?)(-py\d.*)?\.(dist|egg)-info")


def canonical(name: str) -> str:
    """A distribution's name as PEP 503 compares them (``Finishable_Spark.Operator`` →
    ``finishable-spark-operator``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class PythonEnv:
    """A Python environment the driver unpacked: where it is and what it holds."""

    root: Path
    """The unpacked archive on the driver."""
    site_packages: PurePosixPath
    """Relative to ``root`` (and to the alias directory in an executor's working directory)."""
    python: tuple[int, int]
    distributions: Mapping[str, str] = field(default_factory=dict)
    """Installed distributions: canonical name → version."""

    @property
    def python_version(self) -> str:
        return f"{self.python[0]}.{self.python[1]}"


def python_env_in(root: Path) -> PythonEnv | None:
    """The Python environment an unpacked archive holds at its top, or None when it holds none.
    :class:`ValueError` when it holds site-packages for more than one Python version."""
    lib = root / "lib"
    found: list[tuple[tuple[int, int], str]] = []
    if lib.is_dir():
        for child in sorted(lib.iterdir()):
            match = _PYTHON_DIR.fullmatch(child.name)
            if match and (child / "site-packages").is_dir():
                found.append(((int(match[1]), int(match[2])), child.name))
    if not found:
        return None
    if len(found) > 1:
        versions = ", ".join(f"{major}.{minor}" for (major, minor), _ in found)
        raise ValueError(f"it holds site-packages for Python {versions}; pack one environment")
    python, directory = found[0]
    site_packages = PurePosixPath("lib", directory, "site-packages")
    return PythonEnv(root, site_packages, python, distributions(root / site_packages))


def distributions(site_packages: Path) -> dict[str, str]:
    """The distributions installed in a site-packages directory, from their metadata
    directories' names (``pyspark-3.5.1.dist-info``, ``foo-1.0-py3.11.egg-info``)."""
    found: dict[str, str] = {}
    for child in site_packages.iterdir():
        match = _DISTRIBUTION.fullmatch(child.name)
        if match:
            found[canonical(match["name"])] = match["version"]
    return found


def env_problems(
    where: str, env: PythonEnv, *, python: tuple[int, int], running: Mapping[str, str]
) -> list[str]:
    """Why the env of ``where`` (``spec.application.archives[0]: 's3://...'``) cannot be
    layered over an image running Python ``python`` with the distributions ``running``."""
    problems = []
    if env.python != python:
        image = f"{python[0]}.{python[1]}"
        problems.append(
            f"{where}: a Python {env.python_version} environment ({env.site_packages}), but "
            f"the image runs Python {image}: build it with python{image}"
        )
    for name in SHADOW_CHECKED:
        carried = env.distributions.get(name)
        if carried is not None and name in running and carried != running[name]:
            problems.append(
                f"{where}: the environment shadows {name} {running[name]} of the image with "
                f"{name} {carried}: remove {name} from it (the image provides it) or build it "
                f"with {name}=={running[name]}"
            )
    return problems


def single_env_problem(envs: Sequence[str]) -> str | None:
    """More than one environment cannot go first on the path: name them all."""
    if len(envs) <= 1:
        return None
    return (
        f"{' and '.join(envs)}: each is a Python environment, and only one can be layered "
        "over the image's: merge them into one"
    )
