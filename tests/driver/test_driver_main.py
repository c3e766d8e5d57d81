"""``finishable driver``: the driver pod's command starts the user's program with its config."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from finishable.api.jobconfig import write_config
from finishable.api.spec import FinishableSparkJobSpec
from finishable.controller.job import driverconf
from finishable.kube.objects import JobRef

pytestmark = pytest.mark.quick

PROGRAM = """
import json, os, sys
print(json.dumps({
    "argv": sys.argv[1:],
    "cwd": os.getcwd(),
    "attempt": os.environ["FINISHABLE_ATTEMPT"],
    "restore": os.environ.get("FINISHABLE_RESTORE_FROM"),
    "pyspark_python": os.environ["PYSPARK_PYTHON"],
}))
sys.exit(3)
"""


def driver(tmp_path: Path, file: str, **env: str) -> subprocess.CompletedProcess[str]:
    spec = FinishableSparkJobSpec.model_validate(
        {"application": {"file": file, "args": ["--day", "7"]}}
    )
    config = driverconf.job_config(JobRef("clicks", "ns", "uid"), spec)
    config = config.model_copy(update={"work_dir": str(tmp_path / "work")})
    write_config(config, tmp_path / "job.json")
    environment = {
        **os.environ,
        "FINISHABLE_JOB_CONFIG": str(tmp_path / "job.json"),
        "FINISHABLE_ATTEMPT": "2",
        "FINISHABLE_RESTORE_FROM": "sp-9",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "finishable.cli", "driver"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_runs_the_program_from_the_image_with_args_and_environment(tmp_path: Path) -> None:
    program = tmp_path / "app" / "clicks.py"
    program.parent.mkdir()
    program.write_text(PROGRAM)
    result = driver(tmp_path, f"local://{program}")
    assert result.returncode == 3, result.stderr  # the program's own exit code: it was exec'd
    seen = json.loads(result.stdout)
    assert seen["argv"] == ["--day", "7"]
    assert seen["attempt"] == "2" and seen["restore"] == "sp-9"
    assert seen["cwd"] == str(program.parent)
    assert seen["pyspark_python"] == sys.executable


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_fetches_a_remote_program_first(tmp_path: Path, http_root: tuple[Path, str]) -> None:
    root, url = http_root
    (root / "remote.py").write_text(PROGRAM)
    result = driver(tmp_path, f"{url}/remote.py")
    assert result.returncode == 3, result.stderr
    digest = hashlib.sha256(PROGRAM.encode()).hexdigest()
    assert json.loads(result.stdout)["cwd"] == str(tmp_path / "work" / "dependencies" / digest)


def test_problems_name_the_field_or_variable(tmp_path: Path) -> None:
    missing = driver(tmp_path, "local:///nowhere/clicks.py")
    assert missing.returncode == 1
    assert "spec.application.file: 'local:///nowhere/clicks.py'" in missing.stderr
    unconfigured = driver(tmp_path, "local:///x.py", FINISHABLE_JOB_CONFIG="")
    assert unconfigured.returncode == 1
    assert "FINISHABLE_JOB_CONFIG is not set" in unconfigured.stderr


def test_the_operator_without_a_cluster_says_so(tmp_path: Path) -> None:
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "missing")}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    result = subprocess.run(
        [sys.executable, "-m", "finishable.cli", "operator", "--namespace", "x"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("cannot reach the Kubernetes API: cannot load the kubeconfig")
