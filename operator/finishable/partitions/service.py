"""The cluster partition service: FLIP-67's REST API over one partition storage.

It plays the part of Flink's ResourceManager for cluster partitions: it lists them, describes
where each part lives, releases them on request (asynchronously, with a request id to poll) and
when their time to live runs out. Partitions are namespaced by the namespace of the job that
promoted them (``default`` for local runs); every ``/v1/`` route needs the bearer token of that
namespace, read from a directory with one file per namespace (a Secret mounted as a volume, so a
rotated token applies at once)::

    GET    /healthz, /metrics, /openapi.json             no token
    GET    /v1/namespaces/{ns}/partitions                {"partitions": [...]}
    GET    /v1/namespaces/{ns}/partitions/{id}           {"partitions": [{..., "descriptors"}]}
    DELETE /v1/namespaces/{ns}/partitions/{id}           202 {"request-id": ...}
    GET    /v1/namespaces/{ns}/partitions/delete-requests/{rid}
                                                         {"id", "status": IN_PROGRESS|COMPLETED}

Errors are ``{"error": message}``: 401 without a valid token, 403 for a token of another
namespace, 404 for an unknown id, 409 while a running job reads the partition.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import json
import logging
import re
import signal
import sys
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from finishable.partitions.catalog import PartitionCatalog, PartitionInUse
from finishable.partitions.manifest import (
    Manifest,
    is_partition_id,
    namespace_of,
    now_utc,
    summary,
)
from finishable.serving import (
    STRING,
    Handler,
    Refusal,
    json_response,
    openapi,
    operation,
    serve_json,
)
from finishable.shuffle.command import write_port_file
from finishable.shuffle.server import StartupError
from finishable.state.errors import BackendError, ObjectNotFound
from finishable.transport import MISSING_BEARER, WRONG_BEARER, offered_bearer_token

log = logging.getLogger(__name__)

REALM = "finishable-partitions"
_REQUEST_ID = re.compile("[0-9a-f]{32}")
"""A delete request's id (``uuid4().hex``)."""

REQUESTS = "delete-requests"
METRIC_PREFIX = "finishable_cluster_partition"


class Tokens(Protocol):
    """Where the service finds the bearer token of a namespace."""

    def token_for(self, namespace: str) -> str | None: ...

    def namespaces(self) -> Iterable[str]: ...


