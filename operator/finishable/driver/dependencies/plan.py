"""What the driver fetches before the program starts, and what Spark and the program are told.

Pure. The program and every entry of ``pyFiles``, ``files``, ``archives`` and ``jars`` become a
:class:`Dependency`: where it is read from and the digest it must have. Once each is a file on
the driver (:mod:`.fetch`), :func:`launch` turns the local paths into Spark's settings
(``spark.submit.pyFiles``, ``spark.files``, ``spark.archives`` with the alias, ``spark.jars``,
``spark.jars.packages``...) and the program's Python path. Spark's file server then hands them to
the executors from the driver, so executors never need the remote storage's credentials. Only
``local://`` jars stay as written: Spark loads them from the image on every pod. A ``local://``
Python file, file or archive is handed over as a plain path, because Spark's file server skips
``local:`` URLs ("already available on every node") and the tasks would never see them.

The settings go into ``PYSPARK_SUBMIT_ARGS`` (:func:`with_conf`): what spark-submit acts on at
JVM start (``spark.jars.packages``) must be there, and ``FinishableJob`` does not set again on
its session what those arguments set (:func:`submitted_conf`), so a ``sparkConf`` value of the
same key is merged here rather than replacing the merged value.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from urllib.parse import urlsplit

from finishable.api.application import (
    ApplicationSpec,
    alias_of,
    file_name,
    redacted,
    scheme_of,
    without_alias,
)
from finishable.driver.dependencies.pyenv import PythonEnv

SUBMIT_ARGS_ENV = "PYSPARK_SUBMIT_ARGS"
PYSPARK_SHELL = "pyspark-shell"
"""The primary resource that ends pyspark's submit arguments (what follows it would be the
application's arguments)."""

LIST_KEYS = {
    "pyFiles": "spark.submit.pyFiles",
    "files": "spark.files",
    "archives": "spark.archives",
    "jars": "spark.jars",
}
PACKAGES_KEY = "spark.jars.packages"
REPOSITORIES_KEY = "spark.jars.repositories"
IVY_KEY = "spark.jars.ivy"
EXECUTOR_PYTHONPATH_KEY = "spark.executorEnv.PYTHONPATH"
PYTHON_IMPORTABLE = (".zip", ".egg")
"""Python files that go on the path themselves; a ``.py`` file's directory goes instead."""


class Origin(StrEnum):
    """Where the driver reads a dependency from."""

    IMAGE = "image"
    """``local:///path``: in the image, so on every pod."""
    DRIVER = "driver"
    """``file://`` or a plain path: on the driver's file system (a mounted volume, a local run)."""
    REMOTE = "remote"
    """http, https, s3, s3a, gs, hdfs: fetched by the driver."""


@dataclass(frozen=True)
class Dependency:
    """One URL of ``spec.application``, as the driver fetches it."""

    field: str
    """``file``, ``pyFiles``, ``files``, ``archives`` or ``jars``."""
    entry: str
    """``file`` or the list entry, ``archives[1]``."""
    url: str
    """As written, without an archive's ``#alias``: the key of ``sha256``."""
    alias: str | None = None
    sha256: str | None = None

    @property
    def where(self) -> str:
        """How messages name it: the field and the URL."""
        return f"spec.application.{self.entry}: {redacted(self.url)!r}"

    @property
    def name(self) -> str:
        """The file's name, kept wherever the driver puts it (SparkFiles finds it by name)."""
        return file_name(self.url)

    @property
    def task_dir_name(self) -> str:
        """What it is called in an executor's working directory (an archive: its alias)."""
        return self.alias or self.name

    @property
    def origin(self) -> Origin:
        scheme = scheme_of(self.url)
        if scheme == "local":
            return Origin.IMAGE
        if scheme in ("", "file"):
            return Origin.DRIVER
        return Origin.REMOTE

    def local_path(self, manifest_dir: str | None) -> Path:
        """The file of a local:// or driver-side URL (a relative path: against the manifest's
        directory, as ``finishable run`` reads it)."""
        path = Path(urlsplit(self.url).path) if scheme_of(self.url) else Path(self.url)
        if not path.is_absolute() and manifest_dir:
            path = Path(manifest_dir) / path
        return path


def dependencies(application: ApplicationSpec) -> list[Dependency]:
    """The program first, then every entry of pyFiles, files, archives and jars."""
    digests = application.sha256
    found = [Dependency("file", "file", application.file, sha256=digests.get(application.file))]
    for entry, written in application.entries():
        url = without_alias(written)
        field = entry.partition("[")[0]
        found.append(Dependency(field, entry, url, alias_of(written), digests.get(url)))
    return found


