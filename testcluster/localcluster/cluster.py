"""The local cluster: the API emulator, a kubelet, the StatefulSet, Deployment and ReplicaSet
controllers, the chart's operator and Prometheus, on one machine.

The kubelet's runtime is ``container`` (the built image, IMAGE, run by docker: the image's
entrypoint, paths and user run every pod; ``make image`` builds it) or ``process`` (quick, no
container engine: pods are sandboxed processes of this machine, this environment standing in
for the image, see ``local_image()``).

``LocalCluster(directory).start()`` serves the Kubernetes API on a loopback port (the extended
kmock emulator of ``testcluster.apiserver``, checking custom resources against their CRD schema),
creates the namespaces, starts the controllers (StatefulSets, Deployments and ReplicaSets; the
garbage collector is the emulator's) and the kubelet, and installs the chart as helm renders it
(``chart.py``: CRDs, service account, RBAC, Services, dashboard and the Deployment; the
namespaced mode, peering on). The operator is the chart's Deployment's pod, run by the kubelet
with the chart's command, args, env, ports, probes and service account: under RBAC, with the
OwnerReferencesPermissionEnforcement admission plugin on (as in OpenShift), with its default
Spark master: the API server's ``k8s://`` URL, so Spark's
Kubernetes backend in each driver creates its executor pods through the API and the kubelet runs
them (``spark_master="local[2]"`` runs Spark inside the driver pod instead). The kubelet and the
StatefulSet controller keep the admin's token. Prometheus (``prometheus.py``) scrapes the
operator as the chart's ServiceMonitor says and evaluates its alerting rules. The admin
kubeconfig is ``<directory>/kubeconfig``; logs are
``<directory>/pods/<namespace>/<pod>-<uid>/<container>.log`` (the operator's in the namespace
OPERATOR_NAMESPACE); when it stops, the API audit (every call counted by client, verb and
resource, and every request refused) is written to ``<directory>/api-calls.json`` and
``<directory>/api-refusals.json``. While it runs, ``<directory>/cluster.json`` tells another
process how to use it (``attached.py``: an e2e run against ``python -m testcluster``).

``control_plane="real"`` (pods as containers only) runs it on the real control plane instead
(``testcluster.controlplane``: kube-apiserver, kube-controller-manager, kube-scheduler and etcd of
pinned releases): the controller-manager replaces the local controllers and the emulator's
garbage collection, the scheduler binds the pods, the kubelet is the node ``local`` with that
node's own identity (its Node and Lease kept by a ``NodeAgent``), a ``Provisioner`` binds the
claims, clients authenticate by client certificates, and the audit log is the API's record.
``real_nodes=N`` runs the pods on N real nodes in place of the project's kubelet
(``testcluster.controlplane.realnode``: the release's kubelet and kube-proxy, CoreDNS, containerd
and runc; root only): the image is imported into each node's containerd, and the kubelets' logs
are kept in the same layout (``testcluster.controlplane.podlogs``).
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import pyspark

from finishable.kube.api import KubeApi
from testcluster.apiserver.emulator import CALLS_PATH, REFUSALS_PATH, EmulatorServer
from testcluster.chart.helm import only
from testcluster.controlplane.audit import AuditLog
from testcluster.controlplane.cluster import ControlPlane, binaries, host_address
from testcluster.controlplane.node import NodeAgent
from testcluster.controlplane.podlogs import PodLogKeeper
from testcluster.controlplane.provisioner import Provisioner
from testcluster.controlplane.realnode import NODE_COMPONENTS, RealNode
from testcluster.image import IMAGE
from testcluster.localcluster import chart
from testcluster.localcluster.chart import OPERATOR_NAMESPACE, RELEASE
from testcluster.localcluster.container_runtime import ContainerRuntime
from testcluster.localcluster.deployments import DeploymentController, is_ready
from testcluster.localcluster.kubelet import NODE_NAME, Kubelet, kubeconfig
from testcluster.localcluster.objectstore import ObjectStore
from testcluster.localcluster.podspec import Image
from testcluster.localcluster.process_runtime import ProcessRuntime
from testcluster.localcluster.prometheus import Prometheus, scrape_config
from testcluster.localcluster.runtime import ImageUnknown, Runtime
from testcluster.localcluster.statefulsets import StatefulSetController
from testcluster.localcluster.volumes import claim_dir

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_START_TIMEOUT = 120.0
RUNTIMES = ("process", "container")
CONTROL_PLANES = ("emulator", "real")
# The API audit, written into the cluster's directory when it stops (_keep_api_audit).
API_CALLS_FILE = "api-calls.json"
API_REFUSALS_FILE = "api-refusals.json"
ACCESS_FILE = "cluster.json"  # what another process needs to use the running cluster (attached.py)


class ClusterAccess:
    """A local cluster as a test run uses it: its API, object store, chart, Prometheus and the
    files its pods leave, whether this process started it (``LocalCluster``) or another one did
    (``AttachedCluster``, for a test run against ``python -m testcluster``)."""

    directory: Path
    token: str
    namespaces: tuple[str, ...]
    chart: list[dict[str, Any]]
    object_store: ObjectStore
    prometheus: Prometheus | None
    operator_pod: dict[str, Any] | None
    # The partition service's bearer token of each namespace (its Secret's keys).
    partition_tokens: dict[str, str]
    # A real control plane's audit log; None on the emulator, which counts calls itself.
    audit_log: Path | None = None
    # The containerd sockets of real nodes (where their containers are killed); none otherwise.
    containerd_sockets: tuple[Path, ...] = ()

    def api_calls(self) -> list[dict[str, Any]]:
        """Every call the API server was asked, counted by client, verb and resource, as RBAC
        sees it (what the RBAC checks read)."""
        if self.audit_log is not None:
            return AuditLog(self.audit_log).calls()
        return self._emulator_record(CALLS_PATH)

    def api_refusals(self) -> list[dict[str, Any]]:
        """Every request the API server refused or failed (client, method, path, status)."""
        if self.audit_log is not None:
            return AuditLog(self.audit_log).refusals()
        return self._emulator_record(REFUSALS_PATH)

    def _emulator_record(self, path: str) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return list(json.loads(response.read()))

    @property
    def url(self) -> str:
        """The API server's address on loopback: the emulator's plain HTTP (the kubeconfig's is
        HTTPS), or the real control plane's HTTPS."""
        raise NotImplementedError

    @property
    def api_host(self) -> str:
        """The node's address, where pods reach the API server and the object store."""
        raise NotImplementedError

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    def api(self, user_agent: str, namespace: str | None = None) -> KubeApi:
        if not self.token:  # a real control plane: its admin's client certificate
            return KubeApi.from_kubeconfig(
                self.kubeconfig, namespace=namespace or self.namespaces[0], user_agent=user_agent
            )
        return KubeApi.for_url(
            self.url,
            token=self.token,
            namespace=namespace or self.namespaces[0],
            user_agent=user_agent,
        )

    @property
    def partition_storage(self) -> str:
        """The partition service's storage, as pods reach the object store."""
        return self.object_store.url("cluster-partitions", self.api_host)

    def object_storage(self, prefix: str) -> str:
        """An ``s3://`` URL of ``prefix`` in the cluster's bucket, as pods reach it."""
        return self.object_store.url(prefix, self.api_host)

    def partition_storage_from_host(self) -> str:
        return self.object_store.url("cluster-partitions", "127.0.0.1")

    def claim_dir(self, namespace: str, claim: dict[str, Any]) -> Path:
        """Where the cluster keeps the files of ``claim`` (an object read from the API)."""
        return claim_dir(self.directory, namespace, claim)

    def _operator_port(self, name: str) -> int:
        deployment = chart.operator_part(self.chart, "Deployment")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == name]
        return int(port)

    @property
    def operator_address(self) -> str:
        """host:port of the operator pod's metrics port."""
        assert self.operator_pod is not None
        return f"{self.operator_pod['status']['podIP']}:{self._operator_port('metrics')}"

    def partition_service_url(self, timeout: float = OPERATOR_START_TIMEOUT) -> str:
        """``http://podIP:port`` of the partition service's pod, once it is ready."""
        deployment = chart.partition_service_part(self.chart, "Deployment")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == "http"]
        pod = ready_pod(self.api("local-cluster"), deployment, timeout)
        if pod is None:
            raise RuntimeError("the partition service's pod did not become ready")
        return f"http://{pod['status']['podIP']}:{port}"

    def metrics(self) -> str:
        """The operator's Prometheus metrics, as scraped."""
        url = f"http://{self.operator_address}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            return str(response.read().decode())

    def operator_logs(self) -> str:
        """The logs of the operator's pods (one the Deployment replaced too), oldest first."""
        logs = (self.directory / "pods" / OPERATOR_NAMESPACE).glob(f"{RELEASE}-*/operator.log")
        return "".join(
            log.read_text(errors="replace") for log in sorted(logs, key=os.path.getmtime)
        )

    def stop(self) -> None:
        """Nothing to stop here; ``LocalCluster`` stops what it started."""


