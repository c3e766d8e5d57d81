"""A savepoint's files by its location, and ``finishable dispose-savepoint``, which deletes them.

A savepoint's location (``status.location`` of its FinishableSparkSnapshot, what
``restoreFrom.savepoint`` takes) names its blob: ``<root>/sp-<digits>.blob`` in object storage,
``configmap://<namespace>/<job>-<prefix>.sp-<digits>.blob`` in the ConfigMaps of its job. Its meta
is beside it (``sp-<digits>.meta``). Disposal deletes the meta first, then the blob, as
:meth:`~finishable.state.checkpointstore.CheckpointStore.dispose` does, so a reader never sees
half a savepoint (a blob without its meta is invisible); a file already missing is success, so a
retried disposal finishes what an interrupted one began.

The operator holds no storage credentials: it disposes of an object-storage savepoint by running
``finishable dispose-savepoint <location>`` in a pod of the job's image with the job's storage
secret (:mod:`finishable.controller.snapshot.disposalplan`), and deletes ConfigMap savepoints
itself.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from typing import TextIO
from urllib.parse import urlsplit

from finishable.state.backends import open_backend, reached_like
from finishable.state.checkpointstore import savepoint_meta_of
from finishable.state.configmap import configmap_name
from finishable.state.errors import StateError

log = logging.getLogger(__name__)

STATE_URL_ENV = "FINISHABLE_STATE_URL"
"""The job's storage URL in a disposal pod: how to reach a location shown without credentials."""

CONFIGMAP_SCHEME = "configmap"


def is_configmap(location: str) -> bool:
    """Whether the savepoint at ``location`` is stored in ConfigMaps."""
    return urlsplit(location).scheme.lower() == CONFIGMAP_SCHEME


@dataclass(frozen=True)
class SavepointFiles:
    """Where a savepoint's files are: the backend's root and the two object names under it (for
    a ConfigMap savepoint the root is its namespace, the names its job's object names)."""

    root: str
    meta: str
    blob: str


def object_storage_files(location: str) -> SavepointFiles:
    """The files of an object-storage savepoint; :class:`ValueError` saying why when
    ``location`` does not name a savepoint blob in a directory."""
    if is_configmap(location):
        raise ValueError(f"{location} is in ConfigMaps, which the operator disposes of itself")
    root, _, blob = location.rpartition("/")
    if not root:
        raise ValueError(f"{location!r} does not name a savepoint file in a directory")
    return SavepointFiles(root=root, meta=savepoint_meta_of(blob), blob=blob)


def configmap_files(location: str, job: str) -> SavepointFiles:
    """The object names (of the ConfigMap backend of ``job``) of a ConfigMap savepoint at
    ``configmap://<namespace>/<job>-<prefix>.sp-<digits>.blob``; :class:`ValueError` when
    ``location`` is not one of ``job``'s savepoint blobs."""
    parts = urlsplit(location)
    head = parts.path.lstrip("/")
    if not is_configmap(location) or not parts.netloc or not head.startswith(f"{job}-"):
        raise ValueError(f"{location!r} is not a ConfigMap savepoint of job {job!r}")
    prefix, dot, file = head.removeprefix(f"{job}-").rpartition(".sp-")
    blob = f"{prefix.replace('.', '/')}/sp-{file}" if dot else file
    files = SavepointFiles(root=parts.netloc, meta=savepoint_meta_of(blob), blob=blob)
    if configmap_name(job, blob) != head:
        raise ValueError(f"{location!r} is not a ConfigMap savepoint of job {job!r}")
    return files


def dispose_savepoint(location: str, reach_like: str = "") -> None:
    """Delete the object-storage savepoint at ``location``: its meta, then its blob, reached
    with the credentials and options of ``reach_like`` (the job's storage URL) when
    ``location`` has none. :class:`ValueError` when it names no savepoint blob;
    :class:`StateError` or :class:`OSError` when the storage fails."""
    files = object_storage_files(location)
    root = reached_like(files.root, reach_like) if reach_like else files.root
    with open_backend(root) as backend:
        backend.delete(files.meta)
        backend.delete(files.blob)
    log.info("disposed of the savepoint at %s", location)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def dispose_command(args: argparse.Namespace, out: TextIO) -> int:
    """``finishable dispose-savepoint LOCATION``: 0 when its files are gone (or were already),
    1 with a one-line message on stderr otherwise."""
    location = str(args.location)
    try:
        dispose_savepoint(location, str(args.reach_like or ""))
    except ValueError as error:
        sys.stderr.write(f"cannot dispose of the savepoint: {_one_line(error)}\n")
        return 1
    except (StateError, OSError) as error:
        sys.stderr.write(f"cannot dispose of the savepoint at {location}: {_one_line(error)}\n")
        return 1
    out.write(f"disposed of the savepoint at {location}\n")
    return 0
