"""What every HTTP server of ours shares: JSON answers, refusals, request ids, our own failures.

The driver endpoint, the shuffle server and the cluster partition service each answer every
request in JSON, an error too: ``{"error": <what was wrong>, "kind": <a word for it>,
"retryable": <whether the same request may succeed later>}`` (plus what the server adds). A
handler refuses a request by raising :class:`Refusal`; a server names the answers to its own
typed errors in one function (``answer``); anything else is our bug, logged with its traceback
and answered 500 without it. Every answer carries ``X-Request-Id`` (the client's, when it sent a
usable one), and the log lines of a failure name it. Each server publishes its OpenAPI document
at ``GET /openapi.json`` (built with :func:`operation` and :func:`openapi`), which ``make
test-all`` fuzzes with schemathesis (tests/test_http_contracts.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)

REQUEST_ID_HEADER = "X-Request-Id"
_REQUEST_ID: ContextVar[str] = ContextVar("request_id", default="")
"""The id of the request being served: set where it enters (the middleware), read where its
answer is prepared and where its failure is logged, in the same task."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Answer = Callable[[Exception], "Refusal | None"]

KINDS = {
    400: "bad-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    409: "conflict",
    413: "too-large",
    503: "unavailable",
    507: "insufficient-storage",
}


class Refusal(Exception):
    """A request the server refuses: ``status``, the message, a ``kind`` and extra fields become
    the JSON answer (``retryable`` defaults to whether the status is a 5xx)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str | None = None,
        retryable: bool | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind or KINDS.get(status, "error")
        self.retryable = status >= 500 if retryable is None else retryable
        self.extra = extra


def json_response(status: int, payload: object) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(payload, separators=(",", ":")).encode("utf-8"),
        content_type="application/json",
    )


def refusal_response(refusal: Refusal, *, realm: str) -> web.Response:
    payload = {
        "error": str(refusal),
        "kind": refusal.kind,
        "retryable": refusal.retryable,
        **refusal.extra,
    }
    response = json_response(refusal.status, payload)
    if refusal.status == 401:
        response.headers["WWW-Authenticate"] = f'Bearer realm="{realm}"'
    return response


def request_id_of(request: web.Request) -> str:
    """The client's ``X-Request-Id`` if it is a short plain token, else a new one."""
    offered = request.headers.get(REQUEST_ID_HEADER, "")
    usable = 0 < len(offered) <= 64 and all(c.isalnum() or c in "-_." for c in offered)
    return offered if usable else uuid.uuid4().hex[:16]


def serve_json(
    app: web.Application, server: str, realm: str, answer: Answer, document: dict[str, Any]
) -> None:
    """Make ``app`` answer as the module docstring says (its errors in JSON, request ids) and
    publish ``document``, its OpenAPI document (:func:`openapi`), at ``GET /openapi.json``."""

    async def published(request: web.Request) -> web.Response:
        return json_response(200, document)

    async def stamp(request: web.Request, response: web.StreamResponse) -> None:
        response.headers[REQUEST_ID_HEADER] = _REQUEST_ID.get() or request_id_of(request)

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        identity = request_id_of(request)
        _REQUEST_ID.set(identity)
        try:
            return await handler(request)
        except asyncio.CancelledError:
            raise
        except Refusal as refused:
            return refusal_response(refused, realm=realm)
        except web.HTTPException as error:
            if error.status < 400:
                raise
            return refusal_response(_routing_refusal(request, error), realm=realm)
        except Exception as error:
            answered = answer(error)
            if answered is not None:
                return refusal_response(answered, realm=realm)
            log.exception(
                "%s: %s %s failed (request %s)",
                server,
                request.method,
                request.path,
                identity,
            )
            failed = Refusal(
                500,
                f"{server} failed on this request (request {identity}); its log has the traceback",
                kind="internal",
            )
            return refusal_response(failed, realm=realm)

    app.middlewares.insert(0, errors)
    app.on_response_prepare.append(stamp)
    app.router.add_get("/openapi.json", published)


def _routing_refusal(request: web.Request, error: web.HTTPException) -> Refusal:
    """aiohttp's own answers (no route, a method not allowed, a body too large) in our words."""
    if error.status == 404:
        return Refusal(404, f"no route {request.method} {request.path}")
    if error.status == 405:
        return Refusal(405, f"{request.method} is not allowed on {request.path}")
    if error.status == 413:
        return Refusal(413, f"the request body is too large: {error.text or error.reason}")
    return Refusal(error.status, error.reason or f"HTTP {error.status}")


async def json_object(request: web.Request) -> dict[str, Any]:
    """The request's JSON object; an empty body is an empty object."""
    raw = await request.read()
    try:
        document = json.loads(raw) if raw else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise Refusal(400, f"the body is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise Refusal(400, f"body: expected a JSON object, got {type(document).__name__}")
    return document


# -- OpenAPI: each server publishes what it serves at GET /openapi.json -------------------------

Schema = dict[str, Any]
STRING: Schema = {"type": "string"}
COUNT: Schema = {"type": "integer", "minimum": 0}


def operation(
    summary: str,
    *,
    path: dict[str, Schema] | None = None,
    query: dict[str, Schema] | None = None,
    body: Schema | None = None,
    body_type: str = "application/json",
    responses: dict[str, str],
    public: bool = False,
) -> dict[str, Any]:
    """One operation of an OpenAPI 3.0 document: its parameters, its body and its answers (each
    error answer is :func:`refusal_response`'s JSON)."""
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": schema}
        for name, schema in (path or {}).items()
    ]
    parameters += [
        {"name": name, "in": "query", "required": False, "schema": schema}
        for name, schema in (query or {}).items()
    ]
    described: dict[str, Any] = {"summary": summary, "parameters": parameters}
    if body is not None:
        described["requestBody"] = {"required": True, "content": {body_type: {"schema": body}}}
    described["responses"] = {code: {"description": text} for code, text in responses.items()}
    described["security"] = [] if public else [{"bearer": []}]
    return described


def openapi(title: str, description: str, paths: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A server's OpenAPI 3.0 document; its routes need the bearer token unless public."""
    return {
        "openapi": "3.0.3",
        "info": {"title": title, "version": "1", "description": description},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": {"/openapi.json": {"get": _DOCUMENT}, **paths},
    }


_DOCUMENT = operation("This document", responses={"200": "the OpenAPI document"}, public=True)
