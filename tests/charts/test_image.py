"""The image as ``make image`` builds it (docker/build-image.sh, once per test run), tried for
real: the CLI as the image's non-root user, Java 17 and PySpark running a Spark job, and the
entrypoint's three paths — a driver, a shuffle server answering over the network, and Spark's
executor backend reaching for its driver."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest

from finishable.api.spec import FinishableSparkJobSpec
from finishable.controller.job import builders
from finishable.kube.objects import JobRef
from testcluster.image import IMAGE, BuildFailed, build

pytestmark = pytest.mark.quick

ENGINE = os.environ.get("ENGINE", "docker")


@pytest.fixture(scope="session")
def built() -> tuple[str, str]:
    """(image, what ``make image`` printed)."""
    try:
        return IMAGE, build(IMAGE)
    except BuildFailed as failed:
        pytest.fail(str(failed))


def run(
    image: str, *command: str, entrypoint: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    args = [ENGINE, "run", "--rm"]
    if entrypoint is not None:
        args += ["--entrypoint", entrypoint]
    for name, value in (env or {}).items():
        args += ["-e", f"{name}={value}"]
    return subprocess.run(
        [*args, image, *command], capture_output=True, text=True, timeout=300, check=False
    )


def test_make_image_prints_the_image_and_its_size(built: tuple[str, str]) -> None:
    image, printed = built
    name, size, unit = printed.splitlines()[-1].split()
    assert name == image and unit == "MB" and int(size) > 0


def test_the_cli_runs_as_the_images_non_root_user(built: tuple[str, str]) -> None:
    image, _ = built
    assert run(image, "-u", entrypoint="id").stdout.strip() == "1000"
    helped = run(image)  # the image's CMD: finishable --help
    assert helped.returncode == 0 and "stop with a savepoint" in helped.stdout
    version = run(image, "finishable", "version")
    assert version.returncode == 0, version.stderr
    assert "finishable 0.1.0" in version.stdout and "pyspark 4." in version.stdout


@pytest.mark.full
def test_java_17_and_pyspark_run_a_spark_job_with_a_pandas_function_and_have_our_jars(
    built: tuple[str, str],
) -> None:
    image, _ = built
    java = run(image, "java", "-version")
    assert 'version "17.' in java.stderr, java.stderr
    program = (
        "import os, pyspark; from pyspark.sql import SparkSession; "
        "assert os.path.dirname(pyspark.__file__) == os.environ['SPARK_HOME']; "
        "spark = SparkSession.builder.master('local[1]').getOrCreate(); "
        # an Arrow-based Python function, as the batch stages and the sinks run them
        "doubled = spark.range(1000).mapInPandas(lambda fs: (f * 2 for f in fs), 'id long'); "
        # Spark's S3 connector (docker/spark-jars.sh) on its classpath
        "spark._jvm.java.lang.Class.forName('org.apache.hadoop.fs.s3a.S3AFileSystem'); "
        # and the project's data source (jvm/build.sh), which Batch reads of files go through
        "from finishable.connectors.jvm import jvm_source_loadable; "
        "assert jvm_source_loadable(spark); "
        "print(doubled.selectExpr('sum(id) div 2').first()[0])"
    )
    job = run(image, "python", "-c", program)
    assert job.returncode == 0, job.stderr[-3000:]
    assert job.stdout.strip().splitlines()[-1] == str(sum(range(1000)))


def test_the_driver_path_names_what_it_lacks(built: tuple[str, str]) -> None:
    image, _ = built
    driver = run(image, "finishable", "driver")
    assert driver.returncode != 0
    assert "FINISHABLE_JOB_CONFIG is not set" in driver.stderr
    assert "Traceback" not in driver.stderr


@pytest.fixture
def shuffle_server(built: tuple[str, str]) -> Iterator[str]:
    image, _ = built
    started = subprocess.run(
        [ENGINE, "run", "-d", "-e", "FINISHABLE_TOKEN=secret", image, "finishable",
         "shuffle-server", "--host", "0.0.0.0", "--port", "7337",
         "--data-dir", "/tmp/finishable/data", "--job", "orders"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    container = started.stdout.strip()
    try:
        yield container
    finally:
        subprocess.run([ENGINE, "rm", "-f", container], capture_output=True, check=False)


def test_the_shuffle_server_path_serves_over_the_network(shuffle_server: str) -> None:
    address = subprocess.run(
        [ENGINE, "inspect", "-f", "{{.NetworkSettings.IPAddress}}", shuffle_server],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://{address}:7337/healthz", timeout=2) as response:
                assert b'"job":"orders"' in response.read()
                break
        except OSError:
            if time.monotonic() > deadline:
                logs = subprocess.run(
                    [ENGINE, "logs", shuffle_server], capture_output=True, check=False
                )
                pytest.fail(f"the shuffle server never answered: {logs.stderr.decode()[-2000:]}")
            time.sleep(0.5)


def test_the_executor_path_starts_sparks_executor_backend(built: tuple[str, str]) -> None:
    """What Spark's Kubernetes backend gives an executor pod: the argument ``executor`` and the
    SPARK_* environment. Nothing listens at the driver URL: the JVM starts and reaches for it."""
    image, _ = built
    env = {
        "SPARK_EXECUTOR_MEMORY": "512m",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@127.0.0.1:7078",
        "SPARK_EXECUTOR_ID": "1",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_APPLICATION_ID": "spark-app-1",
        "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
        "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_EXECUTOR_POD_NAME": "job-1-exec-1",
    }
    executor = run(image, "executor", env=env)
    assert executor.returncode != 0
    assert "KubernetesExecutorBackend: Started daemon" in executor.stderr, executor.stderr[-3000:]
    assert "Failed to connect to /127.0.0.1:7078" in executor.stderr


def container_logs(name: str) -> str:
    done = subprocess.run([ENGINE, "logs", name], capture_output=True, text=True, check=False)
    return done.stdout


def test_a_driver_pod_ends_at_the_kubelets_sigterm(built: tuple[str, str]) -> None:
    """The driver container as the operator builds it, run as a kubelet runs it (its command,
    if any, replaces the image's entrypoint): a SIGTERM ends it, as a pod's deletion sends one.
    Its program stands in for a driver's (a job's config would start Spark). Run as the
    container's command the driver was PID 1, which the kernel gives no default action for
    SIGTERM: every deleted driver waited out its grace period and was killed."""
    image, _ = built
    job = JobRef(name="clicks", namespace="analytics", uid="uid-1")
    manifest = {"image": image, "application": {"file": "local:///opt/program.py"}}
    spec = FinishableSparkJobSpec.model_validate(manifest)
    (container,) = builders.driver_pod(job, spec, 1, "")["spec"]["containers"]
    program = ["python", "-c", "import time; print('running', flush=True); time.sleep(3600)"]
    # the kubelet's rule: a command replaces the image's entrypoint, args follow it
    assert container.get("args", ["finishable", "driver"]) == ["finishable", "driver"]
    command, args = container.get("command"), program  # the program in place of the driver's
    if command is not None:
        command, args = program, []
    entry = ["--entrypoint", command[0], image, *command[1:]] if command else [image]
    started = subprocess.run(
        [ENGINE, "run", "-d", *entry, *args], capture_output=True, text=True, check=True
    )
    name = started.stdout.strip()
    try:
        deadline = time.monotonic() + 120
        while "running" not in container_logs(name):
            assert time.monotonic() < deadline, "the program never started"
            time.sleep(0.2)
        subprocess.run([ENGINE, "kill", "--signal", "TERM", name], check=True, timeout=60)
        try:
            waited = subprocess.run(
                [ENGINE, "wait", name], capture_output=True, text=True, timeout=120, check=True
            )
        except subprocess.TimeoutExpired:
            pytest.fail("the driver container ignored SIGTERM: its program runs as PID 1")
        assert waited.stdout.strip() == str(128 + signal.SIGTERM)
    finally:
        subprocess.run([ENGINE, "rm", "-f", name], capture_output=True, check=False)