class LocalCluster(ClusterAccess):
    """See the module docstring; a context manager, or ``start()`` and ``stop()``."""

    def __init__(
        self,
        directory: Path,
        *,
        namespaces: tuple[str, ...] = ("default",),
        spark_master: str | None = None,
        port: int = 0,
        runtime: str = "process",
        control_plane: str = "emulator",
        real_nodes: int = 0,
    ) -> None:
        if runtime not in RUNTIMES:
            raise ValueError(f"runtime {runtime!r}: one of {', '.join(RUNTIMES)}")
        if control_plane not in CONTROL_PLANES:
            raise ValueError(f"control_plane {control_plane!r}: one of {', '.join(CONTROL_PLANES)}")
        if control_plane == "real" and runtime != "container":
            raise ValueError(
                "control_plane 'real' runs pods as containers (runtime 'container'): the real "
                "endpoints controllers refuse the process runtime's loopback pod addresses"
            )
        if real_nodes < 0 or (real_nodes and control_plane != "real"):
            raise ValueError(
                f"real_nodes {real_nodes}: 0, or 1 and more with control_plane 'real' (a real "
                "kubelet needs a real API server)"
            )
        self.directory = directory.resolve()
        self.real_nodes: list[RealNode] = []
        self.real_node_count = real_nodes
        self.pod_logs: PodLogKeeper | None = None
        self.runtime: Runtime | None = None  # the project's kubelet's; real nodes run containerd
        if not real_nodes:
            self.runtime = (
                ContainerRuntime([IMAGE])
                if runtime == "container"
                else ProcessRuntime({IMAGE: local_image()})
            )
        # Where pods reach this machine: a real node's pods through their node's route to it.
        self._api_host = self.runtime.api_host if self.runtime is not None else host_address()
        self.namespaces = namespaces
        self.spark_master = spark_master
        self.plane: ControlPlane | None = None
        self.provisioner: Provisioner | None = None
        self.node: NodeAgent | None = None
        if control_plane == "real":
            self.token = ""  # clients authenticate by the admin's client certificate
            self.plane = ControlPlane(
                self.directory / "control-plane",
                bind_address="0.0.0.0",  # pods on the container network reach it
                serving_addresses=(self._api_host,),
            )
            self.audit_log = self.plane.audit_log
        else:
            self.token = secrets.token_urlsafe(16)
        self.server = EmulatorServer(
            port=port,
            tls=True,
            # where pods reach it too: the node's address on the pods' network
            tls_addresses=tuple(dict.fromkeys(("127.0.0.1", self._api_host))),
            required_token=self.token,
            validate_schemas=True,
            # RBAC and the OwnerReferencesPermissionEnforcement admission plugin (on in OpenShift)
            authorize=True,
            owner_reference_enforcement=True,
        )
        self.operator_pod: dict[str, Any] | None = None
        self.deployments: DeploymentController | None = None
        self.kubelet: Kubelet | None = None
        self.stateful_sets: StatefulSetController | None = None
        self.prometheus: Prometheus | None = None
        self._following = threading.Event()
        self.chart: list[dict[str, Any]] = []
        self.object_store = ObjectStore()
        # The partition service's bearer token of each namespace (its Secret's keys).
        self.partition_tokens = {ns: secrets.token_urlsafe(16) for ns in namespaces}

    @property
    def url(self) -> str:
        return self.plane.url if self.plane is not None else str(self.server.url)

    @property
    def api_host(self) -> str:
        return self._api_host

    @property
    def api_port(self) -> int:
        """The API server's HTTPS port (the one pods reach it on)."""
        return self.plane.port if self.plane is not None else int(self.server.tls_port)

    @property
    def api_address(self) -> tuple[str, int]:
        """Where pods reach the API server (its HTTPS port; the Service variables a kubelet
        gives every container: ``KUBERNETES_SERVICE_HOST`` and ``_PORT``)."""
        return self._api_host, self.api_port

    # -- life -------------------------------------------------------------------------------

    def start(self) -> Self:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.object_store.start()
        try:
            if self.runtime is not None:
                self.runtime.check_image(IMAGE)
        except ImageUnknown as unknown:
            raise RuntimeError(f"{unknown}: build it first (make image)") from None
        if self.plane is not None:
            self._start_on_the_control_plane()
        else:
            self._start_on_the_emulator()
        admin = self.api("local-cluster")
        self._install(admin)
        self.operator_pod = self._await_operator(admin)
        self._start_prometheus()
        self._write_access_file()
        return self

    def _start_on_the_emulator(self) -> None:
        """The emulator, with the local cluster's own controllers; its kubelet binds pods."""
        self.server.start()
        self.kubeconfig.write_text(
            # HTTPS, as kubectl sends a token over HTTPS only; the CA is the emulator's.
            json.dumps(
                kubeconfig(
                    self.server.tls_url, self.token, self.namespaces[0], ca=self.server.ca_pem
                ),
                indent=2,
            )
        )
        assert self.runtime is not None  # real nodes run on the real control plane only
        self.stateful_sets = StatefulSetController(self.api("statefulset-controller")).start()
        self.deployments = DeploymentController(self.api("deployment-controller")).start()
        self.kubelet = Kubelet(
            self.api("kubelet"), self.directory, runtime=self.runtime, api_port=self.api_port
        ).start()

    def _start_on_the_control_plane(self) -> None:
        """The real control plane: its controller-manager and scheduler in place of the local
        cluster's controllers, a provisioner for claims, and the kubelet as the node ``local``
        with the node's own identity (its Node and Lease kept by a :class:`NodeAgent`)."""
        assert self.plane is not None
        self.plane.start()
        self.kubeconfig.write_text(self.plane.admin.kubeconfig.read_text())
        self.provisioner = Provisioner(self.api("provisioner"), self.directory).start()
        if self.real_node_count:
            self._start_real_nodes()
            return
        assert self.runtime is not None
        self.node = self.plane.node(NODE_NAME)
        node = KubeApi.from_kubeconfig(
            self.plane.identity(f"system:node:{NODE_NAME}", ["system:nodes"]).kubeconfig,
            user_agent="kubelet",
        )
        self.kubelet = Kubelet(
            node,
            self.directory,
            runtime=self.runtime,
            api_port=self.api_port,
            binds=False,
            keeps_claims=False,
        ).start()

    def _start_real_nodes(self) -> None:
        """The real nodes, each with the image exported from docker once, their pods' logs kept
        where the project's kubelet keeps them."""
        assert self.plane is not None
        archive = self.directory / "image.tar"
        saved = subprocess.run(
            ["docker", "save", "--output", str(archive), IMAGE], capture_output=True, check=False
        )
        if saved.returncode != 0:
            why = saved.stderr.decode().strip()[-500:]
            raise RuntimeError(f"image {IMAGE}: {why}: build it first (make image)")
        parts = binaries(NODE_COMPONENTS)  # found (or built) once for every node
        self.real_nodes = [
            RealNode(
                self.plane, self.directory / name, name=name, archives=(archive,), binaries=parts
            )
            for name in (f"node-{index + 1}" for index in range(self.real_node_count))
        ]
        try:  # side by side: each imports the image (a minute) into its own containerd
            with concurrent.futures.ThreadPoolExecutor(len(self.real_nodes)) as starting:
                for started in [starting.submit(node.start) for node in self.real_nodes]:
                    started.result()
        finally:
            archive.unlink(missing_ok=True)  # a gigabyte, in each node's containerd now
        self.containerd_sockets = tuple(node.socket for node in self.real_nodes)
        sources = [node.pod_logs for node in self.real_nodes]
        self.pod_logs = PodLogKeeper(sources, self.directory / "pods").start()

    def _write_access_file(self) -> None:
        """What another process needs to use this cluster while it runs (``AttachedCluster``)."""
        access = {
            "url": self.url,
            "token": self.token,
            "audit_log": str(self.audit_log) if self.audit_log else "",
            "namespaces": list(self.namespaces),
            "api_host": self.api_host,
            "object_store_port": self.object_store.port,
            "prometheus_port": self.prometheus.port if self.prometheus else 0,
            "partition_tokens": self.partition_tokens,
            "chart": self.chart,
            "containerd_sockets": [str(socket) for socket in self.containerd_sockets],
        }
        (self.directory / ACCESS_FILE).write_text(json.dumps(access))

    def stop(self) -> None:
        self._following.set()
        if self.prometheus is not None:
            self.prometheus.stop()
        if self.deployments is not None:
            self.deployments.stop()
        if self.kubelet is not None:
            self.kubelet.stop()  # and its runtime
        elif self.runtime is not None:
            self.runtime.close()
        for node in self.real_nodes:
            node.stop()
        if self.pod_logs is not None:
            self.pod_logs.stop()  # after the nodes: their pods' last lines
        if self.stateful_sets is not None:
            self.stateful_sets.stop()
        if self.node is not None:
            self.node.stop()
        if self.provisioner is not None:
            self.provisioner.stop()
        if self.plane is not None:
            self.plane.stop()
        else:
            self.server.stop()
        self.object_store.stop()
        (self.directory / ACCESS_FILE).unlink(missing_ok=True)  # nothing to attach to now
        self._keep_api_audit()

    def _keep_api_audit(self) -> None:
        """What the API server was asked (each call as RBAC sees it, counted) and what it refused,
        kept beside the pod logs: where a failed e2e run is read once the cluster is gone."""
        emulator = self.server.emulator
        if self.audit_log is not None:  # the real control plane's (its own file stays too)
            audit = AuditLog(self.audit_log)
            calls, refusals = audit.calls(), audit.refusals()
        elif emulator is not None:
            calls = [{**call._asdict(), "count": n} for call, n in emulator.api_calls.items()]
            refusals = list(emulator.refusals)
        else:
            return
        (self.directory / API_CALLS_FILE).write_text(json.dumps(calls, indent=1))
        (self.directory / API_REFUSALS_FILE).write_text(json.dumps(refusals, indent=1))

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- parts ------------------------------------------------------------------------------

    def _install(self, api: KubeApi) -> None:
        """``kubectl create namespace`` and ``helm install`` of the chart."""
        for namespace in dict.fromkeys((*self.namespaces, OPERATOR_NAMESPACE)):
            body = {"metadata": {"name": namespace}}
            response = api.request("POST", "/api/v1/namespaces", body=body)
            if response.status not in (201, 409):
                raise RuntimeError(f"cannot create namespace {namespace}: {response.message}")
        tokens = {
            "metadata": {"name": "finishable-partition-tokens", "namespace": OPERATOR_NAMESPACE},
            "stringData": self.partition_tokens,
        }
        path = api.path("secrets", namespace=OPERATOR_NAMESPACE)
        response = api.request("POST", path, body=tokens)
        if response.status not in (201, 409):
            raise RuntimeError(f"cannot create the partition tokens: {response.message}")
        self.chart = chart.render(self.namespaces, self.spark_master, self.partition_storage)
        chart.install(api, self.chart)

    def _await_operator(self, api: KubeApi) -> dict[str, Any]:
        """The Deployment's pod, once its readiness probe (kopf's /healthz) answers."""
        deployment = chart.operator_part(self.chart, "Deployment")
        pod = ready_pod(api, deployment, OPERATOR_START_TIMEOUT)
        if pod is None:
            raise RuntimeError(
                f"the operator's pod did not become ready: {self.operator_logs()[-3000:]}"
            )
        return pod

    def _start_prometheus(self) -> None:
        """Prometheus scraping the operator as the chart's ServiceMonitor asks, with its rules."""
        assert self.operator_pod is not None
        scrape = scrape_config(
            chart.operator_part(self.chart, "ServiceMonitor"),
            chart.operator_part(self.chart, "Service"),
            self.operator_address,
            pod=self.operator_pod["metadata"]["name"],
        )
        rules = only(self.chart, "PrometheusRule")["spec"]
        self.prometheus = Prometheus(self.directory / "prometheus", scrape, rules).start()
        threading.Thread(target=self._follow_operator, name="follow-operator", daemon=True).start()

    def _follow_operator(self) -> None:
        """Keep ``operator_pod`` (and so ``metrics()`` and Prometheus' target) on the operator's
        current ready pod: a test that deletes it (e2e/test_disruptions.py) gets a successor the
        Deployment makes, at another address, as a ServiceMonitor's target would follow it."""
        api = self.api("local-cluster")
        deployment = chart.operator_part(self.chart, "Deployment")
        while not self._following.wait(2.0):
            try:
                pod = ready_pod(api, deployment, 0)
            except Exception:  # the API restarting: try again on the next round
                continue
            current = self.operator_pod
            if pod is None or current is None:
                continue
            if pod["metadata"]["name"] != current["metadata"]["name"]:
                self.operator_pod = pod
                if self.prometheus is not None:
                    self.prometheus.retarget(self.operator_address, pod["metadata"]["name"])


