"""The base of the file and range enumerators: the coordinator contract, failover, controls.

The ledger (``ledger``) says where every split is; the contract moves splits on failover:

- ``execution_attempt_failed(s, a)``: the splits ``a`` holds go back to the pool at once;
- ``subtask_reset(s, c)`` rolls ``s`` back to checkpoint ``c``: splits assigned to it after ``c``
  are pending again, and so are splits it finished after ``c`` (their output was rolled back
  too), except those that ``c`` recorded as assigned to ``s``, which become orphans of ``s``
  again. ``c = NO_CHECKPOINT`` (batch: the task re-runs from scratch) returns everything ``s``
  was assigned, finished or not, to the pool;
- ``reset_to_checkpoint(c, data)`` restores the ledger (``snapshot``); assigned splits become
  orphans of their subtask, handed out as the ledger describes.

Controls for the lifecycle of a streaming runtime, called by the driver through
``CoordinatorHost.call`` (never by readers):

- ``suspend()``/``resume()``: while suspended every request gets an empty ``AddSplits`` (counted
  in ``held_requests``), so a stop lands on a batch boundary; only a sentinel split still goes out.
  Suspension is runtime state, not part of a snapshot, and a global reset clears it.
- ``emit_sentinel(split)``: a ``SentinelSplit`` that the next request gets (alone, when suspended),
  so event time can be moved to the end for a drain. Unfinished sentinels stay out of snapshots.
- ``adopt(subtask, attempt, splits)``: a planner that writes the splits of a batch into its own
  log (Spark's offsets log) may re-run that batch after a restart without asking again; adopting
  hands exactly those splits to the new attempt, wherever the ledger has them (pending, orphaned,
  unknown because discovered after the snapshot), so they are not given to anyone else.
- ``SplitSkipped`` from a reader records an unreadable split and why, for the job status.

A subclass implements the hooks of all three layers: the cursor and discovery hooks of the ledger
and of the snapshot, and the discovery start and adoption hooks here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from finishable.coordinator.contract import (
    NO_CHECKPOINT,
    CoordinatorContext,
    OperatorCoordinator,
    SubtaskGateway,
)
from finishable.coordinator.enumerator.state import EnumeratorState
from finishable.coordinator.errors import CoordinatorRejection
from finishable.coordinator.events import (
    OperatorEvent,
    RequestSplit,
    SplitFinished,
    SplitSkipped,
)
from finishable.coordinator.splits import SentinelSplit, Split

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AdoptResult:
    """What ``adopt`` did with each split it was given."""

    adopted: tuple[str, ...]
    """Now held by the attempt (including those it already held)."""
    already_finished: tuple[str, ...]
    """Finished before: the caller must not report them again or expect them to be read."""
    added: tuple[str, ...]
    """Unknown to the ledger (discovered after its snapshot) and added by the adoption."""


@dataclass(frozen=True, slots=True)
class SourceControlState:
    """The figures a runtime steers a source's lifecycle by (see the module docstring)."""

    suspended: bool
    held_requests: int
    """Requests answered with nothing because of the suspension, since the last ``suspend()``."""
    requests: int
    """Split requests handled since this coordinator instance was created."""
    sentinel_pending: bool
    """A sentinel split was emitted and is not finished yet."""
    sentinels_finished: tuple[str, ...]
    bounded: bool
    discovery_complete: bool
    fully_finished: bool
    """Bounded and every real split finished (sentinels do not count): the source is exhausted."""
    skipped: dict[str, str]
    """Split id to the reason a reader skipped it."""


