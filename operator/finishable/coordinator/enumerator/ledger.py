"""The ledger of a split enumerator: where every split is, and the lazy assignment that moves it.

Readers keep no state of their own (a Spark task is re-run from scratch), so this ledger is the
only record of who holds which split. Every split is in exactly one state:

- *pending*: anyone may get it, lowest discovery order first (so re-planning is deterministic);
- *assigned* to subtask ``s``, held by its live attempt ``a``, or *orphaned* (no attempt) after a
  restore, because the checkpoint recorded it as ``s``'s;
- *finished* by ``s``: reported durably processed, never read again.

Each assignment and finish is tagged with its *epoch*: the id of the last checkpoint taken before
it (``NO_CHECKPOINT`` if none), so "after checkpoint c" means "epoch >= c".

A source whose cursor alone says what was cut (Kafka's offsets, a range's next row) *forgets*
finished splits once two completed checkpoints are past their finish (``_forget_finished``): a
stream that runs for weeks keeps the splits of its last batches, not of every batch, and so does
each checkpoint of it. Only their count stays (``forgotten``), for the progress figures. A source
that tells new input from old by the splits it knows (files) keeps them all.

A request is answered with ``AddSplits`` (possibly empty: 'nothing yet, ask again') or, for a
bounded source with nothing pending, no orphans and discovery complete, ``NoMoreSplits``. A
subtask's orphans go to its next attempt's first request, all at once (Flink restores them from
the reader's state); if the pool is empty, other subtasks take orphans too, so a job restored with
fewer subtasks still finishes.
"""

from __future__ import annotations

import heapq
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass

from finishable.coordinator.contract import (
    NO_CHECKPOINT,
    CoordinatorContext,
    CoordinatorProgress,
)
from finishable.coordinator.errors import CoordinatorRejection
from finishable.coordinator.events import AddSplits, NoMoreSplits, OperatorEvent
from finishable.coordinator.splits import FileSplit, SentinelSplit, Split

logger = logging.getLogger(__name__)

_Holding = tuple[int, int | None, int]
"""(subtask, live attempt or None for an orphan, assignment epoch)"""

_Finish = tuple[int, int, int]
"""(subtask, assignment epoch, finish epoch)"""


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


