"""A small synchronous client of the coordinator endpoint, for Spark's Python workers.

It runs inside executors and the planner worker, so it uses only the standard library:
``http.client`` with one keep-alive connection per thread (``http.client`` connections are not
thread-safe). Connection errors, timeouts and 5xx answers are retried with exponential backoff
and jitter until ``retries`` or ``deadline`` run out.

Retrying is safe because every mutating call carries a request id, generated once per logical
call and resent unchanged on each retry: the coordinator host answers a repeated id with the
reply it recorded, so a ``RequestSplit`` whose reply was lost is not assigned a second split.
When the client finally gives up (``CoordinatorUnavailable``) it cannot know whether the request
took effect; the reader must then fail its task, which returns whatever it was given to the pool.

The client pickles without its connections, so a Spark reader can carry it to executors.
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import threading
import time
import uuid
from typing import Any
from urllib.parse import quote, urlsplit

from finishable.coordinator.events import (
    OperatorEvent,
    RequestSplit,
    SplitFinished,
    SplitSkipped,
    event_from_json,
)

logger = logging.getLogger(__name__)


class CoordinatorRequestError(Exception):
    """The endpoint refused a request (4xx, or a 5xx that retrying cannot fix)."""

    def __init__(self, status: int, payload: dict[str, Any]) -> None:
        message = payload.get("error") or f"HTTP {status}"
        super().__init__(f"coordinator endpoint answered {status}: {message}")
        self.status = status
        self.kind: str | None = payload.get("kind")
        self.rule: str | None = payload.get("rule")
        self.subtask: int | None = payload.get("subtask")
        self.attempt: int | None = payload.get("attempt")
        self.payload = payload


class CoordinatorUnavailable(Exception):
    """Retries ran out: the request may or may not have taken effect; fail the task."""


_RETRYABLE_STATUS = frozenset({500, 502, 503, 504})


class CoordinatorClient:
    """Calls the endpoint at ``url`` with ``token``; safe to share between threads."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 10.0,
        retries: int = 8,
        backoff: float = 0.05,
        max_backoff: float = 2.0,
        deadline: float = 60.0,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http(s) URL of a coordinator endpoint")
        self._url = url
        self._token = token
        self._timeout = timeout
        self._retries = retries
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._deadline = deadline
        self._local = threading.local()

    # ------------------------------------------------------------------ the calls

    def send_event(
        self,
        coordinator: str,
        subtask: int,
        attempt: int,
        event: OperatorEvent,
        *,
        request_id: str | None = None,
    ) -> list[OperatorEvent]:
        """Send an event from ``(subtask, attempt)``; returns the events sent back to it."""
        body = {"event": event.to_json(), "request_id": request_id or uuid.uuid4().hex}
        reply = self._call(
            "POST", self._attempt_path(coordinator, subtask, attempt, "events"), body
        )
        events = reply.get("events")
        if not isinstance(events, list):
            raise CoordinatorRequestError(200, {"error": "reply without an events array"})
        return [
            event_from_json(item, f"reply.events[{index}]") for index, item in enumerate(events)
        ]

    def request_splits(
        self, coordinator: str, subtask: int, attempt: int, max_splits: int = 1
    ) -> list[OperatorEvent]:
        """Ask for work: the reply holds ``AddSplits`` (maybe empty) or ``NoMoreSplits``."""
        return self.send_event(
            coordinator, subtask, attempt, RequestSplit(subtask, attempt, max_splits)
        )

    def finish_splits(
        self, coordinator: str, subtask: int, attempt: int, split_ids: list[str]
    ) -> list[OperatorEvent]:
        """Report splits as durably processed."""
        return self.send_event(coordinator, subtask, attempt, SplitFinished(tuple(split_ids)))

    def report_skipped(
        self, coordinator: str, subtask: int, attempt: int, split_id: str, reason: str
    ) -> None:
        """Report a split as skipped because it could not be read (``on_error="skip"``)."""
        self.send_event(coordinator, subtask, attempt, SplitSkipped(split_id, reason))

    def live_attempts(self, coordinator: str) -> dict[int, list[int]]:
        """The live attempts of each subtask, as the coordinator's host sees them."""
        reply = self.progress(coordinator).get("live_attempts")
        if not isinstance(reply, dict):
            raise CoordinatorRequestError(200, {"error": "reply without live_attempts"})
        return {
            int(subtask): [int(number) for number in numbers]
            for subtask, numbers in reply.items()
            if isinstance(numbers, list)
        }

    def attempt_ready(self, coordinator: str, subtask: int, attempt: int) -> None:
        """Announce that an attempt of a subtask runs and can talk to its coordinator."""
        self._call(
            "POST",
            self._attempt_path(coordinator, subtask, attempt, "ready"),
            {"request_id": uuid.uuid4().hex},
        )

    def attempt_failed(
        self, coordinator: str, subtask: int, attempt: int, reason: str | None = None
    ) -> None:
        """Report an attempt as failed or cancelled: its splits go back to the pool."""
        body: dict[str, Any] = {"request_id": uuid.uuid4().hex}
        if reason is not None:
            body["reason"] = reason
        self._call("POST", self._attempt_path(coordinator, subtask, attempt, "failed"), body)

    def progress(self, coordinator: str | None = None) -> dict[str, Any]:
        """Progress of one coordinator, or of all (``{"coordinators": {...}}``)."""
        path = (
            "/v1/coordinators"
            if coordinator is None
            else f"/v1/coordinators/{quote(coordinator, safe='')}"
        )
        return self._call("GET", path, None)

    def health(self) -> bool:
        """Whether the endpoint answers (no token needed)."""
        try:
            return self._call("GET", "/v1/health", None, retries=0).get("status") == "ok"
        except (CoordinatorUnavailable, CoordinatorRequestError):
            return False

    def close(self) -> None:
        """Close this thread's connection."""
        self._drop_connection()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_local"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

    # ------------------------------------------------------------------ transport

    @staticmethod
    def _attempt_path(coordinator: str, subtask: int, attempt: int, action: str) -> str:
        return (
            f"/v1/coordinators/{quote(coordinator, safe='')}/subtasks/{int(subtask)}"
            f"/attempts/{int(attempt)}/{action}"
        )

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        if connection is not None:
            return connection, True
        parts = urlsplit(self._url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        connection = cls(parts.hostname or "127.0.0.1", parts.port, timeout=self._timeout)
        self._local.connection = connection
        return connection, False

    def _drop_connection(self) -> None:
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        self._local.connection = None
        if connection is not None:
            connection.close()

    def _call(
        self, method: str, path: str, body: dict[str, Any] | None, *, retries: int | None = None
    ) -> dict[str, Any]:
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode("utf-8")
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        prefix = urlsplit(self._url).path.rstrip("/")
        max_retries = self._retries if retries is None else retries
        give_up_at = time.monotonic() + self._deadline
        failures = 0
        delay = self._backoff
        while True:
            connection, reused = self._connection()
            try:
                connection.request(method, prefix + path, body=data, headers=headers)
                response = connection.getresponse()
                raw = response.read()
                status = response.status
                if response.will_close:
                    self._drop_connection()
            except (OSError, http.client.HTTPException) as error:
                self._drop_connection()
                problem: Exception = error
                # A kept-alive connection the server has closed in the meantime: reconnect now.
                if (
                    reused
                    and failures == 0
                    and isinstance(
                        error,
                        http.client.RemoteDisconnected | BrokenPipeError | ConnectionResetError,
                    )
                ):
                    failures += 1
                    continue
            else:
                payload = self._decode(raw, status)
                if 200 <= status < 300:
                    return payload
                problem = CoordinatorRequestError(status, payload)
                if status not in _RETRYABLE_STATUS or payload.get("retryable") is False:
                    raise problem
            failures += 1
            if failures > max_retries or time.monotonic() + delay > give_up_at:
                raise CoordinatorUnavailable(
                    f"{method} {self._url}{path} failed {failures} time(s), giving up: {problem}"
                ) from problem
            logger.debug(
                "coordinator call %s %s failed (%s); retrying in %.3f s",
                method,
                path,
                problem,
                delay,
            )
            time.sleep(delay * (0.5 + random.random() / 2))
            delay = min(delay * 2, self._max_backoff)

    @staticmethod
    def _decode(raw: bytes, status: int) -> dict[str, Any]:
        if not raw:
            return {}
        try:
            payload = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return {"error": raw[:200].decode("utf-8", "replace"), "kind": "not-json"}
        if not isinstance(payload, dict):
            return {"error": f"unexpected reply {payload!r:.200}", "kind": "not-json"}
        return payload
