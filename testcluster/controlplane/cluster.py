"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager
and kube-scheduler, each built from its Go module (``build-control-plane.sh``).

Configured as a production cluster is where the project's promises depend on it: TLS with a
client CA, ServiceAccount tokens signed by the cluster, RBAC (with the Node authorizer), the
admission plugins a production cluster runs (ServiceAccount, NodeRestriction,
OwnerReferencesPermissionEnforcement, PodSecurity) and an audit log of every request. Each
component runs as a child process with its own free ports and its log in the cluster's
directory; :meth:`ControlPlane.stop` ends them in reverse order.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from finishable.kube.api import KubeApi
from testcluster.controlplane import pki
from testcluster.controlplane.node import NodeAgent
from testcluster.network import free_port
from testcluster.processes import ROOT, LoggedProcesses

log = logging.getLogger(__name__)

BUILD = ROOT / "testcluster" / "tools" / "build-control-plane.sh"
SERVICE_CIDR = "10.96.0.0/16"
API_SERVICE_IP = "10.96.0.1"  # the first address of SERVICE_CIDR: the ``kubernetes`` Service
ADMISSION_PLUGINS = ("NodeRestriction", "OwnerReferencesPermissionEnforcement", "PodSecurity")
"""Enabled beside the server's defaults (ServiceAccount, NamespaceLifecycle, LimitRanger, ...)."""
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        # the project's own resources written: with bodies, so that a refusal says why
        {
            "level": "RequestResponse",
            "verbs": ["create", "update", "patch"],
            "resources": [{"group": "finishable.dev"}],
        },
        {"level": "Metadata"},
    ],
}
START_SECONDS = 120.0  # a loaded 2-core machine: etcd, then the server's post-start hooks


class ControlPlaneError(RuntimeError):
    """A component did not start; the message names it and ends with its log's tail."""


