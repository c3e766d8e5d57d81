"""The dependency plan (pure): what the driver fetches, and the Spark settings and Python path the
program starts with, merged with what ``sparkConf`` and the submit arguments already say."""

from __future__ import annotations

import shlex
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from finishable.api.application import ApplicationSpec
from finishable.driver.dependencies.plan import (
    Dependency,
    Launch,
    Local,
    Origin,
    dependencies,
    executors_in_driver,
    launch,
    submitted_conf,
    with_conf,
)
from finishable.driver.dependencies.pyenv import PythonEnv

pytestmark = pytest.mark.quick

DIGEST = "c" * 64
STORE = Path("/work/dependencies")
IVY = STORE / "ivy"


def application(**fields: Any) -> ApplicationSpec:
    return ApplicationSpec.model_validate({"file": "local:///opt/app/job.py", **fields})


def fetched(spec: ApplicationSpec, *envs: str) -> list[Local]:
    """Each dependency as the driver would have it: remote ones in the store by name, archives
    named in ``envs`` holding a Python 3.11 environment."""
    local = []
    for dependency in dependencies(spec)[1:]:
        if dependency.origin is Origin.REMOTE:
            path = STORE / DIGEST / dependency.name
        else:
            path = dependency.local_path("/manifests")
        environment = None
        if dependency.entry in envs:
            site = PurePosixPath("lib/python3.11/site-packages")
            environment = PythonEnv(STORE / DIGEST / "unpacked", site, (3, 11))
        local.append(Local(dependency, path, environment))
    return local


def planned(spec: ApplicationSpec, *envs: str, in_driver: bool = False, **conf: str) -> Launch:
    conf = {key.replace("_", "."): value for key, value in conf.items()}
    return launch(fetched(spec, *envs), spec, conf, ivy_dir=IVY, in_driver=in_driver)


def test_the_program_comes_first_and_each_entry_knows_its_digest_alias_and_origin() -> None:
    spec = application(
        pyFiles=["util.py"],
        archives=["s3://b/env.tar.gz#env", "file:///data/model.zip"],
        jars=["local:///opt/jars/udf.jar"],
        sha256={"s3://b/env.tar.gz": DIGEST, "local:///opt/app/job.py": DIGEST},
    )
    found = dependencies(spec)
    assert [(d.entry, d.origin) for d in found] == [
        ("file", Origin.IMAGE),
        ("pyFiles[0]", Origin.DRIVER),
        ("archives[0]", Origin.REMOTE),
        ("archives[1]", Origin.DRIVER),
        ("jars[0]", Origin.IMAGE),
    ]
    program, _, env, model, _ = found
    assert program.sha256 == DIGEST and program.local_path(None) == Path("/opt/app/job.py")
    assert (env.url, env.alias, env.sha256, env.task_dir_name) == (
        "s3://b/env.tar.gz",
        "env",
        DIGEST,
        "env",
    )
    assert (model.alias, model.task_dir_name, model.sha256) == (None, "model.zip", None)
    assert found[1].local_path("/manifests") == Path("/manifests/util.py")
    assert env.where == "spec.application.archives[0]: 's3://b/env.tar.gz'"
    secret = Dependency("files", "files[0]", "s3://key:secret@bucket/data.csv")
    assert secret.where == "spec.application.files[0]: 's3://key:***@bucket/data.csv'"


def test_local_paths_become_spark_settings_and_local_jars_stay_in_the_image() -> None:
    spec = application(
        pyFiles=["https://h/util.py", "local:///opt/app/lib.zip"],
        files=["s3://b/rates.csv", "local:///opt/app/lookup.json"],
        archives=["s3://b/env.tar.gz#env", "local:///opt/app/model.tgz"],
        jars=["local:///opt/jars/udf.jar", "https://h/extra.jar"],
    )
    conf = planned(spec).conf
    stored = f"{STORE}/{DIGEST}"
    assert conf == {
        "spark.submit.pyFiles": f"{stored}/util.py,/opt/app/lib.zip",
        "spark.files": f"{stored}/rates.csv,/opt/app/lookup.json",
        "spark.archives": f"{stored}/env.tar.gz#env,/opt/app/model.tgz#model.tgz",
        "spark.jars": f"local:///opt/jars/udf.jar,{stored}/extra.jar",
    }