def ready_pod(api: KubeApi, deployment: dict[str, Any], timeout: float) -> dict[str, Any] | None:
    """A ready pod of ``deployment`` (in the operator's namespace), or None at the deadline."""
    labels = deployment["spec"]["selector"]["matchLabels"]
    selector = ",".join(f"{key}={value}" for key, value in labels.items())
    path = api.path("pods", namespace=OPERATOR_NAMESPACE)
    deadline = time.monotonic() + timeout
    while True:  # asked once at least (a timeout of 0: is one ready now?)
        response = api.request("GET", path, query={"labelSelector": selector})
        ready = [pod for pod in response.body.get("items") or [] if is_ready(pod)]
        if ready:
            found: dict[str, Any] = ready[0]
            return found
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.5)


def local_image() -> Image:
    """The project's image (the Dockerfile) as this machine stands in for it: its entrypoint,
    CMD, ENV and WORKDIR, with this environment's interpreter, pyspark and Java in place of the
    image's, and the files it copies (the examples, the entrypoint) from the repository.
    ``tests/charts/test_dockerfile.py`` keeps the two in step."""
    python = Path(sys.executable)
    spark_home = Path(pyspark.__file__).resolve().parent
    java = shutil.which("java")
    java_home = os.environ.get("JAVA_HOME") or (
        str(Path(java).resolve().parents[1]) if java else "/usr/lib/jvm/default-java"
    )
    return Image(
        entrypoint=("/opt/finishable/entrypoint.sh",),
        cmd=("finishable", "--help"),
        env={
            "PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "PIP_NO_CACHE_DIR": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "JAVA_HOME": java_home,
            "SPARK_HOME": str(spark_home),
            "PYSPARK_PYTHON": str(python),
            "PYSPARK_DRIVER_PYTHON": str(python),
            "HOME": "/home/finishable",
        },
        working_dir="/home/finishable",
        files={
            "/opt/finishable/examples": ROOT / "examples",
            "/opt/finishable/entrypoint.sh": ROOT / "docker" / "entrypoint.sh",
        },
        dirs=("/home/finishable", "/tmp/finishable"),
        host_paths=tuple(sorted({ROOT, Path(sys.prefix).resolve(), spark_home})),
    )
