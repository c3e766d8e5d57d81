"""``finishable operator``: run kopf with the handlers, a liveness endpoint and ``/metrics``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

import kopf
from prometheus_client import REGISTRY, start_http_server

from finishable.controller.apicalls import Kube
from finishable.controller.handlers import registry
from finishable.controller.job.driverconf import default_master
from finishable.controller.job.reconcile import Controller
from finishable.controller.metrics import Metrics
from finishable.controller.settings import OperatorOptions
from finishable.kube.api import KubeApi
from finishable.state.errors import BackendError

log = logging.getLogger(__name__)

API_THREADS = 16


def run_from_args(args: argparse.Namespace) -> int:
    """``finishable operator``: the options from its command line, then :func:`run_operator`."""
    options = OperatorOptions(
        namespaces=tuple(args.namespace or ()),
        bind=args.bind,
        liveness_port=args.liveness_port,
        metrics_port=args.metrics_port,
        peering=args.peering,
        standalone=args.standalone,
        priority=args.priority,
        resync_seconds=args.resync,
        spark_master=args.spark_master or default_master(os.environ),
        partition_storage=args.cluster_partitions_storage,
        ttl_after_finished=args.ttl_after_finished,
        ttl_after_failed=args.ttl_after_failed,
    )
    try:
        return run_operator(options)
    except BackendError as error:
        sys.stderr.write(f"cannot reach the Kubernetes API: {error}\n")
        return 1


def run_operator(options: OperatorOptions, api: KubeApi | None = None) -> int:
    """Serve until SIGINT or SIGTERM; the credentials come from the pod or the kubeconfig."""
    if api is None:
        api = KubeApi.from_environment(
            namespace=options.namespaces[0] if options.namespaces else None,
            pool_size=API_THREADS,
            user_agent="finishable-operator",
        )
    if not log.isEnabledFor(logging.DEBUG):
        # kopf logs every handler call at INFO; the operator's own log says what it does.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # liveness probes
    metrics = Metrics(REGISTRY)
    start_http_server(options.metrics_port, addr=options.bind, registry=REGISTRY)
    controller = Controller(
        kube=Kube(api, threads=API_THREADS),
        metrics=metrics,
        resync=options.resync_seconds,
        spark_master=options.spark_master,
        partition_storage=options.partition_storage,
        ttl_defaults=options.ttl_defaults,
    )
    where = ", ".join(options.namespaces) if options.namespaces else "all namespaces"
    log.info(
        "watching %s; liveness at %s, metrics at http://%s:%d/metrics",
        where,
        options.liveness_endpoint,
        options.bind,
        options.metrics_port,
    )
    asyncio.run(
        kopf.operator(
            registry=registry,
            clusterwide=options.clusterwide,
            namespaces=list(options.namespaces),
            liveness_endpoint=options.liveness_endpoint,
            memo=kopf.Memo(controller=controller, options=options),
        )
    )
    return 0