class DirectoryTokens:
    """One file per namespace, its content the token (a mounted Secret's layout)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def token_for(self, namespace: str) -> str | None:
        if namespace.startswith(".") or "/" in namespace:
            return None
        try:
            token = (self.directory / namespace).read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return token or None

    def namespaces(self) -> Iterable[str]:
        with contextlib.suppress(OSError):
            return sorted(p.name for p in self.directory.iterdir() if not p.name.startswith("."))
        return []


class PartitionService:
    """The HTTP face of one partition storage."""

    def __init__(
        self, catalog: PartitionCatalog, tokens: Tokens, *, expire_interval: float = 60.0
    ) -> None:
        self.catalog = catalog
        self.tokens = tokens
        self.expire_interval = expire_interval
        self.registry = CollectorRegistry(auto_describe=True)
        self.releases = Counter(
            f"{METRIC_PREFIX}_releases",
            "Cluster partitions released.",
            ["reason"],
            registry=self.registry,
        )
        self.registry.register(_Holdings(catalog))
        self._deletions: set[asyncio.Task[None]] = set()

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth])
        serve_json(app, "the cluster partition service", REALM, self._answer, OPENAPI)
        app.router.add_get("/healthz", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get(_BASE, self._list)
        app.router.add_get(_BASE + "/delete-requests/{request}", self._request_status)
        app.router.add_get(_BASE + "/{id}", self._get)
        app.router.add_delete(_BASE + "/{id}", self._delete)
        app.cleanup_ctx.append(self._expiry)
        return app

    # -- background ------------------------------------------------------------------------

    async def _expiry(self, app: web.Application) -> Any:
        task = asyncio.create_task(self._expire_forever())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for deletion in list(self._deletions):
            with contextlib.suppress(asyncio.CancelledError):
                await deletion

    async def _expire_forever(self) -> None:
        while True:
            await self.expire_now()
            await asyncio.sleep(self.expire_interval)

    async def expire_now(self) -> list[str]:
        """Release what outlived its time to live (the seed's release on expiry)."""
        try:
            expired = await asyncio.to_thread(self.catalog.expire, now_utc())
        except BackendError:
            log.warning("expiring cluster partitions failed", exc_info=True)
            return []
        if expired:
            self.releases.labels("expired").inc(len(expired))
        return expired

    # -- middlewares -----------------------------------------------------------------------

    @staticmethod
    def _answer(error: Exception) -> Refusal | None:
        """The storage unreachable is a 503 (anything else of ours is a 500)."""
        if isinstance(error, BackendError):
            return Refusal(503, f"the partition storage is unavailable: {error}")
        return None

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        namespace = request.match_info.get("namespace")
        if namespace is None:
            return await handler(request)
        offered = offered_bearer_token(request.headers.get("Authorization", ""))
        if offered is None:
            raise Refusal(401, MISSING_BEARER)
        expected = self.tokens.token_for(namespace)
        if expected is not None and hmac.compare_digest(offered, expected.encode("utf-8")):
            return await handler(request)
        for other in self.tokens.namespaces():
            token = self.tokens.token_for(other)
            if other != namespace and token and hmac.compare_digest(offered, token.encode()):
                raise Refusal(403, f"this token is not valid for namespace {namespace!r}")
        raise Refusal(401, WRONG_BEARER)

    # -- handlers --------------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        return json_response(200, {"status": "ok", "storage": self.catalog.location})

    async def _metrics(self, request: web.Request) -> web.Response:
        body = await asyncio.to_thread(generate_latest, self.registry)
        response = web.Response(body=body)
        response.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        return response

    async def _list(self, request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        listed = await asyncio.to_thread(self._summaries, namespace)
        return json_response(200, {"partitions": listed})

    def _summaries(self, namespace: str) -> list[dict[str, Any]]:
        listed = self.catalog.listed()
        return [summary(m, state) for m, state in listed if namespace_of(m) == namespace]

    async def _get(self, request: web.Request) -> web.Response:
        manifest = await self._manifest(request)
        document = await asyncio.to_thread(self.catalog.describe, manifest)
        return json_response(200, {"partitions": [document]})

    async def _delete(self, request: web.Request) -> web.Response:
        manifest = await self._manifest(request)
        readers = await asyncio.to_thread(self.catalog.readers, manifest.id, now_utc())
        if readers:
            raise Refusal(409, str(PartitionInUse(manifest.id, readers)))
        request_id = uuid.uuid4().hex
        record = {
            "id": request_id,
            "partition": manifest.id,
            "namespace": namespace_of(manifest),
            "status": "IN_PROGRESS",
            "requestedAt": now_utc().isoformat(),
        }
        await asyncio.to_thread(self._write_request, record)
        task = asyncio.create_task(self._release(record))
        self._deletions.add(task)
        task.add_done_callback(self._deletions.discard)
        return json_response(202, {"request-id": request_id})

    async def _release(self, record: dict[str, Any]) -> None:
        try:
            await asyncio.to_thread(self.catalog.delete, record["partition"], force=True)
            record.update(status="COMPLETED", completedAt=now_utc().isoformat())
            self.releases.labels("request").inc()
        except Exception as error:
            log.exception("releasing cluster partition %s failed", record["partition"])
            record.update(status="FAILED", error=f"{type(error).__name__}: {error}")
        await asyncio.to_thread(self._write_request, record)

    async def _request_status(self, request: web.Request) -> web.Response:
        request_id = request.match_info["request"]
        if not _REQUEST_ID.fullmatch(request_id):  # no other name reaches the storage
            raise Refusal(404, f"no delete request {request_id!r}")
        try:
            data = await asyncio.to_thread(
                self.catalog.backend.get, f"{REQUESTS}/{request_id}.json"
            )
        except ObjectNotFound:
            raise Refusal(404, f"no delete request {request_id!r}") from None
        record = json.loads(data)
        if record.get("namespace") != request.match_info["namespace"]:
            raise Refusal(404, f"no delete request {request_id!r}")
        return json_response(200, record)

    def _write_request(self, record: dict[str, Any]) -> None:
        self.catalog.backend.put(f"{REQUESTS}/{record['id']}.json", json.dumps(record).encode())

    async def _manifest(self, request: web.Request) -> Manifest:
        """The partition the path names, in the path's namespace (else 404)."""
        partition_id = request.match_info["id"]
        namespace = request.match_info["namespace"]
        manifest = None
        if is_partition_id(partition_id):
            manifest = await asyncio.to_thread(self.catalog.committed, partition_id)
        if manifest is None or manifest.expired(now_utc()) or namespace_of(manifest) != namespace:
            raise Refusal(404, f"no cluster partition {partition_id!r} in namespace {namespace!r}")
        return manifest


class _Holdings(Collector):
    """Partitions and bytes held per namespace and state, read from the storage when scraped."""

    def __init__(self, catalog: PartitionCatalog) -> None:
        self.catalog = catalog

    def collect(self) -> Iterable[GaugeMetricFamily]:
        count = GaugeMetricFamily(
            f"{METRIC_PREFIX}s", "Cluster partitions held.", labels=["namespace", "state"]
        )
        size = GaugeMetricFamily(
            f"{METRIC_PREFIX}_bytes", "Bytes of cluster partitions held.", labels=["namespace"]
        )
        totals: dict[tuple[str, str], int] = {}
        sizes: dict[str, int] = {}
        try:
            listed = self.catalog.listed()
        except BackendError:
            listed = []
        for manifest, state in listed:
            key = (namespace_of(manifest), state)
            totals[key] = totals.get(key, 0) + 1
            sizes[key[0]] = sizes.get(key[0], 0) + manifest.bytes
        for (namespace, state), value in sorted(totals.items()):
            count.add_metric([namespace, state], value)
        for namespace, value in sorted(sizes.items()):
            size.add_metric([namespace], value)
        return [count, size]


_BASE = "/v1/namespaces/{namespace}/partitions"
_NAMESPACE = {"namespace": STRING}
OPENAPI = openapi(
    "Finishable cluster partition service",
    "FLIP-67 cluster partitions: list, describe and release them.",
    {
        "/healthz": {
            "get": operation("Health", responses={"200": "{status, storage}"}, public=True)
        },
        "/metrics": {
            "get": operation("Prometheus metrics", responses={"200": "text"}, public=True)
        },
        _BASE: {
            "get": operation(
                "List the namespace's cluster partitions",
                path=_NAMESPACE,
                responses={"200": "{partitions: [...]}", "401": "no token", "403": "other ns"},
            )
        },
        _BASE + "/{id}": {
            "get": operation(
                "Describe a cluster partition: schema, sizes and where each part lives",
                path={**_NAMESPACE, "id": STRING},
                responses={"200": "{partitions: [{..., descriptors}]}", "404": "unknown id"},
            ),
            "delete": operation(
                "Release a cluster partition (asynchronously)",
                path={**_NAMESPACE, "id": STRING},
                responses={
                    "202": "{request-id}",
                    "404": "unknown id",
                    "409": "a running job reads it",
                },
            ),
        },
        _BASE + "/delete-requests/{request}": {
            "get": operation(
                "The state of a delete request",
                path={**_NAMESPACE, "request": STRING},
                responses={"200": "{id, status: IN_PROGRESS|COMPLETED|FAILED}", "404": "unknown"},
            )
        },
    },
)


async def serve(
    service: PartitionService,
    host: str,
    port: int,
    *,
    port_file: Path | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until ``stop`` is set, or SIGTERM / SIGINT."""
    stop = stop or asyncio.Event()
    runner = web.AppRunner(service.app(), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, reuse_address=True)
        await site.start()
        bound = int(runner.addresses[0][1])
        if port_file is not None:
            write_port_file(port_file, bound)
        log.info("cluster partition service on %s:%d for %s", host, bound, service.catalog.location)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


def run_from_args(args: argparse.Namespace) -> int:
    """``finishable partition-service``: exit code 2 when it cannot start, with the reason."""
    tokens = Path(args.tokens_dir)
    if not tokens.is_dir():
        sys.stderr.write(
            f"finishable partition-service: --tokens-dir {str(tokens)!r} is not a directory "
            "(one file per namespace holding its bearer token, e.g. a mounted Secret)\n"
        )
        return 2
    try:
        catalog = PartitionCatalog(args.storage)
    except BackendError as error:
        sys.stderr.write(f"finishable partition-service: --storage: {error}\n")
        return 2
    service = PartitionService(
        catalog, DirectoryTokens(tokens), expire_interval=args.expire_interval
    )
    port_file = Path(args.port_file) if args.port_file else None
    try:
        asyncio.run(serve(service, args.host, args.port, port_file=port_file))
    except StartupError as error:  # the port file could not be written
        sys.stderr.write(f"finishable partition-service: {error}\n")
        return error.exit_code
    except OSError as error:
        sys.stderr.write(f"finishable partition-service: cannot listen: {error}\n")
        return 1
    finally:
        catalog.close()
    return 0
