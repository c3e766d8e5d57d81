"""The consuming side of cluster partitions: leases on the partitions a Batch job reads.

A job that reads a cluster partition (``sources.ClusterPartition``) holds a lease on it in the
partition storage from the moment it resolves the partition until the run ends, refreshed with
the shuffle heartbeat; a delete is refused while a lease is fresh, so a partition is read whole
or not at all. A driver that crashes leaves a lease that lapses by itself.
"""

from __future__ import annotations

import logging
import threading
import time

from finishable.partitions.catalog import LEASE_TIMEOUT, PartitionCatalog
from finishable.partitions.manifest import now_utc

log = logging.getLogger(__name__)

REFRESH_SECONDS = LEASE_TIMEOUT.total_seconds() / 4


class ReaderLeases:
    """The leases one driver attempt holds, as ``reader`` (the run's key)."""

    def __init__(self, reader: str) -> None:
        self.reader = reader
        self._held: dict[tuple[str, str], PartitionCatalog] = {}
        self._lock = threading.Lock()
        self._refreshed = time.monotonic()

    def hold(self, catalog_url: str, partition_id: str) -> None:
        """Take the lease before the first split is read (storage errors propagate)."""
        catalog = PartitionCatalog(catalog_url)
        catalog.hold(partition_id, self.reader, now_utc())
        with self._lock:
            self._held[(catalog_url, partition_id)] = catalog

    def refresh(self) -> None:
        """Renew the leases when due (called from the heartbeat thread; failures are logged)."""
        if time.monotonic() - self._refreshed < REFRESH_SECONDS:
            return
        self._refreshed = time.monotonic()
        with self._lock:
            held = list(self._held.items())
        for (_, partition_id), catalog in held:
            try:
                catalog.hold(partition_id, self.reader, now_utc())
            except Exception:
                log.warning("renewing the lease on %s failed", partition_id, exc_info=True)

    def close(self) -> None:
        """Give every lease back (the run ended, whichever way)."""
        with self._lock:
            held, self._held = self._held, {}
        for (_, partition_id), catalog in held.items():
            try:
                catalog.let_go(partition_id, self.reader)
            except Exception:
                log.warning("giving back the lease on %s failed", partition_id, exc_info=True)
            finally:
                catalog.close()
