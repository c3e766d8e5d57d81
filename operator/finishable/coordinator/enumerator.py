"""The split bookkeeping every enumerator shares: lazy assignment, failover, snapshot and restore.

Readers keep no state of their own (a Spark task is re-run from scratch), so this ledger is the
only record of who holds which split. Every split is in exactly one state:

- *pending*: anyone may get it, lowest discovery order first (so re-planning is deterministic);
- *assigned* to subtask ``s``, held by its live attempt ``a``, or *orphaned* (no attempt) after a
  restore, because the checkpoint recorded it as ``s``'s;
- *finished* by ``s``: reported durably processed, never read again.

Each assignment and finish is tagged with its *epoch*: the id of the last checkpoint taken before
it (``NO_CHECKPOINT`` if none), so "after checkpoint c" means "epoch >= c". Failover:

- ``execution_attempt_failed(s, a)``: the splits ``a`` holds go back to the pool at once;
- ``subtask_reset(s, c)`` rolls ``s`` back to checkpoint ``c``: splits assigned to it after ``c``
  are pending again, and so are splits it finished after ``c`` (their output was rolled back
  too), except those that ``c`` recorded as assigned to ``s``, which become orphans of ``s``
  again. ``c = NO_CHECKPOINT`` (batch: the task re-runs from scratch) returns everything ``s``
  was assigned, finished or not, to the pool;
- ``reset_to_checkpoint(c, data)`` restores the ledger; assigned splits become orphans of their
  subtask and go to its next attempt's first request, all at once (Flink restores them from the
  reader's state). If the pool is empty, other subtasks take orphans too, so a job restored with
  fewer subtasks still finishes.

A request is answered with ``AddSplits`` (possibly empty: 'nothing yet, ask again') or, for a
bounded source with nothing pending, no orphans and discovery complete, ``NoMoreSplits``.

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
"""

from __future__ import annotations

import heapq
import json
import logging
from abc import abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from finishable.coordinator._json import (
    JsonFieldError,
    as_object,
    get_bool,
    get_int,
    get_list,
    get_str,
)
from finishable.coordinator.contract import (
    NO_CHECKPOINT,
    CoordinatorContext,
    CoordinatorProgress,
    OperatorCoordinator,
    SubtaskGateway,
)
from finishable.coordinator.errors import CoordinatorRejection, SnapshotFormatError
from finishable.coordinator.events import (
    AddSplits,
    NoMoreSplits,
    OperatorEvent,
    RequestSplit,
    SplitFinished,
    SplitSkipped,
)
from finishable.coordinator.splits import SentinelSplit, Split, split_from_json

logger = logging.getLogger(__name__)

SNAPSHOT_FORMAT = "finishable.split-enumerator"
SNAPSHOT_VERSION = 1

_Holding = tuple[int, int | None, int]
"""(subtask, live attempt or None for an orphan, assignment epoch)"""

_Finish = tuple[int, int, int]
"""(subtask, assignment epoch, finish epoch)"""


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


@dataclass(frozen=True, slots=True)
class AssignmentView:
    """A consistent copy of the ledger, for tests, diagnostics and status."""

    pending: frozenset[str]
    held: dict[tuple[int, int], frozenset[str]]
    """Splits held by live attempts, by (subtask, attempt)."""
    orphaned: dict[int, frozenset[str]]
    """Splits assigned to a subtask that has no attempt holding them (after a restore)."""
    finished: dict[str, int]
    """Finished split ids and the subtask that finished each."""
    discovered: tuple[str, ...]
    """Every discovered split id, in discovery order."""


