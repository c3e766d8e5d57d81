"""Typed failures of the state stores.

Callers react differently to "the data is gone or damaged" (fall back to an older snapshot,
re-run work) and "the storage is unreachable right now" (retry later, never fall back silently),
so the two families are separate classes.
"""

from __future__ import annotations


class StateError(Exception):
    """Base of every error raised by ``finishable.state``."""


class BackendError(StateError):
    """The storage could not be reached or refused the request; retrying may help."""


class ObjectNotFound(StateError, LookupError):
    """A named object does not exist in the backend."""

    def __init__(self, name: str, location: str) -> None:
        super().__init__(f"object {name!r} not found at {location}")
        self.name = name
        self.location = location


class ObjectCorrupt(StateError):
    """An object exists but its bytes fail an integrity check (checksum, size, format)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"object {name!r} is corrupt: {reason}")
        self.name = name
        self.reason = reason


class ObjectTooLarge(StateError):
    """An object exceeds the configured size limit of its backend."""

    def __init__(self, name: str, size: int, limit: int, limit_name: str) -> None:
        super().__init__(
            f"object {name!r} is {size} bytes, above the limit {limit_name}={limit} bytes"
        )
        self.name = name
        self.size = size
        self.limit = limit
        self.limit_name = limit_name


class CheckpointNotFound(StateError, LookupError):
    """No committed snapshot with that kind and id exists."""


class CheckpointCorrupt(StateError):
    """A committed snapshot cannot be read back intact (checksum mismatch, missing blob)."""


class CheckpointTooLarge(ObjectTooLarge):
    """A snapshot is larger than its backend accepts; the message names the limit and the size."""


class EventStoreError(StateError):
    """The job event store cannot take or persist events."""


class EventStoreClosed(EventStoreError):
    """``append`` or ``flush`` after ``close``."""


class EventStoreOverflow(EventStoreError):
    """The in-memory buffer hit its cap because the backend could not keep up or was down."""


class EventLogCorrupt(StateError):
    """A segment before the last one is damaged or missing, so replay cannot go on safely."""


class Fenced(StateError):
    """A newer driver attempt claimed the job's state: this one may no longer write it."""

    def __init__(self, mine: str, newer: str, location: str) -> None:
        super().__init__(
            f"driver {mine} was superseded by {newer} (its claim is {location}): this "
            "driver writes nothing more and stops"
        )
        self.mine = mine
        self.newer = newer
        self.location = location