class SplitLedger(ABC):
    """The splits of one source and the state each is in; assignment, finishing and views."""

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
    _forgotten: int
    """Finished splits dropped from the ledger (``_forget_finished``), counted in the progress."""
    # Set by ``SplitEnumerator.__init__``: what the ledger reads of the enumerator around it.
    _context: CoordinatorContext
    _bounded: bool
    _suspended: bool
    _held_requests: int
    _requests: int

    # ------------------------------------------------------------------ hooks for subclasses

    @abstractmethod
    def _reset_cursor(self) -> None:
        """Forget all discovery progress (an empty, new state)."""

    def _discover_on_demand(self, wanted: int) -> None:  # noqa: B027 - an optional hook
        """Discover up to about ``wanted`` more splits now, if that needs no I/O."""

    def _splits_total_hint(self) -> int | None:
        """The number of splits the source will have, when known before discovery ends."""
        return self._real_split_count() if self._discovery_complete else None

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

    # ------------------------------------------------------------------ progress and views

    def progress(self) -> CoordinatorProgress:
        """Split counts for the job status."""
        sentinels = self._sentinels
        unit, backlog, consumed = self.backlog()
        return CoordinatorProgress(
            bounded=self._bounded,
            discovery_complete=self._discovery_complete,
            splits_total=self._splits_total_hint() if self._bounded else None,
            splits_discovered=self._real_split_count(),
            splits_pending=len(self._pending - sentinels),
            splits_assigned=len(self._holder.keys() - sentinels),
            splits_finished=len(self._finished.keys() - sentinels) + self._forgotten,
            fully_finished=self.fully_finished,
            backlog=backlog,
            consumed=consumed,
            backlog_unit=unit,
        )

    def backlog(self) -> tuple[str, int, int]:
        """(unit, input not read yet, input read so far): splits discovered and not finished,
        and splits finished. A source that knows its input finer says so in its own unit."""
        sentinels = self._sentinels
        unread = len(self._pending - sentinels) + len(self._holder.keys() - sentinels)
        return "splits", unread, len(self._finished.keys() - sentinels) + self._forgotten

    @property
    def fully_finished(self) -> bool:
        """Bounded, every split discovered, and every one finished: never read again.

        Sentinel splits do not count: they are not input.
        """
        finished = len(self._finished.keys() - self._sentinels) + self._forgotten
        return self._bounded and self._discovery_complete and finished == self._real_split_count()

    def _real_split_count(self) -> int:
        return len(self._splits) - len(self._sentinels) + self._forgotten

    def _forget_finished(self, before_epoch: int) -> int:
        """Drop the splits finished at an epoch before ``before_epoch`` (sentinels and skipped
        splits stay: the lifecycle and the status read them); how many went."""
        gone = [
            (split_id, finish[0])
            for split_id, finish in self._finished.items()
            if finish[2] < before_epoch
            and split_id not in self._sentinels
            and split_id not in self._skipped
        ]
        for split_id, subtask in gone:
            del self._finished[split_id]
            self._finished_by_subtask[subtask].discard(split_id)
            del self._splits[split_id]
            del self._seq[split_id]
        self._forgotten += len(gone)
        return len(gone)

    def file_urls(self) -> list[str]:
        """The URLs of the files the splits read, once each (ranges and sentinels apart)."""
        return sorted({s.url for s in self._splits.values() if isinstance(s, FileSplit)})

    def input_bytes(self) -> int | None:
        """The bytes the splits cover once all are discovered; None before, or when one is not a
        byte range of a file (a range of rows has no size in bytes)."""
        if not self._discovery_complete:
            return None
        total = 0
        for split_id, split in self._splits.items():
            if split_id in self._sentinels:
                continue
            if not isinstance(split, FileSplit):
                return None
            total += split.length
        return total

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
            return self._assign_suspended(key, max_splits)
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
        return self._give(key, chosen)

    def _give(self, key: tuple[int, int], chosen: list[str]) -> AddSplits:
        """Hand ``chosen`` (taken out of the pending pool) to the attempt ``key``."""
        held = self._by_attempt.setdefault(key, set())
        for split_id in chosen:
            self._holder[split_id] = (key[0], key[1], self._epoch)
            held.add(split_id)
        return AddSplits(tuple(self._splits[split_id] for split_id in chosen))

    def _take_pending_in_order(self, wanted: set[str]) -> list[str]:
        """Take ``wanted`` out of the pending pool, in discovery order."""
        chosen = sorted(wanted & self._pending, key=self._seq.__getitem__)
        self._pending -= set(chosen)
        self._pending_heap = [e for e in self._pending_heap if e[1] not in wanted]
        heapq.heapify(self._pending_heap)
        return chosen

    def _drain_work(self, key: tuple[int, int], max_splits: int) -> OperatorEvent | None:
        """While suspended for a drain: what is still to be read before the sentinel goes out
        (``None``: nothing, the sentinel may go). A source that drains to the input of the moment
        the drain was asked (Kafka's end offsets) hands out its splits up to there."""
        del key, max_splits
        return None

    def _assign_suspended(self, key: tuple[int, int], max_splits: int) -> OperatorEvent:
        """Only pending sentinels go out while suspended, so they make a batch of their own;
        before them, what a drain still has to read (``_drain_work``)."""
        work = self._drain_work(key, max_splits)
        if work is not None:
            return work
        sentinels = self._take_pending_in_order(self._sentinels)
        if not sentinels:
            self._held_requests += 1
            return AddSplits(())
        return self._give(key, sentinels)

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

    def finish_restored(self, subtask: int, split_ids: Iterable[str]) -> bool:
        """Finish, as ``subtask``'s, the splits of output it committed after the snapshot this
        ledger was restored from, whatever state the snapshot has them in (pending, or orphaned
        to any subtask): the job's own log of committed output is the truth, the snapshot only
        saves work. The subtask's other orphans go back to the pool (nothing else will ask for
        them: the subtask does not run again). False, changing nothing, when a split is unknown,
        held by a live attempt or finished by another subtask: then the output cannot be kept.
        """
        wanted = list(dict.fromkeys(split_ids))
        for split_id in wanted:
            holding = self._holder.get(split_id)
            finish = self._finished.get(split_id)
            if (
                split_id not in self._splits
                or (holding is not None and holding[1] is not None)
                or (finish is not None and finish[0] != subtask)
            ):
                return False
        self._take_pending(set(wanted))
        for split_id in wanted:
            if split_id in self._finished:
                continue
            assigned_epoch = self._epoch
            holding = self._holder.pop(split_id, None)
            if holding is not None:
                self._drop_orphan(holding[0], split_id)
                assigned_epoch = holding[2]
            self._finished[split_id] = (subtask, assigned_epoch, self._epoch)
            self._finished_by_subtask.setdefault(subtask, set()).add(split_id)
        for split_id in list(self._orphans.get(subtask, ())):
            self._drop_orphan(subtask, split_id)
            del self._holder[split_id]
            self._make_pending(split_id)
        return True

    def _take_pending(self, split_ids: set[str]) -> None:
        """Take ``split_ids`` out of the pool (those in it), keeping the heap in step."""
        taken = split_ids & self._pending
        if taken:
            self._pending -= taken
            self._pending_heap = [e for e in self._pending_heap if e[1] not in taken]
            heapq.heapify(self._pending_heap)

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
        self._forgotten = 0
        self._reset_cursor()
