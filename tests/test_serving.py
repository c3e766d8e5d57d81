"""What our HTTP servers share (finishable/serving.py), served over loopback by aiohttp."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

from finishable.serving import (
    REQUEST_ID_HEADER,
    Refusal,
    json_object,
    json_response,
    openapi,
    operation,
    serve_json,
)

pytestmark = pytest.mark.quick


class Full(OSError):
    """A typed error of the server's own, which it answers itself."""


DOCUMENT = openapi(
    "Test server",
    "What serving.py gives a server.",
    {"/refuse": {"get": operation("Refuses", responses={"409": "always"})}},
)


def app() -> web.Application:
    async def refuse(request: web.Request) -> web.Response:
        raise Refusal(409, "already there", kind="exists", name="x")

    async def fail(request: web.Request) -> web.Response:
        raise KeyError("a bug of ours")

    async def full(request: web.Request) -> web.Response:
        raise Full("no space left")

    async def echo(request: web.Request) -> web.Response:
        return json_response(200, await json_object(request))

    application = web.Application(client_max_size=64)
    application.router.add_get("/refuse", refuse)
    application.router.add_get("/fail", fail)
    application.router.add_get("/full", full)
    application.router.add_post("/echo", echo)
    serve_json(
        application,
        "the test server",
        "test",
        lambda error: Refusal(507, str(error)) if isinstance(error, Full) else None,
        DOCUMENT,
    )
    return application


Call = Callable[..., Awaitable[tuple[int, dict[str, Any], CIMultiDict[str]]]]


def served(test: Callable[[Call], Awaitable[None]]) -> None:
    async def main() -> None:
        server = TestServer(app())
        await server.start_server()
        try:
            async with ClientSession() as session:

                async def call(
                    method: str, path: str, **kwargs: Any
                ) -> tuple[int, dict[str, Any], CIMultiDict[str]]:
                    async with session.request(method, server.make_url(path), **kwargs) as answer:
                        return answer.status, await answer.json(), CIMultiDict(answer.headers)

                await test(call)
        finally:
            await server.close()

    asyncio.run(main())


def test_refusals_routing_and_bad_bodies_are_json_that_names_the_problem() -> None:
    async def test(call: Call) -> None:
        status, body, _ = await call("GET", "/refuse")
        assert status == 409
        assert body == {"error": "already there", "kind": "exists", "retryable": False, "name": "x"}
        status, body, _ = await call("GET", "/nowhere")
        assert (status, body["kind"], body["error"]) == (404, "not-found", "no route GET /nowhere")
        status, body, _ = await call("DELETE", "/refuse")
        assert (status, body["kind"]) == (405, "method-not-allowed")
        status, body, _ = await call("POST", "/echo", data=b"[1]")
        assert (status, body["error"]) == (400, "body: expected a JSON object, got list")
        status, body, _ = await call("POST", "/echo", data=b"{")
        assert status == 400 and body["error"].startswith("the body is not JSON")
        status, body, _ = await call("POST", "/echo", data=b"{}" + b" " * 100)
        assert (status, body["kind"]) == (413, "too-large")
        status, body, _ = await call("GET", "/openapi.json")
        assert status == 200 and body == DOCUMENT
        assert body["paths"]["/openapi.json"]["get"]["security"] == []
        assert body["paths"]["/refuse"]["get"]["security"] == [{"bearer": []}]
        status, body, _ = await call("GET", "/full")
        assert (status, body) == (
            507,
            {"error": "no space left", "kind": "insufficient-storage", "retryable": True},
        )

    served(test)


def test_our_own_failure_is_a_500_naming_the_request_not_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def test(call: Call) -> None:
        status, body, headers = await call("GET", "/fail", headers={REQUEST_ID_HEADER: "r-42"})
        assert status == 500 and body["kind"] == "internal" and body["retryable"] is True
        assert "request r-42" in body["error"] and "Traceback" not in body["error"]
        assert headers[REQUEST_ID_HEADER] == "r-42"
        assert "a bug of ours" not in body["error"]

    served(test)
    failures = [r for r in caplog.records if "GET /fail failed (request r-42)" in r.getMessage()]
    assert failures and failures[0].exc_info is not None, "the traceback is in the log"


def test_every_answer_carries_a_request_id_and_a_usable_one_is_the_clients() -> None:
    async def test(call: Call) -> None:
        _, _, given = await call("POST", "/echo", json={"a": 1}, headers={REQUEST_ID_HEADER: "abc"})
        assert given[REQUEST_ID_HEADER] == "abc"
        _, _, made = await call("POST", "/echo", json={}, headers={REQUEST_ID_HEADER: "a b\tc"})
        assert made[REQUEST_ID_HEADER] not in ("", "a b\tc")
        _, _, fresh = await call("GET", "/nowhere")
        assert len(fresh[REQUEST_ID_HEADER]) == 16

    served(test)
