"""Flink's OperatorCoordinator contract in Python form (seed 004), plus its context and gateway.

The contract's value is its call order, which the ``CoordinatorHost`` guarantees and checks:

1. ``execution_attempt_ready(s, a, gateway)``: the attempt can receive events; interaction starts.
2. ``execution_attempt_failed(s, a, reason)``: the attempt failed or was cancelled; interaction
   stops. Called for every attempt that fails, also one that never became ready (Flink does so for
   attempts that fail while being deployed).
3. ``subtask_reset(s, checkpoint_id)`` (partial failover) or ``reset_to_checkpoint`` (global):
   only once every attempt of the subtask (of every subtask) has failed.
4. ``execution_attempt_ready(s, a')``: the recovered subtask's new attempt.

All methods run on one dedicated thread per coordinator and must never block: a coordinator that
needs I/O hands it to ``CoordinatorContext.call_async`` and gets the result back on its thread.

``checkpoint_coordinator`` returns the snapshot synchronously rather than completing a future as
Flink does: a snapshot taken on the coordinator thread is consistent with the order of events by
construction (everything handled before the call is in it, nothing after), and our enumerators
hold their state in memory. The host hands callers a ``concurrent.futures.Future`` of it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from finishable.coordinator.events import OperatorEvent

NO_CHECKPOINT = -1
"""The checkpoint id of batch snapshots and of restores when no completed checkpoint exists yet."""

T = TypeVar("T")


class SubtaskGateway(ABC):
    """Sends events to one specific subtask attempt; events to an attempt that is gone fail."""

    @property
    @abstractmethod
    def subtask(self) -> int:
        """The subtask index this gateway is bound to."""

    @property
    @abstractmethod
    def attempt(self) -> int:
        """The attempt number this gateway is bound to."""

    @abstractmethod
    def send_event(self, event: OperatorEvent) -> Future[None]:
        """Queue ``event`` for the attempt; the future completes once it was handed over.

        Delivery piggybacks on the reply to the attempt's next request (readers pull), and fails
        with ``AttemptGoneError`` if the attempt fails first.
        """


class AttemptGoneError(Exception):
    """An event was sent to an attempt that failed (or was reset) before it was delivered."""


class CoordinatorContext(ABC):
    """What a coordinator may call; every method is safe from any thread."""

    @property
    @abstractmethod
    def name(self) -> str:
        """The coordinator's name (one per source)."""

    @abstractmethod
    def call_async(
        self,
        work: Callable[[], T],
        handler: Callable[[T | None, BaseException | None], None],
        *,
        initial_delay: float = 0.0,
        period: float | None = None,
    ) -> None:
        """Run ``work`` (I/O) on a worker thread, then ``handler(result, error)`` on the coordinator
        thread; with ``period``, repeat that many seconds after each run completes.

        Handlers of a coordinator instance that was closed or replaced are dropped.
        """

    @abstractmethod
    def run_in_coordinator_thread(self, action: Callable[[], None]) -> None:
        """Run ``action`` on the coordinator thread, after the calls already queued."""

    @abstractmethod
    def fail_job(self, cause: BaseException) -> None:
        """Fail the coordinator (and so the job) until a global reset, as Flink's context does."""


class OperatorCoordinator(ABC):
    """A coordinator of one operator (here: a source's split enumerator). See the module doc."""

    @abstractmethod
    def start(self) -> None:
        """Start work (schedule discovery). Raising fails the job."""

    @abstractmethod
    def close(self) -> None:
        """Release resources; the coordinator is disposed afterwards."""

    @abstractmethod
    def handle_event_from_operator(self, subtask: int, attempt: int, event: OperatorEvent) -> None:
        """Handle an event of a ready attempt; reply through that attempt's gateway.

        Raise ``CoordinatorRejection`` (before changing state) for an invalid event; any other
        exception fails the job.
        """

    @abstractmethod
    def checkpoint_coordinator(self, checkpoint_id: int) -> bytes:
        """Snapshot the state as of now; ``NO_CHECKPOINT`` for a batch snapshot."""

    @abstractmethod
    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` (and every earlier one) is complete."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:  # noqa: B027 - Flink's default
        """Checkpoint ``checkpoint_id`` was aborted; by default nothing to do."""

    @abstractmethod
    def reset_to_checkpoint(self, checkpoint_id: int, data: bytes | None) -> None:
        """Global failover: restore ``data`` (``None``: reset to an empty, new state)."""

    @abstractmethod
    def subtask_reset(self, subtask: int, checkpoint_id: int) -> None:
        """Partial failover: the subtask restarts from ``checkpoint_id``; recover its work since."""

    @abstractmethod
    def execution_attempt_failed(
        self, subtask: int, attempt: int, reason: BaseException | None
    ) -> None:
        """The attempt failed or was cancelled; stop interacting with it."""

    @abstractmethod
    def execution_attempt_ready(self, subtask: int, attempt: int, gateway: SubtaskGateway) -> None:
        """The attempt can receive events through ``gateway``."""

    @abstractmethod
    def supports_batch_snapshot(self) -> bool:
        """Whether ``checkpoint_coordinator(NO_CHECKPOINT)`` gives a usable batch snapshot."""


CoordinatorProvider = Callable[[CoordinatorContext], OperatorCoordinator]
"""Creates a coordinator (Flink's Provider); the host makes a fresh one on every global reset."""


@dataclass(frozen=True, slots=True)
class CoordinatorProgress:
    """How far a source got: the figures the job status shows (``splitsTotal``, ...)."""

    bounded: bool
    discovery_complete: bool
    splits_total: int | None
    """All splits the source will have (``None`` while unknown: unbounded or still discovering)."""
    splits_discovered: int
    splits_pending: int
    splits_assigned: int
    splits_finished: int
    fully_finished: bool
    backlog: int = 0
    """Input not read yet, in :attr:`backlog_unit` (the autoscaler's catch-up measure)."""
    consumed: int = 0
    """Input handed out so far in this run, in the same unit: its rate is the read rate."""
    backlog_unit: str = "splits"
    """``splits`` (files: discovered and not finished) or ``offsets`` (Kafka: not yet cut)."""

    def to_json(self) -> dict[str, Any]:
        """JSON form for the endpoint and the job status."""
        return {
            "bounded": self.bounded,
            "discovery_complete": self.discovery_complete,
            "splits_total": self.splits_total,
            "splits_discovered": self.splits_discovered,
            "splits_pending": self.splits_pending,
            "splits_assigned": self.splits_assigned,
            "splits_finished": self.splits_finished,
            "fully_finished": self.fully_finished,
            "backlog": self.backlog,
            "consumed": self.consumed,
            "backlog_unit": self.backlog_unit,
        }


@runtime_checkable
class ReportsProgress(Protocol):
    """A coordinator that can say how far its source got."""

    def progress(self) -> CoordinatorProgress:
        """Current figures; called on the coordinator thread."""
        ...
