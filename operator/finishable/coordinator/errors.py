"""Typed errors of the coordinator package, so callers (and the endpoint) can tell them apart.

A violation of the call order is a bug in the caller and changes nothing; a rejection is an event
the coordinator refused without changing its state; a failure is an unexpected error inside a
coordinator, which (as in Flink) fails the job until a global reset.
"""

from __future__ import annotations

from enum import StrEnum


class OrderRule(StrEnum):
    """The ordering rules of Flink's OperatorCoordinator contract that the host enforces."""

    NOT_STARTED = "not-started"
    ALREADY_STARTED = "already-started"
    CLOSED = "closed"
    READY_TWICE = "attempt-ready-twice"
    READY_AFTER_FAILED = "attempt-ready-after-failed"
    READY_BEFORE_RESET = "ready-before-subtask-reset"
    FAILED_TWICE = "attempt-failed-twice"
    RESET_WITH_LIVE_ATTEMPT = "subtask-reset-with-live-attempt"
    GLOBAL_RESET_WITH_LIVE_ATTEMPTS = "reset-to-checkpoint-with-live-attempts"
    EVENT_FROM_UNREADY_ATTEMPT = "event-from-attempt-never-ready"
    EVENT_FROM_FAILED_ATTEMPT = "event-from-failed-attempt"
    CHECKPOINT_ID_NOT_INCREASING = "checkpoint-id-not-increasing"


class CoordinatorError(Exception):
    """Base of every error raised by a coordinator or its host."""

    def __init__(self, coordinator: str, message: str) -> None:
        super().__init__(f"coordinator {coordinator!r}: {message}")
        self.coordinator = coordinator
        self.detail = message


def _where(subtask: int | None, attempt: int | None) -> str:
    """``"subtask 3 attempt 1: "``, or nothing when the error concerns no subtask."""
    if subtask is None:
        return ""
    return f"subtask {subtask}" + (f" attempt {attempt}" if attempt is not None else "") + ": "


class CoordinatorOrderViolation(CoordinatorError):
    """A call broke the documented call order; the coordinator never saw it."""

    def __init__(
        self,
        coordinator: str,
        rule: OrderRule,
        message: str,
        *,
        subtask: int | None = None,
        attempt: int | None = None,
    ) -> None:
        super().__init__(coordinator, f"{_where(subtask, attempt)}{message} (rule {rule.value})")
        self.rule = rule
        self.subtask = subtask
        self.attempt = attempt


class CoordinatorClosedError(CoordinatorOrderViolation):
    """The coordinator was closed; nothing reaches it any more."""


class CoordinatorFailedError(CoordinatorError):
    """The coordinator raised unexpectedly (or failed the job); only a global reset revives it."""

    def __init__(self, coordinator: str, cause: BaseException) -> None:
        super().__init__(coordinator, f"failed: {type(cause).__name__}: {cause}")
        self.cause = cause


class CoordinatorRejection(CoordinatorError):
    """A coordinator refused an event as invalid and left its state unchanged."""

    def __init__(
        self,
        coordinator: str,
        message: str,
        *,
        subtask: int | None = None,
        attempt: int | None = None,
    ) -> None:
        super().__init__(coordinator, f"{_where(subtask, attempt)}{message}")
        self.subtask = subtask
        self.attempt = attempt


class RequestIdConflict(CoordinatorRejection):
    """A request id was reused for a different request: retries must resend the same one."""


class EventDecodeError(ValueError):
    """An operator event or split in JSON form is malformed; the message names the field."""


class EnumeratorStateError(ValueError):
    """An enumerator state cannot be restored: wrong format, version, source or contents."""
