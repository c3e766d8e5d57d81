"""``python -m testcluster.controlplane``: start the real control plane and serve until Ctrl-C.

.venv/bin/python -m testcluster.controlplane --dir .control-plane
export KUBECONFIG=.control-plane/kubeconfigs/finishable-admin.json
kubectl apply -f crds/                                           # the CRDs, checked by the server
kubectl apply --dry-run=server -f examples/streaming/job.yaml    # a job, validated and admitted

kube-apiserver, kube-controller-manager and kube-scheduler of the pinned release (built on the
first start, minutes) with etcd, as the full tier runs them. No kubelet runs here yet: pods are
scheduled when a node is registered (``--node``) but no container starts; jobs run on the local
cluster (``python -m testcluster``).
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


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m testcluster.controlplane", description=__doc__)
    parser.add_argument("--dir", default=".control-plane", help="etcd's data, logs, kubeconfigs")
    parser.add_argument(
        "--node", action="append", default=[], help="register a node of this name, kept Ready"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with ControlPlane(Path(args.dir).resolve()) as plane:
        nodes = [plane.node(name) for name in args.node]  # kept Ready until Ctrl-C
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
