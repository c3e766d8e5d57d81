"""What the shuffle server reads from a request and how it answers one.

Every part of a request (path names, query flags, the JSON body, a driver epoch) is parsed
strictly, so a bad request gets a 400 that names the field, the value and what is accepted,
and every answer, error or not, is the same compact JSON. The routes themselves are in
:mod:`finishable.shuffle.server`.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from finishable.shuffle.records import check_dataset, check_partition


class HttpError(Exception):
    """A request the server refuses; ``status`` and the message become the answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def json_response(status: int, payload: object) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(payload, separators=(",", ":")).encode("utf-8"),
        content_type="application/json",
    )


def error_response(status: int, message: str) -> web.Response:
    response = json_response(status, {"error": message})
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="finishable-shuffle"'
    return response


def partition_names(request: web.Request) -> tuple[str, int]:
    """The ``{dataset}`` and ``{partition}`` of a partition's path."""
    dataset = check_dataset(request.match_info["dataset"])
    return dataset, check_partition(request.match_info["partition"])


def flag(request: web.Request, name: str) -> bool:
    """A boolean query parameter; absent is false."""
    value = request.query.get(name)
    if value is None:
        return False
    lowered = value.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no", ""):
        return False
    raise HttpError(400, f"query parameter {name}={value!r} is not valid: expected true or false")


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object; an empty body is an empty object."""
    raw = await request.read()
    try:
        document = json.loads(raw) if raw else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise HttpError(400, f"the body is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise HttpError(400, "the body must be a JSON object")
    return document


def positive(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise HttpError(400, f"{field} {value!r} is not valid: expected an integer >= 1")
    return value


def driver_epoch(value: object, field: str) -> tuple[int, int] | None:
    """``R.N`` (run R, driver attempt N): the writing driver's epoch, where a request gives it."""
    if value is None:
        return None
    run, _, attempt = str(value).partition(".")
    if not (
        isinstance(value, str)
        and run.isdigit()
        and attempt.isdigit()
        and int(run) >= 1
        and int(attempt) >= 1
    ):
        raise HttpError(400, f"{field}={value!r} is not valid: expected RUN.ATTEMPT, e.g. 1.2")
    return int(run), int(attempt)
