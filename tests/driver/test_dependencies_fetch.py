"""The driver's dependency step on real files and a real HTTP server, without Spark: fetched into
the work directory by content, verified against sha256, archives unpacked, Python environments
checked against the running image, and the program's environment prepared."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from finishable import __version__
from finishable.api.control import DriverState
from finishable.api.jobconfig import ControlType, JobConfig, write_config
from finishable.api.spec import FinishableSparkJobSpec
from finishable.driver.dependencies import packages
from finishable.driver.dependencies.errors import DriverError, StartRefused
from finishable.driver.dependencies.prepare import prepare, running_versions
from finishable.driver.dependencies.pyenv import PythonEnv, env_problems, python_env_in
from finishable.state.control import LocalControlChannel
from testcluster import artifacts
from testcluster.artifacts import FileServer
from testcluster.localcluster.objectstore import ObjectStore

pytestmark = pytest.mark.quick

PYTHON = (sys.version_info.major, sys.version_info.minor)
SITE = f"lib/python{PYTHON[0]}.{PYTHON[1]}/site-packages"


@pytest.fixture
def www(tmp_path: Path) -> Iterator[FileServer]:
    root = tmp_path / "www"
    root.mkdir()
    with FileServer(root) as server:
        yield server


def served(server: FileServer, tmp_path: Path, name: str, content: bytes) -> str:
    (tmp_path / "www" / name).write_bytes(content)
    return f"{server.url}/{name}"


def config(tmp_path: Path, **application: Any) -> JobConfig:
    program = tmp_path / "job.py"
    program.write_text("print('the program')\n")
    spec = FinishableSparkJobSpec.model_validate(
        {"application": {"file": str(program), **application}}
    )
    return JobConfig(
        name="deps",
        spec=spec,
        state_url=str(tmp_path / "state"),
        work_dir=str(tmp_path / "work"),
        control=ControlType.LOCAL,
        control_dir=str(tmp_path / "control"),
        manifest_dir=str(tmp_path),
    )


def store(tmp_path: Path) -> Path:
    return tmp_path / "work" / "dependencies"


def env_dir(root: Path, python: str = f"{PYTHON[0]}.{PYTHON[1]}", *dists: str) -> Path:
    site = root / "lib" / f"python{python}" / "site-packages"
    (site / "hellodep").mkdir(parents=True)
    (site / "hellodep" / "__init__.py").write_text("")
    for dist in dists:
        (site / dist).mkdir()
    return root


def test_a_job_without_dependencies_gets_its_program_and_nothing_else(tmp_path: Path) -> None:
    prepared = prepare(config(tmp_path), {"PYSPARK_SUBMIT_ARGS": "pyspark-shell"})
    assert prepared.program == tmp_path / "job.py"
    assert prepared.environment == {}
    assert not store(tmp_path).exists()


def test_a_verified_file_is_stored_by_content_and_not_fetched_again(
    tmp_path: Path, www: FileServer
) -> None:
    content = b"rate,value\n1,2\n"
    digest = hashlib.sha256(content).hexdigest()
    url = served(www, tmp_path, "rates.csv", content)
    job = config(tmp_path, files=[url], sha256={url: digest})
    first = prepare(job, {})
    stored = store(tmp_path) / digest / "rates.csv"
    assert stored.read_bytes() == content
    words = shlex.split(first.environment["PYSPARK_SUBMIT_ARGS"])
    assert words == ["--conf", f"spark.files={stored}", "pyspark-shell"]
    assert www.requested == ["/rates.csv"]
    second = prepare(job, {})  # the next attempt: the store has it, the server is not asked
    assert second == first and www.requested == ["/rates.csv"]
    assert not any((store(tmp_path) / ".incoming").iterdir())


def test_a_download_a_dead_driver_left_is_removed_and_a_live_one_kept(
    tmp_path: Path, www: FileServer
) -> None:
    incoming = store(tmp_path) / ".incoming"
    incoming.mkdir(parents=True)
    (incoming / "left-by-a-killed-driver").write_bytes(b"par")
    os.utime(incoming / "left-by-a-killed-driver", (0, 0))
    (incoming / "being-written").write_bytes(b"par")
    prepare(config(tmp_path, files=[served(www, tmp_path, "rates.csv", b"1\n")]), {})
    assert [p.name for p in incoming.iterdir()] == ["being-written"]


def test_an_unverified_file_is_fetched_by_every_attempt(tmp_path: Path, www: FileServer) -> None:
    url = served(www, tmp_path, "rates.csv", b"v1\n")
    job = config(tmp_path, files=[url])
    prepare(job, {})
    served(www, tmp_path, "rates.csv", b"v2\n")
    second = prepare(job, {})
    path = second.environment["PYSPARK_SUBMIT_ARGS"].split("spark.files=")[1].split()[0]
    assert Path(path).read_bytes() == b"v2\n"
    assert Path(path).parent.name == hashlib.sha256(b"v2\n").hexdigest()
    assert (store(tmp_path) / hashlib.sha256(b"v1\n").hexdigest() / "rates.csv").exists(), (
        "the first attempt's file is never replaced under it"
    )


def test_a_digest_mismatch_names_the_url_and_both_digests_and_keeps_nothing(
    tmp_path: Path, www: FileServer
) -> None:
    url = served(www, tmp_path, "util.py", b"X = 1\n")
    wrong = "0" * 64
    actual = hashlib.sha256(b"X = 1\n").hexdigest()
    with pytest.raises(StartRefused) as refused:
        prepare(config(tmp_path, pyFiles=[url], sha256={url: wrong}), {})
    assert str(refused.value) == (
        f"spec.application.pyFiles[0]: {url!r}: sha256 mismatch: spec.application.sha256 "
        f"expects {wrong}, the file has {actual}"
    )
    assert sorted(p.name for p in store(tmp_path).iterdir()) == [".incoming"]
    assert not any((store(tmp_path) / ".incoming").iterdir())


def test_local_files_are_verified_where_they_are(tmp_path: Path) -> None:
    lookup = tmp_path / "lookup.json"
    lookup.write_text("{}")
    digest = hashlib.sha256(b"{}").hexdigest()
    prepared = prepare(config(tmp_path, files=["lookup.json"], sha256={"lookup.json": digest}), {})
    assert f"spark.files={lookup}" in prepared.environment["PYSPARK_SUBMIT_ARGS"]
    program_digest = {str(tmp_path / "job.py"): "1" * 64}
    with pytest.raises(StartRefused, match=r"spec.application.file: .* sha256 mismatch"):
        prepare(config(tmp_path, sha256=program_digest), {})
    with pytest.raises(StartRefused) as missing:
        prepare(config(tmp_path, jars=["local:///nowhere/udf.jar"]), {})
    assert str(missing.value) == (
        "spec.application.jars[0]: 'local:///nowhere/udf.jar': /nowhere/udf.jar does not exist; "
        "local:///path names a file inside the image"
    )


def test_object_store_urls_are_read_with_pyarrow_and_the_credentials_they_carry(
    tmp_path: Path,
) -> None:
    store_server = ObjectStore().start()
    try:
        url = store_server.url("jobs/lookup.csv", "127.0.0.1")
        filesystem, path = pafs.FileSystem.from_uri(url)
        with filesystem.open_output_stream(path) as out:
            out.write(b"a,b\n")
        digest = hashlib.sha256(b"a,b\n").hexdigest()
        prepared = prepare(config(tmp_path, files=[url], sha256={url: digest}), {})
        stored = store(tmp_path) / digest / "lookup.csv"
        assert stored.read_bytes() == b"a,b\n"
        assert f"spark.files={stored}" in prepared.environment["PYSPARK_SUBMIT_ARGS"]
        missing = store_server.url("jobs/missing.zip", "127.0.0.1")
        with pytest.raises(StartRefused) as refused:
            prepare(config(tmp_path, pyFiles=[missing]), {})
        message = str(refused.value)
        assert message.startswith("spec.application.pyFiles[0]: 's3://testing:***@finishable/")
        assert "does not exist" in message and "testing:testing" not in message
    finally:
        store_server.stop()


def test_a_missing_url_fails_for_good_and_an_unreachable_one_may_be_retried(
    tmp_path: Path, www: FileServer
) -> None:
    with pytest.raises(StartRefused, match=r"pyFiles\[0\]: .*/gone.zip': HTTP 404"):
        prepare(config(tmp_path, pyFiles=[f"{www.url}/gone.zip"]), {})
    with FileServer(tmp_path) as stopped:
        unreachable = f"{stopped.url}/lib.zip"
    with pytest.raises(DriverError) as error:
        prepare(config(tmp_path, pyFiles=[unreachable]), {})
    assert not isinstance(error.value, StartRefused)
    assert str(error.value).startswith(
        f"spec.application.pyFiles[0]: {unreachable!r}: cannot fetch"
    )


def test_an_archived_environment_is_unpacked_once_and_layered_first(
    tmp_path: Path, www: FileServer
) -> None:
    env = artifacts.python_env(tmp_path / "env", artifacts.wheel(tmp_path / "wheels"))
    archive = artifacts.packed(env, tmp_path / "www" / "env.tar.gz")
    url = f"{www.url}/env.tar.gz"
    lib = artifacts.python_zip(tmp_path / "www" / "lib.zip")
    job = config(
        tmp_path,
        archives=[f"{url}#env"],
        pyFiles=[f"{www.url}/lib.zip"],
        sha256={url: artifacts.sha256(archive)},
        sparkConf={"spark.master": "k8s://https://api:443", "spark.executorEnv.PYTHONPATH": "/x"},
    )
    environ = {"PYTHONPATH": "/opt/own", "PYSPARK_SUBMIT_ARGS": "--driver-memory 1g pyspark-shell"}
    prepared = prepare(job, environ)
    unpacked = store(tmp_path) / artifacts.sha256(archive) / "unpacked"
    assert (unpacked / SITE / "hellodep" / "__init__.py").is_file()
    assert prepared.environment["PYTHONPATH"] == os.pathsep.join(
        [str(unpacked / SITE), str(store(tmp_path) / artifacts.sha256(lib) / "lib.zip"), "/opt/own"]
    )
    settings = shlex.split(prepared.environment["PYSPARK_SUBMIT_ARGS"])
    assert settings[:2] == ["--driver-memory", "1g"] and settings[-1] == "pyspark-shell"
    assert f"spark.executorEnv.PYTHONPATH=./env/{SITE}:/x" in settings
    assert (
        f"spark.archives={store(tmp_path) / artifacts.sha256(archive)}/env.tar.gz#env" in settings
    )
    marker = unpacked / SITE / "marker"
    marker.write_text("kept")
    assert prepare(job, environ) == prepared
    assert marker.read_text() == "kept", "a later attempt uses the tree unpacked before"
    program = "import hellodep, mymod; print(hellodep.greet('x'), mymod.NAME)"
    shown = subprocess.run(
        [sys.executable, "-c", program],
        env={**os.environ, **prepared.environment},
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout == f"hello x {artifacts.MODULE_NAME}\n"


def test_environments_are_read_from_the_unpacked_tree(tmp_path: Path) -> None:
    found = python_env_in(env_dir(tmp_path / "a", "3.11", "pyspark-3.5.1.dist-info"))
    assert found is not None
    assert (found.python, str(found.site_packages)) == ((3, 11), "lib/python3.11/site-packages")
    assert found.distributions == {"pyspark": "3.5.1"}
    conda = env_dir(tmp_path / "b", "3.11", "Finishable_Spark_Operator-0.0.9.dist-info")
    (conda / "lib" / "python3.11" / "site-packages" / "six-1.16.0-py3.11.egg-info").mkdir()
    conda_env = python_env_in(conda)
    assert conda_env is not None
    assert conda_env.distributions == {"finishable-spark-operator": "0.0.9", "six": "1.16.0"}
    plain = tmp_path / "c"
    (plain / "lib").mkdir(parents=True)
    assert python_env_in(plain) is None
    two = env_dir(env_dir(tmp_path / "d", "3.10"), "3.11")
    with pytest.raises(ValueError, match=r"site-packages for Python 3\.10, 3\.11"):
        python_env_in(two)


def test_an_environment_must_fit_the_image_it_is_layered_over(tmp_path: Path) -> None:
    running = {"pyspark": "4.3.0", "finishable-spark-operator": "0.1.0"}

    def checked(*dists: str, python: str = "3.11") -> list[str]:
        root = env_dir(tmp_path / f"env{len(list(tmp_path.iterdir()))}", python, *dists)
        env = python_env_in(root)
        assert isinstance(env, PythonEnv)
        return env_problems(
            "spec.application.archives[0]: 'e'", env, python=(3, 11), running=running
        )

    assert checked("pyspark-4.3.0.dist-info", "pandas-2.2.0.dist-info") == []
    assert checked("pyspark-3.5.1.dist-info") == [
        "spec.application.archives[0]: 'e': the environment shadows pyspark 4.3.0 of the image "
        "with pyspark 3.5.1: remove pyspark from it (the image provides it) or build it with "
        "pyspark==4.3.0"
    ]
    (problem,) = checked("finishable_spark_operator-0.0.1.dist-info")
    assert (
        "shadows finishable-spark-operator 0.1.0 of the image with finishable-spark-operator 0.0.1"
        in problem
    )
    assert checked(python="3.12") == [
        "spec.application.archives[0]: 'e': a Python 3.12 environment "
        "(lib/python3.12/site-packages), but the image runs Python 3.11: build it with python3.11"
    ]


def test_the_driver_refuses_environments_that_do_not_fit(tmp_path: Path) -> None:
    shadowing = env_dir(
        tmp_path / "shadowing", f"{PYTHON[0]}.{PYTHON[1]}", "pyspark-3.5.1.dist-info"
    )
    other = env_dir(tmp_path / "other", "3.9")
    archives = []
    for name, tree in (("shadowing", shadowing), ("other", other)):
        archives.append(str(artifacts.packed(tree, tmp_path / f"{name}.tar.gz")))
    with pytest.raises(StartRefused) as refused:
        prepare(config(tmp_path, archives=[f"{archives[0]}#a", f"{archives[1]}#b"]), {})
    message = str(refused.value)
    pyspark = running_versions()["pyspark"]
    assert f"archives[0]: {archives[0]!r}: the environment shadows pyspark {pyspark}" in message
    assert "with pyspark 3.5.1" in message
    assert f"archives[1]: {archives[1]!r}: a Python 3.9 environment" in message
    assert f"image runs Python {PYTHON[0]}.{PYTHON[1]}" in message
    assert "each is a Python environment, and only one can be layered" in message
    assert running_versions()["finishable-spark-operator"] == __version__


def test_a_zip_archive_is_unpacked_too_and_a_broken_one_is_refused(tmp_path: Path) -> None:
    model = artifacts.python_zip(tmp_path / "model.zip")
    prepared = prepare(config(tmp_path, archives=["model.zip#model"]), {})
    assert "spark.archives=" + f"{model}#model" in prepared.environment["PYSPARK_SUBMIT_ARGS"]
    assert "PYTHONPATH" not in prepared.environment, "an archive without an env is no path"
    unpacked = store(tmp_path) / artifacts.sha256(model) / "unpacked" / "mymod.py"
    assert unpacked.is_file()
    (tmp_path / "broken.tar.gz").write_bytes(b"not a tar")
    with pytest.raises(StartRefused, match=r"archives\[0\]: 'broken.tar.gz': cannot unpack it"):
        prepare(config(tmp_path, archives=["broken.tar.gz"]), {})


IVY_FAILURE = """\
\t\t::::::::::::::::::::::::::::::::::::::::::::::
\t\t::          UNRESOLVED DEPENDENCIES         ::
\t\t:: dev.finishable.test#hello;1.1: not found
\t\t:: org.example#transitive;2.0: not found
Exception in thread "main" java.lang.RuntimeException: [unresolved dependency: \
dev.finishable.test#hello;1.1: not found, unresolved dependency: org.example#transitive;2.0: \
not found]
"""


def test_an_unresolved_package_is_named_with_where_spark_looked() -> None:
    missing = packages.unresolved(IVY_FAILURE)
    assert missing == [
        ("dev.finishable.test:hello:1.1", "not found"),
        ("org.example:transitive:2.0", "not found"),
    ]
    message = packages.unresolved_message(
        missing, ["dev.finishable.test:hello:1.1"], ["https://user:pw@repo.example/maven2"]
    )
    assert message == (
        "spec.application.packages: Spark's resolver cannot resolve dev.finishable.test:hello:1.1 "
        "(not found), org.example:transitive:2.0 (not found, needed by a listed one); it searched "
        "the local Maven and Ivy caches, Maven Central, spark-packages and "
        "https://user:***@repo.example/maven2"
    )
    assert packages.unresolved("java.net.UnknownHostException: repo") == []


def test_a_package_check_that_passed_is_not_run_again(tmp_path: Path) -> None:
    conf = {"spark.jars.packages": "a:b:1", "spark.jars.ivy": str(tmp_path / "ivy")}
    no_spark = {"SPARK_HOME": str(tmp_path / "nowhere")}
    with pytest.raises(DriverError, match=r"spec\.application\.packages: cannot run spark-submit"):
        packages.resolve(conf, ["a:b:1"], no_spark)
    (tmp_path / "ivy" / f"checked-{packages.settings_digest(conf)}").write_text("{}")
    packages.resolve(conf, ["a:b:1"], no_spark)  # remembered: no spark-submit is started
    other = {**conf, "spark.jars.repositories": "https://repo.example/maven2"}
    with pytest.raises(DriverError, match="cannot run spark-submit"):
        packages.resolve(other, ["a:b:1"], no_spark)


def refused_driver(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """A driver of a job whose file does not have the digest the spec names."""
    job = config(tmp_path, files=["lookup.json"], sha256={"lookup.json": "2" * 64})
    (tmp_path / "lookup.json").write_text("{}")
    write_config(job, tmp_path / "job.json")
    return subprocess.run(
        [sys.executable, "-m", "finishable.driver.main", "--keep-cwd"],
        env={**os.environ, "FINISHABLE_JOB_CONFIG": str(tmp_path / "job.json"), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_driver_reports_a_refused_dependency_as_permanent(tmp_path: Path) -> None:
    done = refused_driver(tmp_path)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith(
        "spec.application.files[0]: 'lookup.json': sha256 mismatch"
    )
    report = LocalControlChannel(tmp_path / "control").read_report()
    assert report is not None
    assert (report.state, report.permanent) == (DriverState.FAILED, True)
    assert "sha256 mismatch: spec.application.sha256 expects 2222" in report.message
    assert json.loads(report.model_dump_json())["attempt"] == 1


def test_an_upgrade_check_is_refused_by_the_same_step_and_leaves_the_running_job_alone(
    tmp_path: Path,
) -> None:
    done = refused_driver(tmp_path, FINISHABLE_PREFLIGHT="1")
    assert done.returncode == 1
    # The check pod's verdict is its last log line (its termination message).
    assert done.stderr.splitlines()[-1].startswith(
        "spec.application.files[0]: 'lookup.json': sha256 mismatch"
    )
    assert LocalControlChannel(tmp_path / "control").read_report() is None


@pytest.mark.parametrize("filtered", [True, False], ids=["python-3.11.4+", "debian-3.11.2"])
def test_a_virtualenv_unpacks_on_every_python_311_and_an_escaping_member_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, filtered: bool
) -> None:
    """Debian's Python 3.11.2 (the image's) has no extraction filters: a virtualenv (its
    interpreter a link to an absolute path) unpacks there too, and a member that would land
    outside the archive's directory is refused as the ``tar`` filter refuses it."""
    import tarfile

    if not filtered:
        monkeypatch.delattr(tarfile, "tar_filter", raising=False)
    env = artifacts.python_env(tmp_path / "env", artifacts.wheel(tmp_path / "wheels"))
    archive = artifacts.packed(env, tmp_path / "local" / "env.tar.gz")
    prepare(config(tmp_path, archives=[f"{archive}#env"]), {})
    unpacked = store(tmp_path) / artifacts.sha256(archive) / "unpacked"
    assert (unpacked / "bin" / "python").is_symlink()
    assert (unpacked / SITE / "hellodep" / "__init__.py").is_file()

    evil = tmp_path / "local" / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as bundle:
        payload = tmp_path / "payload"
        payload.write_text("x")
        bundle.add(payload, arcname="../escaped")
    with pytest.raises(StartRefused, match=r"archives\[0\]: .*evil.tar.gz': cannot unpack it: "):
        prepare(config(tmp_path, archives=[f"{evil}#evil"]), {})
    assert not (store(tmp_path) / "escaped").exists()
