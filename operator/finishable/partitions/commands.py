"""``finishable partitions list|get|delete``: cluster partitions, locally or through the service.

Without ``--server`` the command reads a partition storage itself: ``--storage``, by default the
one of local runs (``<state dir>/_partitions``, where ``finishable run`` promotes). With
``--server URL`` it asks a cluster partition service (``finishable partition-service``, which the
chart installs) for the partitions of ``--namespace``, with the bearer token in
``$FINISHABLE_PARTITION_TOKEN`` or ``--token-file``. Both print the same table, or JSON with
``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any, Protocol, TextIO
from urllib.parse import quote

from finishable.partitions.catalog import (
    AmbiguousPartition,
    PartitionCatalog,
    PartitionInUse,
    PartitionNotFound,
)
from finishable.partitions.manifest import is_partition_id, summary
from finishable.state.errors import BackendError
from finishable.transport import HttpAnswerError, Policy, Transport, Unreachable

TOKEN_ENV = "FINISHABLE_PARTITION_TOKEN"
DELETE_WAIT_SECONDS = 120.0


CLI_PATIENCE = Policy(timeout=60.0, retries=3)
"""A person waits on the command: a service that is down is said within a second."""


class PartitionCommandError(Exception):
    """A user mistake, an unknown partition or an unreachable storage: one line for stderr."""


class Partitions(Protocol):
    """What the command needs of a partition storage, near or behind the service."""

    def list(self) -> list[dict[str, Any]]: ...

    def get(self, reference: str) -> dict[str, Any]: ...

    def delete(self, reference: str, *, force: bool) -> str: ...

    def close(self) -> None: ...


def run(args: argparse.Namespace, out: TextIO, storage: str) -> int:
    """Carry out ``args.action`` on the service ``args.server``, else on ``storage``."""
    if args.action != "list" and not args.partition:
        raise PartitionCommandError(f"`finishable partitions {args.action}` needs PARTITION")
    partitions = _remote(args) if args.server else _local(storage)
    try:
        if args.action == "list":
            listed = partitions.list()
            out.write(json.dumps({"partitions": listed}, indent=2) + "\n" if args.json else "")
            if not args.json:
                out.write(_table(listed) if listed else "no cluster partitions\n")
        elif args.action == "get":
            document = partitions.get(args.partition)
            out.write(json.dumps(document, indent=2) + "\n" if args.json else _details(document))
        else:
            out.write(partitions.delete(args.partition, force=args.force) + "\n")
    except (PartitionNotFound, AmbiguousPartition, PartitionInUse, BackendError) as error:
        raise PartitionCommandError(str(error)) from None
    finally:
        partitions.close()
    return 0


def _local(storage: str) -> Partitions:
    try:
        return LocalPartitions(PartitionCatalog(storage))
    except BackendError as error:
        raise PartitionCommandError(str(error)) from None


def _remote(args: argparse.Namespace) -> Partitions:
    if args.force:
        raise PartitionCommandError("--force works on a storage, not through --server")
    if args.token_file:
        try:
            token = open(args.token_file, encoding="utf-8").read().strip()  # noqa: SIM115
        except OSError as error:
            raise PartitionCommandError(f"--token-file: {error}") from None
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise PartitionCommandError(f"--server needs a token: set ${TOKEN_ENV} or --token-file")
    return RemotePartitions(args.server, args.namespace, token)


class LocalPartitions:
    """The storage itself."""

    def __init__(self, catalog: PartitionCatalog) -> None:
        self.catalog = catalog

    def list(self) -> list[dict[str, Any]]:
        return [summary(manifest, state) for manifest, state in self.catalog.listed()]

    def get(self, reference: str) -> dict[str, Any]:
        return self.catalog.describe(self.catalog.get(reference))

    def delete(self, reference: str, *, force: bool) -> str:
        manifest = self.catalog.get(reference)
        removed = self.catalog.delete(manifest.id, force=force)
        return f"deleted cluster partition {manifest.id} ({manifest.name}): {removed} file(s)"

    def close(self) -> None:
        self.catalog.close()


class RemotePartitions:
    """The cluster partition service's REST API."""

    def __init__(self, server: str, namespace: str, token: str) -> None:
        self._transport = Transport(server, token, CLI_PATIENCE, what="the partition service")
        self.path = f"/v1/namespaces/{quote(namespace, safe='')}/partitions"
        self.base = self._transport.url + self.path
        self.namespace = namespace

    def list(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "")["partitions"])

    def get(self, reference: str) -> dict[str, Any]:
        [document] = self._call("GET", f"/{quote(self._id(reference), safe='')}")["partitions"]
        return dict(document)

    def delete(self, reference: str, *, force: bool) -> str:
        partition_id = self._id(reference)
        request = self._call("DELETE", f"/{quote(partition_id, safe='')}")["request-id"]
        deadline = time.monotonic() + DELETE_WAIT_SECONDS
        while time.monotonic() < deadline:
            record = self._call("GET", f"/delete-requests/{request}")
            if record["status"] == "COMPLETED":
                return f"deleted cluster partition {partition_id} (request {request})"
            if record["status"] == "FAILED":
                raise PartitionCommandError(f"delete request {request} failed: {record['error']}")
            time.sleep(0.5)
        return f"delete of {partition_id} accepted, still in progress (request {request})"

    def close(self) -> None:
        self._transport.close()

    def _id(self, reference: str) -> str:
        """An id as given; a name resolved from the listing as the storage would (newest)."""
        if is_partition_id(reference):
            return reference
        found = [p for p in self.list() if reference in (p["id"], p["name"], p["dataset"])]
        if not found:
            raise PartitionCommandError(
                f"no cluster partition {reference!r} in namespace {self.namespace!r}"
            )
        if len({p["name"] for p in found}) > 1:
            names = ", ".join(sorted({p["name"] for p in found}))
            raise PartitionCommandError(f"{reference!r} names several: {names}; pass an id")
        return str(max(found, key=lambda p: p["created-at"])["id"])

    def _call(self, method: str, path: str) -> dict[str, Any]:
        # a DELETE is not retried: it files a delete request, and a second one would be filed
        retries = 0 if method == "DELETE" else None
        try:
            return dict(self._transport.request_json(method, self.path + path, retries=retries))
        except HttpAnswerError as error:
            raise PartitionCommandError(
                f"{method} {self.base}{path}: {error.status} {error.message}"
            ) from None
        except Unreachable as error:
            raise PartitionCommandError(f"cannot reach {self.base}: {error.problem}") from None


def _table(listed: list[dict[str, Any]]) -> str:
    rows = [("ID", "NAME", "RUN", "PARTS", "ROWS", "BYTES", "STATE", "CREATED", "EXPIRES")]
    rows.extend(
        (
            str(p["id"]),
            str(p["name"]),
            str(p["run"]),
            str(p["partitions"]),
            str(p["rows"]),
            str(p["bytes"]),
            str(p["state"]),
            str(p["created-at"])[:19],
            str(p["expires-at"] or "never")[:19],
        )
        for p in listed
    )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
    return "".join(line.rstrip() + "\n" for line in lines)


_DETAILS = ("id", "name", "state", "job-name", "job-id", "run", "namespace", "rows", "bytes")
_DETAILS_AFTER = ("checksum", "created-at", "expires-at", "readers")


def _details(document: dict[str, Any]) -> str:
    lines = [f"{key}: {document[key]}" for key in (*_DETAILS, *_DETAILS_AFTER)]
    lines.append("parts:")
    lines.extend(
        f"  {part['partition']}: {part['rows']} row(s), {part['bytes']} byte(s), {part['url']}"
        for part in document["descriptors"]
    )
    return "\n".join(lines) + "\n"