class SplitEnumerator(OperatorCoordinator):
    """Base of the file and range enumerators: the ledger, the events and the snapshot."""

    source_kind: ClassVar[str]

    _splits: dict[str, Split]
    _seq: dict[str, int]
    _next_seq: int
    _pending: set[str]
    _pending_heap: list[tuple[int, str]]
    _holder: dict[str, _Holding]
    _by_attempt: dict[tuple[int, int], set[str]]
    _orphans: dict[int, set[str]]
    _finished: dict[str, _Finish]
    _finished_by_subtask: dict[int, set[str]]
    _epoch: int
    _discovery_complete: bool
    _sentinels: set[str]
    _skipped: dict[str, str]

    def __init__(self, context: CoordinatorContext, *, bounded: bool) -> None:
        self._context = context
        self._bounded = bounded
        self._started = False
        self._closed = False
        self._gateways: dict[tuple[int, int], SubtaskGateway] = {}
        self._suspended = False
        self._held_requests = 0
        self._requests = 0
        self._clear_ledger()

    # ------------------------------------------------------------------ hooks for subclasses

    @abstractmethod
    def _source_identity(self) -> dict[str, Any]:
        """What makes two enumerators read the same input; a snapshot of another is refused."""

    @abstractmethod
    def _cursor_json(self) -> dict[str, Any]:
        """The discovery cursor, as stored in the snapshot."""

    @abstractmethod
    def _restore_cursor(self, cursor: dict[str, Any]) -> None:
        """Restore the cursor; raise ``JsonFieldError`` naming a bad field."""

    @abstractmethod
    def _reset_cursor(self) -> None:
        """Forget all discovery progress (an empty, new state)."""

    def _start_discovery(self) -> None:
        """Begin discovery when the coordinator starts (schedule I/O through the context)."""

    def _discover_on_demand(self, wanted: int) -> None:
        """Discover up to about ``wanted`` more splits now, if that needs no I/O."""

    def _splits_total_hint(self) -> int | None:
        """The number of splits the source will have, when known before discovery ends."""
        return self._real_split_count() if self._discovery_complete else None

    def _discovered_with(self, split: Split) -> list[Split]:
        """The splits to add when ``split`` is adopted but unknown (it must be among them).

        A subclass adds what discovery would have found with it (the other byte ranges of the
        file), so that later discovery neither misses nor repeats anything.
        """
        return [split]

    # ------------------------------------------------------------------ helpers for subclasses

    @property
    def context(self) -> CoordinatorContext:
        """The host's context (async I/O, job failure)."""
        return self._context

    @property
    def bounded(self) -> bool:
        """Whether the source ends."""
        return self._bounded

    @property
    def discovery_complete(self) -> bool:
        """Whether every split of a bounded source is known."""
        return self._discovery_complete

    def _add_discovered(self, splits: Iterable[Split]) -> int:
        """Add new splits as pending, in order, skipping known ids; returns how many were new."""
        added = 0
        for split in splits:
            split_id = split.split_id
            if split_id in self._splits:
                continue
            self._splits[split_id] = split
            seq = self._next_seq
            self._next_seq += 1
            self._seq[split_id] = seq
            self._pending.add(split_id)
            heapq.heappush(self._pending_heap, (seq, split_id))
            if isinstance(split, SentinelSplit):
                self._sentinels.add(split_id)
            added += 1
        return added

    def _mark_discovery_complete(self) -> None:
        if not self._bounded:
            raise RuntimeError("an unbounded source never completes discovery")
        self._discovery_complete = True

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
        logger.debug("%s: checkpoint %d complete", self._context.name, checkpoint_id)

    def reset_to_checkpoint(self, checkpoint_id: int, data: bytes | None) -> None:
        self._gateways.clear()
        self._clear_ledger()
        if data is None:
            self._epoch = checkpoint_id
            logger.info("%s: reset to an empty state", self._context.name)
        else:
            self._restore(checkpoint_id, data)
        self._after_restore()

    def _after_restore(self) -> None:
        """Called after every ``reset_to_checkpoint`` (subclasses re-anchor clocks)."""

    # ------------------------------------------------------------------ progress and views

    def progress(self) -> CoordinatorProgress:
        """Split counts for the job status."""
        sentinels = self._sentinels
        return CoordinatorProgress(
            bounded=self._bounded,
            discovery_complete=self._discovery_complete,
            splits_total=self._splits_total_hint() if self._bounded else None,
            splits_discovered=self._real_split_count(),
            splits_pending=len(self._pending - sentinels),
            splits_assigned=len(self._holder.keys() - sentinels),
            splits_finished=len(self._finished.keys() - sentinels),
            fully_finished=self.fully_finished,
        )

    @property
    def fully_finished(self) -> bool:
        """Bounded, every split discovered, and every one finished: never read again.

        Sentinel splits do not count: they are not input.
        """
        return (
            self._bounded
            and self._discovery_complete
            and len(self._finished.keys() - self._sentinels) == self._real_split_count()
        )

    def _real_split_count(self) -> int:
        return len(self._splits) - len(self._sentinels)

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
        wanted = {split.split_id for split in splits}
        take_pending = wanted & self._pending
        if take_pending:
            self._pending -= take_pending
            self._pending_heap = [e for e in self._pending_heap if e[1] not in take_pending]
            heapq.heapify(self._pending_heap)
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

    def assignment_view(self) -> AssignmentView:
        """A copy of the ledger (call on the coordinator thread)."""
        return AssignmentView(
            pending=frozenset(self._pending),
            held={key: frozenset(ids) for key, ids in self._by_attempt.items() if ids},
            orphaned={s: frozenset(ids) for s, ids in self._orphans.items() if ids},
            finished={split_id: f[0] for split_id, f in self._finished.items()},
            discovered=tuple(self._splits),
        )

    def consistency_problems(self) -> list[str]:
        """Disagreements between the ledger's indexes (tests and diagnostics; empty when sound)."""
        problems: list[str] = []
        heap_ids = {split_id for _, split_id in self._pending_heap}
        if heap_ids != self._pending or len(self._pending_heap) != len(self._pending):
            problems.append("the pending heap and the pending set differ")
        places = [self._pending, set(self._holder), set(self._finished)]
        if sum(map(len, places)) != len(self._splits) or set().union(*places) != set(self._splits):
            problems.append("splits are not in exactly one state")
        indexed: dict[str, tuple[int, int | None]] = {
            split_id: (subtask, attempt)
            for (subtask, attempt), ids in self._by_attempt.items()
            for split_id in ids
        }
        indexed.update(
            (split_id, (subtask, None))
            for subtask, ids in self._orphans.items()
            for split_id in ids
        )
        if indexed != {split_id: (h[0], h[1]) for split_id, h in self._holder.items()}:
            problems.append("holders disagree with the by-attempt and orphan indexes")
        by_subtask = {
            split_id
            for subtask, ids in self._finished_by_subtask.items()
            for split_id in ids
            if self._finished.get(split_id, (None,))[0] == subtask
        }
        if by_subtask != set(self._finished):
            problems.append("finished splits disagree with their by-subtask index")
        return problems

    def split(self, split_id: str) -> Split:
        """A discovered split by id."""
        return self._splits[split_id]

    # ------------------------------------------------------------------ assignment

    def _assign(self, subtask: int, attempt: int, max_splits: int) -> OperatorEvent:
        key = (subtask, attempt)
        self._requests += 1
        if self._suspended:
            return self._assign_suspended(key)
        own = self._orphans.pop(subtask, None)
        if own:
            # The subtask's share of the restored checkpoint, all at once, as Flink restores it.
            chosen = sorted(own, key=self._seq.__getitem__)
            held = self._by_attempt.setdefault(key, set())
            for split_id in chosen:
                _, _, assigned_epoch = self._holder[split_id]
                self._holder[split_id] = (subtask, attempt, assigned_epoch)
                held.add(split_id)
            return AddSplits(tuple(self._splits[split_id] for split_id in chosen))
        if len(self._pending) < max_splits and not self._discovery_complete:
            self._discover_on_demand(max_splits - len(self._pending))
        chosen = []
        while self._pending_heap and len(chosen) < max_splits:
            _, split_id = heapq.heappop(self._pending_heap)
            self._pending.discard(split_id)
            chosen.append(split_id)
        if not chosen and self._orphans:
            # Nothing pending: take other subtasks' orphans, which nobody reads right now.
            for owner in sorted(self._orphans):
                orphans = self._orphans[owner]
                for split_id in sorted(orphans, key=self._seq.__getitem__):
                    if len(chosen) >= max_splits:
                        break
                    self._drop_orphan(owner, split_id)
                    del self._holder[split_id]
                    chosen.append(split_id)
                if len(chosen) >= max_splits:
                    break
        if not chosen:
            if self._bounded and self._discovery_complete and not self._orphans:
                return NoMoreSplits()
            return AddSplits(())
        held = self._by_attempt.setdefault(key, set())
        for split_id in chosen:
            self._holder[split_id] = (subtask, attempt, self._epoch)
            held.add(split_id)
        return AddSplits(tuple(self._splits[split_id] for split_id in chosen))

    def _assign_suspended(self, key: tuple[int, int]) -> OperatorEvent:
        """Only pending sentinels go out while suspended, so they make a batch of their own."""
        sentinels = sorted(self._sentinels & self._pending, key=self._seq.__getitem__)
        if not sentinels:
            self._held_requests += 1
            return AddSplits(())
        chosen = set(sentinels)
        self._pending -= chosen
        self._pending_heap = [e for e in self._pending_heap if e[1] not in chosen]
        heapq.heapify(self._pending_heap)
        held = self._by_attempt.setdefault(key, set())
        for split_id in sentinels:
            self._holder[split_id] = (key[0], key[1], self._epoch)
            held.add(split_id)
        return AddSplits(tuple(self._splits[split_id] for split_id in sentinels))

    def _finish(self, subtask: int, attempt: int, split_ids: tuple[str, ...]) -> None:
        key = (subtask, attempt)
        fresh: list[str] = []
        for split_id in split_ids:
            holding = self._holder.get(split_id)
            if holding is not None and holding[0] == subtask and holding[1] == attempt:
                fresh.append(split_id)
                continue
            finish = self._finished.get(split_id)
            if finish is not None and finish[0] == subtask:
                continue  # reported twice: harmless
            if split_id not in self._splits:
                why = "is unknown"
            elif holding is not None:
                owner = "an orphan" if holding[1] is None else f"attempt {holding[1]}"
                why = f"is held by subtask {holding[0]} {owner}"
            elif finish is not None:
                why = f"was finished by subtask {finish[0]}"
            else:
                why = "is pending (not assigned to this attempt)"
            raise CoordinatorRejection(
                self._context.name,
                f"cannot finish split {split_id!r}: it {why}",
                subtask=subtask,
                attempt=attempt,
            )
        held = self._by_attempt.get(key)
        for split_id in fresh:
            if split_id in self._finished:
                continue  # listed twice in one event
            _, _, assigned_epoch = self._holder.pop(split_id)
            if held is not None:
                held.discard(split_id)
            self._finished[split_id] = (subtask, assigned_epoch, self._epoch)
            self._finished_by_subtask.setdefault(subtask, set()).add(split_id)

    def _make_pending(self, split_id: str) -> None:
        self._pending.add(split_id)
        heapq.heappush(self._pending_heap, (self._seq[split_id], split_id))

    def _drop_orphan(self, subtask: int, split_id: str) -> None:
        orphans = self._orphans[subtask]
        orphans.discard(split_id)
        if not orphans:
            del self._orphans[subtask]

    def _clear_ledger(self) -> None:
        self._splits = {}
        self._seq = {}
        self._next_seq = 0
        self._pending = set()
        self._pending_heap = []
        self._holder = {}
        self._by_attempt = {}
        self._orphans = {}
        self._finished = {}
        self._finished_by_subtask = {}
        self._epoch = NO_CHECKPOINT
        self._discovery_complete = False
        self._sentinels = set()
        self._skipped = {}
        self._reset_cursor()

    # ------------------------------------------------------------------ snapshot format

    def _snapshot(self, checkpoint_id: int) -> bytes:
        # An unfinished sentinel belongs to a drain in progress, not to the source's state.
        left_out = {split_id for split_id in self._sentinels if split_id not in self._finished}
        assigned: dict[str, list[list[Any]]] = {}
        for split_id in self._splits:
            if split_id in left_out:
                continue
            holding = self._holder.get(split_id)
            if holding is not None:
                assigned.setdefault(str(holding[0]), []).append([split_id, holding[2]])
        document = {
            "format": SNAPSHOT_FORMAT,
            "version": SNAPSHOT_VERSION,
            "source": {"kind": self.source_kind, **self._source_identity()},
            "checkpoint_id": checkpoint_id,
            "epoch": self._epoch,
            "bounded": self._bounded,
            "discovery_complete": self._discovery_complete,
            "fully_finished": self.fully_finished,
            "cursor": self._cursor_json(),
            "splits": [
                split.to_json()
                for split_id, split in self._splits.items()
                if split_id not in left_out
            ],
            "pending": sorted(self._pending - left_out, key=self._seq.__getitem__),
            "assigned": dict(sorted(assigned.items(), key=lambda item: int(item[0]))),
            "finished": [
                [split_id, *self._finished[split_id]]
                for split_id in self._splits
                if split_id in self._finished
            ],
        }
        if self._skipped:
            document["skipped"] = dict(sorted(self._skipped.items()))
        return json.dumps(document, separators=(",", ":")).encode("utf-8")

    def _restore(self, checkpoint_id: int, data: bytes) -> None:
        try:
            document = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise SnapshotFormatError(f"coordinator snapshot is not JSON: {error}") from None
        try:
            self._restore_document(checkpoint_id, as_object(document, "snapshot"))
        except JsonFieldError as error:
            self._clear_ledger()
            raise SnapshotFormatError(f"coordinator snapshot: {error}") from None
        except SnapshotFormatError:
            self._clear_ledger()
            raise

    def _restore_document(self, checkpoint_id: int, doc: dict[str, Any]) -> None:
        fmt = get_str(doc, "format", "snapshot")
        version = get_int(doc, "version", "snapshot")
        if fmt != SNAPSHOT_FORMAT or version != SNAPSHOT_VERSION:
            raise SnapshotFormatError(
                f"snapshot has format {fmt!r} version {version}; this enumerator reads "
                f"{SNAPSHOT_FORMAT!r} version {SNAPSHOT_VERSION}"
            )
        source = as_object(doc.get("source"), "snapshot.source")
        expected = {"kind": self.source_kind, **self._source_identity()}
        if source != expected:
            raise SnapshotFormatError(
                f"the snapshot belongs to source {json.dumps(source, sort_keys=True)}, this "
                f"enumerator reads {json.dumps(expected, sort_keys=True)}"
            )
        for index, item in enumerate(get_list(doc, "splits", "snapshot")):
            try:
                split = split_from_json(item, f"snapshot.splits[{index}]")
            except ValueError as error:
                raise SnapshotFormatError(str(error)) from None
            if split.split_id in self._splits:
                raise SnapshotFormatError(f"snapshot.splits[{index}]: duplicate split")
            self._splits[split.split_id] = split
            self._seq[split.split_id] = index
            if isinstance(split, SentinelSplit):
                self._sentinels.add(split.split_id)
        self._next_seq = len(self._splits)
        placed: set[str] = set()

        def place(split_id: object, where: str) -> str:
            if not isinstance(split_id, str) or split_id not in self._splits:
                raise SnapshotFormatError(f"{where}: unknown split id {split_id!r}")
            if split_id in placed:
                raise SnapshotFormatError(f"{where}: split {split_id!r} is in two states")
            placed.add(split_id)
            return split_id

        def integer(value: object, where: str) -> int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise SnapshotFormatError(f"{where}: expected an integer, got {value!r}")
            return value

        for index, split_id in enumerate(get_list(doc, "pending", "snapshot")):
            self._make_pending(place(split_id, f"snapshot.pending[{index}]"))
        assigned = as_object(doc.get("assigned", {}), "snapshot.assigned")
        for key, entries in assigned.items():
            try:
                subtask = int(key)
            except ValueError:
                raise SnapshotFormatError(f"snapshot.assigned: {key!r} is no subtask") from None
            if not isinstance(entries, list):
                raise SnapshotFormatError(f"snapshot.assigned[{key}]: expected an array")
            for index, entry in enumerate(entries):
                where = f"snapshot.assigned[{key}][{index}]"
                if not isinstance(entry, list) or len(entry) != 2:
                    raise SnapshotFormatError(f"{where}: expected [split id, epoch]")
                split_id = place(entry[0], where)
                self._holder[split_id] = (subtask, None, integer(entry[1], where))
                self._orphans.setdefault(subtask, set()).add(split_id)
        for index, entry in enumerate(get_list(doc, "finished", "snapshot")):
            where = f"snapshot.finished[{index}]"
            if not isinstance(entry, list) or len(entry) != 4:
                raise SnapshotFormatError(
                    f"{where}: expected [split id, subtask, assigned epoch, finished epoch]"
                )
            split_id = place(entry[0], where)
            subtask = integer(entry[1], where)
            self._finished[split_id] = (
                subtask,
                integer(entry[2], where),
                integer(entry[3], where),
            )
            self._finished_by_subtask.setdefault(subtask, set()).add(split_id)
        skipped = as_object(doc.get("skipped", {}), "snapshot.skipped")
        for split_id, reason in skipped.items():
            if split_id not in self._splits or not isinstance(reason, str):
                raise SnapshotFormatError(
                    f"snapshot.skipped[{split_id!r}]: expected a known split id and a reason"
                )
            self._skipped[split_id] = reason
        missing = [split_id for split_id in self._splits if split_id not in placed]
        if missing:
            raise SnapshotFormatError(
                f"snapshot: {len(missing)} split(s) in no state, such as {missing[0]!r}"
            )
        bounded = get_bool(doc, "bounded", "snapshot")
        if bounded != self._bounded:
            logger.warning(
                "%s: the snapshot's source was %s, this one is %s",
                self._context.name,
                "bounded" if bounded else "unbounded",
                "bounded" if self._bounded else "unbounded",
            )
        self._discovery_complete = self._bounded and get_bool(doc, "discovery_complete", "snapshot")
        self._restore_cursor(as_object(doc.get("cursor"), "snapshot.cursor"))
        self._epoch = max(checkpoint_id, get_int(doc, "epoch", "snapshot"))
        if get_bool(doc, "fully_finished", "snapshot") and not self.fully_finished:
            logger.warning(
                "%s: the snapshot says fully finished but its splits disagree", self._context.name
            )
        logger.info(
            "%s: restored checkpoint %d: %d split(s), %d pending, %d assigned, %d finished%s",
            self._context.name,
            checkpoint_id,
            len(self._splits),
            len(self._pending),
            len(self._holder),
            len(self._finished),
            ", fully finished" if self.fully_finished else "",
        )
