"""The README's kubectl commands, run as written with a real kubectl (v1.33, pinned by
``make tools``) against the local cluster: submit, suspend, resume, drain and
delete a job, ``kubectl get fsj`` printing the CRD's columns, the executor pods Spark created,
and the API server refusing a misspelt field under kubectl's default ``--validate=strict``.

The commands are read from the README's "Run on a cluster" section, so that the test runs exactly
what a user types; they run from the repository's root (their paths are relative to it), in a
namespace of their own (the kubeconfig's context names it).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from e2e.clickcounts import assert_prefix_of_input, committed
from e2e.conftest import KUBECTL_NAMESPACE
from testcluster.client import ROOT
from testcluster.localcluster.cluster import ClusterAccess
from testcluster.tools import installed
from testcluster.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.quick]

SECTION = "### Run on a cluster"
COMMAND_TIMEOUT = 420  # above the --timeout=5m of the README's waits
START = 240.0  # a driver's start and its first batch on a busy machine


def kubectl_binary() -> str:
    """The pinned kubectl in .venv/bin (``make tools``), else $KUBECTL, else one on $PATH."""
    return installed("kubectl")


def readme_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start)
    return text[start : end if end >= 0 else len(text)]


def blocks(section: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", section, flags=re.S | re.M)


def readme_commands() -> list[list[str]]:
    """Each line of the section's shell block, split as the shell would (comments dropped)."""
    lines = blocks(readme_section(), "sh")[0].splitlines()
    return [shlex.split(line, comments=True) for line in lines if line.strip()]


def readme_refusal() -> tuple[list[str], str]:
    """The misspelt-field example: the command after ``$ `` and the error it prints."""
    for block in blocks(readme_section(), "text"):
        if block.startswith("$ kubectl apply"):
            command, _, output = block.partition("\n")
            return shlex.split(command.removeprefix("$ ")), output.strip()
    raise AssertionError("the README shows no refused kubectl apply")


class Kubectl:
    def __init__(self, binary: str, kubeconfig: Path, cluster: ClusterAccess) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.cluster = cluster

    def run(self, command: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
        assert command[0] == "kubectl", command
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        return subprocess.run(
            [self.binary, *command[1:]],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )

    def claim_dir(self, claim: str) -> Path:
        """Where the local cluster keeps the files of ``claim`` (read here as a pod would)."""
        done = self.run(["kubectl", "get", "pvc", claim, "-o", "json"])
        assert done.returncode == 0, done.stderr
        return self.cluster.claim_dir(KUBECTL_NAMESPACE, json.loads(done.stdout))

    def logs(self) -> str:
        parts = []
        pods = self.cluster.directory / "pods" / KUBECTL_NAMESPACE
        for log in sorted(pods.glob("*/*.log")):
            parts.append(f"\n--- {log.parent.name}/{log.name} ---\n{log.read_text()[-3000:]}")
        parts.append(f"\n--- the operator's log ---\n{self.cluster.operator_logs()[-3000:]}")
        return "".join(parts)


@pytest.fixture(scope="module")
def kubectl(
    local_cluster: ClusterAccess | None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Kubectl]:
    if local_cluster is None:
        pytest.skip("runs on the local cluster (its operator watches the kubectl namespace)")
    config = json.loads(local_cluster.kubeconfig.read_text())
    for context in config["contexts"]:
        context["context"]["namespace"] = KUBECTL_NAMESPACE
    path = tmp_path_factory.mktemp("kubectl") / "kubeconfig"
    path.write_text(json.dumps(config))
    yield Kubectl(kubectl_binary(), path, local_cluster)


def test_the_readme_commands_are_what_the_suite_runs() -> None:
    commands = readme_commands()
    assert all(command[0] == "kubectl" for command in commands)
    verbs = [command[1] for command in commands]
    assert verbs.count("wait") == 4 and verbs[-1] == "delete"
    assert ["kubectl", "get", "fsj"] in commands


def test_a_misspelt_field_is_refused_with_the_servers_message(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    command, expected = readme_refusal()
    manifest = (ROOT / "examples" / "streaming" / "cluster.yaml").read_text()
    assert "    maxAttempts: 3\n" in manifest
    (tmp_path / command[-1]).write_text(manifest.replace("maxAttempts: 3", "maxAtempts: 3"))
    done = kubectl.run(command, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip() == expected
    gone = kubectl.run(["kubectl", "get", "fsj", "clickstream", "--ignore-not-found"])
    assert gone.returncode == 0 and gone.stdout == "", "nothing was created"


def test_the_readme_commands_run_a_job_through_its_phases(kubectl: Kubectl) -> None:
    read = 0
    for command in readme_commands():
        done = kubectl.run(command)
        line = shlex.join(command)
        assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}{kubectl.logs()}"
        if command[1:] == ["get", "fsj"]:
            header, *rows = done.stdout.splitlines()
            assert header.split() == ["NAME", "PHASE", "STATE", "CHECKPOINT", "ATTEMPT", "AGE"]
            row = next(r.split() for r in rows if r.startswith("clickstream "))
            assert row[1:3] == ["Running", "Running"], done.stdout
        if command[1:3] == ["get", "pods"]:
            pods = sorted(row.split()[0] for row in done.stdout.splitlines()[1:])
            assert pods == ["clickstream-1-exec-1", "clickstream-1-exec-2"], done.stdout
        if command[1] == "wait":
            assert "condition met" in done.stdout, done.stdout
        if command[1] == "wait" and command[-2].endswith("=Running"):
            # Each attempt reads input before the next command stops it (as a user would find
            # it: typing takes longer), so that the suspend, the resume and the drain carry data.
            read = wait_for(
                more_read(kubectl, read),
                "the running job reads input",
                START,
                on_fail=kubectl.logs,
                interval=1.0,
            )
        if "jsonpath={.status.savepoint.location}" in command:
            assert done.stdout.strip(), "the drained job names its savepoint"
    gone = kubectl.run(["kubectl", "get", "fsj", "clickstream", "--ignore-not-found"])
    assert gone.returncode == 0 and gone.stdout == "", gone.stdout

    # Suspended, resumed and drained: nothing lost, nothing twice (e2e/clickcounts.py): the
    # counts of at least the files read before the drain.
    data = kubectl.claim_dir("finishable-data") / "clickstream"
    assert_prefix_of_input(committed(data / "output"), data / "input", read)


def more_read(kubectl: Kubectl, than: int) -> Callable[[], int | None]:
    """A probe: the files read, once more than ``than``."""
    return lambda: n if (n := splits_finished(kubectl)) > than else None


def splits_finished(kubectl: Kubectl) -> int:
    """The input files the job had read, as its status counts them."""
    jsonpath = "jsonpath={.status.coordinator.splitsFinished}"
    done = kubectl.run(["kubectl", "get", "fsj", "clickstream", "-o", jsonpath])
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip() or 0)