@dataclass(frozen=True)
class Local:
    """A dependency as a file on the driver, and the Python environment an archive holds."""

    dependency: Dependency
    path: Path
    environment: PythonEnv | None = None

    @property
    def spark_value(self) -> str:
        """How Spark's list setting names it."""
        dependency = self.dependency
        if dependency.field == "jars" and dependency.origin is Origin.IMAGE:
            return dependency.url
        if dependency.field == "archives":
            return f"{self.path}#{dependency.task_dir_name}"
        return str(self.path)

    @property
    def python_path(self) -> str | None:
        """What the program's Python path gets from a Python file (spark-submit puts them
        there too, so the program's imports work before its session starts)."""
        if self.dependency.field != "pyFiles":
            return None
        if self.path.suffix.lower() in PYTHON_IMPORTABLE:
            return str(self.path)
        return str(self.path.parent)


@dataclass(frozen=True)
class Launch:
    """What the program is started with."""

    conf: dict[str, str]
    """Spark's settings, for ``PYSPARK_SUBMIT_ARGS``."""
    python_path: list[str]
    """First on the program's ``PYTHONPATH``."""


def executors_in_driver(conf: Mapping[str, str], environ: Mapping[str, str]) -> bool:
    """Whether Spark's tasks run in the driver's JVM (``local[N]``, the default of a session
    without a master): their Python workers inherit the program's own Python path."""
    master = conf.get("spark.master") or environ.get("SPARK_MASTER") or "local"
    return master == "local" or master.startswith("local[")


def launch(
    local: Sequence[Local],
    application: ApplicationSpec,
    conf: Mapping[str, str],
    *,
    ivy_dir: Path,
    in_driver: bool,
) -> Launch:
    """Spark's settings and the program's Python path for the fetched ``local`` dependencies;
    ``conf``: the settings the driver would start with (``sparkConf`` and the submit arguments),
    whose values of the same keys come first."""
    settings: dict[str, str] = {}
    for field, key in LIST_KEYS.items():
        added = [item.spark_value for item in local if item.dependency.field == field]
        if added:
            settings[key] = _joined(conf.get(key), added)
    if application.packages:
        settings[PACKAGES_KEY] = _joined(conf.get(PACKAGES_KEY), application.packages)
        settings[IVY_KEY] = conf.get(IVY_KEY) or str(ivy_dir)
        if application.repositories:
            settings[REPOSITORIES_KEY] = _joined(
                conf.get(REPOSITORIES_KEY), application.repositories
            )
    envs = [(item.dependency, env) for item in local if (env := item.environment) is not None]
    if envs and not in_driver:
        # Spark unpacks an archive in each executor's working directory, where its Python
        # workers start: a relative path reaches the env there (PythonWorkerFactory merges
        # this into the workers' PYTHONPATH after pyspark's own).
        relative = [f"./{dependency.task_dir_name}/{env.site_packages}" for dependency, env in envs]
        existing = conf.get(EXECUTOR_PYTHONPATH_KEY)
        settings[EXECUTOR_PYTHONPATH_KEY] = os.pathsep.join([*relative, *_present(existing)])
    environments = [str(env.root / env.site_packages) for _, env in envs]
    py_files = [path for item in local if (path := item.python_path) is not None]
    return Launch(settings, [*environments, *py_files])


def _present(value: str | None) -> list[str]:
    return [value] if value else []


def _joined(existing: str | None, added: Iterable[str]) -> str:
    """A comma-separated Spark list: what was set first, then ``added``, each once."""
    items = [item.strip() for item in (existing or "").split(",") if item.strip()]
    return ",".join(dict.fromkeys([*items, *added]))


def submitted_conf(submit_args: str | None) -> dict[str, str]:
    """The ``--conf key=value`` settings of pyspark's submit arguments."""
    words = shlex.split(submit_args or "")
    settings: dict[str, str] = {}
    for index, word in enumerate(words):
        if word == "--conf" and index + 1 < len(words):
            key, equals, value = words[index + 1].partition("=")
            if equals:
                settings[key] = value
        elif word.startswith("--conf="):
            key, equals, value = word.removeprefix("--conf=").partition("=")
            if equals:
                settings[key] = value
    return settings


def with_conf(submit_args: str | None, settings: Mapping[str, str]) -> str:
    """pyspark's submit arguments with ``settings`` as ``--conf`` before ``pyspark-shell`` (a
    later ``--conf`` of a key wins in spark-submit)."""
    words = shlex.split(submit_args or PYSPARK_SHELL)
    if PYSPARK_SHELL in words:
        position = words.index(PYSPARK_SHELL)
        head, tail = words[:position], words[position:]
    else:
        head, tail = words, [PYSPARK_SHELL]
    for key, value in settings.items():
        head += ["--conf", f"{key}={value}"]
    return shlex.join([*head, *tail])


def python_path(first: Sequence[str], existing: str | None) -> str:
    """``first`` ahead of the ``PYTHONPATH`` the driver was started with."""
    return os.pathsep.join([*first, *_present(existing)])
