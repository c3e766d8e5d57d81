"""A real Kubernetes node under the real control plane: the kubelet and kube-proxy of the pinned
release, CoreDNS, and Debian's containerd, runc and CNI plugins.

The node lives in a network namespace of its own (``finishable-node-<index>``, the first free
index), linked to this machine by a veth pair: its kubelet, kube-proxy (iptables mode), CoreDNS
and containerd, and the CNI bridge of its pods, touch nothing of another node's, so two test
runs on one machine can each have one. Its pods run under a cgroup root of their own. What the
machine needs: root, cgroup v1 or v2, ``ip``, ``iptables``, ``cc``, Debian's ``containerd``,
``runc`` and ``containernetworking-plugins``, and docker for the images the pods run (exported
from docker's store into the node's containerd).

What differs from a production node, and why: runc runs through ``runc_floor.py`` (this machine
may not lower an OOM score; the kubelet asks -998 for each sandbox), and the sandbox image is
Kubernetes' pause built here. Everything else is as the releases ship it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from finishable.kube.api import KubeApi
from testcluster.controlplane import nodeconfig
from testcluster.controlplane.cluster import ControlPlane, binaries
from testcluster.processes import LoggedProcesses

log = logging.getLogger(__name__)

NODE_COMPONENTS = ("kubelet", "kube-proxy", "coredns", "pause")
READY_SECONDS = 180.0
CGROUP_ROOT = Path("/sys/fs/cgroup")
RUNC = shutil.which("runc") or "/usr/sbin/runc"


class RealNodeError(RuntimeError):
    """The node could not be set up here: the message says which part and why."""


def _run(*command: str, stdin: bytes | None = None, check: bool = True) -> str:
    done = subprocess.run(command, input=stdin, capture_output=True, check=False)
    if check and done.returncode != 0:
        raise RealNodeError(
            f"{' '.join(command)} failed ({done.returncode}): {done.stderr.decode()[-2000:]}"
        )
    return done.stdout.decode()


def _attempt(*command: str) -> subprocess.CompletedProcess[bytes]:
    """A command whose failure is an answer (a name taken, a thing already gone)."""
    return subprocess.run(command, capture_output=True, check=False)


def cgroup_hierarchies() -> list[Path]:
    """Where the node's cgroup root is made: each v1 controller hierarchy, or the v2 root."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]
    return [path for path in CGROUP_ROOT.iterdir() if path.is_dir() and not path.is_symlink()]


