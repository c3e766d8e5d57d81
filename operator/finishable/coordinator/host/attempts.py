"""The calls of subtask attempts on the coordinator host: their order rules and request-id dedup.

Before a call reaches the coordinator, the host checks it against the order the contract
documents and refuses it with a ``CoordinatorOrderViolation`` naming the rule, subtask and attempt.
The coordinator never sees a refused call, so a violation changes nothing.

The host also makes retried requests idempotent: a call that carries a ``request_id`` already
answered for that attempt gets the recorded answer instead of being handled again, so a
``RequestSplit`` whose reply was lost on the wire cannot assign a second split. Events the
coordinator sends an attempt while handling its event wait in the attempt's outbox and go back as
the reply.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field

from finishable.coordinator.contract import AttemptGoneError
from finishable.coordinator.errors import (
    CoordinatorOrderViolation,
    CoordinatorRejection,
    OrderRule,
    RequestIdConflict,
)
from finishable.coordinator.events import OperatorEvent, RequestSplit
from finishable.coordinator.host.gateway import HostGateway
from finishable.coordinator.host.thread import HostThread

logger = logging.getLogger(__name__)


class RemoteAttemptFailure(RuntimeError):
    """The failure reason of an attempt, as text reported over the endpoint."""


@dataclass
class AttemptRecord:
    """One attempt of a subtask as the host knows it: live or failed, its gateway and replies."""

    number: int
    live: bool
    gateway: HostGateway | None = None
    ready_request_id: str | None = None
    failed_request_id: str | None = None
    outbox: list[tuple[OperatorEvent, Future[None]]] = field(default_factory=list)
    replies: OrderedDict[str, tuple[OperatorEvent, tuple[OperatorEvent, ...]]] = field(
        default_factory=OrderedDict
    )


@dataclass
class SubtaskRecord:
    """The attempts of one subtask, by attempt number."""

    attempts: dict[int, AttemptRecord] = field(default_factory=dict)
    awaiting_reset: bool = False
    """Every attempt failed and no reset came yet: a new attempt must wait for the reset."""

    def live(self) -> list[int]:
        return [number for number, attempt in self.attempts.items() if attempt.live]


class AttemptCalls(HostThread):
    """Attempt ready, failed, reset and events, checked against the contract's order."""

    def _subtask(self, subtask: int) -> SubtaskRecord:
        state = self._subtasks.get(subtask)
        if state is None:
            if subtask < 0:
                raise CoordinatorRejection(self._name, f"subtask index {subtask} is negative")
            state = self._subtasks[subtask] = SubtaskRecord()
        return state

    def _do_ready(self, subtask: int, attempt: int, request_id: str | None) -> None:
        coordinator = self._check_usable(subtask=subtask, attempt=attempt)
        state = self._subtask(subtask)
        known = state.attempts.get(attempt)
        if known is not None:
            if request_id is not None and known.ready_request_id == request_id:
                return  # a retried notification that was already applied
            if known.live:
                raise CoordinatorOrderViolation(
                    self._name,
                    OrderRule.READY_TWICE,
                    "the attempt is already ready",
                    subtask=subtask,
                    attempt=attempt,
                )
            raise CoordinatorOrderViolation(
                self._name,
                OrderRule.READY_AFTER_FAILED,
                "the attempt has failed; a recovered subtask runs under a new attempt number",
                subtask=subtask,
                attempt=attempt,
            )
        if state.awaiting_reset:
            raise CoordinatorOrderViolation(
                self._name,
                OrderRule.READY_BEFORE_RESET,
                "every earlier attempt of the subtask failed; call subtask_reset (or "
                "reset_to_checkpoint) before a new attempt becomes ready",
                subtask=subtask,
                attempt=attempt,
            )
        record = AttemptRecord(number=attempt, live=True, ready_request_id=request_id)
        record.gateway = HostGateway(self, subtask, attempt)
        state.attempts[attempt] = record
        gateway = record.gateway
        self._invoke(
            "execution_attempt_ready",
            lambda: coordinator.execution_attempt_ready(subtask, attempt, gateway),
        )

    def _do_failed(
        self, subtask: int, attempt: int, reason: BaseException | None, request_id: str | None
    ) -> None:
        # A failed coordinator still learns of failures: a global reset needs every attempt gone.
        coordinator = self._check_usable(subtask=subtask, attempt=attempt, allow_failed=True)
        state = self._subtask(subtask)
        record = state.attempts.get(attempt)
        if record is not None and not record.live:
            if request_id is not None and record.failed_request_id == request_id:
                return
            raise CoordinatorOrderViolation(
                self._name,
                OrderRule.FAILED_TWICE,
                "the attempt has already failed",
                subtask=subtask,
                attempt=attempt,
            )
        if record is None:
            # Flink reports attempts that fail while deploying, before they were ever ready.
            record = state.attempts[attempt] = AttemptRecord(number=attempt, live=False)
        record.live = False
        record.failed_request_id = request_id
        record.gateway = None
        record.replies.clear()
        self._fail_outbox(record, "the attempt failed")
        if not state.live():
            state.awaiting_reset = True
        logger.info(
            "coordinator %r: subtask %d attempt %d failed: %s", self._name, subtask, attempt, reason
        )
        if self._failure is None:
            self._invoke(
                "execution_attempt_failed",
                lambda: coordinator.execution_attempt_failed(subtask, attempt, reason),
            )

    def _do_subtask_reset(self, subtask: int, checkpoint_id: int) -> None:
        coordinator = self._check_usable(subtask=subtask)
        state = self._subtask(subtask)
        live = state.live()
        if live:
            raise CoordinatorOrderViolation(
                self._name,
                OrderRule.RESET_WITH_LIVE_ATTEMPT,
                f"attempt(s) {live} have not failed; a subtask is reset only after every one of "
                "its attempts failed",
                subtask=subtask,
                attempt=live[0],
            )
        state.awaiting_reset = False
        self._invoke("subtask_reset", lambda: coordinator.subtask_reset(subtask, checkpoint_id))

    def _do_event(
        self, subtask: int, attempt: int, event: OperatorEvent, request_id: str | None
    ) -> list[OperatorEvent]:
        coordinator = self._check_usable(subtask=subtask, attempt=attempt)
        state = self._subtasks.get(subtask)
        record = state.attempts.get(attempt) if state is not None else None
        if record is None:
            raise CoordinatorOrderViolation(
                self._name,
                OrderRule.EVENT_FROM_UNREADY_ATTEMPT,
                f"{event.type_name} from an attempt that never became ready",
                subtask=subtask,
                attempt=attempt,
            )
        if not record.live:
            raise CoordinatorOrderViolation(
                self._name,
                OrderRule.EVENT_FROM_FAILED_ATTEMPT,
                f"{event.type_name} from an attempt that has failed",
                subtask=subtask,
                attempt=attempt,
            )
        if isinstance(event, RequestSplit) and (
            event.subtask != subtask or event.attempt != attempt
        ):
            raise CoordinatorRejection(
                self._name,
                f"RequestSplit names subtask {event.subtask} attempt {event.attempt} but was sent "
                "for another",
                subtask=subtask,
                attempt=attempt,
            )
        if request_id is not None:
            cached = record.replies.get(request_id)
            if cached is not None:
                original, recorded = cached
                if original != event:
                    raise RequestIdConflict(
                        self._name,
                        f"request id {request_id!r} was already used for a different "
                        f"{original.type_name}; a retry must resend the same event",
                        subtask=subtask,
                        attempt=attempt,
                    )
                record.replies.move_to_end(request_id)
                logger.debug(
                    "coordinator %r: replayed the reply to request %s", self._name, request_id
                )
                return list(recorded)
        self._invoke(
            "handle_event_from_operator",
            lambda: coordinator.handle_event_from_operator(subtask, attempt, event),
        )
        reply = self._drain_outbox(record)
        if request_id is not None:
            record.replies[request_id] = (event, tuple(reply))
            while len(record.replies) > self._replies_per_attempt:
                record.replies.popitem(last=False)
        return reply

    # ------------------------------------------------------------------ gateways

    def _queue_event(
        self, gateway: HostGateway, event: OperatorEvent, future: Future[None]
    ) -> None:
        state = self._subtasks.get(gateway.subtask)
        record = state.attempts.get(gateway.attempt) if state is not None else None
        if record is None or not record.live or record.gateway is not gateway or self._closed:
            future.set_exception(
                AttemptGoneError(
                    f"coordinator {self._name!r}: subtask {gateway.subtask} attempt "
                    f"{gateway.attempt} is no longer running; {event.type_name} not delivered"
                )
            )
            return
        record.outbox.append((event, future))

    @staticmethod
    def _drain_outbox(record: AttemptRecord) -> list[OperatorEvent]:
        if not record.outbox:
            return []
        events = [event for event, _ in record.outbox]
        for _, future in record.outbox:
            future.set_result(None)
        record.outbox.clear()
        return events

    def _fail_outbox(self, record: AttemptRecord, why: str) -> None:
        for event, future in record.outbox:
            if not future.done():
                future.set_exception(
                    AttemptGoneError(
                        f"coordinator {self._name!r}: {event.type_name} to attempt "
                        f"{record.number} not delivered: {why}"
                    )
                )
        record.outbox.clear()
