"""The byte-object interface every state backend implements, and a factory from storage URLs.

The checkpoint store and the job event store are written once against this small interface (put,
get, list, delete of named objects), so each backend only has to move bytes; checksums,
visibility rules and retention live above it and behave the same everywhere.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

from finishable.api.models import OBJECT_STORE_SCHEMES

# Names are portable across file systems, object stores and ConfigMap names (DNS subdomains):
# lowercase segments of [a-z0-9.-] that start and end alphanumeric, joined by "/".
_SEGMENT = r"[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?"
_NAME = re.compile(rf"{_SEGMENT}(?:/{_SEGMENT})*")


def validate_name(name: str) -> str:
    """Return ``name`` if it is a portable object name, else raise ``ValueError`` saying why."""
    if not _NAME.fullmatch(name) or ".." in name:
        raise ValueError(
            f"invalid object name {name!r}: use lowercase segments of a-z, 0-9, '.' and '-' "
            "that start and end with a letter or digit, separated by '/'"
        )
    return name


class ObjectBackend(abc.ABC):
    """Named immutable-ish byte objects.

    Contract every implementation keeps (the contract test suite checks it):

    * ``put`` is atomic for readers: a concurrent or later ``get`` sees the old bytes, the new
      bytes or "not found", never a prefix;
    * ``get`` raises ``ObjectNotFound`` for a missing object, ``ObjectCorrupt`` when the backend
      itself detects damage, ``BackendError`` for I/O trouble that may pass;
    * ``list`` returns the names under a prefix, sorted;
    * ``delete`` is idempotent;
    * every method may be called from several threads at once.
    """

    @abc.abstractmethod
    def put(self, name: str, data: bytes) -> None:
        """Store ``data`` under ``name``, replacing what was there."""

    @abc.abstractmethod
    def get(self, name: str) -> bytes:
        """Return the bytes stored under ``name``."""

    @abc.abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Return the sorted names that start with ``prefix``."""

    @abc.abstractmethod
    def delete(self, name: str) -> None:
        """Remove ``name``; a missing object is not an error."""

    @abc.abstractmethod
    def location(self, name: str = "") -> str:
        """A human-readable address of ``name`` (or of the backend root) for logs and status."""

    def close(self) -> None:  # noqa: B027 - most backends hold nothing to release
        """Release connections; the backend is unusable afterwards."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class WrappedBackend(ObjectBackend):
    """A backend that adds a rule to another one's writes; reads pass through."""

    def __init__(self, inner: ObjectBackend) -> None:
        self.inner = inner

    def put(self, name: str, data: bytes) -> None:
        self.inner.put(name, data)

    def delete(self, name: str) -> None:
        self.inner.delete(name)

    def get(self, name: str) -> bytes:
        return self.inner.get(name)

    def list(self, prefix: str = "") -> list[str]:
        return self.inner.list(prefix)

    def location(self, name: str = "") -> str:
        return self.inner.location(name)

    def close(self) -> None:
        self.inner.close()


class ReadOnlyBackend(WrappedBackend):
    """Another process's state, read without the right to change it (an upgrade check reads
    the running job's): a write is a bug, and raises."""

    def put(self, name: str, data: bytes) -> None:
        raise PermissionError(f"{self.inner.location(name)} is read-only here")

    def delete(self, name: str) -> None:
        raise PermissionError(f"{self.inner.location(name)} is read-only here")


def open_backend(
    url: str,
    *,
    job: str | None = None,
    namespace: str | None = None,
    owner_references: Sequence[Mapping[str, Any]] = (),
) -> ObjectBackend:
    """Open a backend from a storage address.

    * ``s3://``, ``gs://``, ``gcs://``, ``hdfs://``, ``file://`` go through ``pyarrow.fs``;
    * ``configmap:`` (or ``configmap://<namespace>``) stores ConfigMaps of ``job`` through the
      Kubernetes API, in-cluster or from the kubeconfig, owned by ``owner_references`` when
      they are in ``namespace``;
    * anything else (``local:///dir``, or a plain path) is a local directory.
    """
    # Imported here so that local mode never loads pyarrow.fs or the Kubernetes client.
    scheme = urlsplit(url).scheme.lower()
    if scheme in OBJECT_STORE_SCHEMES:
        from finishable.state.objectstore import ObjectStoreBackend  # noqa: PLC0415

        return ObjectStoreBackend(url)
    if scheme == "configmap":
        from finishable.state.configmap import ConfigMapBackend  # noqa: PLC0415

        if not job:
            raise ValueError(f"{url!r}: a ConfigMap backend needs the job name")
        target = urlsplit(url).netloc or namespace
        # An owner is only valid in its own namespace (elsewhere the collector deletes at once).
        owners = owner_references if target == namespace else ()
        return ConfigMapBackend.from_environment(job, namespace=target, owner_references=owners)
    from finishable.state.local import LocalDirBackend  # noqa: PLC0415

    path = urlsplit(url).path if scheme == "local" else url
    return LocalDirBackend(path)


def reached_like(location: str, url: str) -> str:
    """``location`` with the credentials and options (endpoint, scheme, region) of ``url``,
    when it names none of its own and is in the same kind of storage.

    A status shows object storage locations without them (no secret belongs in a status), so a
    savepoint location copied from one is reached as the reader's own storage is reached: what
    users of S3-compatible stores (MinIO, Ceph) expect. A location with its own query or
    credentials is taken as it is."""
    target, own = urlsplit(location), urlsplit(url)
    if target.query or "@" in target.netloc or not target.scheme:
        return location
    if target.scheme.lower() != own.scheme.lower():
        return location
    userinfo = own.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{target.netloc}" if userinfo else target.netloc
    return urlunsplit(target._replace(netloc=netloc, query=own.query))
