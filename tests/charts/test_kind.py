"""e2e/kind/run.sh without kind: there is no Docker engine here.

What can be checked here is checked: the script's syntax (and shellcheck's verdict, on it and
the project's other shell scripts); that without Docker it stops with exit status 3 ("skipped",
never taken for a pass) and says where the same suite runs instead; and, with stand-ins for
docker, kind, kubectl, helm and pytest that record their calls, that it builds, loads and
installs what the e2e suite expects, hands the suite the kind cluster's kubeconfig and the shared
data directory, and deletes the cluster afterwards whatever happened.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from testcluster.tools import installed

pytestmark = pytest.mark.quick

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "e2e" / "kind" / "run.sh"
CLUSTER_CONFIG = ROOT / "e2e" / "kind" / "cluster.yaml"
BASH = shutil.which("bash") or "/bin/bash"
IMAGE = "finishable-spark-operator:0.1.0"
SKIPPED_NO_DOCKER, MISSING_TOOL = 3, 4


def run(path: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BASH, str(RUN)],
        env={"PATH": path, "HOME": os.environ.get("HOME", "/tmp"), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def stub(directory: Path, name: str, body: str) -> None:
    """An executable `name` that logs its arguments (one call a line) and runs `body`."""
    script = directory / name
    script.write_text(
        f'#!{BASH}\nprintf "%s\\n" "{name} $*" >> "$CALLS"\n{body}\n',
    )
    script.chmod(0o755)


def test_the_script_is_valid_bash() -> None:
    subprocess.run([BASH, "-n", str(RUN)], check=True)
    assert RUN.stat().st_mode & 0o111, "executable"
    assert "set -Eeuo pipefail" in RUN.read_text()


def test_shellcheck_finds_nothing() -> None:
    tools = sorted((ROOT / "testcluster" / "tools").glob("*.sh"))
    assert tools, "the test cluster's scripts are where this looks"
    scripts = [RUN, *tools, ROOT / "docker" / "entrypoint.sh", ROOT / "docker" / "build-image.sh"]
    result = subprocess.run(
        [installed("shellcheck"), *map(str, scripts)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


def test_without_docker_it_is_skipped_with_status_3(tmp_path: Path) -> None:
    """PATH holds nothing: no docker (and no other command)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    result = run(str(empty))
    assert result.returncode == SKIPPED_NO_DOCKER, result.stderr
    assert "skipped" in result.stderr and "docker is not installed" in result.stderr
    assert "Docker engine" in result.stderr
    assert ".venv/bin/pytest e2e" in result.stderr and "local cluster" in result.stderr
    assert "not passed" in result.stderr


def test_a_docker_without_a_running_engine_is_skipped_with_status_3(tmp_path: Path) -> None:
    """As on this machine: the docker command is there, the engine is not."""
    tools = tmp_path / "bin"
    tools.mkdir()
    stub(tools, "docker", 'echo "Cannot connect to the Docker daemon" >&2; exit 1')
    result = run(f"{tools}:/usr/bin:/bin", CALLS=str(tmp_path / "calls"))
    assert result.returncode == SKIPPED_NO_DOCKER, result.stderr
    assert "not running" in result.stderr and ".venv/bin/pytest e2e" in result.stderr


