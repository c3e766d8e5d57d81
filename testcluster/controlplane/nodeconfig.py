"""What a real node's parts are told, built without I/O (``realnode.py`` writes and runs them).

One node per network namespace: its addresses come from its index (1..250), so that two nodes
on one machine (two test runs side by side) share no address, port, bridge or iptables chain.
The node's parts: containerd (Debian's, with runc and CNI's plugins), the kubelet, kube-proxy and
CoreDNS of the pinned releases.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CNI_PLUGINS = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
PAUSE_IMAGE = "finishable.dev/pause:3.10"
"""The pods' sandbox image: Kubernetes' own pause.c (in the k8s.io/kubernetes module), built here
(no registry serves registry.k8s.io's image to this machine)."""
CLUSTER_DOMAIN = "cluster.local"


@dataclass(frozen=True)
class NodeAddresses:
    """The addresses of node ``index``: a /30 link between the machine and the node's namespace,
    and the node's pod subnet, a /24 its bridge serves."""

    index: int

    def __post_init__(self) -> None:
        if not 1 <= self.index <= 250:
            raise ValueError(f"node index {self.index}: 1..250")

    @property
    def name(self) -> str:
        """The node's network namespace, and the stem of its interfaces' names."""
        return f"finishable-node-{self.index}"

    @property
    def host(self) -> str:
        return f"10.250.{self.index}.1"

    @property
    def node(self) -> str:
        """The node's InternalIP: where the API server reaches the kubelet, and its pods' DNS."""
        return f"10.250.{self.index}.2"

    @property
    def pod_subnet(self) -> str:
        return f"10.244.{self.index}.0/24"

    @property
    def host_link(self) -> str:
        return f"fsn{self.index}h"

    @property
    def node_link(self) -> str:
        return f"fsn{self.index}n"

    @property
    def bridge(self) -> str:
        return f"fsn{self.index}br"


def forward_rules(addresses: NodeAddresses) -> list[list[str]]:
    """The machine's ``FORWARD`` rules that let the node's traffic through (docker sets the
    chain's policy to DROP): a pod reaches a pod of another node through the machine."""
    return [
        ["FORWARD", "-i", addresses.host_link, "-j", "ACCEPT"],
        ["FORWARD", "-o", addresses.host_link, "-j", "ACCEPT"],
    ]


def containerd_config(root: Path, state: Path, runc: Path, cni_conf: Path) -> str:
    """containerd 1.6's config (version 2): its CRI plugin with runc through ``runc`` (the
    wrapper that keeps OOM scores this machine may set) and CNI from ``cni_conf``."""
    cri = '[plugins."io.containerd.grpc.v1.cri"]'
    runtime = f"{cri[:-1]}.containerd.runtimes.runc]"
    return "\n".join(
        [
            "version = 2",
            f'root = "{root}"',
            f'state = "{state}"',
            "[grpc]",
            f'  address = "{state}/containerd.sock"',
            "[ttrpc]",
            f'  address = "{state}/containerd.sock.ttrpc"',
            cri,
            f'  sandbox_image = "{PAUSE_IMAGE}"',
            f"{cri[:-1]}.containerd]",
            '  snapshotter = "overlayfs"',
            '  default_runtime_name = "runc"',
            runtime,
            '  runtime_type = "io.containerd.runc.v2"',
            f"{runtime[:-1]}.options]",
            "  SystemdCgroup = false",
            f'  BinaryName = "{runc}"',
            f"{cri[:-1]}.cni]",
            f'  bin_dir = "{CNI_PLUGINS}"',
            f'  conf_dir = "{cni_conf}"',
            "",
        ]
    )


def cni_config(addresses: NodeAddresses, ipam_dir: Path) -> dict[str, Any]:
    """A bridge with the node's pod subnet (the bridge is the pods' gateway; traffic leaving the
    subnet is masqueraded), hairpin so that a pod reaches itself through its Service, and
    portmap."""
    return {
        "cniVersion": "1.0.0",
        "name": addresses.name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": addresses.bridge,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": addresses.pod_subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(ipam_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(
    *,
    containerd_socket: Path,
    client_ca: Path,
    serving: tuple[Path, Path],
    cgroup_root: str,
    pod_logs: Path,
    dns: str,
) -> dict[str, Any]:
    """The kubelet's KubeletConfiguration for this machine: cgroup v1 kept (``failCgroupV1``,
    as 1.35+ refuses it otherwise), cgroupfs, swap allowed, pods under ``cgroup_root`` (a
    hierarchy of its own beside another node's), x509 and webhook authentication and
    authorization as a production node, and eviction thresholds a shared disk does not trip."""
    cert, key = serving
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{containerd_socket}",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(cert),
        "tlsPrivateKeyFile": str(key),
        "clusterDNS": [dns],
        "clusterDomain": CLUSTER_DOMAIN,
        "podLogsDir": str(pod_logs),
        "readOnlyPort": 0,
        "enforceNodeAllocatable": [],
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "resolvConf": "/etc/resolv.conf",
        "localStorageCapacityIsolation": False,
        "serializeImagePulls": False,
    }  # fmt: skip


def kube_proxy_config(kubeconfig: Path, cluster_cidr: str) -> dict[str, Any]:
    """kube-proxy in iptables mode inside the node's namespace; every Service connection is
    masqueraded, so that a reply between two pods of one bridge comes back through the rules
    that translated it."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "clusterCIDR": cluster_cidr,
        "iptables": {"masqueradeAll": True},
        "conntrack": {"maxPerCore": 0},  # leave the machine's conntrack table as it is
    }


def corefile(listen: str, kubeconfig: Path) -> str:
    """CoreDNS answering for the cluster's Services and pods (the ``kubernetes`` plugin, through
    the API server with ``kubeconfig``) on ``listen``:53, and nothing else: the jobs resolve
    only cluster names."""
    return (
        f"{CLUSTER_DOMAIN}:53 {{\n"
        f"    bind {listen}\n"
        f"    kubernetes {CLUSTER_DOMAIN} {{\n"
        f"        kubeconfig {kubeconfig}\n"
        "        pods insecure\n"
        "    }\n"
        "    errors\n"
        "}\n"
    )


COREDNS_RULES = [
    {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
     "verbs": ["list", "watch"]},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
     "verbs": ["list", "watch"]},
]  # fmt: skip
"""What CoreDNS's kubernetes plugin reads (no default role grants it: a cluster's DNS add-on
brings its own)."""


def image_archive(binary: bytes, reference: str, entrypoint: str) -> bytes:
    """A docker-archive (what ``ctr images import`` reads) of one static ``binary`` at
    ``entrypoint``, run as 65535: the pause image, built here."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo(entrypoint.lstrip("/"))
        info.size, info.mode = len(binary), 0o755
        tar.addfile(info, io.BytesIO(binary))
    layer_bytes = layer.getvalue()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": [entrypoint], "User": "65535:65535"},
            "rootfs": {
                "type": "layers",
                "diff_ids": [f"sha256:{hashlib.sha256(layer_bytes).hexdigest()}"],
            },
        }
    ).encode()
    manifest = json.dumps(
        [{"Config": "config.json", "RepoTags": [reference], "Layers": ["layer.tar"]}]
    ).encode()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, data in (("layer.tar", layer_bytes), ("config.json", config),
                           ("manifest.json", manifest)):  # fmt: skip
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive.getvalue()
