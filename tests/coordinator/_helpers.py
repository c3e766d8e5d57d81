"""Helpers of the coordinator tests: short synchronous calls on a host."""

from __future__ import annotations

from finishable.coordinator import (
    AddSplits,
    CoordinatorHost,
    OperatorEvent,
    RequestSplit,
    SplitFinished,
)

TOKEN = "s3cret-token"
TIMEOUT = 60.0  # a bound for liveness only: events are awaited, never timed


def ready(host: CoordinatorHost, subtask: int, attempt: int) -> None:
    host.execution_attempt_ready(subtask, attempt).result(TIMEOUT)


def fail(host: CoordinatorHost, subtask: int, attempt: int) -> None:
    host.execution_attempt_failed(subtask, attempt, "test failure").result(TIMEOUT)


def request(
    host: CoordinatorHost, subtask: int, attempt: int, max_splits: int = 1
) -> list[OperatorEvent]:
    return host.handle_event_from_operator(
        subtask, attempt, RequestSplit(subtask, attempt, max_splits)
    ).result(TIMEOUT)


def take(host: CoordinatorHost, subtask: int, attempt: int, max_splits: int = 1) -> list[str]:
    """Request splits and return their ids (asserting the reply is one AddSplits)."""
    reply = request(host, subtask, attempt, max_splits)
    assert len(reply) == 1 and isinstance(reply[0], AddSplits), reply
    return [split.split_id for split in reply[0].splits]


def finish(host: CoordinatorHost, subtask: int, attempt: int, *split_ids: str) -> None:
    host.handle_event_from_operator(subtask, attempt, SplitFinished(tuple(split_ids))).result(
        TIMEOUT
    )
