"""Calls from Spark's Python workers to their driver's endpoint: a sink's batch commit
(:mod:`finishable.connectors.streaming.commit_hook`) and a Batch task's runtime calls
(:mod:`finishable.connectors.batch.datasources`).

Standard library only (``transport``), because it runs in every worker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from finishable.transport import (
    RETRY_NONE,
    UNTIL_DEADLINE,
    HttpAnswerError,
    Policy,
    Transport,
    Unreachable,
)


def post_json(
    url: str,
    token: str,
    body: dict[str, Any],
    *,
    timeout: float,
    connect_retries: float,
    refused: Callable[[int, str], Exception],
    unreachable: Callable[[BaseException], Exception],
) -> dict[str, Any]:
    """POST ``body`` to the driver's endpoint from a Spark worker; retry while it is unreachable.

    Any HTTP answer is final, because the driver has decided (``refused(code, message)`` is
    raised); connection errors and timeouts are retried with backoff for ``connect_retries``
    seconds, as a restarting driver comes back, then ``unreachable(error)`` is raised.
    """
    patience = Policy(timeout, UNTIL_DEADLINE, 0.2, 2.0, connect_retries, RETRY_NONE)
    transport = Transport(url, token, patience, what="the driver's endpoint")
    try:
        reply = transport.request_json("POST", "", body)
    except HttpAnswerError as error:
        raise refused(error.status, error.message) from None
    except Unreachable as error:
        raise unreachable(error.problem) from None
    finally:
        transport.close()  # one call per commit or task event: no connection to keep
    if not isinstance(reply, dict):
        raise refused(200, f"unexpected reply {reply!r:.200}")
    return reply