def test_missing_tools_are_named_with_status_4(tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    stub(tools, "docker", "exit 0")
    result = run(str(tools), CALLS=str(tmp_path / "calls"))
    assert result.returncode == MISSING_TOOL, result.stderr
    assert "missing: kind kubectl helm" in result.stderr


def test_the_cluster_config_mounts_the_data_directory_on_every_node() -> None:
    config = yaml.safe_load(CLUSTER_CONFIG.read_text())
    assert config["kind"] == "Cluster" and config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert config["name"] == "finishable-e2e"
    assert {node["role"] for node in config["nodes"]} == {"control-plane", "worker"}
    for node in config["nodes"]:
        assert node["extraMounts"] == [
            {"hostPath": "${E2E_DATA_DIR}", "containerPath": "${E2E_DATA_DIR}"}
        ]


class StubbedRun:
    """run.sh with recording stand-ins for docker, kind, kubectl, helm and pytest."""

    def __init__(
        self, tmp_path: Path, existing: str = "", pytest_status: int = 0, helm_status: int = 0
    ) -> None:
        self.tools = tmp_path / "bin"
        self.tools.mkdir()
        self.calls = tmp_path / "calls"
        self.data = tmp_path / "data"
        self.seen = tmp_path / "seen"
        self.seen.mkdir()
        stub(self.tools, "docker", "exit 0")
        stub(
            self.tools,
            "kind",
            f"""
case "$1 $2" in
  "get clusters") printf '%s' "{existing}" ;;
  "create cluster")
    while (($#)); do
      case $1 in
        --config) cp "$2" "{self.seen}/cluster.yaml" ;;
        --kubeconfig) echo "apiVersion: v1" > "$2" ;;
      esac
      shift
    done ;;
esac""",
        )
        stub(
            self.tools,
            "kubectl",
            f"""
case " $* " in
  *" apply -f - "*) cat > "{self.seen}/work-claim.yaml" ;;
esac""",
        )
        stub(self.tools, "helm", f"exit {helm_status}")
        stub(
            self.tools,
            "pytest",
            f"""
env | grep '^E2E_' | sort > "{self.seen}/env"
cp "$E2E_KUBECONFIG" "{self.seen}/kubeconfig"
pwd > "{self.seen}/cwd"
exit {pytest_status}""",
        )

    def __call__(self, **env: str) -> subprocess.CompletedProcess[str]:
        return run(
            f"{self.tools}:/usr/bin:/bin",
            CALLS=str(self.calls),
            PYTEST=str(self.tools / "pytest"),
            E2E_DATA_DIR=str(self.data),
            **env,
        )

    def lines(self) -> list[str]:
        return self.calls.read_text().splitlines()


def test_it_builds_installs_runs_the_suite_and_deletes_the_cluster(tmp_path: Path) -> None:
    stubs = StubbedRun(tmp_path)
    result = stubs()
    assert result.returncode == 0, result.stderr
    calls = stubs.lines()
    commands = [" ".join(call.split()[: 2 if call.startswith("kubectl") else 3]) for call in calls]
    assert commands == [
        "docker info",
        "kind get clusters",
        "docker build --tag",
        "kind create cluster",
        "kind load docker-image",
        "helm install fso",
        "kubectl --kubeconfig",
        "kubectl --kubeconfig",
        "pytest e2e -v",
        "kind delete cluster",
    ]
    assert calls[2] == f"docker build --tag {IMAGE} {ROOT}"
    assert "--name finishable-e2e" in calls[3]
    assert calls[4] == f"kind load docker-image {IMAGE} --name finishable-e2e"
    helm = calls[5].split()
    assert helm[:4] == ["helm", "install", "fso", str(ROOT / "charts/finishable-spark-operator")]
    for option in ("--namespace finishable", "--create-namespace", "--set image.tag=0.1.0"):
        assert option in calls[5]
    assert "--wait" in helm and "--kubeconfig" in helm
    assert "sparkMaster" not in calls[5]
    assert calls[6].endswith("create namespace finishable-e2e")
    assert calls[7].endswith("apply -f -")
    assert "--name finishable-e2e" in calls[9]

    data = stubs.data.resolve()
    config = yaml.safe_load((stubs.seen / "cluster.yaml").read_text())
    for node in config["nodes"]:
        assert node["extraMounts"] == [{"hostPath": str(data), "containerPath": str(data)}]
    env = dict(line.split("=", 1) for line in (stubs.seen / "env").read_text().splitlines())
    assert env["E2E_DATA_DIR"] == str(data) and env["E2E_IMAGE"] == IMAGE
    # kind's storage has no ReadWriteMany class: a hostPath volume on the shared directory is one.
    assert env["E2E_WORK_CLAIM"] == "finishable-work"
    volume, claim = yaml.safe_load_all((stubs.seen / "work-claim.yaml").read_text())
    assert volume["spec"]["hostPath"]["path"] == str(data / "work")
    assert volume["spec"]["accessModes"] == claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["metadata"] == {"name": "finishable-work", "namespace": "finishable-e2e"}
    assert (data / "work").is_dir()
    assert (stubs.seen / "kubeconfig").read_text() == "apiVersion: v1\n", "kind's kubeconfig"
    assert (stubs.seen / "cwd").read_text().strip() == str(ROOT)
    assert not Path(env["E2E_KUBECONFIG"]).exists(), "its temporary directory is removed"
    assert data.is_dir(), "a directory it was given is left alone"


def test_a_failing_suite_fails_the_run_and_still_deletes_the_cluster(tmp_path: Path) -> None:
    stubs = StubbedRun(tmp_path, pytest_status=5)
    result = stubs(SPARK_MASTER="local[2]")
    assert result.returncode == 1, result.stderr
    assert "pytest exit status 5" in result.stderr
    calls = stubs.lines()
    assert "--set-string operator.sparkMaster=local[2]" in calls[5]
    assert calls[-1].startswith("kind delete cluster --name finishable-e2e")
    assert any(call.startswith("kubectl ") for call in calls), "it shows the cluster's state"


def test_a_failing_step_names_itself_and_still_deletes_the_cluster(tmp_path: Path) -> None:
    stubs = StubbedRun(tmp_path, helm_status=3)
    result = stubs()
    assert result.returncode == 1, "a failure is 1, never the 3 of a skipped run"
    assert "failed (status 3)" in result.stderr and "helm" in result.stderr
    calls = stubs.lines()
    assert not any(call.startswith("pytest") for call in calls)
    assert calls[-1].startswith("kind delete cluster --name finishable-e2e")


def test_keep_cluster_keeps_it(tmp_path: Path) -> None:
    stubs = StubbedRun(tmp_path)
    result = stubs(KEEP_CLUSTER="1")
    assert result.returncode == 0, result.stderr
    assert not any(call.startswith("kind delete") for call in stubs.lines())
    assert "kind delete cluster --name finishable-e2e" in result.stderr


def test_an_existing_cluster_is_neither_reused_nor_deleted(tmp_path: Path) -> None:
    stubs = StubbedRun(tmp_path, existing="other\nfinishable-e2e\n")
    result = stubs()
    assert result.returncode == 1, result.stderr
    assert "exists already" in result.stderr
    assert not any(call.startswith(("kind create", "kind delete")) for call in stubs.lines())
