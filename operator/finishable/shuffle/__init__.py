"""Result partitions of Batch jobs, kept on shuffle pods that outlive a driver crash.

A Batch job's driver materialises each stage's output as result partitions (Arrow IPC streams)
on the job's shuffle servers, one per shuffle pod. When the driver dies, the pods keep the
partitions for the retain timeout, so the next driver attempt reuses what survived and recomputes
only the rest (Flink's FLIP-383); a dataset marked promoted stays until it is deleted explicitly
(cluster partitions themselves live in the partition storage: ``finishable.partitions``).

* ``store``: the on-disk partition store (atomic commits, checksums, crash recovery), speaking
  the names, errors and records of ``records`` and writing through ``files``;
* ``server``: the authenticated HTTP server around a store, with its ``metrics``; ``command``
  runs it as ``finishable shuffle-server``;
* ``client``: the standard-library client of one server the driver and executors use, with its
  ``errors`` and the ``answers`` it hands out; ``cluster``: all of a job's servers as one. All
  are re-exported here.
"""

from finishable.shuffle.answers import (
    CorruptEntry,
    DatasetInfo,
    Listing,
    PartitionInfo,
    Registration,
)
from finishable.shuffle.client import ShuffleClient
from finishable.shuffle.cluster import ClusterListing, ShuffleCluster
from finishable.shuffle.errors import (
    CorruptPartition,
    PartitionNotFound,
    ShuffleError,
    ShuffleRequestError,
    ShuffleUnauthorized,
    ShuffleUnavailable,
)

__all__ = [
    "ClusterListing",
    "CorruptEntry",
    "CorruptPartition",
    "DatasetInfo",
    "Listing",
    "PartitionInfo",
    "PartitionNotFound",
    "Registration",
    "ShuffleClient",
    "ShuffleCluster",
    "ShuffleError",
    "ShuffleRequestError",
    "ShuffleUnauthorized",
    "ShuffleUnavailable",
]