def test_settings_keep_what_spark_conf_and_the_submit_arguments_said_first() -> None:
    spec = application(
        jars=["https://h/extra.jar"],
        packages=["org.example:udfs:1.0"],
        repositories=["https://repo.example/maven2"],
    )
    conf = planned(
        spec,
        spark_jars="local:///opt/jars/own.jar, https://h/extra.jar",
        spark_jars_packages="org.example:other:2.0",
    ).conf
    assert (
        conf["spark.jars"]
        == f"local:///opt/jars/own.jar,https://h/extra.jar,{STORE}/{DIGEST}/extra.jar"
    )
    assert conf["spark.jars.packages"] == "org.example:other:2.0,org.example:udfs:1.0"
    assert conf["spark.jars.repositories"] == "https://repo.example/maven2"
    assert conf["spark.jars.ivy"] == str(IVY), "the cache is in the work directory"
    own_cache = planned(spec, spark_jars_ivy="/cache/ivy").conf
    assert own_cache["spark.jars.ivy"] == "/cache/ivy", "a cache the user chose is kept"
    assert "spark.jars.repositories" not in planned(application(packages=["a:b:1"])).conf


def test_an_environment_goes_first_on_the_program_path_and_relative_on_the_executors() -> None:
    spec = application(
        pyFiles=["https://h/util.py", "https://h/lib.zip"], archives=["s3://b/env.tar.gz#env"]
    )
    done = planned(spec, "archives[0]", spark_executorEnv_PYTHONPATH="/opt/app")
    assert done.python_path == [
        f"{STORE}/{DIGEST}/unpacked/lib/python3.11/site-packages",
        f"{STORE}/{DIGEST}",
        f"{STORE}/{DIGEST}/lib.zip",
    ]
    # Spark unpacks the archive in each executor's working directory, where its workers start.
    assert done.conf["spark.executorEnv.PYTHONPATH"] == (
        "./env/lib/python3.11/site-packages:/opt/app"
    )
    unaliased = application(archives=["s3://b/env.tar.gz"])
    assert planned(unaliased, "archives[0]").conf["spark.executorEnv.PYTHONPATH"] == (
        "./env.tar.gz/lib/python3.11/site-packages"
    )
    # Tasks in the driver's JVM (local[N]) have workers that inherit the program's path.
    assert "spark.executorEnv.PYTHONPATH" not in planned(spec, "archives[0]", in_driver=True).conf


def test_nothing_is_set_for_a_job_without_dependencies() -> None:
    assert planned(application()) == Launch({}, [])


def test_where_tasks_run() -> None:
    assert executors_in_driver({}, {})
    assert executors_in_driver({"spark.master": "local[4]"}, {})
    assert executors_in_driver({}, {"SPARK_MASTER": "local"})
    assert not executors_in_driver({"spark.master": "k8s://https://10.0.0.1:443"}, {})
    assert not executors_in_driver({"spark.master": "local-cluster[2,1,1024]"}, {})


def test_settings_go_before_pyspark_shell_in_the_submit_arguments() -> None:
    pod = "--driver-memory 1g --conf spark.driver.host=10.0.0.7 pyspark-shell"
    settings = {"spark.files": "/w/a b.csv", "spark.jars.packages": "a:b:1"}
    merged = with_conf(pod, settings)
    words = shlex.split(merged)
    assert words[-1] == "pyspark-shell"
    assert words[:4] == ["--driver-memory", "1g", "--conf", "spark.driver.host=10.0.0.7"]
    assert submitted_conf(merged) == {"spark.driver.host": "10.0.0.7", **settings}
    assert shlex.split(with_conf(None, settings))[-1] == "pyspark-shell"
    assert submitted_conf("--conf=spark.a=1 --master local pyspark-shell") == {"spark.a": "1"}
    assert submitted_conf(None) == {}
