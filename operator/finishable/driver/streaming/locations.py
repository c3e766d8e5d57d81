"""Reading a savepoint from where status says it is: the job's store, or any object store.

A location of the job's own store is read through the store (verified, by kind and id); any other
is opened by its scheme. ``SavepointUnreachable`` tells a store that did not answer, which a
later attempt may read, from a savepoint that is not there or not one.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from finishable.driver.streaming.savepoints import SavepointError
from finishable.state import (
    CheckpointCorrupt,
    CheckpointKind,
    CheckpointNotFound,
    CheckpointStore,
    ObjectNotFound,
    StateError,
    open_backend,
)
from finishable.state.backends import reached_like
from finishable.state.checkpointstore import decode_blob

_SNAPSHOT_NAME = re.compile(r"(?:^|[/.-])snapshots[/.](?P<tag>sp|chk)-(?P<id>\d+)\.blob$")


class SavepointUnreachable(SavepointError):
    """The store that holds the savepoint did not answer: a later attempt may read it."""


def read_snapshot_location(
    location: str, store: CheckpointStore, reach_like: str = ""
) -> tuple[bytes, str]:
    """The payload of the snapshot blob at ``location`` (a savepoint or checkpoint location as
    reported in status), verified; and a short description of it. A location without
    credentials or options is reached like ``reach_like``, the job's own storage URL."""
    match = _SNAPSHOT_NAME.search(location)
    if match is not None:
        kind = CheckpointKind.SAVEPOINT if match["tag"] == "sp" else CheckpointKind.CHECKPOINT
        snapshot_id = int(match["id"])
        name = f"{store.prefix}/{match['tag']}-{snapshot_id:012d}.blob"
        if store.backend.location(name) == location:
            try:
                return store.get(kind, snapshot_id).data, f"{kind.value} {snapshot_id}"
            except CheckpointNotFound:
                raise SavepointError(f"no {kind.value} at {location}") from None
    scheme = urlsplit(location).scheme.lower()
    if scheme == "configmap":
        raise SavepointError(
            f"{location} is in the ConfigMaps of another job; copy it to object storage or "
            "restore into the job that took it"
        )
    root, _, name = location.rpartition("/")
    if not name:
        raise SavepointError(f"{location!r} does not name a savepoint file")
    try:
        with open_backend(reached_like(root, reach_like) if root else ".") as backend:
            blob = backend.get(name)
    except ObjectNotFound:
        raise SavepointError(f"no savepoint at {location}") from None
    except (StateError, OSError) as error:
        raise SavepointUnreachable(f"cannot read the savepoint at {location}: {error}") from None
    except ValueError as error:
        raise SavepointError(f"cannot read the savepoint at {location}: {error}") from None
    try:
        payload, _ = decode_blob(blob, what=location)
    except CheckpointCorrupt as error:
        raise SavepointError(str(error)) from None
    return payload, location
