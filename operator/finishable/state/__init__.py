"""Durable state: checkpoint stores (ConfigMap, object storage, local dir) and the job event store.

Everything here is synchronous and thread-safe: the driver runtime is threads, not asyncio.
Heavy backends (``pyarrow.fs``, the Kubernetes client) are imported only when used.
"""

from finishable.state.backends import ObjectBackend, open_backend, validate_name
from finishable.state.checkpointstore import (
    CheckpointBlob,
    CheckpointInfo,
    CheckpointKind,
    CheckpointStore,
)
from finishable.state.errors import (
    BackendError,
    CheckpointCorrupt,
    CheckpointNotFound,
    CheckpointTooLarge,
    EventLogCorrupt,
    EventStoreClosed,
    EventStoreError,
    EventStoreOverflow,
    ObjectCorrupt,
    ObjectNotFound,
    ObjectTooLarge,
    StateError,
)
from finishable.state.eventlog import EventLog, JobEvent, read_events
from finishable.state.events import FlushedSegment, JobEventStore, event_type_name
from finishable.state.local import LocalDirBackend

__all__ = [
    "BackendError",
    "CheckpointBlob",
    "CheckpointCorrupt",
    "CheckpointInfo",
    "CheckpointKind",
    "CheckpointNotFound",
    "CheckpointStore",
    "CheckpointTooLarge",
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
    "StateError",
    "event_type_name",
    "open_backend",
    "read_events",
    "validate_name",
]
