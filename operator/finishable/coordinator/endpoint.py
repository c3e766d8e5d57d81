"""The driver endpoint: a small authenticated HTTP server in the driver process.

No Python Data Source method runs in the driver's own process (docs/architecture.md, *PySpark
facts*): Spark's planner worker and the executors' readers reach the coordinators over HTTP. The
server runs aiohttp on a thread and event loop of its own, so the driver's main thread stays free;
every request becomes a call on the named coordinator's host and is awaited without blocking the
loop.

API (JSON bodies; every route but ``/v1/health`` needs ``Authorization: Bearer <token>``)::

    GET  /v1/health                                    liveness, no token needed
    GET  /v1/coordinators                              progress of every coordinator
    GET  /v1/coordinators/{name}                       progress and live attempts of one
    POST /v1/coordinators/{name}/subtasks/{s}/attempts/{a}/ready    {"request_id"?}
    POST /v1/coordinators/{name}/subtasks/{s}/attempts/{a}/failed   {"reason"?, "request_id"?}
    POST /v1/coordinators/{name}/subtasks/{s}/attempts/{a}/events   {"event", "request_id"?}
         -> {"events": [...]}   the events the coordinator sent back to that attempt
    POST /v1/batches/{batch}/{stage}                   {"sink"}  a sink's commit of a micro-batch
         reached ``stage`` (prepare, published): the runtime's batch hook runs it
    POST /v1/batches/{batch}/publish    {"sink", "parts", "schema", "overwrite"}  the JVM sink
         writer's commit: the runtime publishes the parts its tasks staged, between both stages;
         a Kafka sink's ({"sink", "transactions", "records"}): it commits the open transactions

Errors: 400 malformed request (the message names the field), 401 missing or wrong token
(nothing is changed), 404 unknown coordinator or route, 409 order violation or rejected event
(with ``rule``, ``subtask``, ``attempt``), 500 coordinator failed (``"retryable": false``),
503 endpoint stopping.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from aiohttp import web

from finishable.coordinator._json import JsonFieldError, get_optional_str
from finishable.coordinator.errors import (
    CoordinatorFailedError,
    CoordinatorOrderViolation,
    CoordinatorRejection,
    EventDecodeError,
    RequestIdConflict,
)
from finishable.coordinator.events import event_from_json
from finishable.coordinator.host import CoordinatorHost
from finishable.coordinator.openapi import BATCH_STAGES, MAX_REQUEST_ID_LENGTH, OPENAPI
from finishable.serving import (
    Handler,
    Refusal,
    json_object,
    json_response,
    serve_json,
)
from finishable.transport import bearer_problem

logger = logging.getLogger(__name__)

T = TypeVar("T")

REALM = "finishable-coordinator"
MAX_BODY_BYTES = 4 * 1024 * 1024

BatchHook = Callable[[str, int, dict[str, Any]], dict[str, Any]]
"""``hook(stage, batch_id, body) -> reply``: a sink's commit (``body["sink"]``) reached ``stage``
for a batch. A ``ValueError`` is the call's fault (400)."""
RuntimeHook = Callable[[str, dict[str, Any]], dict[str, Any]]
"""``hook(action, body) -> reply``: a Batch job's tasks talk to its driver (``/v1/runtime/...``)."""


