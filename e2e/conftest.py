"""The e2e suite's cluster: the local cluster unless ``E2E_KUBECONFIG`` names another one.

The local cluster runs pods as containers of the built image with ``E2E_RUNTIME=container``
(what ``make test`` runs: the image is built first, a cache hit after the image tests), as
sandboxed processes otherwise (quick, no container engine). Container pods run on the real
control plane (``testcluster/controlplane``: Kubernetes built from its Go modules) unless
``E2E_CONTROL_PLANE=emulator`` asks for the project's API emulator, which process pods always run
on. ``E2E_LOCAL_CLUSTER=DIR`` uses the
local cluster ``python -m testcluster --dir DIR`` runs already (serving both namespaces below)
instead of starting one."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from finishable.kube.api import KubeApi
from testcluster import image
from testcluster.client import E2ECluster, KubeconfigE2ECluster, LocalE2ECluster
from testcluster.controlplane.cluster import ControlPlaneError
from testcluster.localcluster.attached import AttachedCluster, NotRunning
from testcluster.localcluster.cluster import RUNTIMES, ClusterAccess, LocalCluster

NAMESPACE = os.environ.get("E2E_NAMESPACE", "finishable-e2e")
RUNTIME = os.environ.get("E2E_RUNTIME", "process")
# The local cluster's API: the emulator with its own controllers, or ``real``: the control plane of
# the pinned Kubernetes release (testcluster/controlplane; pods as containers only).
CONTROL_PLANE = os.environ.get(
    "E2E_CONTROL_PLANE", "real" if RUNTIME == "container" else "emulator"
)
# Real nodes (kubelet, kube-proxy, CoreDNS, containerd: testcluster/controlplane/realnode.py; root)
# in place of the project's kubelet on the real control plane; 0: the project's kubelet. Each
# node has this machine's CPUs, and the flows' pods request 1 CPU each (drivers, executors).
REAL_NODES = int(os.environ.get("E2E_REAL_NODES", "0"))
# Where e2e/test_kubectl.py runs the README's kubectl commands (they name no namespace).
KUBECTL_NAMESPACE = "finishable-kubectl"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The RBAC check reads the calls of every other test: it runs last."""
    items.sort(key=lambda item: item.get_closest_marker("after_all") is not None)


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterAccess | None]:
    if os.environ.get("E2E_KUBECONFIG"):
        yield None
        return
    namespaces = (NAMESPACE, KUBECTL_NAMESPACE)
    if running := os.environ.get("E2E_LOCAL_CLUSTER"):
        try:
            attached = AttachedCluster(Path(running), namespaces)
            attached.clear(namespaces)
        except NotRunning as problem:
            pytest.fail(str(problem))
        yield attached
        return
    if RUNTIME not in RUNTIMES:
        pytest.fail(f"E2E_RUNTIME={RUNTIME!r}: one of {', '.join(RUNTIMES)}")
    if RUNTIME == "container":
        try:
            image.build()
        except image.BuildFailed as failed:
            pytest.fail(str(failed))
    directory = tmp_path_factory.mktemp("cluster")
    try:
        cluster = LocalCluster(
            directory,
            namespaces=namespaces,
            runtime=RUNTIME,
            control_plane=CONTROL_PLANE,
            real_nodes=REAL_NODES,
        )
    except ValueError as invalid:
        pytest.fail(
            f"E2E_RUNTIME={RUNTIME!r}, E2E_CONTROL_PLANE={CONTROL_PLANE!r}, "
            f"E2E_REAL_NODES={REAL_NODES}: {invalid}"
        )
    except ControlPlaneError as missing:  # no Go to build it with, or a failed build
        pytest.fail(f"{missing}\n(E2E_CONTROL_PLANE=emulator runs the flows without it)")
    with cluster:
        yield cluster


@pytest.fixture(scope="session")
def cluster(
    local_cluster: ClusterAccess | None, tmp_path_factory: pytest.TempPathFactory
) -> E2ECluster:
    if local_cluster is not None:
        api = local_cluster.api("e2e", NAMESPACE)
        data = tmp_path_factory.mktemp("data")
        data.chmod(0o777)  # the jobs' /data: the image's user (uid 1000) writes there
        pods = local_cluster.directory / "pods"
        return LocalE2ECluster(
            api,
            NAMESPACE,
            data,
            pods,
            local_cluster.operator_logs,
            object_storage=local_cluster.object_storage,
            containerd_sockets=local_cluster.containerd_sockets,
        )
    kubeconfig = os.environ["E2E_KUBECONFIG"]
    data_dir = os.environ.get("E2E_DATA_DIR")
    if not data_dir:
        pytest.fail("E2E_DATA_DIR: a directory every node sees at the same path is required")
    api = KubeApi.from_kubeconfig(kubeconfig, namespace=NAMESPACE, user_agent="e2e")
    response = api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})
    assert response.status in (201, 409), response.body
    image = os.environ.get("E2E_IMAGE", "finishable-spark-operator:0.1.0")
    return KubeconfigE2ECluster(api, NAMESPACE, Path(data_dir), image, kubeconfig)
