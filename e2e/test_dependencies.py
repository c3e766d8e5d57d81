"""Dependencies through the operator, with executor pods: what ``spec.application`` ships reaches
the program in the driver pod and the tasks in the executor pods.

* An archived Python environment (from the cluster's object store where it has one, with its
  sha256), a pyFiles zip and a file: the driver fetches them, its program imports the env's
  package before Spark starts, a Python data source's planner imports it in the driver pod, and
  each executor pod's Python workers (a UDF, the data source's reader) import it from the copy
  Spark unpacked in that executor's working directory; the rows say which pod computed them.
* A Maven package from a repository on the shared volume: the driver resolves it with Spark's
  resolver into the job's work volume, the program loads its class through py4j, and the
  executor pods call it in ``java_method``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from finishable.connectors.sinks import TransactionalFiles
from testcluster import artifacts
from testcluster.client import DATA_MOUNT, E2ECluster, example, wait_for
from testcluster.dependency_program import OUTPUT_NAME, ROWS

pytestmark = [pytest.mark.e2e, pytest.mark.full]

RUN = 600.0  # to Finished: two executor pods and Spark's start-up on a busy machine
EXECUTORS = 2


def manifest(cluster: E2ECluster, name: str, uses: str, **application: Any) -> dict[str, Any]:
    """The program copied to the shared volume (every pod sees it there, as in an image), run
    as a bounded Streaming job on two executor pods."""
    directory = cluster.data_dir / name
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o777)  # the pods' user (uid 1000) writes the output beside the program
    shutil.copyfile(artifacts.PROGRAM, directory / artifacts.PROGRAM.name)
    body = example("examples/streaming/cluster.yaml", cluster.data_dir, cluster.image)
    body["metadata"]["name"] = name
    spec = body["spec"]
    spec["application"].update(
        {
            "file": f"local://{DATA_MOUNT}/{name}/{artifacts.PROGRAM.name}",
            "args": [f"--output={DATA_MOUNT}/{name}/output", f"--uses={uses}"],
            **application,
        }
    )
    spec["executor"]["instances"] = EXECUTORS
    spec["checkpointing"]["interval"] = "1s"
    return body


def rows(cluster: E2ECluster, name: str) -> list[dict[str, Any]]:
    output = cluster.data_dir / name / "output"
    table = TransactionalFiles(str(output), format="json", name=OUTPUT_NAME).read_committed()
    return sorted(table.to_pylist(), key=lambda row: int(row["value"]))


def executor_pod_names(cluster: E2ECluster, name: str) -> set[str]:
    return {pod["metadata"]["name"] for pod in cluster.executor_pods(name)}


def shipped_url(cluster: E2ECluster, name: str, archive: Path) -> str:
    """The archive where the driver fetches it: the cluster's object store (s3://, through
    pyarrow, as a bucket would be), else the shared volume."""
    storage = cluster.object_storage(f"dependencies/{name}")
    if storage is None:
        return f"file://{DATA_MOUNT}/{name}/{archive.name}"
    base, _, query = storage.partition("?")
    url = f"{base}/{archive.name}?{query}"
    filesystem, path = pafs.FileSystem.from_uri(url)
    with filesystem.open_output_stream(path) as out:
        out.write(archive.read_bytes())
    return url


def test_an_archived_environment_reaches_the_driver_and_every_executor_pod(
    cluster: E2ECluster, tmp_path: Path
) -> None:
    name = "deps-env"
    shared = cluster.data_dir / name
    env = artifacts.python_env(tmp_path / "env", artifacts.wheel(tmp_path / "wheels"))
    archive = artifacts.packed(env, shared / "env.tar.gz")
    artifacts.python_zip(shared / "mymod.zip")
    (shared / "data.txt").write_text(artifacts.DATA + "\n")
    url = shipped_url(cluster, name, archive)
    body = manifest(
        cluster,
        name,
        "env,pyfiles,files",
        archives=[f"{url}#env"],
        pyFiles=[f"file://{DATA_MOUNT}/{name}/mymod.zip"],
        files=[f"local://{DATA_MOUNT}/{name}/data.txt"],
        sha256={url: artifacts.sha256(archive)},
    )
    body["spec"].pop("workVolume", None)  # a stateless query: nothing for the executors to keep
    assert cluster.apply(body).status == 201
    wait_for(
        lambda: len(executor_pod_names(cluster, name)) == EXECUTORS,
        "Spark's executor pods",
        RUN,
        on_fail=lambda: cluster.logs(name),
    )
    executors = executor_pod_names(cluster, name)
    cluster.wait_phase(name, "Finished", RUN)

    found = rows(cluster, name)
    assert [int(row["value"]) for row in found] == list(range(ROWS))
    hosts = set()
    for row in found:
        task = json.loads(row["task"])
        hosts.add(task["host"])
        # Each executor imports from its own copy, which Spark unpacked in its working
        # directory: the relative spark.executorEnv.PYTHONPATH the driver set.
        assert task["env"].startswith("hello task from "), task
        assert task["env"].endswith("/env/lib/python3.11/site-packages/hellodep/__init__.py"), task
        assert "/dependencies/" not in task["env"], "not the driver's copy"
        assert (task["pyfiles"], task["files"]) == (artifacts.MODULE_NAME, artifacts.DATA)
        driver = json.loads(row["driver"])
        assert (driver["env"], driver["pyfiles"]) == ("hello driver", artifacts.MODULE_NAME)
        # A Python data source: planned in the driver pod, read in an executor pod.
        assert driver["datasource"].startswith("hello reader on "), driver
        hosts.add(driver["datasource"].removeprefix("hello reader on "))
    assert hosts <= executors, (hosts, executors)
    cluster.assert_executors_ran_tasks(sorted(executors))


def test_a_package_is_resolved_into_the_work_volume_and_loaded_on_every_pod(
    cluster: E2ECluster, tmp_path: Path
) -> None:
    name = "deps-package"
    shared = cluster.data_dir / name
    artifacts.maven_repository(shared / "m2", artifacts.java_jar(tmp_path / "java"))
    body = manifest(
        cluster,
        name,
        "jvm",
        packages=[artifacts.COORDINATE],
        repositories=[f"file://{DATA_MOUNT}/{name}/m2"],
    )
    assert body["spec"]["workVolume"], "the resolver's cache is on the job's work volume"
    assert cluster.apply(body).status == 201
    wait_for(
        lambda: len(executor_pod_names(cluster, name)) == EXECUTORS,
        "Spark's executor pods",
        RUN,
        on_fail=lambda: cluster.logs(name),
    )
    executors = executor_pod_names(cluster, name)
    cluster.wait_phase(name, "Finished", RUN)

    found = rows(cluster, name)
    assert len(found) == ROWS
    assert {row["jvm"] for row in found} == {"hello task"}, "java_method in the executors"
    assert {row["driver"] for row in found} == {json.dumps({"jvm": "hello driver"})}
    assert {json.loads(row["task"])["host"] for row in found} <= executors
    log = cluster.pod_log(f"{name}-driver-1")
    assert f"spec.application.packages: resolved {artifacts.COORDINATE}" in log, log[-3000:]