class SplitEnumerator(EnumeratorState, OperatorCoordinator):
    """Base of the file and range enumerators: the ledger, the events and the snapshot."""

    forgets_finished_splits: ClassVar[bool] = False
    """Whether the cursor alone says what was cut, so finished splits may be forgotten."""

    def __init__(self, context: CoordinatorContext, *, bounded: bool) -> None:
        self._context = context
        self._bounded = bounded
        self._started = False
        self._closed = False
        self._gateways: dict[tuple[int, int], SubtaskGateway] = {}
        self._suspended = False
        self._held_requests = 0
        self._requests = 0
        self._last_complete: int | None = None
        self._clear_ledger()

    # ------------------------------------------------------------------ hooks for subclasses

    def _start_discovery(self) -> None:
        """Begin discovery when the coordinator starts (schedule I/O through the context)."""

    def _discovered_with(self, split: Split) -> list[Split]:
        """The splits to add when ``split`` is adopted but unknown (it must be among them).

        A subclass adds what discovery would have found with it (the other byte ranges of the
        file), so that later discovery neither misses nor repeats anything.
        """
        return [split]

    # ------------------------------------------------------------------ the contract

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._start_discovery()

    def close(self) -> None:
        self._closed = True
        self._gateways.clear()

    def supports_batch_snapshot(self) -> bool:
        return True

    def execution_attempt_ready(self, subtask: int, attempt: int, gateway: SubtaskGateway) -> None:
        self._gateways[(subtask, attempt)] = gateway

    def execution_attempt_failed(
        self, subtask: int, attempt: int, reason: BaseException | None
    ) -> None:
        self._gateways.pop((subtask, attempt), None)
        returned = self._by_attempt.pop((subtask, attempt), set())
        for split_id in returned:
            del self._holder[split_id]
            self._make_pending(split_id)
        if returned:
            logger.info(
                "%s: %d split(s) of failed subtask %d attempt %d back to the pool",
                self._context.name,
                len(returned),
                subtask,
                attempt,
            )

    def subtask_reset(self, subtask: int, checkpoint_id: int) -> None:
        to_pool: list[str] = []
        to_orphan: list[tuple[str, int]] = []
        for key in [key for key in self._by_attempt if key[0] == subtask]:
            # Only without a host: the host resets a subtask after all its attempts failed.
            self._gateways.pop(key, None)
            for split_id in self._by_attempt.pop(key):
                _, _, assigned_epoch = self._holder.pop(split_id)
                self._holder[split_id] = (subtask, None, assigned_epoch)
                self._orphans.setdefault(subtask, set()).add(split_id)
        for split_id in list(self._orphans.get(subtask, ())):
            _, _, assigned_epoch = self._holder[split_id]
            if assigned_epoch >= checkpoint_id:
                self._drop_orphan(subtask, split_id)
                del self._holder[split_id]
                to_pool.append(split_id)
        for split_id in list(self._finished_by_subtask.get(subtask, ())):
            _, assigned_epoch, finished_epoch = self._finished[split_id]
            if finished_epoch < checkpoint_id:
                continue
            del self._finished[split_id]
            self._finished_by_subtask[subtask].discard(split_id)
            if assigned_epoch >= checkpoint_id:
                to_pool.append(split_id)
            else:
                to_orphan.append((split_id, assigned_epoch))
        for split_id in to_pool:
            self._make_pending(split_id)
        for split_id, assigned_epoch in to_orphan:
            self._holder[split_id] = (subtask, None, assigned_epoch)
            self._orphans.setdefault(subtask, set()).add(split_id)
        logger.info(
            "%s: subtask %d reset to checkpoint %d: %d split(s) pending again, %d kept for it",
            self._context.name,
            subtask,
            checkpoint_id,
            len(to_pool),
            len(to_orphan),
        )

    def handle_event_from_operator(self, subtask: int, attempt: int, event: OperatorEvent) -> None:
        gateway = self._gateways.get((subtask, attempt))
        if gateway is None:
            raise CoordinatorRejection(
                self._context.name,
                "the enumerator has no gateway for this attempt",
                subtask=subtask,
                attempt=attempt,
            )
        if isinstance(event, RequestSplit):
            gateway.send_event(self._assign(subtask, attempt, event.max_splits))
        elif isinstance(event, SplitFinished):
            self._finish(subtask, attempt, event.split_ids)
        elif isinstance(event, SplitSkipped):
            self._record_skipped(subtask, attempt, event)
        else:
            raise CoordinatorRejection(
                self._context.name,
                f"a split enumerator does not handle {event.type_name}",
                subtask=subtask,
                attempt=attempt,
            )

    def checkpoint_coordinator(self, checkpoint_id: int) -> bytes:
        data = self._snapshot(checkpoint_id)
        if checkpoint_id != NO_CHECKPOINT:
            self._epoch = max(self._epoch, checkpoint_id)
        return data

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Forget, if the source may, the splits finished before the previous completed
        checkpoint: the last two checkpoints' finishes stay, so the batch a restart replays
        (the one after its checkpoint) is never among the forgotten. A subtask is only ever
        reset to the latest completed checkpoint or a later one, as Flink's scheduler does, so
        no reset needs a forgotten finish back."""
        logger.debug("%s: checkpoint %d complete", self._context.name, checkpoint_id)
        previous = self._last_complete
        if previous is not None and checkpoint_id <= previous:
            return  # a late notification of an older checkpoint
        self._last_complete = checkpoint_id
        if self.forgets_finished_splits and previous is not None:
            forgotten = self._forget_finished(previous)
            if forgotten:
                logger.debug("%s: %d finished split(s) forgotten", self._context.name, forgotten)

    def reset_to_checkpoint(self, checkpoint_id: int, data: bytes | None) -> None:
        self._gateways.clear()
        self._last_complete = None
        self._clear_ledger()
        if data is None:
            self._epoch = checkpoint_id
            logger.info("%s: reset to an empty state", self._context.name)
        else:
            self._restore(checkpoint_id, data)
        self._after_restore()

    def _after_restore(self) -> None:
        """Called after every ``reset_to_checkpoint`` (subclasses re-anchor clocks)."""

    # ------------------------------------------------------------------ lifecycle controls

    @property
    def suspended(self) -> bool:
        """Whether requests are held (see ``suspend``)."""
        return self._suspended

    def suspend(self) -> None:
        """Assign nothing (but a sentinel) until ``resume``; restarts the held-request count."""
        self._suspended = True
        self._held_requests = 0
        logger.info("%s: suspended: no new splits are assigned", self._context.name)

    def begin_drain(self) -> None:
        """Suspend for a stop with drain: most sources stop at the next batch boundary; one
        whose input has a knowable end of the moment (Kafka's offsets) reads up to it first."""
        self.suspend()

    def resume(self) -> None:
        """Assign splits again."""
        if self._suspended:
            logger.info("%s: resumed", self._context.name)
        self._suspended = False

    def emit_sentinel(self, split: SentinelSplit) -> bool:
        """Queue ``split`` for the next request; ``False`` if it is known already (a repeat)."""
        if split.split_id in self._splits:
            return False
        self._add_discovered([split])
        logger.info(
            "%s: sentinel split %s emitted%s",
            self._context.name,
            split.split_id,
            " (suspended: it goes out alone)" if self._suspended else "",
        )
        return True

    def control_state(self) -> SourceControlState:
        """The lifecycle figures (call on the coordinator thread)."""
        finished_sentinels = tuple(
            split_id for split_id in self._sentinels if split_id in self._finished
        )
        return SourceControlState(
            suspended=self._suspended,
            held_requests=self._held_requests,
            requests=self._requests,
            sentinel_pending=len(finished_sentinels) < len(self._sentinels),
            sentinels_finished=finished_sentinels,
            bounded=self._bounded,
            discovery_complete=self._discovery_complete,
            fully_finished=self.fully_finished,
            skipped=dict(self._skipped),
        )

    def adopt(self, subtask: int, attempt: int, splits: Sequence[Split]) -> AdoptResult:
        """Hand ``splits`` to the ready attempt as its own, whatever state the ledger has them in.

        For a planner that replays a batch from its own log after a restart (see the module
        docstring). Splits held by another live attempt are refused (nothing changes); finished
        ones are left alone and reported back.
        """
        key = (subtask, attempt)
        if key not in self._gateways:
            raise CoordinatorRejection(
                self._context.name,
                "cannot adopt splits for an attempt that is not ready",
                subtask=subtask,
                attempt=attempt,
            )
        for split in splits:
            holding = self._holder.get(split.split_id)
            if holding is not None and holding[1] is not None and holding[:2] != key:
                raise CoordinatorRejection(
                    self._context.name,
                    f"cannot adopt split {split.split_id!r}: subtask {holding[0]} attempt "
                    f"{holding[1]} holds it",
                    subtask=subtask,
                    attempt=attempt,
                )
        added: list[str] = []
        for split in splits:
            if split.split_id not in self._splits:
                before = len(self._splits)
                self._add_discovered(self._discovered_with(split))
                if split.split_id not in self._splits:  # a subclass hook that forgot it
                    self._add_discovered([split])
                added.append(split.split_id)
                logger.info(
                    "%s: adopted split %s was unknown; %d split(s) added",
                    self._context.name,
                    split.split_id,
                    len(self._splits) - before,
                )
        self._take_pending({split.split_id for split in splits})
        adopted: list[str] = []
        finished: list[str] = []
        seen: set[str] = set()
        held = self._by_attempt.setdefault(key, set())
        for split in splits:
            split_id = split.split_id
            if split_id in seen:
                continue
            seen.add(split_id)
            if split_id in self._finished:
                finished.append(split_id)
                continue
            holding = self._holder.get(split_id)
            epoch = self._epoch
            if holding is not None:
                if holding[1] is None:
                    self._drop_orphan(holding[0], split_id)
                epoch = holding[2]
            self._holder[split_id] = (subtask, attempt, epoch)
            held.add(split_id)
            adopted.append(split_id)
        if not held:
            del self._by_attempt[key]
        if finished:
            logger.warning(
                "%s: %d adopted split(s) were already finished, such as %s",
                self._context.name,
                len(finished),
                finished[0],
            )
        return AdoptResult(tuple(adopted), tuple(finished), tuple(added))

    def skipped(self) -> dict[str, str]:
        """Splits a reader skipped as unreadable, with the reason."""
        return dict(self._skipped)

    def _record_skipped(self, subtask: int, attempt: int, event: SplitSkipped) -> None:
        if event.split_id not in self._splits:
            raise CoordinatorRejection(
                self._context.name,
                f"cannot record split {event.split_id!r} as skipped: it is unknown",
                subtask=subtask,
                attempt=attempt,
            )
        if event.split_id not in self._skipped:
            logger.warning(
                "%s: split %s skipped as unreadable: %s",
                self._context.name,
                event.split_id,
                event.reason,
            )
        self._skipped[event.split_id] = event.reason