@dataclass
class RealNode:
    """One node named ``name``, registered with ``plane`` (started with ``bind_address`` 0.0.0.0:
    the node reaches it from its namespace), running pods of ``images`` (docker's) and of the
    image archives ``archives`` (``docker save``'s: several nodes import one export)."""

    plane: ControlPlane
    directory: Path
    name: str = "node-1"
    images: tuple[str, ...] = ()
    archives: tuple[Path, ...] = ()
    binaries: dict[str, Path] = field(default_factory=lambda: binaries(NODE_COMPONENTS))
    addresses: nodeconfig.NodeAddresses | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.components = LoggedProcesses(self.directory)

    # -- start ------------------------------------------------------------------------------

    def start(self) -> Self:
        if os.geteuid() != 0:
            raise RealNodeError("a real node needs root (network namespace, cgroups, mounts)")
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            self.addresses = self._claim_namespace()
            self._link(self.addresses)
            self._make_cgroups()
            self._start_containerd(self.addresses)
            self._start_kubelet(self.addresses)
            self._start_kube_proxy()
            self._start_coredns(self.addresses)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def state(self) -> Path:
        """containerd's state and sockets: short, as a socket's path must be."""
        assert self.addresses is not None
        return Path("/run") / self.addresses.name

    @property
    def kubelet_root(self) -> Path:
        """The kubelet's ``--root-dir``: short too (it makes sockets there, such as
        ``pod-resources/<n>``, and a test's directory can be longer than a socket's 108 bytes),
        on disk (the pods' emptyDir volumes are in it)."""
        assert self.addresses is not None
        return Path("/var/lib") / self.addresses.name

    @property
    def pod_logs(self) -> Path:
        """The kubelet's ``podLogsDir``: ``<namespace>_<pod>_<uid>/<container>/<n>.log``."""
        return self.directory / "pod-logs"

    @property
    def socket(self) -> Path:
        return self.state / "containerd.sock"

    @property
    def cgroup(self) -> str:
        assert self.addresses is not None
        return f"/{self.addresses.name}"

    def _claim_namespace(self) -> nodeconfig.NodeAddresses:
        """The first index whose namespace this call creates (another run may hold others)."""
        for index in range(1, 251):
            addresses = nodeconfig.NodeAddresses(index)
            done = _attempt("ip", "netns", "add", addresses.name)
            if done.returncode == 0:
                return addresses
        raise RealNodeError("no free node index: 250 namespaces finishable-node-* exist")

    def _in_namespace(self, *command: str) -> list[str]:
        """``command`` in the node's network namespace and this machine's mount namespace (not
        ``ip netns exec``'s own: the kubelet's volume mounts must be where containerd looks)."""
        assert self.addresses is not None
        return ["nsenter", f"--net=/run/netns/{self.addresses.name}", *command]

    def _link(self, at: nodeconfig.NodeAddresses) -> None:
        _run("ip", "link", "add", at.host_link, "type", "veth", "peer", "name", at.node_link)
        _run("ip", "link", "set", at.node_link, "netns", at.name)
        _run("ip", "addr", "add", f"{at.host}/30", "dev", at.host_link)
        _run("ip", "link", "set", at.host_link, "up")
        _run("ip", "route", "add", at.pod_subnet, "via", at.node)
        for rule in nodeconfig.forward_rules(at):  # pod to pod across nodes, through the machine
            _run("iptables", "--wait", "-I", *rule)
        inside = self._in_namespace
        _run(*inside("ip", "addr", "add", f"{at.node}/30", "dev", at.node_link))
        _run(*inside("ip", "link", "set", at.node_link, "up"))
        _run(*inside("ip", "link", "set", "lo", "up"))
        _run(*inside("ip", "route", "add", "default", "via", at.host))
        _run(*inside("sysctl", "-q", "-w", "net.ipv4.ip_forward=1"))
        _run(*inside("sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1"), check=False)

    def _make_cgroups(self) -> None:
        for hierarchy in cgroup_hierarchies():
            path = hierarchy / self.cgroup.lstrip("/")
            path.mkdir(exist_ok=True)
            if hierarchy.name == "cpuset":  # a v1 cpuset starts empty: no task may join it
                for name in ("cpuset.cpus", "cpuset.mems"):
                    (path / name).write_text((hierarchy / name).read_text())

    def _start_containerd(self, at: nodeconfig.NodeAddresses) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        cni = self.directory / "cni"
        cni.mkdir(exist_ok=True)
        (cni / "10-pods.conflist").write_text(
            json.dumps(nodeconfig.cni_config(at, self.directory / "ipam"))
        )
        runc = self.directory / "runc"
        floor = Path(__file__).with_name("runc_floor.py")
        runc.write_text(f'#!/bin/sh\nexec {sys.executable} {floor} {RUNC} "$@"\n')
        runc.chmod(0o755)
        config = self.directory / "containerd.toml"
        config.write_text(
            nodeconfig.containerd_config(self.directory / "containerd", self.state, runc, cni)
        )
        command = self._in_namespace("containerd", "--config", str(config))
        self.components.spawn("containerd", command)
        deadline = time.monotonic() + READY_SECONDS
        while not self.socket.exists():
            self._check_alive("containerd")
            if time.monotonic() > deadline:
                tail = self.components.tail("containerd")
                raise RealNodeError(f"containerd made no socket:\n{tail}")
            time.sleep(0.2)
        pause = self.binaries["pause"].read_bytes()
        self._ctr_import(nodeconfig.image_archive(pause, nodeconfig.PAUSE_IMAGE, "/pause"))
        for image in self.images:  # streamed from docker's store: an image is a gigabyte
            with subprocess.Popen(
                ["docker", "save", image], stdout=subprocess.PIPE, stderr=subprocess.PIPE
            ) as exported:
                assert exported.stdout is not None and exported.stderr is not None
                imported = subprocess.run(
                    self._ctr_import_command(), stdin=exported.stdout, capture_output=True,
                    check=False,
                )  # fmt: skip
                failed = exported.wait() != 0 and exported.stderr.read().decode()
            if failed or imported.returncode != 0:
                why = failed or imported.stderr.decode()
                raise RealNodeError(f"{image} not exported into the node: {why[-500:]}")
        for archive in self.archives:
            with archive.open("rb") as stream:
                imported = subprocess.run(
                    self._ctr_import_command(), stdin=stream, capture_output=True, check=False
                )
            if imported.returncode != 0:
                why = imported.stderr.decode()[-500:]
                raise RealNodeError(f"{archive} not imported into the node: {why}")

    def _ctr_import_command(self) -> list[str]:
        return ["ctr", "--address", str(self.socket), "-n", "k8s.io", "images", "import", "-"]

    def _ctr_import(self, archive: bytes) -> None:
        _run(*self._ctr_import_command(), stdin=archive)

    def _start_kubelet(self, at: nodeconfig.NodeAddresses) -> None:
        identity = self.plane.identity(
            f"system:node:{self.name}", ["system:nodes"], from_outside=True
        )
        serving = self.plane.ca.serving(self.name, [self.name], [at.node])
        cert, key = self.directory / "kubelet.crt", self.directory / "kubelet.key"
        cert.write_text(serving.certificate)
        key.write_text(serving.key)
        key.chmod(0o600)
        config = nodeconfig.kubelet_config(
            containerd_socket=self.socket,
            client_ca=self.plane.ca_file,
            serving=(cert, key),
            cgroup_root=self.cgroup,
            pod_logs=self.pod_logs,
            dns=at.node,
        )
        path = self.directory / "kubelet.json"
        path.write_text(json.dumps(config, indent=1))
        self.components.spawn(
            "kubelet",
            self._in_namespace(
                str(self.binaries["kubelet"]),
                "--config", str(path),
                "--kubeconfig", str(identity.kubeconfig),
                "--hostname-override", self.name,
                "--node-ip", at.node,
                "--root-dir", str(self.kubelet_root),
            ),
        )  # fmt: skip

    def _start_kube_proxy(self) -> None:
        # bound to system:node-proxier
        identity = self.plane.identity("system:kube-proxy", from_outside=True)
        config = nodeconfig.kube_proxy_config(identity.kubeconfig, "10.244.0.0/16")
        path = self.directory / "kube-proxy.json"
        path.write_text(json.dumps(config, indent=1))
        command = [str(self.binaries["kube-proxy"]), "--config", str(path),
                   "--hostname-override", self.name]  # fmt: skip
        self.components.spawn("kube-proxy", self._in_namespace(*command))

    def _start_coredns(self, at: nodeconfig.NodeAddresses) -> None:
        user = "finishable:coredns"
        admin = KubeApi.from_kubeconfig(self.plane.admin.kubeconfig, user_agent="finishable-node")
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        for path, body in (
            (f"{rbac}/clusterroles",
             {"metadata": {"name": user}, "rules": nodeconfig.COREDNS_RULES}),
            (f"{rbac}/clusterrolebindings",
             {"metadata": {"name": user},
              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                          "name": user},
              "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                            "name": user}]}),
        ):  # fmt: skip
            response = admin.request("POST", path, body=body)
            if response.status not in (201, 409):
                raise RealNodeError(f"CoreDNS's RBAC: {response.status} {response.body}")
        identity = self.plane.identity(user, from_outside=True)
        corefile = self.directory / "Corefile"
        corefile.write_text(nodeconfig.corefile(at.node, identity.kubeconfig))
        self.components.spawn("coredns", self._in_namespace(str(self.binaries["coredns"]), "-conf",
                                                  str(corefile)))  # fmt: skip

    def _wait_ready(self) -> None:
        admin = KubeApi.from_kubeconfig(self.plane.admin.kubeconfig, user_agent="finishable-node")
        deadline = time.monotonic() + READY_SECONDS
        while time.monotonic() < deadline:
            for name in self.components.running:
                self._check_alive(name)
            response = admin.request("GET", f"/api/v1/nodes/{self.name}")
            if response.status == 200:
                conditions = response.body.get("status", {}).get("conditions", [])
                if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                    return
            time.sleep(1.0)
        raise RealNodeError(f"node {self.name} not Ready in {READY_SECONDS:.0f} s:\n"
                            f"{self.components.tail('kubelet')}")  # fmt: skip

    # -- stop -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Everything the node made goes: processes, pods' processes, mounts, the namespace,
        the cgroups. The Node object stays, as when a machine is switched off."""
        self.components.stop("coredns", "kube-proxy", "kubelet")
        if self.addresses is not None:
            self._kill_pods()
        self.components.stop("containerd")
        if self.addresses is not None:
            self._kill_shims()
            self._unmount()
            _attempt("ip", "netns", "del", self.addresses.name)
            _attempt("ip", "link", "del", self.addresses.host_link)
            for rule in nodeconfig.forward_rules(self.addresses):
                _attempt("iptables", "--wait", "-D", *rule)
            self._remove_cgroups()
            shutil.rmtree(self.state, ignore_errors=True)
            shutil.rmtree(self.kubelet_root, ignore_errors=True)
            # Its images and snapshots (3 GB a node): a test session's directory is kept for
            # its logs, and four nodes' content filled the disk after two sessions.
            shutil.rmtree(self.directory / "containerd", ignore_errors=True)
            self.addresses = None

    def _kill_pods(self) -> None:
        for hierarchy in cgroup_hierarchies():
            root = hierarchy / self.cgroup.lstrip("/")
            for procs in root.rglob("cgroup.procs") if root.exists() else ():
                for pid in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)

    def _kill_shims(self) -> None:
        marker = str(self.socket).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if marker in (entry / "cmdline").read_bytes():
                    os.kill(int(entry.name), signal.SIGKILL)

    def _unmount(self) -> None:
        """The kubelet's volume mounts and containerd's, then the pods' network namespaces
        (those with an address of this node's pod subnet)."""
        assert self.addresses is not None
        roots = (str(self.directory), str(self.state), str(self.kubelet_root))
        mounts = [
            line.split()[4].replace("\\040", " ")
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
        ]
        for point in reversed(mounts):
            if point.startswith(roots):
                _attempt("umount", "-l", point)
        subnet = f" {self.addresses.pod_subnet.rsplit('.', 1)[0]}."
        for netns in Path("/run/netns").glob("cni-*"):
            links = _attempt("ip", "-n", netns.name, "-o", "addr")
            if subnet in links.stdout.decode():
                _attempt("ip", "netns", "del", netns.name)

    def _remove_cgroups(self) -> None:
        for hierarchy in cgroup_hierarchies():
            root = hierarchy / self.cgroup.lstrip("/")
            if not root.exists():
                continue
            directories = sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True)
            for directory in [*directories, root]:
                deadline = time.monotonic() + 10.0
                while directory.exists():
                    try:
                        directory.rmdir()
                    except OSError:
                        if time.monotonic() > deadline:
                            log.warning("cgroup %s not removed", directory)
                            break
                        time.sleep(0.2)

    # -- helpers ----------------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def log_of(self, name: str) -> Path:
        return self.components.log_of(name)

    def _check_alive(self, name: str) -> None:
        if ended := self.components.exited(name):
            raise RealNodeError(ended)
