"""The operator's options and the kopf settings they imply, set explicitly rather than left to
kopf's defaults, so that what the operator does against a cluster is written down here."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

import kopf

from finishable.api.units import Duration
from finishable.controller.naming import (
    ANNOTATION_PREFIX,
    CONTROL,
    DRIVER,
    FINALIZER,
    KUBERNETES_MASTER,
)
from finishable.kube.objects import LABEL_COMPONENT
from finishable.lifecycle.ttl import TimeToLive

DEFAULT_PEERING = "finishable-spark-operator"
PRIORITY_RANGE = (1, 32767)


@dataclass(frozen=True)
class OperatorOptions:
    """What ``finishable operator`` was asked to do."""

    namespaces: tuple[str, ...] = ()  # empty: every namespace
    bind: str = "0.0.0.0"
    liveness_port: int = 8080
    metrics_port: int = 9090
    peering: str = DEFAULT_PEERING
    standalone: bool = False
    priority: int | None = None  # None: a random one, so that replicas never tie
    resync_seconds: float = 60.0
    # Whole seconds: kopf sends it as the watch's ``timeoutSeconds`` query parameter, which a
    # real API server parses as an int64 and refuses ("300.0": 400 BadRequest) otherwise.
    watch_timeout_seconds: int = 300
    request_timeout_seconds: float = 30.0
    event_level: int = logging.INFO
    spark_master: str = KUBERNETES_MASTER  # what drivers run Spark on (see driverconf.spark_conf)
    partition_storage: str | None = None  # Batch jobs' default spec.clusterPartitions.storage
    # How long Finished and Failed jobs are kept when their spec says nothing (None: forever).
    ttl_after_finished: Duration | None = None
    ttl_after_failed: Duration | None = None

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces

    @property
    def ttl_defaults(self) -> TimeToLive:
        return TimeToLive(self.ttl_after_finished, self.ttl_after_failed)

    @property
    def liveness_endpoint(self) -> str:
        return f"http://{self.bind}:{self.liveness_port}/healthz"


def configure(settings: kopf.OperatorSettings, options: OperatorOptions) -> None:
    """Apply the options to kopf's settings (peering mode is decided at start-up, see
    :func:`finishable.controller.handlers.start`)."""
    # Watches: end each request server-side, and give up on the client side a little later.
    # kopf puts server_timeout into the URL as it is: an int, never a float (see the field).
    settings.watching.server_timeout = int(options.watch_timeout_seconds)
    settings.watching.client_timeout = options.watch_timeout_seconds + 30
    settings.watching.connect_timeout = 10
    settings.networking.request_timeout = options.request_timeout_seconds
    settings.networking.connect_timeout = 10
    # Only the pods and ConfigMaps the operator reads are streamed to it, filtered server-side.
    settings.watching.label_selectors["pods"] = f"{LABEL_COMPONENT}={DRIVER}"
    settings.watching.label_selectors["configmaps"] = f"{LABEL_COMPONENT}={CONTROL}"
    # Events: the phase machine's, at this level and above; log lines are not posted.
    settings.posting.enabled = True
    settings.posting.level = options.event_level
    settings.posting.loggers = False
    settings.posting.reporting_component = "finishable-spark-operator"
    # The status has one writer, the operator's status writer: kopf keeps its own records in
    # annotations, never in status.
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    # Peering: replicas see each other in one peering object; the highest priority acts.
    settings.peering.name = options.peering
    settings.peering.clusterwide = options.clusterwide
    settings.peering.priority = (
        options.priority if options.priority is not None else random.randint(*PRIORITY_RANGE)
    )
    settings.peering.standalone = options.standalone
    settings.peering.mandatory = not options.standalone
    settings.peering.stealth = True
