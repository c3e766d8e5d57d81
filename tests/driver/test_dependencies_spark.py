"""Dependencies with a real PySpark driver, as a user runs a job: ``finishable run`` of a manifest
whose ``spec.application`` ships a packed Python environment, a pyFiles zip, a file and a jar
over HTTP (with their sha256), or a Maven package from a repository the test lays out. The
program (testcluster/dependency_program.py) imports and loads them in the driver and in its
tasks; a wrong digest or an unknown coordinate fails the job at once, naming it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from finishable.connectors.sinks import TransactionalFiles
from testcluster import artifacts
from testcluster.artifacts import FileServer
from testcluster.dependency_program import OUTPUT_NAME, ROWS

pytestmark = pytest.mark.full  # each job starts Spark's JVM: about half a minute

RUN_TIMEOUT = 600


@dataclass(frozen=True)
class Shipped:
    """What the test serves, and the URLs a manifest names it by."""

    server: FileServer
    root: Path

    def url(self, name: str) -> str:
        return f"{self.server.url}/{name}"

    def digest(self, name: str) -> str:
        return artifacts.sha256(self.root / name)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shipped]:
    """An environment holding ``hellodep``, a zip holding ``mymod``, data.txt, served."""
    build = tmp_path_factory.mktemp("build")
    root = tmp_path_factory.mktemp("www")
    env = artifacts.python_env(build / "env", artifacts.wheel(build / "wheels"))
    artifacts.packed(env, root / "env.tar.gz")
    artifacts.python_zip(root / "mymod.zip")
    (root / "data.txt").write_text(artifacts.DATA + "\n")
    with FileServer(root) as server:
        yield Shipped(server, root)


@pytest.fixture(scope="module")
def jar(shipped: Shipped, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``hello.jar`` served as a file, and as a package in the Maven repository ``m2/``."""
    built = artifacts.java_jar(tmp_path_factory.mktemp("java"))
    (shipped.root / "hello.jar").write_bytes(built.read_bytes())
    artifacts.maven_repository(shipped.root / "m2", built)
    return built


@dataclass
class Run:
    done: subprocess.CompletedProcess[str]
    status: dict[str, Any]
    state: Path

    def rows(self, output: Path) -> list[dict[str, Any]]:
        table = TransactionalFiles(str(output), format="json", name=OUTPUT_NAME).read_committed()
        return sorted(table.to_pylist(), key=lambda row: int(row["value"]))

    def driver_log(self) -> str:
        return "".join(p.read_text() for p in sorted(self.state.glob("*/driver-*.log")))


def run(tmp_path: Path, name: str, application: dict[str, Any], uses: str) -> Run:
    manifest = tmp_path / f"{name}.yaml"
    program = {"file": str(artifacts.PROGRAM)}
    args = {"args": [f"--output={tmp_path / 'output'}", f"--uses={uses}"]}
    spec = {
        "mode": "Streaming",
        "application": {**program, **args, **application},
        "checkpointing": {"interval": "500ms"},
        "recovery": {"maxAttempts": 2},
    }
    body = {"apiVersion": "finishable.dev/v1alpha1", "kind": "FinishableSparkJob"}
    manifest.write_text(yaml.safe_dump({**body, "metadata": {"name": name}, "spec": spec}))
    state = tmp_path / "state"
    done = subprocess.run(
        [sys.executable, "-m", "finishable.cli", "run", str(manifest), "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
        cwd=tmp_path,
    )
    status = json.loads((state / name / "status.json").read_text())
    return Run(done, status, state)


def test_tasks_import_from_an_archived_environment_and_py_files_and_read_files_and_jars(
    tmp_path: Path, shipped: Shipped, jar: Path
) -> None:
    env = shipped.url("env.tar.gz")
    application = {
        "archives": [f"{env}#env"],
        "pyFiles": [shipped.url("mymod.zip")],
        "files": [shipped.url("data.txt")],
        "jars": [shipped.url("hello.jar")],
        "sha256": {
            env: shipped.digest("env.tar.gz"),
            shipped.url("hello.jar"): shipped.digest("hello.jar"),
        },
    }
    done = run(tmp_path, "shipped", application, "env,pyfiles,files,jvm")
    assert done.status["phase"] == "Finished", done.done.stdout + done.driver_log()
    rows = done.rows(tmp_path / "output")
    assert [int(row["value"]) for row in rows] == list(range(ROWS))
    unpacked = (
        tmp_path / "state" / "shipped" / "work" / "dependencies" / shipped.digest("env.tar.gz")
    )
    for row in rows:
        task = json.loads(row["task"])
        # local[N]: the tasks' Python workers inherit the program's path, the env's first
        assert task["env"].startswith("hello task from ") and task["env"].endswith(
            "/site-packages/hellodep/__init__.py"
        ), task
        assert task["env"].removeprefix("hello task from ").startswith(str(unpacked)), task
        assert (task["pyfiles"], task["files"]) == (artifacts.MODULE_NAME, artifacts.DATA)
        assert row["jvm"] == "hello task"
        assert json.loads(row["driver"]) == {
            "env": "hello driver",
            "datasource": f"hello reader on {socket.gethostname()}",
            "pyfiles": artifacts.MODULE_NAME,
            "jvm": "hello driver",
        }


def test_a_package_is_resolved_from_the_repositories_and_its_class_loaded(
    tmp_path: Path, shipped: Shipped, jar: Path
) -> None:
    application = {"packages": [artifacts.COORDINATE], "repositories": [shipped.url("m2")]}
    done = run(tmp_path, "package", application, "jvm")
    assert done.status["phase"] == "Finished", done.done.stdout + done.driver_log()
    rows = done.rows(tmp_path / "output")
    assert len(rows) == ROWS and {row["jvm"] for row in rows} == {"hello task"}
    assert {row["driver"] for row in rows} == {json.dumps({"jvm": "hello driver"})}
    ivy = tmp_path / "state" / "package" / "work" / "dependencies" / "ivy"
    assert (ivy / "jars" / "dev.finishable.test_hello-1.0.jar").read_bytes() == jar.read_bytes()
    assert [p.name for p in ivy.glob("checked-*")], "the passed check is remembered"


def test_an_unknown_package_fails_the_job_at_once_naming_it(
    tmp_path: Path, shipped: Shipped, jar: Path
) -> None:
    missing = "dev.finishable.test:hello:9.9"
    application = {"packages": [missing], "repositories": [shipped.url("m2")]}
    done = run(tmp_path, "unknown", application, "jvm")
    assert done.done.returncode == 1
    status = done.status
    assert (status["phase"], status["attempt"], status.get("restarts", 0)) == ("Failed", 1, 0)
    assert (
        f"spec.application.packages: Spark's resolver cannot resolve {missing} (not found)"
        in status["message"]
    ), status["message"]
    assert shipped.url("m2") in status["message"]


@pytest.mark.quick  # refused before Spark starts
def test_a_wrong_digest_fails_the_job_at_once_naming_the_url_and_both_digests(
    tmp_path: Path, shipped: Shipped
) -> None:
    env = shipped.url("env.tar.gz")
    wrong = "0" * 64
    application = {"archives": [f"{env}#env"], "sha256": {env: wrong}}
    done = run(tmp_path, "wrong", application, "env")
    assert done.done.returncode == 1
    status = done.status
    assert (status["phase"], status["attempt"], status.get("restarts", 0)) == ("Failed", 1, 0)
    assert (
        f"spec.application.archives[0]: {env!r}: sha256 mismatch: spec.application.sha256 "
        f"expects {wrong}, the file has {shipped.digest('env.tar.gz')}"
    ) in status["message"], status["message"]
