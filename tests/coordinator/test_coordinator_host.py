"""The host: one thread per coordinator, the contract's call order, idempotent replies."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from typing import Any

import pytest

from finishable.coordinator import (
    NO_CHECKPOINT,
    AddSplits,
    AttemptGoneError,
    CoordinatorClosedError,
    CoordinatorContext,
    CoordinatorFailedError,
    CoordinatorOrderViolation,
    CoordinatorRejection,
    NoMoreSplits,
    OperatorCoordinator,
    OperatorEvent,
    OrderRule,
    RangeSplit,
    RequestIdConflict,
    RequestSplit,
    SubtaskGateway,
)
from finishable.coordinator.ranges import RangeSplitEnumerator

from ._helpers import TIMEOUT, fail, ready, request
from .conftest import HostFactory

pytestmark = pytest.mark.quick


class Recorder(OperatorCoordinator):
    """Records every call and the thread it ran on; answers each event with NoMoreSplits."""

    instances: list[Recorder]

    def __init__(self, context: CoordinatorContext, log: list[Recorder]) -> None:
        self.context = context
        self.calls: list[tuple[Any, ...]] = []
        self.threads: set[str] = set()
        self.gateways: dict[tuple[int, int], SubtaskGateway] = {}
        self.explode_on: str | None = None
        self.sleep = 0.0
        log.append(self)

    def _record(self, *call: Any) -> None:
        self.calls.append(call)
        self.threads.add(threading.current_thread().name)
        if self.sleep:
            time.sleep(self.sleep)
        if self.explode_on == call[0]:
            raise RuntimeError(f"boom in {call[0]}")

    def start(self) -> None:
        self._record("start")

    def close(self) -> None:
        self._record("close")

    def handle_event_from_operator(self, subtask: int, attempt: int, event: OperatorEvent) -> None:
        self._record("event", subtask, attempt, event)
        self.gateways[(subtask, attempt)].send_event(NoMoreSplits())

    def checkpoint_coordinator(self, checkpoint_id: int) -> bytes:
        self._record("checkpoint", checkpoint_id)
        return str(checkpoint_id).encode()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self._record("complete", checkpoint_id)

    def reset_to_checkpoint(self, checkpoint_id: int, data: bytes | None) -> None:
        self._record("reset", checkpoint_id, data)

    def subtask_reset(self, subtask: int, checkpoint_id: int) -> None:
        self._record("subtask_reset", subtask, checkpoint_id)

    def execution_attempt_failed(
        self, subtask: int, attempt: int, reason: BaseException | None
    ) -> None:
        self._record("failed", subtask, attempt)

    def execution_attempt_ready(self, subtask: int, attempt: int, gateway: SubtaskGateway) -> None:
        self._record("ready", subtask, attempt)
        self.gateways[(subtask, attempt)] = gateway

    def supports_batch_snapshot(self) -> bool:
        return True


@pytest.fixture
def recorded(make_host: HostFactory) -> tuple[Any, list[Recorder]]:
    log: list[Recorder] = []
    host = make_host(lambda context: Recorder(context, log), name="rec")
    return host, log


def violation(future: Future[Any]) -> CoordinatorOrderViolation:
    with pytest.raises(CoordinatorOrderViolation) as caught:
        future.result(TIMEOUT)
    return caught.value


def test_all_calls_run_on_one_dedicated_thread(recorded: Any) -> None:
    host, log = recorded
    ready(host, 0, 0)
    request(host, 0, 0)
    host.checkpoint_coordinator(1).result(TIMEOUT)
    caller = threading.current_thread().name
    assert log[0].threads == {"coordinator-rec"} and caller not in log[0].threads


def test_calls_before_start_and_a_second_start_are_refused(make_host: HostFactory) -> None:
    log: list[Recorder] = []
    host = make_host(lambda context: Recorder(context, log), start=False)
    error = violation(host.execution_attempt_ready(0, 0))
    assert error.rule is OrderRule.NOT_STARTED and error.subtask == 0 and error.attempt == 0
    host.start().result(TIMEOUT)
    assert violation(host.start()).rule is OrderRule.ALREADY_STARTED
    assert [call[0] for call in log[0].calls] == ["start"]


def test_the_documented_order_ready_failed_reset_ready(recorded: Any) -> None:
    host, log = recorded
    ready(host, 2, 0)
    fail(host, 2, 0)
    host.subtask_reset(2, 7).result(TIMEOUT)
    ready(host, 2, 1)
    assert request(host, 2, 1) == [NoMoreSplits()]
    assert [call[:3] for call in log[0].calls[1:]] == [
        ("ready", 2, 0),
        ("failed", 2, 0),
        ("subtask_reset", 2, 7),
        ("ready", 2, 1),
        ("event", 2, 1),
    ]


@pytest.mark.parametrize(
    ("steps", "bad", "rule"),
    [
        ([("ready", 0, 0)], ("ready", 0, 0), OrderRule.READY_TWICE),
        ([("ready", 0, 0), ("failed", 0, 0)], ("failed", 0, 0), OrderRule.FAILED_TWICE),
        ([("ready", 0, 0), ("failed", 0, 0)], ("ready", 0, 1), OrderRule.READY_BEFORE_RESET),
        (
            [("ready", 0, 0), ("failed", 0, 0), ("reset", 0)],
            ("ready", 0, 0),
            OrderRule.READY_AFTER_FAILED,
        ),
        ([("ready", 0, 0)], ("reset", 0), OrderRule.RESET_WITH_LIVE_ATTEMPT),
        (
            [("ready", 0, 0), ("ready", 0, 1), ("failed", 0, 0)],
            ("reset", 0),
            OrderRule.RESET_WITH_LIVE_ATTEMPT,
        ),
        ([], ("event", 0, 0), OrderRule.EVENT_FROM_UNREADY_ATTEMPT),
        ([("ready", 0, 0), ("failed", 0, 0)], ("event", 0, 0), OrderRule.EVENT_FROM_FAILED_ATTEMPT),
        ([("ready", 1, 0)], ("global", 0), OrderRule.GLOBAL_RESET_WITH_LIVE_ATTEMPTS),
        ([("checkpoint", 5)], ("checkpoint", 5), OrderRule.CHECKPOINT_ID_NOT_INCREASING),
        ([("checkpoint", 5)], ("checkpoint", 3), OrderRule.CHECKPOINT_ID_NOT_INCREASING),
    ],
)
def test_violations_name_the_rule_and_never_reach_the_coordinator(
    recorded: Any, steps: list[tuple[Any, ...]], bad: tuple[Any, ...], rule: OrderRule
) -> None:
    host, log = recorded

    def call(step: tuple[Any, ...]) -> Future[Any]:
        kind, *args = step
        if kind == "ready":
            return host.execution_attempt_ready(*args)
        if kind == "failed":
            return host.execution_attempt_failed(*args, "x")
        if kind == "reset":
            return host.subtask_reset(args[0], 1)
        if kind == "event":
            return host.handle_event_from_operator(*args, RequestSplit(*args))
        if kind == "global":
            return host.reset_to_checkpoint(args[0], None)
        return host.checkpoint_coordinator(args[0])

    for step in steps:
        call(step).result(TIMEOUT)
    calls_before = list(log[0].calls)
    error = violation(call(bad))
    assert error.rule is rule
    assert rule.value in str(error)
    if len(bad) == 3:
        assert (error.subtask, error.attempt) == (bad[1], bad[2])
        assert f"subtask {bad[1]} attempt {bad[2]}" in str(error)
    assert log[0].calls == calls_before
    assert len(log) == 1


def test_failure_of_an_attempt_that_never_became_ready_is_accepted(recorded: Any) -> None:
    # Flink reports attempts that fail while deploying; the number can then never become ready.
    host, _log = recorded
    fail(host, 4, 0)
    assert violation(host.execution_attempt_ready(4, 1)).rule is OrderRule.READY_BEFORE_RESET
    host.subtask_reset(4, NO_CHECKPOINT).result(TIMEOUT)
    assert violation(host.execution_attempt_ready(4, 0)).rule is OrderRule.READY_AFTER_FAILED
    ready(host, 4, 1)


def test_a_speculative_attempt_may_start_while_another_runs(recorded: Any) -> None:
    host, _ = recorded
    ready(host, 0, 0)
    ready(host, 0, 1)
    fail(host, 0, 0)
    ready(host, 0, 2)  # attempt 1 still runs: no reset needed
    assert host.live_attempts().result(TIMEOUT) == {0: [1, 2]}


def test_subtask_reset_of_a_subtask_without_attempts_is_allowed(recorded: Any) -> None:
    # Batch recovery in a new driver resets unfinished subtasks that never ran in it.
    host, log = recorded
    host.subtask_reset(9, NO_CHECKPOINT).result(TIMEOUT)
    assert log[0].calls[-1] == ("subtask_reset", 9, NO_CHECKPOINT)


def test_events_after_close_are_refused(make_host: HostFactory) -> None:
    log: list[Recorder] = []
    host = make_host(lambda context: Recorder(context, log))
    ready(host, 0, 0)
    host.close()
    with pytest.raises(CoordinatorClosedError) as caught:
        request(host, 0, 0)
    assert caught.value.rule is OrderRule.CLOSED
    assert log[0].calls[-1] == ("close",)
    host.close()  # idempotent


def test_checkpoint_ids_increase_but_batch_snapshots_are_always_allowed(recorded: Any) -> None:
    host, _log = recorded
    assert host.checkpoint_coordinator(NO_CHECKPOINT).result(TIMEOUT) == b"-1"
    host.checkpoint_coordinator(3).result(TIMEOUT)
    host.checkpoint_coordinator(NO_CHECKPOINT).result(TIMEOUT)
    host.checkpoint_coordinator(4).result(TIMEOUT)
    # After a restore of checkpoint 10, the next checkpoint must come after it.
    host.reset_to_checkpoint(10, b"10").result(TIMEOUT)
    assert violation(host.checkpoint_coordinator(10)).rule is OrderRule.CHECKPOINT_ID_NOT_INCREASING
    host.checkpoint_coordinator(11).result(TIMEOUT)


def test_initial_restore_comes_before_start_on_the_same_instance(make_host: HostFactory) -> None:
    log: list[Recorder] = []
    host = make_host(lambda context: Recorder(context, log), start=False)
    host.reset_to_checkpoint(5, b"state").result(TIMEOUT)
    host.start().result(TIMEOUT)
    assert len(log) == 1
    assert log[0].calls == [("reset", 5, b"state"), ("start",)]


def test_global_reset_replaces_the_instance_and_drops_its_async_work(
    make_host: HostFactory,
) -> None:
    log: list[Recorder] = []
    host = make_host(lambda context: Recorder(context, log))
    release = threading.Event()
    handled: list[str] = []
    log[0].context.call_async(
        lambda: release.wait(TIMEOUT), lambda result, error: handled.append("old")
    )
    ready(host, 0, 0)
    host.global_failover(3, b"three", "driver lost").result(TIMEOUT)
    release.set()
    deadline = time.monotonic() + TIMEOUT
    while host.dropped_callbacks == 0:  # the old instance's result arrives, and is dropped
        assert time.monotonic() < deadline, "the old instance's async result never arrived"
        time.sleep(0.01)
    assert handled == []
    assert [call[0] for call in log[0].calls] == ["start", "ready", "failed", "close"]
    assert log[1].calls == [("reset", 3, b"three"), ("start",)]
    ready(host, 0, 0)  # attempt numbers start over after a global reset


def test_an_exception_fails_the_coordinator_until_a_global_reset(recorded: Any) -> None:
    host, log = recorded
    ready(host, 0, 0)
    log[0].explode_on = "checkpoint"
    with pytest.raises(CoordinatorFailedError, match="boom in checkpoint"):
        host.checkpoint_coordinator(1).result(TIMEOUT)
    assert isinstance(host.failure, RuntimeError)
    with pytest.raises(CoordinatorFailedError):
        request(host, 0, 0)
    with pytest.raises(CoordinatorOrderViolation) as caught:
        host.reset_to_checkpoint(0, None).result(TIMEOUT)
    assert caught.value.rule is OrderRule.GLOBAL_RESET_WITH_LIVE_ATTEMPTS
    fail(host, 0, 0)  # failures are still taken, so that the reset becomes possible
    host.reset_to_checkpoint(0, None).result(TIMEOUT)
    assert host.failure is None
    ready(host, 0, 0)
    assert request(host, 0, 0) == [NoMoreSplits()]


def test_fail_job_from_the_context_fails_the_coordinator(recorded: Any) -> None:
    host, log = recorded
    log[0].context.fail_job(RuntimeError("listing failed for good"))
    with pytest.raises(CoordinatorFailedError, match="listing failed for good"):
        host.checkpoint_coordinator(1).result(TIMEOUT)


def test_call_async_runs_work_off_thread_and_handlers_on_it(recorded: Any) -> None:
    host, log = recorded
    seen: list[tuple[str, str, object]] = []
    done = threading.Event()

    def work() -> str:
        return threading.current_thread().name

    def handler(result: str | None, error: BaseException | None) -> None:
        seen.append((str(result), threading.current_thread().name, error))
        if len(seen) == 3:
            done.set()

    log[0].context.call_async(work, handler, period=0.02)
    assert done.wait(TIMEOUT)
    worker, handler_thread, error = seen[0]
    assert worker.startswith("coordinator-rec-io") and handler_thread == "coordinator-rec"
    assert error is None
    host.close()
    # Periodic work stops with the coordinator: its timers are cancelled with its context, and a
    # result still in flight is dropped, not handed to the closed instance.
    context = log[0].context
    assert context.closed and not context.pending_timers
    assert all(name == "coordinator-rec" for _, name, _ in seen)


def test_call_async_hands_errors_to_the_handler(recorded: Any) -> None:
    _, log = recorded
    got: Future[BaseException | None] = Future()

    def work() -> int:
        raise OSError("disk on fire")

    log[0].context.call_async(work, lambda result, error: got.set_result(error))
    assert isinstance(got.result(TIMEOUT), OSError)


def test_events_sent_through_a_gateway_ride_on_the_next_reply(recorded: Any) -> None:
    host, log = recorded
    ready(host, 0, 0)
    gateway = log[0].gateways[(0, 0)]
    delivered = gateway.send_event(AddSplits(()))  # from the test thread
    assert request(host, 0, 0) == [AddSplits(()), NoMoreSplits()]
    assert delivered.result(TIMEOUT) is None
    undelivered = gateway.send_event(NoMoreSplits())
    fail(host, 0, 0)
    with pytest.raises(AttemptGoneError):
        undelivered.result(TIMEOUT)
    with pytest.raises(AttemptGoneError):
        gateway.send_event(NoMoreSplits()).result(TIMEOUT)


def test_a_retried_request_id_gets_the_recorded_reply(make_host: HostFactory) -> None:
    host = make_host(RangeSplitEnumerator.provider(end=100, split_size=10))
    ready(host, 0, 0)
    event = RequestSplit(0, 0)
    first = host.handle_event_from_operator(0, 0, event, "req-1").result(TIMEOUT)
    again = host.handle_event_from_operator(0, 0, event, "req-1").result(TIMEOUT)
    assert first == again == [AddSplits((RangeSplit(0, 10),))]
    progress = host.progress().result(TIMEOUT)
    assert progress is not None and progress.splits_assigned == 1
    with pytest.raises(RequestIdConflict, match="req-1"):
        host.handle_event_from_operator(0, 0, RequestSplit(0, 0, 2), "req-1").result(TIMEOUT)
    nxt = host.handle_event_from_operator(0, 0, event, "req-2").result(TIMEOUT)
    assert nxt != first


def test_retried_ready_and_failed_notifications_are_idempotent(recorded: Any) -> None:
    host, log = recorded
    host.execution_attempt_ready(0, 0, "r1").result(TIMEOUT)
    host.execution_attempt_ready(0, 0, "r1").result(TIMEOUT)
    host.execution_attempt_failed(0, 0, "x", "f1").result(TIMEOUT)
    host.execution_attempt_failed(0, 0, "x", "f1").result(TIMEOUT)
    assert violation(host.execution_attempt_failed(0, 0, "x", "f2")).rule is OrderRule.FAILED_TWICE
    assert [call[0] for call in log[0].calls] == ["start", "ready", "failed"]


def test_request_split_must_name_the_attempt_it_comes_from(recorded: Any) -> None:
    host, _ = recorded
    ready(host, 0, 0)
    with pytest.raises(CoordinatorRejection, match="names subtask 1 attempt 0"):
        host.handle_event_from_operator(0, 0, RequestSplit(1, 0)).result(TIMEOUT)


def test_slow_coordinator_calls_are_reported(
    make_host: HostFactory, caplog: pytest.LogCaptureFixture
) -> None:
    log: list[Recorder] = []
    host = make_host(lambda context: Recorder(context, log), slow_call_warning=0.01)
    log[0].sleep = 0.05
    with caplog.at_level(logging.WARNING, logger="finishable.coordinator.host"):
        host.checkpoint_coordinator(1).result(TIMEOUT)
    assert "must not block" in caplog.text
