"""The kubelet with the container runtime: pods as docker containers of the built image, run
through the API (the image is built first, as ``make image`` builds it: a cache hit after the
image tests)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from finishable.kube.api import KubeApi
from testcluster import image
from testcluster.apiserver.emulator import EmulatorServer
from testcluster.localcluster.container_runtime import LABEL, OWNER_LABEL, ContainerRuntime
from testcluster.localcluster.kubelet import Kubelet

pytestmark = pytest.mark.quick

TIMEOUT = 120.0


@pytest.fixture(scope="module")
def built() -> str:
    try:
        image.build()
    except image.BuildFailed as failed:
        pytest.fail(str(failed))
    return image.IMAGE


@pytest.fixture
def node(tmp_path: Path, built: str) -> Iterator[tuple[KubeApi, Kubelet]]:
    runtime = ContainerRuntime([built])
    try:
        addresses = ("127.0.0.1", runtime.api_host)
        with EmulatorServer(required_token="admin", tls=True, tls_addresses=addresses) as server:
            api = KubeApi.for_url(server.url, token="admin", namespace="ns1")
            api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "ns1"}})
            kubelet = Kubelet(api, tmp_path, runtime=runtime, api_port=server.tls_port).start()
            try:
                yield api, kubelet
            finally:
                kubelet.stop()
                api.close()
    finally:
        runtime.close()
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={LABEL}={runtime.id}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert left == "", "the runtime removed its containers"
    networks = subprocess.run(
        ["docker", "network", "ls", "-q", "--filter", f"name={runtime.network}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert networks == "", "and its network"


def wait(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def status_of(api: KubeApi, name: str) -> dict[str, Any]:
    return dict(api.request("GET", api.path("pods", name)).body.get("status") or {})


def ended(api: KubeApi, name: str) -> dict[str, Any]:
    return dict(
        wait(
            lambda: (s := status_of(api, name)).get("phase") in ("Succeeded", "Failed") and s,
            f"{name} to end",
        )
    )


def pod(name: str, script: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "c", "image": image.IMAGE, "command": ["sh", "-c"], "args": [script]}
    container |= spec.pop("container", {})
    return {
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }


def test_a_pod_runs_as_the_images_user_with_its_volumes_address_name_and_the_api(
    node: tuple[KubeApi, Kubelet],
) -> None:
    """The image's user and entrypoint's environment, a ConfigMap at its path, an emptyDir the
    non-root user writes, the pod's address and name, the kubelet's hosts file, and the API
    server reached in-cluster: at KUBERNETES_SERVICE_HOST, verified with the mounted CA, with
    the pod's own ServiceAccount token."""
    api, kubelet = node
    config = {"metadata": {"name": "settings"}, "data": {"greeting": "hello"}}
    assert api.request("POST", api.path("configmaps"), body=config).status == 201
    account = "/var/run/secrets/kubernetes.io/serviceaccount"
    call_api = (
        "import os, ssl, urllib.request; "
        f"context = ssl.create_default_context(cafile='{account}/ca.crt'); "
        "host = os.environ['KUBERNETES_SERVICE_HOST']; "
        "port = os.environ['KUBERNETES_SERVICE_PORT']; "
        f"token = open('{account}/token').read(); "
        "url = f'https://{host}:{port}/api/v1/namespaces/ns1/pods/runner'; "
        "request = urllib.request.Request(url, headers={'Authorization': 'Bearer ' + token}); "
        "print(urllib.request.urlopen(request, context=context).status)"
    )
    script = (
        "set -e; id -u > /scratch/out; (cat /etc/settings/greeting; echo) >> /scratch/out; "
        'echo "$(POD_IP) $JAVA_HOME" >> /scratch/out; hostname >> /scratch/out; '
        "grep -c runner /etc/hosts >> /scratch/out; "
        f'python -c "{call_api}" >> /scratch/out; exit 3'
    )
    body = pod(
        "runner",
        script,
        container={
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "volumeMounts": [
                {"name": "settings", "mountPath": "/etc/settings"},
                {"name": "scratch", "mountPath": "/scratch"},
            ],
        },
        volumes=[
            {"name": "settings", "configMap": {"name": "settings"}},
            {"name": "scratch", "emptyDir": {}},
        ],
    )
    assert api.request("POST", api.path("pods"), body=body).status == 201
    status = ended(api, "runner")
    [directory] = (kubelet.root / "pods" / "ns1").glob("runner-*")
    log = (directory / "c.log").read_text()
    terminated = status["containerStatuses"][0]["state"]["terminated"]
    assert status["phase"] == "Failed" and terminated["exitCode"] == 3, log
    assert status["containerStatuses"][0]["containerID"].startswith("docker://")
    assert status["hostIP"] == kubelet.runtime.host_ip
    out = (directory / "volumes" / "scratch" / "out").read_text().splitlines()
    assert out[0] == "1000", "the image's non-root user"
    assert out[1:] == [
        "hello",
        f"{status['podIP']} /usr/lib/jvm/java-17-openjdk",
        "runner",
        "1",
        "200",
    ], log


def test_a_sigkilled_container_ends_with_137_and_a_bad_context_never_starts(
    node: tuple[KubeApi, Kubelet],
) -> None:
    api, _ = node
    assert api.request("POST", api.path("pods"), body=pod("sleeper", "sleep 600")).status == 201
    container_id = wait(
        lambda: (status_of(api, "sleeper").get("containerStatuses") or [{}])[0].get("containerID"),
        "the container to start",
    )
    scheme, _, name = container_id.partition("://")
    subprocess.run([scheme, "kill", "--signal", "KILL", name], check=True, capture_output=True)
    status = ended(api, "sleeper")
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137

    root = pod("as-root", "true", securityContext={"runAsNonRoot": True, "runAsUser": 0})
    assert api.request("POST", api.path("pods"), body=root).status == 201
    waiting = wait(
        lambda: (
            (status_of(api, "as-root").get("containerStatuses") or [{}])[0]
            .get("state", {})
            .get("waiting")
        ),
        "the pod to wait",
    )
    assert waiting["reason"] == "CreateContainerConfigError"
    assert "runAsNonRoot" in waiting["message"]


def test_a_new_runtime_removes_what_a_killed_local_cluster_left(built: str) -> None:
    """A local cluster killed before it cleaned up leaves running containers and a network:
    the next runtime removes them (their owner process is gone), and only them."""
    owner = subprocess.Popen(["true"])
    owner.wait()
    labels = ["--label", f"{LABEL}=gone", "--label", f"{OWNER_LABEL}={owner.pid}"]
    network = subprocess.run(
        ["docker", "network", "create", *labels, "finishable-gone"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    left = subprocess.run(
        ["docker", "run", "-d", *labels, built, "sleep", "600"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    ContainerRuntime([built]).close()
    for listing in (["ps", "-aq", "--no-trunc"], ["network", "ls", "-q", "--no-trunc"]):
        found = subprocess.run(
            ["docker", *listing, "--filter", f"label={LABEL}=gone"],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        assert left not in found and network not in found
