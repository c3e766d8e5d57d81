"""The Dockerfile, checked statically (``test_image.py`` builds and runs it): what the pods the
operator creates rely on, and that the process runtime's stand-in image matches it."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.quick

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"


def instructions(name: str) -> list[str]:
    """The arguments of every instruction ``name`` (continuation lines joined)."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE)
    return [m.group(1).strip() for m in re.finditer(rf"^{name}\s+(.+)$", joined, re.MULTILINE)]


def test_python_311_with_java_17_on_a_base_chosen_at_build_time() -> None:
    assert re.search(r"^ARG BASE=python:3\.11-slim-bookworm$", DOCKERFILE, re.MULTILINE)
    assert instructions("FROM") == ["${BASE} AS build", "${BASE}"], "both stages on BASE"
    assert any("openjdk-17-jre-headless" in run for run in instructions("RUN"))
    env = " ".join(instructions("ENV"))
    assert "JAVA_HOME=/usr/lib/jvm/java-17-openjdk" in env


def test_the_package_is_installed_in_a_venv_and_spark_home_is_its_pyspark() -> None:
    # with the iceberg and kafka extras: sinks.Iceberg and sources.Kafka work in the image
    installed = r"pip install (--\S+ )*'/src\[iceberg,kafka\]'(\s|$)"
    assert any(re.search(installed, run) for run in instructions("RUN"))
    env = " ".join(instructions("ENV"))
    assert "SPARK_HOME=/opt/finishable/venv/lib/python3.11/site-packages/pyspark" in env
    assert "PYSPARK_PYTHON=/opt/finishable/venv/bin/python" in env
    assert "PATH=/opt/finishable/venv/bin:" in env
    assert "--from=build /opt/finishable/venv /opt/finishable/venv" in instructions("COPY")
    # the build fails if pip's pyspark ends up anywhere else
    assert any("os.environ['SPARK_HOME']" in run for run in instructions("RUN"))


def test_what_the_build_machine_hands_the_build_is_never_committed() -> None:
    """docker/build-image.sh copies its CA bundle and the tests' versions to docker/build-local/
    for the build stage only: the directory ignores everything but its .gitignore."""
    ignore = (ROOT / "docker" / "build-local" / ".gitignore").read_text().split()
    assert "*" in ignore and "!.gitignore" in ignore
    assert "docker/build-local/ /tmp/build-local/" in instructions("COPY")
    build_stage = DOCKERFILE[: DOCKERFILE.index("FROM ${BASE}\n")]
    assert (
        "/tmp/build-local/" in build_stage
        and "/tmp/build-local" not in DOCKERFILE[len(build_stage) :]
    )


def test_examples_are_where_the_manifests_say() -> None:
    assert "examples /opt/finishable/examples" in instructions("COPY")
    manifests = sorted((ROOT / "examples").glob("*/cluster.yaml"))
    assert manifests
    for manifest in manifests:
        program = yaml.safe_load(manifest.read_text())["spec"]["application"]["file"]
        assert program.startswith("local:///opt/finishable/examples/"), manifest
        assert (ROOT / program.removeprefix("local:///opt/finishable/")).is_file(), program


def test_runs_as_the_non_root_user_it_creates() -> None:
    """USER is the uid of ARG UID (numeric, so runAsNonRoot can verify it), the one useradd
    creates: a build with another --build-arg UID stays consistent."""
    assert instructions("USER") == ["${UID}:${UID}"], "no USER: the image would run as root"
    (default,) = re.findall(r"^ARG UID=(\d+)$", DOCKERFILE, re.MULTILINE)
    assert int(default) >= 1000
    assert any('useradd --uid "$UID"' in run for run in instructions("RUN"))


def test_the_entrypoint_runs_commands_and_spark_executors() -> None:
    (entrypoint,) = instructions("ENTRYPOINT")
    assert "/opt/finishable/entrypoint.sh" in entrypoint
    assert "docker/entrypoint.sh /opt/finishable/entrypoint.sh" in instructions("COPY")
    assert os.access(ENTRYPOINT, os.X_OK)
    script = ENTRYPOINT.read_text()
    assert "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend" in script
    for variable in ("SPARK_DRIVER_URL", "SPARK_EXECUTOR_ID", "SPARK_EXECUTOR_CORES"):
        assert variable in script


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_the_entrypoint_execs_any_other_command(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(ENTRYPOINT), "echo", "finishable", "operator"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == "finishable operator\n"


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_the_entrypoint_builds_the_executor_command(tmp_path: Path) -> None:
    """A fake java prints what it was started with: the command Spark's executor pod runs."""
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    java.chmod(0o755)
    env = {
        "PATH": os.environ["PATH"],
        "JAVA_HOME": str(tmp_path),
        "SPARK_HOME": "/spark",
        "SPARK_JAVA_OPT_1": "-Dsecond=2",
        "SPARK_JAVA_OPT_0": "-Dfirst=1",
        "SPARK_EXECUTOR_MEMORY": "2g",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@job-driver.ns.svc:7078",
        "SPARK_EXECUTOR_ID": "3",
        "SPARK_EXECUTOR_CORES": "2",
        "SPARK_APPLICATION_ID": "spark-app-1",
        "SPARK_EXECUTOR_POD_IP": "10.0.0.7",
        "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_EXECUTOR_POD_NAME": "job-exec-3",
    }
    done = subprocess.run(
        ["bash", str(ENTRYPOINT), "executor"], env=env, capture_output=True, text=True, check=True
    )
    args = done.stdout.splitlines()
    assert args[:2] == ["-Dfirst=1", "-Dsecond=2"], "Java options in Spark's order"
    assert args[args.index("-cp") + 1] == "/spark/jars/*"
    assert "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend" in args
    pairs = dict(itertools.pairwise(args))
    assert pairs["--executor-id"] == "3" and pairs["--podName"] == "job-exec-3"
    assert pairs["--driver-url"].endswith("job-driver.ns.svc:7078")
    assert "-Xmx2g" in args


def test_the_local_clusters_stand_in_is_this_image() -> None:
    """The process runtime of the local cluster runs pods from ``local_image()``: the same
    entrypoint (tini aside), CMD, working directory, files and variables as this Dockerfile,
    with this machine's interpreter, pyspark and Java in place of the image's."""
    import json

    from testcluster.localcluster.cluster import local_image

    image = local_image()
    (entrypoint,) = instructions("ENTRYPOINT")
    assert json.loads(entrypoint) == ["/usr/bin/tini", "--", *image.entrypoint]
    (cmd,) = instructions("CMD")
    assert json.loads(cmd) == list(image.cmd)
    assert instructions("WORKDIR")[-1] == image.working_dir
    copied = {copy.split()[-1] for copy in instructions("COPY")}
    assert set(image.files) <= copied
    for path, source in image.files.items():
        assert f"{source.relative_to(ROOT)} {path}" in instructions("COPY")
    declared = set(re.findall(r"(\w+)=", " ".join(instructions("ENV"))))
    assert declared <= set(image.env), declared - set(image.env)
