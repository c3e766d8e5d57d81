"""``finishable operator``: run kopf with the handlers, a liveness endpoint and ``/metrics``."""

from __future__ import annotations

import asyncio
import logging

import kopf
from prometheus_client import REGISTRY, start_http_server

from finishable.controller.apicalls import Kube
from finishable.controller.handlers import registry
from finishable.controller.job.reconcile import Controller
from finishable.controller.metrics import Metrics
from finishable.controller.settings import OperatorOptions
from finishable.kube.api import KubeApi

log = logging.getLogger(__name__)

API_THREADS = 16


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
