"""What the shuffle server reads from a request and how it answers one.

Every part of a request (path names, query flags, a driver epoch) is parsed strictly, so a bad
request gets a 400 that names the field, the value and what is accepted (a
:class:`~finishable.serving.Refusal`; the JSON body and every answer are
:mod:`finishable.serving`'s). The routes themselves are in
:mod:`finishable.shuffle.server`.
"""

from __future__ import annotations

from aiohttp import web

from finishable.serving import Refusal
from finishable.shuffle.records import check_dataset, check_partition


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
    raise Refusal(400, f"query parameter {name}={value!r} is not valid: expected true or false")


def positive(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Refusal(400, f"{field} {value!r} is not valid: expected an integer >= 1")
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
        raise Refusal(400, f"{field}={value!r} is not valid: expected RUN.ATTEMPT, e.g. 1.2")
    return int(run), int(attempt)
