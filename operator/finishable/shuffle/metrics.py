"""The shuffle server's Prometheus metrics (``GET /metrics``), in a registry of their own.

Gauges read the store when scraped (partitions, bytes, promoted datasets, the driver heartbeat's
age); counters are bumped by the server's handlers and its retain timeout. Kept apart from the
HTTP routes so that the metric names a dashboard depends on are listed in one place.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.exposition import generate_latest

from finishable.shuffle.store import PartitionStore

METRIC_PREFIX = "finishable_shuffle_"


class ShuffleMetrics:
    """The server's metrics in a registry of its own, so several servers fit in one process."""

    def __init__(self, store: PartitionStore, seconds_since_heartbeat: Callable[[], float]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        Gauge(
            METRIC_PREFIX + "partitions",
            "Committed partitions stored.",
            registry=registry,
        ).set_function(lambda: float(store.totals()[0]))
        Gauge(
            METRIC_PREFIX + "stored_bytes",
            "Bytes of committed partitions stored.",
            registry=registry,
        ).set_function(lambda: float(store.totals()[1]))
        Gauge(
            METRIC_PREFIX + "promoted_datasets",
            "Datasets promoted to cluster partitions.",
            registry=registry,
        ).set_function(lambda: float(len(store.promoted())))
        Gauge(
            METRIC_PREFIX + "seconds_since_driver_heartbeat",
            "Seconds since a driver last registered or heartbeated (since start when none did).",
            registry=registry,
        ).set_function(seconds_since_heartbeat)
        self.puts = Counter(METRIC_PREFIX + "puts", "Partitions committed.", registry=registry)
        self.gets = Counter(
            METRIC_PREFIX + "gets", "Partitions served completely.", registry=registry
        )
        self.received_bytes = Counter(
            METRIC_PREFIX + "received_bytes", "Bytes of partitions uploaded.", registry=registry
        )
        self.sent_bytes = Counter(
            METRIC_PREFIX + "sent_bytes", "Bytes of partitions served.", registry=registry
        )
        self.releases = Counter(
            METRIC_PREFIX + "releases",
            "Releases of the job's partitions (or of a dataset), by reason.",
            ["reason"],
            registry=registry,
        )
        self.released_partitions = Counter(
            METRIC_PREFIX + "released_partitions",
            "Partitions deleted by releases, by reason.",
            ["reason"],
            registry=registry,
        )
        self.corrupt = Counter(
            METRIC_PREFIX + "corrupt_partitions",
            "Partitions found corrupt (and deleted) by verification.",
            registry=registry,
        )
        for reason in ("request", "retain_timeout"):
            self.releases.labels(reason)
            self.released_partitions.labels(reason)

    def render(self) -> bytes:
        return generate_latest(self.registry)
