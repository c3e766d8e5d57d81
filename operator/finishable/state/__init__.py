"""Durable state: snapshot stores (ConfigMap, object storage, local dir) and the job event store.

Everything here is synchronous and thread-safe: the driver runtime is threads, not asyncio.
Heavy backends (``pyarrow.fs``, the Kubernetes client) are imported only when used.
"""

from finishable.state.backends import ObjectBackend, open_backend, validate_name
from finishable.state.errors import (
    BackendError,
    EventLogCorrupt,
    EventStoreClosed,
    EventStoreError,
    EventStoreOverflow,
    ObjectCorrupt,
    ObjectNotFound,
    ObjectTooLarge,
    SnapshotCorrupt,
    SnapshotNotFound,
    SnapshotTooLarge,
    StateError,
)
from finishable.state.eventlog import EventLog, JobEvent, read_events
from finishable.state.events import FlushedSegment, JobEventStore, event_type_name
from finishable.state.local import LocalDirBackend
from finishable.state.snapshots import Snapshot, SnapshotInfo, SnapshotKind, SnapshotStore
from finishable.state.throttle import NO_CHECKPOINT, SnapshotThrottle

__all__ = [
    "NO_CHECKPOINT",
    "BackendError",
    "EventLog",
    "EventLogCorrupt",
    "EventStoreClosed",
    "EventStoreError",
    "EventStoreOverflow",
    "FlushedSegment",
    "JobEvent",
    "JobEventStore",
    "LocalDirBackend",
    "ObjectBackend",
    "ObjectCorrupt",
    "ObjectNotFound",
    "ObjectTooLarge",
    "Snapshot",
    "SnapshotCorrupt",
    "SnapshotInfo",
    "SnapshotKind",
    "SnapshotNotFound",
    "SnapshotStore",
    "SnapshotThrottle",
    "SnapshotTooLarge",
    "StateError",
    "event_type_name",
    "open_backend",
    "read_events",
    "validate_name",
]
