"""The one small HTTP transport of every call between our own processes.

The coordinator client, the shuffle client and the calls of Spark's Python workers to the driver
run inside executors and planner workers, where only the standard library can be counted on: so
this module imports nothing else, and nothing of ``finishable``.

* One keep-alive ``http.client`` connection per thread, because those connections are not
  thread-safe and a worker's threads share one client.
* Connection errors, timeouts and the statuses a client names retryable (``retry_statuses``) are
  retried with exponential backoff and jitter until ``retries`` or ``deadline`` run out, then
  ``Unreachable`` carries the last problem. Any other answer, and a retryable one whose JSON says
  ``"retryable": false``, is final: ``HttpAnswerError``. The jitter keeps the executors of a job
  from retrying in step after an outage.
* A kept-alive connection the server closed while it was idle fails the next request at once;
  that first failure is retried on a new connection immediately, without backoff.
* Request bodies and answers are JSON; an error body that is not JSON becomes
  ``{"error": <its first 200 characters>, "kind": "not-json"}``.
* ``Transport.exchange`` runs any exchange (a streamed upload or download) through the same loop.
* A transport pickles without its connections, so a client can travel to executors.

Whether a retry is *safe* is the caller's business: the coordinator client sends request ids,
and the shuffle client's uploads, which cannot replay their chunks, are not retried.
"""

from __future__ import annotations

import hmac
import http.client
import json
import logging
import random
import select
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

logger = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_5XX: frozenset[int] = frozenset({500, 502, 503, 504})
"""Answers worth retrying for an idempotent call: the server (or a proxy in front) failed."""
RETRY_NONE: frozenset[int] = frozenset()
"""Every HTTP answer is final; only connection errors and timeouts are retried."""
UNTIL_DEADLINE = sys.maxsize
"""A retry count that leaves the deadline alone to end the retries."""

_PEER_CLOSED = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)
_ERROR_TEXT = 200

Body = bytes | Iterable[bytes] | None
Exchanger = Callable[["Exchange"], T]


class TransportError(Exception):
    """Base of the transport's errors."""


class HttpAnswerError(TransportError):
    """A final non-2xx answer; ``payload`` is its JSON object."""

    def __init__(self, status: int, payload: dict[str, Any]) -> None:
        self.status = status
        self.payload = payload
        super().__init__(f"answered {status}: {self.message}")

    @property
    def message(self) -> str:
        """The answer's ``error`` text, or ``HTTP <status>`` when it has none."""
        error = self.payload.get("error")
        return error if isinstance(error, str) and error else f"HTTP {self.status}"

    def __reduce__(self) -> tuple[type[HttpAnswerError], tuple[int, dict[str, Any]]]:
        return type(self), (self.status, self.payload)


class Unreachable(TransportError):
    """Retries or the deadline ran out; ``problem`` is the last failure (an error or answer)."""

    def __init__(self, message: str, problem: Exception, attempts: int) -> None:
        super().__init__(message)
        self.problem = problem
        self.attempts = attempts

    def __reduce__(self) -> tuple[type[Unreachable], tuple[str, Exception, int]]:
        return type(self), (str(self), self.problem, self.attempts)


def decode_json(raw: bytes) -> Any:
    """A body's JSON (``{}`` when empty); a body that is not JSON becomes an error object."""
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        return {"error": raw[:_ERROR_TEXT].decode("utf-8", "replace"), "kind": "not-json"}


def error_payload(raw: bytes) -> dict[str, Any]:
    """The JSON object of an error answer, whatever its body was."""
    payload = decode_json(raw)
    if isinstance(payload, dict):
        return payload
    return {"error": f"unexpected reply {payload!r:.200}", "kind": "not-json"}


MISSING_BEARER = "missing bearer token: send the header Authorization: Bearer <token>"
WRONG_BEARER = "wrong bearer token"


def offered_bearer_token(header: str) -> bytes | None:
    """The token of an ``Authorization: Bearer <token>`` header; None for any other header."""
    scheme, _, credentials = header.partition(" ")
    offered = credentials.strip().encode("utf-8")
    return offered if scheme.lower() == "bearer" and offered else None


def bearer_problem(header: str, token: bytes) -> str | None:
    """Why a server of ours refuses a request's ``Authorization`` header; None if it carries
    ``token``. ``compare_digest`` takes the same time wherever the tokens differ."""
    offered = offered_bearer_token(header)
    if offered is None:
        return MISSING_BEARER
    return None if hmac.compare_digest(offered, token) else WRONG_BEARER


class Exchange:
    """One try on one connection, handed to the hook of ``Transport.exchange``."""

    def __init__(self, transport: Transport, connection: http.client.HTTPConnection) -> None:
        self._transport = transport
        self.connection = connection

    def send(
        self,
        method: str,
        path: str,
        body: Body = None,
        headers: Mapping[str, str] | None = None,
        *,
        chunked: bool = False,
    ) -> http.client.HTTPResponse:
        """Send a request with the token; its 2xx response, body unread, or HttpAnswerError."""
        self.connection.request(
            method,
            self._transport.prefix + path,
            body=body,
            headers={**self._transport.headers(), **(headers or {})},
            encode_chunked=chunked,
        )
        response = self.connection.getresponse()
        if not 200 <= response.status < 300:
            raise HttpAnswerError(response.status, error_payload(response.read()))
        return response