class DriverEndpoint:
    """Serves named coordinator hosts over HTTP with a bearer token; start/stop from any thread."""

    def __init__(
        self,
        token: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        advertised_host: str | None = None,
    ) -> None:
        if not token:
            raise ValueError("the driver endpoint needs a non-empty token")
        self._token = token.encode("utf-8")
        self._bind_host = host
        self._advertised_host = advertised_host
        self._batch_hook: BatchHook | None = None
        self._runtime_hook: RuntimeHook | None = None
        self._bind_port = port
        self._coordinators: dict[str, CoordinatorHost] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._stopping = False

    # ------------------------------------------------------------------ registry

    def add(self, coordinator: CoordinatorHost) -> None:
        """Serve ``coordinator`` under its name (one per source)."""
        with self._lock:
            if coordinator.name in self._coordinators:
                raise ValueError(f"a coordinator named {coordinator.name!r} is already served")
            self._coordinators[coordinator.name] = coordinator

    def remove(self, name: str) -> CoordinatorHost | None:
        """Stop serving the named coordinator (it is not closed)."""
        with self._lock:
            return self._coordinators.pop(name, None)

    def set_batch_hook(self, hook: BatchHook | None) -> None:
        """Route sinks' batch commits (``/v1/batches/...``) to ``hook``, run on a worker thread.

        The hook may block (it stores checkpoints); its JSON-ready result is the reply.
        """
        with self._lock:
            self._batch_hook = hook

    def set_runtime_hook(self, hook: RuntimeHook | None) -> None:
        """Route batch tasks' calls (``POST /v1/runtime/{action}``) to ``hook``, on a worker thread.

        A ``ValueError`` from the hook is the caller's mistake (400); the reply is JSON-ready.
        """
        with self._lock:
            self._runtime_hook = hook

    def names(self) -> list[str]:
        """The served coordinator names."""
        with self._lock:
            return sorted(self._coordinators)

    # ------------------------------------------------------------------ lifecycle

    @property
    def port(self) -> int:
        """The bound port (known after ``start``)."""
        if self._port is None:
            raise RuntimeError("the endpoint is not started")
        return self._port

    @property
    def url(self) -> str:
        """Base URL for clients, such as ``http://127.0.0.1:43121`` (or the advertised host)."""
        host = self._advertised_host or self._bind_host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 10.0) -> str:
        """Bind (port 0 picks a free port), serve on a thread of its own, return the URL."""
        if self._thread is not None:
            raise RuntimeError("the endpoint is already started")
        self._stopping = False
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="coordinator-endpoint", daemon=True)
        self._thread.start()
        ready.wait(timeout)
        try:
            asyncio.run_coroutine_threadsafe(self._open(), loop).result(timeout)
        except BaseException:
            self._shutdown_loop(timeout)
            raise
        logger.info("driver endpoint serving %s at %s", self.names(), self.url)
        return self.url

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving; in-flight requests finish or get 503. Coordinators stay open."""
        if self._loop is None or self._thread is None:
            return
        self._stopping = True
        if self._runner is not None:
            runner = self._runner
            try:
                asyncio.run_coroutine_threadsafe(runner.cleanup(), self._loop).result(timeout)
            except Exception:
                logger.warning("driver endpoint: cleanup failed", exc_info=True)
        self._shutdown_loop(timeout)
        logger.info("driver endpoint stopped")

    def _shutdown_loop(self, timeout: float) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if not thread.is_alive():
            loop.close()
        self._loop = None
        self._thread = None
        self._runner = None

    def __enter__(self) -> DriverEndpoint:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _open(self) -> None:
        app = web.Application(middlewares=[self._auth_middleware], client_max_size=MAX_BODY_BYTES)
        serve_json(app, "the driver endpoint", REALM, self._answer, OPENAPI)
        base = "/v1/coordinators/{name}/subtasks/{subtask}/attempts/{attempt}"
        app.router.add_get("/v1/health", self._health)
        app.router.add_get("/v1/coordinators", self._summary)
        app.router.add_get("/v1/coordinators/{name}", self._progress)
        app.router.add_post(base + "/ready", self._ready)
        app.router.add_post(base + "/failed", self._failed)
        app.router.add_post(base + "/events", self._event)
        app.router.add_post("/v1/batches/{batch}/{stage}", self._batch)
        app.router.add_post("/v1/runtime/{action}", self._runtime)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self._bind_host, self._bind_port, reuse_address=True)
        await site.start()
        self._runner = runner
        address = runner.addresses[0]
        self._port = int(address[1])

    # ------------------------------------------------------------------ middlewares

    @staticmethod
    def _answer(error: Exception) -> Refusal | None:
        """The answers to the coordinators' typed errors (anything else is our bug: a 500)."""
        if isinstance(error, RequestIdConflict):
            return Refusal(
                409,
                str(error),
                kind="request-id-conflict",
                subtask=error.subtask,
                attempt=error.attempt,
            )
        if isinstance(error, CoordinatorOrderViolation):
            return Refusal(
                409,
                str(error),
                kind="order-violation",
                rule=error.rule.value,
                subtask=error.subtask,
                attempt=error.attempt,
            )
        if isinstance(error, CoordinatorRejection):
            return Refusal(
                409, str(error), kind="rejected", subtask=error.subtask, attempt=error.attempt
            )
        if isinstance(error, CoordinatorFailedError):
            # Retrying cannot help: the coordinator refuses calls until a global reset.
            return Refusal(500, str(error), kind="coordinator-failed", retryable=False)
        return None

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in ("/v1/health", "/openapi.json"):
            return await handler(request)
        problem = bearer_problem(request.headers.get("Authorization", ""), self._token)
        if problem is not None:
            raise Refusal(401, problem)
        if self._stopping:
            raise Refusal(503, "the driver endpoint is stopping", kind="stopping")
        return await handler(request)

    # ------------------------------------------------------------------ handlers

    def _host(self, request: web.Request) -> CoordinatorHost:
        name = request.match_info["name"]
        with self._lock:
            host = self._coordinators.get(name)
            known = sorted(self._coordinators)
        if host is None:
            raise Refusal(
                404,
                f"no coordinator named {name!r} (served: {', '.join(known) or 'none'})",
                kind="unknown-coordinator",
            )
        return host

    @staticmethod
    def _index(request: web.Request, key: str) -> int:
        text = request.match_info[key]
        if not text.isdigit() or len(text) > 9:
            raise Refusal(
                400,
                f"{key} in the path must be a non-negative integer, got {text!r}",
            )
        return int(text)

    @staticmethod
    def _request_id(body: dict[str, Any]) -> str | None:
        try:
            request_id = get_optional_str(body, "request_id", "body")
        except JsonFieldError as error:
            raise Refusal(400, str(error)) from None
        if request_id is not None and not 0 < len(request_id) <= MAX_REQUEST_ID_LENGTH:
            raise Refusal(
                400,
                f"body.request_id: must have 1 to {MAX_REQUEST_ID_LENGTH} characters",
            )
        return request_id

    @staticmethod
    async def _await(future: Future[T]) -> T:
        return await asyncio.wrap_future(future)

    async def _health(self, request: web.Request) -> web.Response:
        return json_response(200, {"status": "ok"})

    async def _summary(self, request: web.Request) -> web.Response:
        with self._lock:
            hosts = dict(self._coordinators)
        result: dict[str, Any] = {}
        for name, host in sorted(hosts.items()):
            try:
                progress = await self._await(host.progress())
            except Exception as error:
                result[name] = {"error": str(error)}
                continue
            result[name] = progress.to_json() if progress is not None else None
        return json_response(200, {"coordinators": result})

    async def _progress(self, request: web.Request) -> web.Response:
        host = self._host(request)
        progress = await self._await(host.progress())
        attempts = await self._await(host.live_attempts())
        return json_response(
            200,
            {
                "name": host.name,
                "progress": progress.to_json() if progress is not None else None,
                "failed": str(host.failure) if host.failure is not None else None,
                "live_attempts": {str(s): numbers for s, numbers in attempts.items()},
            },
        )

    async def _ready(self, request: web.Request) -> web.Response:
        host = self._host(request)
        subtask, attempt = self._index(request, "subtask"), self._index(request, "attempt")
        request_id = self._request_id(await json_object(request))
        await self._await(host.execution_attempt_ready(subtask, attempt, request_id))
        return json_response(200, {"ok": True})

    async def _failed(self, request: web.Request) -> web.Response:
        host = self._host(request)
        subtask, attempt = self._index(request, "subtask"), self._index(request, "attempt")
        body = await json_object(request)
        request_id = self._request_id(body)
        try:
            reason = get_optional_str(body, "reason", "body")
        except JsonFieldError as error:
            raise Refusal(400, str(error)) from None
        await self._await(
            host.execution_attempt_failed(subtask, attempt, reason or "reported failed", request_id)
        )
        return json_response(200, {"ok": True})

    async def _event(self, request: web.Request) -> web.Response:
        host = self._host(request)
        subtask, attempt = self._index(request, "subtask"), self._index(request, "attempt")
        body = await json_object(request)
        request_id = self._request_id(body)
        if "event" not in body:
            raise Refusal(400, "body.event: missing (expected an operator event)")
        try:
            event = event_from_json(body["event"], "body.event")
        except EventDecodeError as error:
            raise Refusal(400, str(error)) from None
        reply = await self._await(
            host.handle_event_from_operator(subtask, attempt, event, request_id)
        )
        return json_response(200, {"events": [item.to_json() for item in reply]})

    async def _batch(self, request: web.Request) -> web.Response:
        with self._lock:
            hook = self._batch_hook
        if hook is None:
            raise Refusal(404, "no batch hook: this endpoint serves no job runtime")
        stage = request.match_info["stage"]
        if stage not in BATCH_STAGES:
            raise Refusal(404, f"unknown batch stage {stage!r}; expected one of {BATCH_STAGES}")
        batch = self._index(request, "batch")
        body = await json_object(request)
        try:
            body["sink"] = get_optional_str(body, "sink", "body") or ""
        except JsonFieldError as error:
            raise Refusal(400, str(error)) from None
        reply = await _hooked(request, hook, stage, batch, body, refused=ValueError)
        return json_response(200, reply)

    async def _runtime(self, request: web.Request) -> web.Response:
        with self._lock:
            hook = self._runtime_hook
        if hook is None:
            raise Refusal(404, "no runtime hook: this endpoint serves no batch job")
        action = request.match_info["action"]
        body = await json_object(request)
        reply = await _hooked(request, hook, action, body, refused=ValueError)
        return json_response(200, reply)


async def _hooked(
    request: web.Request,
    hook: Callable[..., dict[str, Any]],
    *args: Any,
    refused: type[Exception] | None = None,
) -> Any:
    """The driver's answer to a worker's call (a batch hook, a runtime hook), off the loop. A
    ``refused`` error is the call's fault: a 400 with its message. Any other failure is the
    driver's work failing, not a bug of the endpoint: the worker's error names it (``Type:
    message``) and the driver's log keeps the traceback."""
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(None, hook, *args)
    except asyncio.CancelledError:
        raise
    except Exception as error:
        if refused is not None and isinstance(error, refused):
            raise Refusal(400, str(error)) from None
        logger.exception("driver endpoint: %s %s failed", request.method, request.path)
        raise Refusal(500, f"{type(error).__name__}: {error}", kind="hook-failed") from None
