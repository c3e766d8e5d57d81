"""A small synchronous client of the driver endpoint, for Spark's Python workers.

It runs inside executors and the planner worker, so it speaks HTTP through ``transport`` (standard
library only, one keep-alive connection per thread): connection errors, timeouts and 5xx answers
are retried with backoff and jitter until ``retries`` or ``deadline`` run out.

Retrying is safe because every mutating call carries a request id, generated once per logical
call and resent unchanged on each retry: the coordinator host answers a repeated id with the
reply it recorded, so a ``RequestSplit`` whose reply was lost is not assigned a second split.
When the client finally gives up (``CoordinatorUnavailable``) it cannot know whether the request
took effect; the reader must then fail its task, which returns whatever it was given to the pool.

The client pickles without its connections, so a Spark reader can carry it to executors.
"""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import quote

from finishable.coordinator.events import (
    OperatorEvent,
    RequestSplit,
    SplitFinished,
    SplitSkipped,
    event_from_json,
)
from finishable.transport import HttpAnswerError, Policy, Transport, Unreachable


class CoordinatorRequestError(Exception):
    """The endpoint refused a request (4xx, or a 5xx that retrying cannot fix)."""

    def __init__(self, status: int, payload: dict[str, Any]) -> None:
        message = payload.get("error") or f"HTTP {status}"
        super().__init__(f"driver endpoint answered {status}: {message}")
        self.status = status
        self.kind: str | None = payload.get("kind")
        self.rule: str | None = payload.get("rule")
        self.subtask: int | None = payload.get("subtask")
        self.attempt: int | None = payload.get("attempt")
        self.payload = payload


class CoordinatorUnavailable(Exception):
    """Retries ran out: the request may or may not have taken effect; fail the task."""


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
        policy = Policy(timeout, retries, backoff, max_backoff, deadline)
        self._transport = Transport(url, token, policy, what="a driver endpoint")

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
        self._transport.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ requests

    @staticmethod
    def _attempt_path(coordinator: str, subtask: int, attempt: int, action: str) -> str:
        return (
            f"/v1/coordinators/{quote(coordinator, safe='')}/subtasks/{int(subtask)}"
            f"/attempts/{int(attempt)}/{action}"
        )

    def _call(
        self, method: str, path: str, body: dict[str, Any] | None, *, retries: int | None = None
    ) -> dict[str, Any]:
        try:
            reply = self._transport.request_json(method, path, body, retries=retries)
        except HttpAnswerError as error:
            raise CoordinatorRequestError(error.status, error.payload) from None
        except Unreachable as error:
            raise CoordinatorUnavailable(str(error)) from error.problem
        if not isinstance(reply, dict):
            raise CoordinatorRequestError(200, {"error": f"unexpected reply {reply!r:.200}"})
        return reply