def binaries(components: Sequence[str] = ()) -> dict[str, Path]:
    """The pinned releases' binaries by name (kube-apiserver, ..., etcd), built on the first call
    on a machine (``build-control-plane.sh``, minutes) and found in the cache afterwards."""
    result = subprocess.run(
        ["sh", str(BUILD), *components], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ControlPlaneError(f"build-control-plane.sh failed:\n{result.stderr[-4000:]}")
    if result.stderr.strip():
        log.info("%s", result.stderr.strip())
    paths = [Path(line) for line in result.stdout.split()]
    return {path.name: path for path in paths}


def host_address() -> str:
    """This machine's address on its default route: the API server's advertised address (the
    ``kubernetes`` Service's endpoint, which may not be a loopback address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("203.0.113.1", 9))  # no packet is sent: this only picks the route
        return str(probe.getsockname()[0])


@dataclass
class Identity:
    """A kubeconfig for one user of the cluster."""

    user: str
    kubeconfig: Path


@dataclass
class ControlPlane:
    """etcd and the three control-plane components, started by :meth:`start`."""

    directory: Path
    binaries: dict[str, Path] = field(default_factory=binaries)
    url: str = field(default="", init=False)
    advertise: str = field(default_factory=host_address)
    controller_manager_flags: tuple[str, ...] = ()
    """Beside the defaults, e.g. a short ``--node-monitor-grace-period`` for a test."""
    bind_address: str = "127.0.0.1"
    """Where kube-apiserver listens: 0.0.0.0 for pods on a container network to reach it."""
    serving_addresses: tuple[str, ...] = ()
    """More addresses its certificate is valid for: where those pods reach it."""

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.components = LoggedProcesses(self.directory)
        self.ca = pki.ClusterCA()
        self.ca_file = self._write("ca.crt", self.ca.certificate)
        self.audit_log = self.directory / "audit.log"
        self._identities: dict[tuple[str, tuple[str, ...], bool], Identity] = {}
        self._issuing = threading.Lock()

    # -- identities -------------------------------------------------------------------------

    def identity(
        self, user: str, groups: Sequence[str] = (), *, from_outside: bool = False
    ) -> Identity:
        """A kubeconfig for ``user`` in ``groups``, authenticated by a client certificate; with
        ``from_outside``, for a client in another network namespace (a real node's), which
        reaches the server at this machine's address instead of its loopback. One certificate
        per identity: nodes started side by side share kube-proxy's, and none rewrites the key
        files another's process is reading."""
        with self._issuing:
            key = (user, tuple(groups), from_outside)
            if key not in self._identities:
                self._identities[key] = self._issue(user, groups, from_outside)
            return self._identities[key]

    def _issue(self, user: str, groups: Sequence[str], from_outside: bool) -> Identity:
        issued = self.ca.client(user, groups)
        name = user.replace(":", "-")
        cert = self._write(f"{name}.crt", issued.certificate)
        key = self._write(f"{name}.key", issued.key)
        credentials = {"client-certificate": str(cert), "client-key": str(key)}
        server = self.url.replace("127.0.0.1", self.advertise) if from_outside else self.url
        return Identity(user, self._kubeconfig(name, credentials, server))

    def node(self, name: str, *, renew_seconds: float = 10.0) -> NodeAgent:
        """A node registered and kept alive with its kubelet's identity (:class:`NodeAgent`)."""
        kubelet = self.identity(f"system:node:{name}", ["system:nodes"])
        api = KubeApi.from_kubeconfig(kubelet.kubeconfig, user_agent="kubelet")
        return NodeAgent(api, name, renew_seconds=renew_seconds).start()

    def token_identity(self, name: str, token: str) -> Identity:
        """A kubeconfig that authenticates by a bearer token (a ServiceAccount's)."""
        return Identity(name, self._kubeconfig(name.replace(":", "-"), {"token": token}, self.url))

    def _kubeconfig(self, name: str, user: dict[str, str], server: str) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {"server": server, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": "local", "user": name}}],
            "current-context": name,
        }
        path = self.directory / "kubeconfigs" / f"{name}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(config, indent=1))
        return path

    # -- processes --------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        try:
            self._start_etcd()
            self._start_apiserver()
            self._start_controller_manager()
            self._start_scheduler()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self.components.spawn(
            "etcd",
            [
                str(self.binaries["etcd"]),
                "--name", "finishable",
                "--data-dir", str(self.directory / "etcd"),
                "--listen-client-urls", self.etcd_url,
                "--advertise-client-urls", self.etcd_url,
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"finishable=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",  # a test cluster: its data dies with it
            ],
        )  # fmt: skip
        self._wait_healthy("etcd", f"{self.etcd_url}/health", tls=False)

    def _start_apiserver(self) -> None:
        port = free_port()
        self.port = port
        self.url = f"https://127.0.0.1:{port}"
        self.admin = self.identity("finishable-admin", ["system:masters"])
        served = self.ca.serving(
            "kube-apiserver",
            ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
             "kubernetes.default.svc.cluster.local"],
            list(dict.fromkeys(
                ["127.0.0.1", API_SERVICE_IP, self.advertise, *self.serving_addresses]
            )),
        )  # fmt: skip
        signing = pki.signing_key()
        self.sa_key = self._write("sa.key", signing.key)
        sa_pub = self._write("sa.pub", signing.certificate)
        policy = self._write("audit-policy.json", json.dumps(AUDIT_POLICY))
        # what it shows a kubelet (logs, exec, port-forward): a real kubelet authorizes it
        kubelet_client = self.ca.client("kube-apiserver-kubelet-client", ["system:masters"])
        self.components.spawn(
            "kube-apiserver",
            [
                str(self.binaries["kube-apiserver"]),
                "--etcd-servers", self.etcd_url,
                "--bind-address", self.bind_address,
                "--secure-port", str(port),
                "--advertise-address", self.advertise,
                "--tls-cert-file", str(self._write("apiserver.crt", served.certificate)),
                "--tls-private-key-file", str(self._write("apiserver.key", served.key)),
                "--client-ca-file", str(self.ca_file),
                "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
                "--service-account-key-file", str(sa_pub),
                "--service-account-signing-key-file", str(self.sa_key),
                "--service-cluster-ip-range", SERVICE_CIDR,
                "--authorization-mode", "Node,RBAC",
                "--enable-admission-plugins", ",".join(ADMISSION_PLUGINS),
                "--kubelet-client-certificate",
                str(self._write("kubelet-client.crt", kubelet_client.certificate)),
                "--kubelet-client-key", str(self._write("kubelet-client.key", kubelet_client.key)),
                "--kubelet-preferred-address-types", "InternalIP,Hostname",
                "--audit-log-path", str(self.audit_log),
                "--audit-policy-file", str(policy),
                "--profiling=false",
            ],
        )  # fmt: skip
        self._wait_healthy("kube-apiserver", f"{self.url}/readyz", tls=True, admin=True)

    def _start_controller_manager(self) -> None:
        self._start_component(
            "kube-controller-manager",
            [
                "--use-service-account-credentials=true",  # each controller as its own user
                "--service-account-private-key-file", str(self.sa_key),
                "--root-ca-file", str(self.ca_file),
                "--service-cluster-ip-range", SERVICE_CIDR,
                *self.controller_manager_flags,
            ],
        )  # fmt: skip

    def _start_scheduler(self) -> None:
        self._start_component("kube-scheduler", [])

    def _start_component(self, name: str, flags: list[str]) -> None:
        """A control-plane component that calls the API server as ``system:<name>`` and serves
        its health on a free port (one instance: no leader election)."""
        kubeconfig = str(self.identity(f"system:{name}").kubeconfig)
        port = free_port()
        self.components.spawn(
            name,
            [
                str(self.binaries[name]),
                "--kubeconfig", kubeconfig,
                "--authentication-kubeconfig", kubeconfig,
                "--authorization-kubeconfig", kubeconfig,
                "--bind-address", "127.0.0.1",
                "--secure-port", str(port),
                "--leader-elect=false",
                *flags,
            ],
        )  # fmt: skip
        self._wait_healthy(name, f"https://127.0.0.1:{port}/healthz", tls=True)

    def stop(self) -> None:
        self.components.stop()

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # -- helpers ----------------------------------------------------------------------------

    def log_of(self, name: str) -> Path:
        return self.components.log_of(name)

    def _wait_healthy(self, name: str, url: str, *, tls: bool, admin: bool = False) -> None:
        context: ssl.SSLContext | None = None
        if tls:
            context = ssl.create_default_context(cafile=str(self.ca_file))
            if admin:
                context.load_cert_chain(
                    self.directory / "finishable-admin.crt", self.directory / "finishable-admin.key"
                )
            else:  # the controller-manager's and scheduler's serving certificates are self-signed
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
        deadline = time.monotonic() + START_SECONDS
        last = ""
        while time.monotonic() < deadline:
            if ended := self.components.exited(name):
                raise ControlPlaneError(ended)
            try:
                with urllib.request.urlopen(url, timeout=5, context=context) as response:
                    if response.status == 200:
                        return
            except OSError as error:
                last = str(error)
            time.sleep(0.2)
        tail = self.components.tail(name)
        raise ControlPlaneError(
            f"{name} not healthy at {url} in {START_SECONDS:.0f} s ({last}):\n{tail}"
        )

    def _write(self, name: str, text: str) -> Path:
        path = self.directory / name
        path.write_text(text)
        path.chmod(0o600)
        return path
