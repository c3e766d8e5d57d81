"""The real node (``testcluster/controlplane/realnode.py``): the kubelet and kube-proxy of the
pinned release, CoreDNS, containerd and runc run pods of the project's image under the real
control plane, on this machine's cgroup v1.

One pod serves a file; another, started after it, finds it through cluster DNS and its Service
(kube-proxy's rules), asks the API server through the ``kubernetes`` Service with its
ServiceAccount token, and prints what it got; the test reads that through the API server (the
kubelet's log endpoint) and compares it with what the server stores. Full tier: the node's parts
are built from their modules on a machine's first run (minutes), the image exported into the
node's containerd on every run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from finishable.kube.api import KubeApi
from testcluster import image
from testcluster.controlplane import realnode
from testcluster.controlplane.cluster import ControlPlane
from testcluster.controlplane.realnode import RealNode
from testcluster.waiting import wait_for

pytestmark = pytest.mark.full

NAMESPACE = "web"
NODE = "node-1"

CLIENT = """
import json, os, socket, ssl, urllib.request
service = socket.gethostbyname("files.web.svc.cluster.local")
body = urllib.request.urlopen("http://files:8080/greeting.txt", timeout=30).read().decode()
account = "/var/run/secrets/kubernetes.io/serviceaccount"
context = ssl.create_default_context(cafile=f"{account}/ca.crt")
request = urllib.request.Request(
    f"https://{os.environ['KUBERNETES_SERVICE_HOST']}/version",
    headers={"Authorization": "Bearer " + open(f"{account}/token").read()},
)
version = json.load(urllib.request.urlopen(request, context=context, timeout=30))["gitVersion"]
print(json.dumps({"service": service, "body": body, "version": version}))
"""


def pod(name: str, labels: dict[str, str], command: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": image.IMAGE,
                    "imagePullPolicy": "Never",  # exported into the node's containerd
                    "command": command,
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, RealNode]]:
    image.build()
    with (
        ControlPlane(tmp_path_factory.mktemp("plane"), bind_address="0.0.0.0") as plane,
        RealNode(plane, tmp_path_factory.mktemp("node"), NODE, images=(image.IMAGE,)) as node,
    ):
        yield plane, node


def test_pods_find_each_other_and_the_api_server_through_dns_and_services(
    node: tuple[ControlPlane, RealNode],
) -> None:
    plane, real = node
    assert real.addresses is not None
    admin = KubeApi.from_kubeconfig(plane.admin.kubeconfig, namespace=NAMESPACE)
    assert admin.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})
    server = pod(
        "files",
        {"app": "files"},
        ["sh", "-c", "mkdir -p /tmp/site && echo hello-from-files > /tmp/site/greeting.txt "
                     "&& exec python3 -m http.server 8080 --directory /tmp/site"],
    )  # fmt: skip
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "files"},
        "spec": {"selector": {"app": "files"}, "ports": [{"port": 8080}]},
    }
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    assert admin.request("POST", pods, body=server).status == 201
    created = admin.request("POST", f"/api/v1/namespaces/{NAMESPACE}/services", body=service)
    assert created.status == 201, created.body
    cluster_ip = created.body["spec"]["clusterIP"]

    def ready_endpoint() -> str | None:
        slices = admin.request(
            "GET", f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices"
        ).body["items"]
        return next(
            (address for piece in slices for endpoint in piece.get("endpoints") or []
             if endpoint.get("conditions", {}).get("ready") for address in endpoint["addresses"]),
            None,
        )  # fmt: skip

    served_at = wait_for(ready_endpoint, timeout=300, what="the files Service's ready endpoint")
    subnet = real.addresses.pod_subnet.rsplit(".", 1)[0] + "."
    assert served_at.startswith(subnet), (served_at, real.addresses.pod_subnet)

    assert admin.request("POST", pods, body=pod("client", {}, ["python3", "-c", CLIENT])).status
    done = wait_for(
        lambda: (
            (phase := admin.request("GET", f"{pods}/client").body["status"].get("phase"))
            in ("Succeeded", "Failed")
            and phase
        ),
        timeout=300,
        what="the client pod's end",
    )
    log = admin.request("GET", f"{pods}/client/log")
    assert done == "Succeeded", log.body
    assert log.status == 200, log.body
    text = log.body if isinstance(log.body, str) else json.dumps(log.body)
    printed = json.loads(text.strip().splitlines()[-1])
    version = admin.request("GET", "/version").body["gitVersion"]
    assert printed == {"service": cluster_ip, "body": "hello-from-files\n", "version": version}
    on_node = admin.request("GET", f"{pods}/files").body["spec"]["nodeName"]
    assert on_node == NODE


def test_a_stopped_node_leaves_nothing_behind(tmp_path: Path) -> None:
    """A node of its own (no images to export): stopped, it leaves no network namespace,
    cgroup, mount or process of its containerd."""
    with ControlPlane(tmp_path / "plane", bind_address="0.0.0.0") as plane:
        node = RealNode(plane, tmp_path / "node", "node-2").start()
        addresses = node.addresses
        assert addresses is not None
        socket, kubelet_root = str(node.socket), node.kubelet_root
        node.stop()
    assert not Path(f"/run/netns/{addresses.name}").exists()
    assert not any((h / addresses.name).exists() for h in realnode.cgroup_hierarchies())
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(tmp_path / "node") not in mounts and str(kubelet_root) not in mounts
    assert not kubelet_root.exists()
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit()
            and socket.encode() in _cmdline(p)]  # fmt: skip
    assert not left


def _cmdline(process: Path) -> bytes:
    try:
        return (process / "cmdline").read_bytes()
    except OSError:
        return b""  # ended while we looked