@dataclass(frozen=True)
class Policy:
    """How patient a client is. The first five fields are in the order of the clients' own
    constructor arguments, so that a client can hand them on positionally."""

    timeout: float = 10.0
    """Seconds one connect, send or read may take."""
    retries: int = 8
    backoff: float = 0.05
    """The first pause between tries; it doubles up to ``max_backoff``, with jitter."""
    max_backoff: float = 2.0
    deadline: float = 60.0
    """Seconds after which no new try starts, whatever ``retries`` says."""
    retry_statuses: frozenset[int] = RETRY_5XX


class Transport:
    """Requests to one http(s) base URL with a bearer token; safe to share between threads."""

    def __init__(
        self, url: str, token: str, policy: Policy = Policy(), *, what: str = "a server"
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http(s) URL of {what}")
        self.url = url.rstrip("/")
        self.prefix = parts.path.rstrip("/")
        self._token = token
        self.policy = policy
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"Transport({self.url!r})"

    def headers(self) -> dict[str, str]:
        """The headers of every request: the bearer token, and JSON answers wanted."""
        return {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}

    def request_json(
        self, method: str, path: str, body: object = None, *, retries: int | None = None
    ) -> Any:
        """Send ``body`` (``None``: no body) as JSON; the answer's JSON (``{}`` when empty)."""
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode("utf-8")
        headers = {} if data is None else {"Content-Type": "application/json"}

        def attempt(exchange: Exchange) -> Any:
            return decode_json(exchange.send(method, path, data, headers).read())

        return self.exchange(method, path, attempt, retries=retries)

    def exchange(
        self,
        method: str,
        path: str,
        attempt: Exchanger[T],
        *,
        retries: int | None = None,
        retry_statuses: frozenset[int] | None = None,
        fresh_after: float | None = None,
    ) -> T:
        """Run ``attempt`` on this thread's connection, retrying as the module docstring says.

        ``attempt`` must read the whole response. It may raise ``HttpAnswerError`` (``send``
        does) or a connection error (``OSError``, ``http.client.HTTPException``) to be judged
        here; anything else drops the connection (it may be mid-body) and passes through.
        ``method`` and ``path`` only name the exchange in errors and logs. ``fresh_after``: a
        connection idle for longer, or already closed by the server, is replaced first.
        """
        policy = self.policy
        max_retries = policy.retries if retries is None else retries
        statuses = policy.retry_statuses if retry_statuses is None else retry_statuses
        give_up_at = time.monotonic() + policy.deadline
        failures = 0
        delay = policy.backoff
        while True:
            connection, reused = self._connection(fresh_after)
            problem: Exception
            try:
                result = attempt(Exchange(self, connection))
            except HttpAnswerError as answer:
                self._settle(connection)
                if answer.status not in statuses or answer.payload.get("retryable") is False:
                    raise
                problem = answer
            except (OSError, http.client.HTTPException) as error:
                self.close()
                problem = error
                # A kept-alive connection the server closed in the meantime: reconnect at once.
                if reused and failures == 0 and isinstance(error, _PEER_CLOSED):
                    failures += 1
                    continue
            except BaseException:
                self.close()
                raise
            else:
                self._settle(connection)
                return result
            failures += 1
            if failures > max_retries or time.monotonic() + delay > give_up_at:
                raise Unreachable(
                    f"{method} {self.url}{path} failed {failures} time(s), giving up: {problem}",
                    problem,
                    failures,
                ) from problem
            # Quiet for a blip; a warning once the backoff is at its longest (an outage).
            logger.log(
                logging.WARNING if delay >= policy.max_backoff else logging.DEBUG,
                "%s %s%s failed (%s); retrying in %.3f s",
                method,
                self.url,
                path,
                problem,
                delay,
            )
            time.sleep(delay * (0.5 + random.random() / 2))
            delay = min(delay * 2, policy.max_backoff)

    def close(self) -> None:
        """Close this thread's connection."""
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        self._local.connection = None
        if connection is not None:
            connection.close()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_local"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

    def _connection(self, fresh_after: float | None) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection, and whether it was used before."""
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        if connection is not None:
            idle = time.monotonic() - float(getattr(self._local, "used", 0.0))
            if fresh_after is None or (idle < fresh_after and not _closed_by_peer(connection)):
                return connection, True
            self.close()
        parts = urlsplit(self.url)
        factory = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        connection = factory(parts.hostname or "127.0.0.1", parts.port, timeout=self.policy.timeout)
        self._local.connection = connection
        self._local.used = time.monotonic()
        return connection, False

    def _settle(self, connection: http.client.HTTPConnection) -> None:
        """After a complete answer: keep the connection, or forget it if the answer closed it."""
        self._local.used = time.monotonic()
        if connection.sock is None:  # http.client closes it on "Connection: close"
            self.close()


def _closed_by_peer(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle keep-alive connection is readable, which means the server closed it."""
    sock = connection.sock
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


__all__ = [
    "RETRY_5XX",
    "RETRY_NONE",
    "UNTIL_DEADLINE",
    "Exchange",
    "HttpAnswerError",
    "Policy",
    "Transport",
    "TransportError",
    "Unreachable",
    "decode_json",
    "error_payload",
]
