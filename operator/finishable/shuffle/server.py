"""The shuffle server: one job's result partitions over HTTP (run by ``finishable shuffle-server``).

A Batch job's driver materialises datasets as result partitions on shuffle pods, one server per
pod. The pods outlive the driver, so a new driver attempt lists what survived and recomputes only
what is missing (the ideas of Flink's FLIP-383 and FLIP-67). When no driver heartbeats for the
retain timeout, the server releases the job's partitions itself, except promoted datasets
(cluster partitions), which only an explicit delete removes.

API (JSON; every route under ``/v1/`` needs ``Authorization: Bearer <token>``)::

    GET    /healthz                                       liveness, no token
    GET    /metrics                                       Prometheus text, no token
    POST   /v1/drivers                                    {"attempt": n, "run": r} register
    PUT    /v1/partitions/{dataset}/{partition}?attempt=A[&epoch=R.N][&commit=true]   Arrow IPC
    POST   /v1/partitions/{dataset}/{partition}/commit    {"upload": id[, "epoch": "R.N"]}
    GET    /v1/partitions/{dataset}/{partition}           the partition's bytes
    GET    /v1/partitions[?dataset=D][&verify=true]       committed (and corrupt) partitions
    DELETE /v1/partitions[?includePromoted=true]          release the job
    DELETE /v1/partitions/{dataset}                       release one dataset, even promoted
    POST   /v1/datasets/{dataset}/promote                 keep it when the job is released
    GET    /v1/datasets                                   per-dataset totals

Stale drivers are fenced: the server remembers the newest driver epoch (run, attempt) that
registered and refuses, with 409, a registration or an upload of an older one, so a driver that
lost its pod but still runs cannot replace its successor's partitions. The first registration of
a newer *run* releases the job's partitions (promoted ones stay): a new run starts from nothing.

Disk I/O runs in worker threads; uploads are read in chunks and never held whole in memory.
This module is the HTTP face and the retain timeout; the command around it (options, signals,
exit codes) is :mod:`finishable.shuffle.command`, the metrics :mod:`finishable.shuffle.metrics`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from finishable.api.jobconfig import TOKEN_ENV
from finishable.serving import (
    Handler,
    Refusal,
    json_object,
    json_response,
    serve_json,
)
from finishable.shuffle.metrics import ShuffleMetrics
from finishable.shuffle.openapi import ARROW_STREAM_TYPE, OPENAPI
from finishable.shuffle.records import (
    DatasetMissing,
    InvalidName,
    NotArrowStream,
    PartitionMissing,
    UnknownUpload,
    check_attempt,
    check_dataset,
)
from finishable.shuffle.store import PartitionStore
from finishable.shuffle.wire import driver_epoch, flag, partition_names, positive
from finishable.transport import bearer_problem

logger = logging.getLogger(__name__)

REALM = "finishable-shuffle"

CHUNK_SIZE = 1 << 20
"""Bytes per disk write and per read of a download: big enough to amortise a thread hop."""
UPLOAD_IDLE_SECONDS = 600.0
"""A finished upload nobody committed for this long is deleted (its client is gone)."""


class StartupError(Exception):
    """The server cannot start as configured; the message says what to fix (exit code 2)."""

    exit_code = 2


class BindError(StartupError):
    """The address is taken or not ours: the configuration may be fine (exit code 1)."""

    exit_code = 1


class ShuffleServer:
    """The HTTP face of a ``PartitionStore``, with the driver heartbeat and retain timeout."""

    def __init__(
        self,
        store: PartitionStore,
        token: str,
        retain_timeout: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_retain_release: Callable[[], None] | None = None,
    ) -> None:
        if not token:
            raise StartupError(f"the shuffle server needs a bearer token in ${TOKEN_ENV}")
        if retain_timeout <= 0:
            raise StartupError(f"the retain timeout must be positive, got {retain_timeout!r} s")
        self.store = store
        self.job = store.job
        self.retain_timeout = retain_timeout
        self._token = token.encode("utf-8")
        self._clock = clock
        self.last_heartbeat = clock()
        self.driver_epoch: tuple[int, int] | None = store.load_driver_epoch()
        """The newest (run, attempt) that registered."""
        self._released_for_idle = False
        self._on_retain_release = on_retain_release
        self.metrics = ShuffleMetrics(store, self.seconds_since_heartbeat)

    def seconds_since_heartbeat(self) -> float:
        return max(0.0, self._clock() - self.last_heartbeat)

    def app(self) -> web.Application:
        """The aiohttp application; its startup starts the retain-timeout watch."""
        app = web.Application(middlewares=[self._auth_middleware])
        serve_json(app, "the shuffle server", REALM, self._answer, OPENAPI)
        app.router.add_get("/healthz", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/v1/drivers", self._register)
        app.router.add_get("/v1/partitions", self._list)
        app.router.add_delete("/v1/partitions", self._release_job)
        app.router.add_put("/v1/partitions/{dataset}/{partition}", self._put)
        app.router.add_post("/v1/partitions/{dataset}/{partition}/commit", self._commit)
        app.router.add_get("/v1/partitions/{dataset}/{partition}", self._get)
        app.router.add_delete("/v1/partitions/{dataset}", self._release_dataset)
        app.router.add_get("/v1/datasets", self._datasets)
        app.router.add_post("/v1/datasets/{dataset}/promote", self._promote)
        app.cleanup_ctx.append(self._background)
        return app

    # ------------------------------------------------------------------ retain timeout

    async def _background(self, app: web.Application) -> Any:
        task = asyncio.create_task(self._watch(), name="shuffle-retain-timeout")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _watch(self) -> None:
        interval = min(1.0, self.retain_timeout / 4)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.check_retain_timeout()
                await asyncio.to_thread(self.store.abort_stale, UPLOAD_IDLE_SECONDS)
            except Exception:
                logger.exception("shuffle server: the retain-timeout check failed")

    async def check_retain_timeout(self) -> int | None:
        """Release the job once when no driver heartbeated for the retain timeout."""
        idle = self.seconds_since_heartbeat()
        if self._released_for_idle or idle < self.retain_timeout:
            return None
        self._released_for_idle = True
        released = await asyncio.to_thread(self.store.release)
        promoted = self.store.promoted()
        kept = self.store.totals()[0]
        logger.warning(
            "shuffle server: no driver of job %r registered or heartbeated for %.1f s "
            "(retain timeout %.1f s): released %d partition(s); kept %d partition(s) of "
            "%d promoted dataset(s)",
            self.job,
            idle,
            self.retain_timeout,
            released,
            kept,
            len(promoted),
        )
        self.metrics.releases.labels("retain_timeout").inc()
        self.metrics.released_partitions.labels("retain_timeout").inc(released)
        if self._on_retain_release is not None:
            self._on_retain_release()
        return released

    # ------------------------------------------------------------------ middlewares

    @staticmethod
    def _answer(error: Exception) -> Refusal | None:
        """The answers to the store's typed errors (anything else is our bug: a 500)."""
        if isinstance(error, InvalidName | NotArrowStream):
            return Refusal(400, str(error))
        if isinstance(error, UnknownUpload | PartitionMissing | DatasetMissing):
            return Refusal(404, str(error))
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return Refusal(507, f"the shuffle server's disk is full: {error}")
        return None

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith("/v1/"):
            return await handler(request)
        problem = bearer_problem(request.headers.get("Authorization", ""), self._token)
        if problem is not None:
            raise Refusal(401, problem)
        return await handler(request)

    # ------------------------------------------------------------------ handlers

    async def _health(self, request: web.Request) -> web.Response:
        return json_response(
            200,
            {
                "status": "ok",
                "job": self.job,
                "driverAttempt": self.driver_epoch[1] if self.driver_epoch else None,
                "driverRun": self.driver_epoch[0] if self.driver_epoch else None,
            },
        )

    async def _metrics(self, request: web.Request) -> web.Response:
        response = web.Response(body=self.metrics.render())
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    def _refuse_superseded(self, epoch: tuple[int, int], what: str) -> None:
        if self.driver_epoch is not None and epoch < self.driver_epoch:
            run, attempt = self.driver_epoch
            raise Refusal(
                409,
                f"{what} of driver attempt {epoch[1]} of run {epoch[0]} refused: attempt "
                f"{attempt} of run {run} registered since, and a superseded driver writes nothing",
            )

    async def _register(self, request: web.Request) -> web.Response:
        body = await json_object(request)
        attempt = positive(body.get("attempt"), "body.attempt")
        epoch = (positive(body.get("run", 1), "body.run"), attempt)
        self._refuse_superseded(epoch, "the registration")
        if self.driver_epoch != epoch:
            logger.info(
                "shuffle server: driver attempt %d of run %d of job %r registered",
                epoch[1],
                epoch[0],
                self.job,
            )
            if self.driver_epoch is not None and epoch[0] > self.driver_epoch[0]:
                released = await asyncio.to_thread(self.store.release)
                self._count_release(released)
                logger.info("shuffle server: a new run; %d partition(s) released", released)
            await asyncio.to_thread(self.store.save_driver_epoch, epoch)
        self.driver_epoch = epoch
        self.last_heartbeat = self._clock()
        self._released_for_idle = False
        return json_response(
            200,
            {
                "job": self.job,
                "attempt": attempt,
                "partitions": self.store.totals()[0],
                "retainTimeoutSeconds": self.retain_timeout,
            },
        )

    async def _put(self, request: web.Request) -> web.Response:
        dataset, partition = partition_names(request)
        attempt = request.query.get("attempt")
        if attempt is None:
            raise Refusal(
                400,
                "query parameter attempt is missing: expected the writing attempt, 1 to 64 "
                "letters, digits, '_', '.' or '-'",
            )
        check_attempt(attempt)
        epoch = driver_epoch(request.query.get("epoch"), "query parameter epoch")
        if epoch is not None:
            self._refuse_superseded(epoch, "the upload")
        commit = flag(request, "commit")
        upload = await asyncio.to_thread(self.store.begin, dataset, partition, attempt)
        try:
            buffer = bytearray()
            async for chunk in request.content.iter_chunked(CHUNK_SIZE):
                buffer += chunk
                self.metrics.received_bytes.inc(len(chunk))
                if len(buffer) >= CHUNK_SIZE:
                    await asyncio.to_thread(upload.write, buffer)
                    buffer = bytearray()
            if buffer:
                await asyncio.to_thread(upload.write, buffer)
            await asyncio.to_thread(upload.finish)
        except BaseException:
            self.store.abort(upload)
            raise
        if not commit:
            return json_response(
                200, {"upload": upload.id, "bytes": upload.size, "sha256": upload.sha256}
            )
        if epoch is not None and self.driver_epoch is not None and epoch < self.driver_epoch:
            self.store.abort(upload)  # a successor registered while the upload streamed in
            self._refuse_superseded(epoch, "the commit")
        meta = await asyncio.to_thread(self.store.commit, upload.id)
        self.metrics.puts.inc()
        return json_response(200, meta.to_json())

    async def _commit(self, request: web.Request) -> web.Response:
        dataset, partition = partition_names(request)
        body = await json_object(request)
        upload_id = body.get("upload")
        if not isinstance(upload_id, str) or not upload_id:
            raise Refusal(
                400,
                f"body.upload {upload_id!r} is not valid: expected the id a PUT without "
                "commit=true answered",
            )
        epoch = driver_epoch(body.get("epoch"), "body.epoch")
        if epoch is not None:
            self._refuse_superseded(epoch, "the commit")
        meta = await asyncio.to_thread(self.store.commit, upload_id, dataset, partition)
        self.metrics.puts.inc()
        return json_response(200, meta.to_json())

    async def _get(self, request: web.Request) -> web.StreamResponse:
        dataset, partition = partition_names(request)
        meta, handle = await asyncio.to_thread(self.store.open, dataset, partition)
        try:
            # The file's own size, not the sidecar's: a damaged file is sent as it is, and the
            # client's checksum reports it instead of a hang on a short body.
            size = os.fstat(handle.fileno()).st_size
            response = web.StreamResponse(
                headers={
                    "X-Finishable-Sha256": meta.sha256,
                    "X-Finishable-Rows": str(meta.rows),
                    "X-Finishable-Attempt": meta.attempt,
                    "X-Finishable-Committed-At": meta.to_json()["committedAt"],
                }
            )
            response.content_type = ARROW_STREAM_TYPE
            response.content_length = size
            await response.prepare(request)
            sent = 0
            while sent < size:
                chunk = await asyncio.to_thread(handle.read, min(CHUNK_SIZE, size - sent))
                if not chunk:
                    break
                await response.write(chunk)
                sent += len(chunk)
                self.metrics.sent_bytes.inc(len(chunk))
            await response.write_eof()
        finally:
            handle.close()
        self.metrics.gets.inc()
        return response

    async def _list(self, request: web.Request) -> web.Response:
        dataset = request.query.get("dataset")
        if dataset is not None:
            check_dataset(dataset)
        corrupt = []
        if flag(request, "verify"):
            corrupt = await asyncio.to_thread(self.store.verify, dataset)
            self.metrics.corrupt.inc(len(corrupt))
        partitions = await asyncio.to_thread(self.store.partitions, dataset)
        return json_response(
            200,
            {
                "job": self.job,
                "partitions": [meta.to_json() for meta in partitions],
                "corrupt": [report.to_json() for report in corrupt],
            },
        )

    async def _release_job(self, request: web.Request) -> web.Response:
        include_promoted = flag(request, "includePromoted")
        released = await asyncio.to_thread(self.store.release, include_promoted=include_promoted)
        self._count_release(released)
        logger.info(
            "shuffle server: released %d partition(s) of job %r on request%s",
            released,
            self.job,
            " (promoted datasets included)" if include_promoted else "",
        )
        return json_response(200, {"released": released})

    async def _release_dataset(self, request: web.Request) -> web.Response:
        dataset = check_dataset(request.match_info["dataset"])
        released = await asyncio.to_thread(self.store.release_dataset, dataset)
        self._count_release(released)
        logger.info("shuffle server: released %d partition(s) of %r", released, dataset)
        return json_response(200, {"released": released})

    def _count_release(self, released: int) -> None:
        self.metrics.releases.labels("request").inc()
        self.metrics.released_partitions.labels("request").inc(released)

    async def _promote(self, request: web.Request) -> web.Response:
        dataset = check_dataset(request.match_info["dataset"])
        summary = await asyncio.to_thread(self.store.promote, dataset)
        logger.info("shuffle server: dataset %r promoted", dataset)
        return json_response(200, summary.to_json())

    async def _datasets(self, request: web.Request) -> web.Response:
        summaries = await asyncio.to_thread(self.store.datasets)
        return json_response(200, [summary.to_json() for summary in summaries])


def create_app(store: PartitionStore, token: str, retain_timeout: float) -> web.Application:
    """An application serving ``store``; for embedding (tests, a local runner)."""
    return ShuffleServer(store, token, retain_timeout).app()
