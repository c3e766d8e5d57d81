"""``python -m testcluster``: start the local cluster and serve until Ctrl-C.

.venv/bin/python -m testcluster --dir .local-cluster [--runtime container]
KUBECONFIG=.local-cluster/kubeconfig kubectl apply -f examples/batch/cluster.yaml   # any client

The e2e suite runs against it when it serves the suite's namespaces (docs/testing.md):

.venv/bin/python -m testcluster --namespace finishable-e2e --namespace finishable-kubectl
E2E_LOCAL_CLUSTER=.local-cluster .venv/bin/pytest e2e/test_batch.py   # again and again
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
from pathlib import Path

from testcluster.localcluster.chart import OPERATOR_NAMESPACE
from testcluster.localcluster.cluster import CONTROL_PLANES, RUNTIMES, LocalCluster


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m testcluster", description=__doc__)
    parser.add_argument("--dir", default=".local-cluster", help="state, logs and the kubeconfig")
    parser.add_argument("--port", type=int, default=0, help="API port (default: a free one)")
    parser.add_argument(
        "--namespace", action="append", help="namespaces to create and serve (default: default)"
    )
    parser.add_argument(
        "--spark-master",
        help="the drivers' Spark master (default: the API server's k8s:// URL, so Spark creates "
        "executor pods; local[N] runs Spark inside each driver pod)",
    )
    parser.add_argument(
        "--runtime",
        choices=RUNTIMES,
        default="process",
        help="run pods as sandboxed processes of this machine (default: quick, no container "
        "engine) or as docker containers of the image (build it first: make image)",
    )
    parser.add_argument(
        "--control-plane",
        choices=CONTROL_PLANES,
        default="emulator",
        help="the API emulator with the local cluster's controllers (default), or the real "
        "control plane of the pinned Kubernetes release (make control-plane; pods as containers)",
    )
    parser.add_argument(
        "--real-nodes",
        type=int,
        default=0,
        metavar="N",
        help="run pods on N real nodes (kubelet, kube-proxy, CoreDNS, containerd; root; "
        "make real-node) in place of the project's kubelet (with --control-plane real)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        cluster = LocalCluster(
            Path(args.dir),
            namespaces=tuple(args.namespace or ["default"]),
            spark_master=args.spark_master,
            port=args.port,
            runtime=args.runtime,
            control_plane=args.control_plane,
            real_nodes=args.real_nodes,
        )
    except ValueError as invalid:
        parser.error(str(invalid))  # --control-plane real with --runtime process, say
    with cluster:
        print(f"API server  {cluster.url}")
        print(f"kubeconfig  {cluster.kubeconfig}")
        operator = (cluster.operator_pod or {}).get("metadata", {}).get("name")
        print(
            f"operator    pod {OPERATOR_NAMESPACE}/{operator}, logs under pods/{OPERATOR_NAMESPACE}"
        )
        print(f"pods        logs under {cluster.directory / 'pods'}")
        print(f"e2e         E2E_LOCAL_CLUSTER={args.dir} .venv/bin/pytest e2e/...")
        print("Ctrl-C stops the cluster and every pod.", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
