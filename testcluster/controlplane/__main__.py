"""``python -m testcluster.controlplane``: start the real control plane and serve until Ctrl-C.

.venv/bin/python -m testcluster.controlplane --dir .control-plane
export KUBECONFIG=.control-plane/kubeconfigs/finishable-admin.json
kubectl apply -f crds/                                           # the CRDs, checked by the server
kubectl apply --dry-run=server -f examples/streaming/job.yaml    # a job, validated and admitted

kube-apiserver, kube-controller-manager and kube-scheduler of the pinned release (built on the
first start, minutes) with etcd, as the e2e tiers run them. ``--node NAME`` registers a node
whose pods are scheduled but never started; ``--real-node NAME`` (as root) starts a real one
(``realnode.py``: kubelet, kube-proxy, CoreDNS, containerd, runc) whose pods run the image
``make image`` built. Jobs run end to end on the local cluster (``python -m testcluster``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
from pathlib import Path

from testcluster.controlplane.cluster import ControlPlane
from testcluster.controlplane.realnode import RealNode
from testcluster.image import IMAGE


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m testcluster.controlplane", description=__doc__)
    parser.add_argument("--dir", default=".control-plane", help="etcd's data, logs, kubeconfigs")
    parser.add_argument(
        "--node", action="append", default=[], help="register a node of this name, kept Ready"
    )
    parser.add_argument(
        "--real-node",
        action="append",
        default=[],
        help="start a real node of this name (root): its pods run the project's image",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    directory = Path(args.dir).resolve()
    # a real node reaches the API server from its own network namespace
    bind = "0.0.0.0" if args.real_node else "127.0.0.1"
    with ControlPlane(directory, bind_address=bind) as plane, contextlib.ExitStack() as real:
        nodes = [plane.node(name) for name in args.node]  # kept Ready until Ctrl-C
        for name in args.real_node:
            real.enter_context(RealNode(plane, directory / name, name, images=(IMAGE,)))
        sys.stdout.write(
            f"API server  {plane.url}\n"
            f"kubeconfig  {plane.admin.kubeconfig}  (a cluster admin)\n"
            f"audit log   {plane.audit_log}\n"
            f"logs        {plane.directory}/<component>.log\n"
            "Ctrl-C stops it.\n"
        )
        sys.stdout.flush()
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
        for node in nodes:
            node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
