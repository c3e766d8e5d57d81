"""Property test: random requests, finishes, failures, checkpoints, resets and restores.

A plain reference model of the split ledger runs beside a real ``CoordinatorHost`` with a
bounded range enumerator. After every step: no split is lost (every split is in exactly one
state), none is held by two live attempts, what each live attempt was handed equals what the
coordinator thinks it holds, and the pending splits (in particular after a subtask reset or a
restore) are exactly the ones the model predicts. Every reply must match the model exactly.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from finishable.coordinator import (
    NO_CHECKPOINT,
    AddSplits,
    CoordinatorHost,
    CoordinatorOrderViolation,
    CoordinatorRejection,
    NoMoreSplits,
    OperatorEvent,
    OrderRule,
    RangeSplit,
    RequestSplit,
    SplitFinished,
)
from finishable.coordinator.enumerator import AssignmentView, SplitEnumerator
from finishable.coordinator.ranges import RangeSplitEnumerator

from ._helpers import TIMEOUT

pytestmark = pytest.mark.quick

SUBTASKS = st.integers(min_value=0, max_value=1)

Key = tuple[int, int]


def split_id(k: int) -> str:
    return f"r-{k}-{k + 1}"


def order(sid: str) -> int:
    return int(sid.split("-")[1])


@dataclass
class Ledger:
    """The reference model: which split is where, with assignment and finish epochs."""

    pending: set[str]
    held: dict[Key, dict[str, int]] = field(default_factory=dict)
    orphans: dict[int, dict[str, int]] = field(default_factory=dict)
    finished: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    epoch: int = NO_CHECKPOINT
    forgotten: set[str] = field(default_factory=set)
    """Finished splits the enumerator forgot (a range's cursor says they were cut)."""

    def assign(self, subtask: int, attempt: int, max_splits: int) -> OperatorEvent:
        mine = self.held.setdefault((subtask, attempt), {})
        own = self.orphans.pop(subtask, None)
        if own:
            mine.update(own)
            return AddSplits(
                tuple(RangeSplit(order(s), order(s) + 1) for s in sorted(own, key=order))
            )
        chosen = sorted(self.pending, key=order)[:max_splits]
        self.pending.difference_update(chosen)
        if not chosen:
            for owner in sorted(self.orphans):
                for sid in sorted(self.orphans[owner], key=order):
                    if len(chosen) < max_splits:
                        chosen.append(sid)
                for sid in chosen:
                    self.orphans[owner].pop(sid, None)
                if not self.orphans[owner]:
                    del self.orphans[owner]
                if len(chosen) >= max_splits:
                    break
        if not chosen:
            return NoMoreSplits()
        for sid in chosen:
            mine[sid] = self.epoch
        return AddSplits(tuple(RangeSplit(order(s), order(s) + 1) for s in chosen))

    def finish(self, key: Key, sids: list[str]) -> None:
        for sid in sids:
            self.finished[sid] = (key[0], self.held[key].pop(sid), self.epoch)

    def forget(self, before_epoch: int) -> None:
        for sid, (_, _, finished) in list(self.finished.items()):
            if finished < before_epoch:
                del self.finished[sid]
                self.forgotten.add(sid)

    def fail(self, key: Key) -> None:
        self.pending.update(self.held.pop(key, {}))

    def subtask_reset(self, subtask: int, checkpoint_id: int) -> None:
        own = self.orphans.get(subtask, {})
        for sid, assigned in list(own.items()):
            if assigned >= checkpoint_id:
                del own[sid]
                self.pending.add(sid)
        for sid, (owner, assigned, finished) in list(self.finished.items()):
            if owner != subtask or finished < checkpoint_id:
                continue
            del self.finished[sid]
            if assigned >= checkpoint_id:
                self.pending.add(sid)
            else:
                self.orphans.setdefault(subtask, {})[sid] = assigned
        if subtask in self.orphans and not self.orphans[subtask]:
            del self.orphans[subtask]

    def restored(self, checkpoint_id: int) -> Ledger:
        """The ledger after restoring a snapshot of this one: held splits become orphans."""
        ledger = copy.deepcopy(self)
        for (subtask, _), sids in ledger.held.items():
            if sids:
                ledger.orphans.setdefault(subtask, {}).update(sids)
        ledger.held = {}
        ledger.epoch = max(checkpoint_id, self.epoch)
        return ledger


class CoordinatorMachine(RuleBasedStateMachine):
    """Drives a real host and the reference model with the same random steps."""

    host: CoordinatorHost

    @initialize(splits=st.integers(min_value=1, max_value=10))
    def setup(self, splits: int) -> None:
        self.all = {split_id(k) for k in range(splits)}
        self.host = CoordinatorHost("prop", RangeSplitEnumerator.provider(end=splits, split_size=1))
        self.host.start().result(TIMEOUT)
        self.model = Ledger(pending=set(self.all))
        self.live: dict[int, set[int]] = {0: set(), 1: set()}
        self.awaiting_reset = {0: False, 1: False}
        self.next_attempt = {0: 0, 1: 0}
        self.beliefs: dict[Key, set[str]] = {}
        self.saved: list[tuple[int, bytes, Ledger]] = []
        self.taken: list[int] = []
        self.next_checkpoint = 1
        self.latest = NO_CHECKPOINT  # the latest checkpoint of the current timeline
        self.completed: int | None = None  # the latest checkpoint notified complete
        for subtask in self.live:
            self.attempt_ready(subtask)

    def teardown(self) -> None:
        if hasattr(self, "host"):
            self.host.close()

    def live_keys(self) -> list[Key]:
        return sorted((s, a) for s, attempts in self.live.items() for a in attempts)

    def expect_violation(self, future: object, rule_: OrderRule) -> None:
        with pytest.raises(CoordinatorOrderViolation) as caught:
            future.result(TIMEOUT)  # type: ignore[attr-defined]
        assert caught.value.rule is rule_

    # ------------------------------------------------------------------ attempts

    @rule(subtask=SUBTASKS)
    def attempt_ready(self, subtask: int) -> None:
        attempt = self.next_attempt[subtask]
        future = self.host.execution_attempt_ready(subtask, attempt)
        if self.awaiting_reset[subtask]:
            self.expect_violation(future, OrderRule.READY_BEFORE_RESET)
            return
        future.result(TIMEOUT)
        self.next_attempt[subtask] += 1
        self.live[subtask].add(attempt)
        self.beliefs[(subtask, attempt)] = set()

    @precondition(lambda self: bool(self.live_keys()))
    @rule(data=st.data())
    def attempt_failed(self, data: st.DataObject) -> None:
        subtask, attempt = data.draw(st.sampled_from(self.live_keys()))
        self.host.execution_attempt_failed(subtask, attempt, "chaos").result(TIMEOUT)
        self.live[subtask].discard(attempt)
        self.model.fail((subtask, attempt))
        del self.beliefs[(subtask, attempt)]
        if not self.live[subtask]:
            self.awaiting_reset[subtask] = True
        # A failed attempt is heard no more.
        self.expect_violation(
            self.host.handle_event_from_operator(subtask, attempt, RequestSplit(subtask, attempt)),
            OrderRule.EVENT_FROM_FAILED_ATTEMPT,
        )

    @rule(subtask=SUBTASKS)
    def attempt_failed_while_deploying(self, subtask: int) -> None:
        attempt = self.next_attempt[subtask]
        self.next_attempt[subtask] += 1
        self.host.execution_attempt_failed(subtask, attempt, "never started").result(TIMEOUT)
        if not self.live[subtask]:
            self.awaiting_reset[subtask] = True

    # ------------------------------------------------------------------ events

    @precondition(lambda self: bool(self.live_keys()))
    @rule(data=st.data(), max_splits=st.integers(min_value=1, max_value=3))
    def request_split(self, data: st.DataObject, max_splits: int) -> None:
        subtask, attempt = data.draw(st.sampled_from(self.live_keys()))
        reply = self.host.handle_event_from_operator(
            subtask, attempt, RequestSplit(subtask, attempt, max_splits)
        ).result(TIMEOUT)
        expected = self.model.assign(subtask, attempt, max_splits)
        assert reply == [expected]
        if isinstance(expected, AddSplits):
            self.beliefs[(subtask, attempt)].update(s.split_id for s in expected.splits)

    @precondition(lambda self: any(self.beliefs.values()))
    @rule(data=st.data())
    def split_finished(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from([k for k, held in sorted(self.beliefs.items()) if held]))
        sids = data.draw(
            st.lists(st.sampled_from(sorted(self.beliefs[key])), min_size=1, unique=True)
        )
        self.host.handle_event_from_operator(*key, SplitFinished(tuple(sids))).result(TIMEOUT)
        self.model.finish(key, sids)
        self.beliefs[key].difference_update(sids)

    @precondition(lambda self: bool(self.live_keys()))
    @rule(data=st.data())
    def foreign_split_finished(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(self.live_keys()))
        foreign = sorted(
            sid
            for sid in self.all
            if sid not in self.beliefs[key]
            and not (sid in self.model.finished and self.model.finished[sid][0] == key[0])
        )
        if not foreign:
            return
        sid = data.draw(st.sampled_from(foreign))
        with pytest.raises(CoordinatorRejection):
            self.host.handle_event_from_operator(*key, SplitFinished((sid,))).result(TIMEOUT)

    # ------------------------------------------------------------------ checkpoints and resets

    @rule()
    def checkpoint(self) -> None:
        checkpoint_id = self.next_checkpoint
        self.next_checkpoint += 1
        data = self.host.checkpoint_coordinator(checkpoint_id).result(TIMEOUT)
        self.saved.append((checkpoint_id, data, copy.deepcopy(self.model)))
        self.taken.append(checkpoint_id)
        self.latest = checkpoint_id
        self.model.epoch = checkpoint_id

    @rule()
    def batch_snapshot(self) -> None:
        data = self.host.checkpoint_coordinator(NO_CHECKPOINT).result(TIMEOUT)
        self.saved.append((NO_CHECKPOINT, data, copy.deepcopy(self.model)))

    @precondition(lambda self: bool(self.taken))
    @rule(data=st.data())
    def checkpoint_complete(self, data: st.DataObject) -> None:
        checkpoint_id = data.draw(st.sampled_from(self.taken))
        self.host.notify_checkpoint_complete(checkpoint_id).result(TIMEOUT)
        previous = self.completed
        if previous is None or checkpoint_id > previous:
            self.completed = checkpoint_id
            if previous is not None:
                self.model.forget(previous)

    def restore_point(self, data: st.DataObject) -> int:
        """A checkpoint to reset a subtask to: mostly the latest, as a scheduler picks, sometimes
        any, but none before the latest completed one (a scheduler restores from that or later)."""
        latest = self.latest
        if self.completed is not None:
            later = [c for c in self.taken if c >= self.completed]
            return data.draw(st.one_of(st.just(latest), st.sampled_from(later)))
        return data.draw(st.one_of(st.just(latest), st.sampled_from([NO_CHECKPOINT, *self.taken])))

    @rule(subtask=SUBTASKS, data=st.data())
    def regional_failover(self, subtask: int, data: st.DataObject) -> None:
        """What a scheduler does: fail every attempt, reset the subtask, start a new attempt."""
        for attempt in sorted(self.live[subtask]):
            self.host.execution_attempt_failed(subtask, attempt, "region lost").result(TIMEOUT)
            self.model.fail((subtask, attempt))
            del self.beliefs[(subtask, attempt)]
        self.live[subtask] = set()
        checkpoint_id = self.restore_point(data)
        self.host.subtask_reset(subtask, checkpoint_id).result(TIMEOUT)
        self.model.subtask_reset(subtask, checkpoint_id)
        self.awaiting_reset[subtask] = False
        self.attempt_ready(subtask)

    @rule(subtask=SUBTASKS, data=st.data())
    def subtask_reset(self, subtask: int, data: st.DataObject) -> None:
        checkpoint_id = self.restore_point(data)
        future = self.host.subtask_reset(subtask, checkpoint_id)
        if self.live[subtask]:
            self.expect_violation(future, OrderRule.RESET_WITH_LIVE_ATTEMPT)
            return
        future.result(TIMEOUT)
        self.model.subtask_reset(subtask, checkpoint_id)
        self.awaiting_reset[subtask] = False

    @rule(data=st.data())
    def global_restore(self, data: st.DataObject) -> None:
        choice = data.draw(st.integers(min_value=-1, max_value=len(self.saved) - 1))
        if choice < 0:
            self.host.global_failover(NO_CHECKPOINT, None, "driver lost").result(TIMEOUT)
            self.model = Ledger(pending=set(self.all))
            self.latest = NO_CHECKPOINT
        else:
            checkpoint_id, snapshot, ledger = self.saved[choice]
            self.host.global_failover(checkpoint_id, snapshot, "driver lost").result(TIMEOUT)
            self.model = ledger.restored(checkpoint_id)
            self.latest = max(checkpoint_id, ledger.epoch)
        self.live = {0: set(), 1: set()}
        self.awaiting_reset = {0: False, 1: False}
        self.beliefs = {}
        self.completed = None
        for subtask in self.live:  # the restarted job deploys every subtask again
            self.attempt_ready(subtask)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def ledger_matches_the_model(self) -> None:
        if not hasattr(self, "host"):
            return

        def probe(coordinator: object) -> tuple[AssignmentView, list[str]]:
            assert isinstance(coordinator, SplitEnumerator)
            return coordinator.assignment_view(), coordinator.consistency_problems()

        view, problems = self.host.inspect(probe).result(TIMEOUT)
        assert problems == []
        model = self.model
        undiscovered = self.all - set(view.discovered) - model.forgotten
        assert view.pending | undiscovered == model.pending
        assert {k: set(v) for k, v in view.held.items()} == {
            k: set(v) for k, v in model.held.items() if v
        }
        assert {k: set(v) for k, v in view.orphaned.items()} == {
            k: set(v) for k, v in model.orphans.items() if v
        }
        assert view.finished == {sid: f[0] for sid, f in model.finished.items()}

    @invariant()
    def no_split_is_lost_or_held_twice(self) -> None:
        if not hasattr(self, "host"):
            return
        model = self.model
        places: list[set[str]] = [model.pending, set(model.finished), model.forgotten]
        places += [set(ids) for ids in model.held.values()]
        places += [set(ids) for ids in model.orphans.values()]
        assert sum(len(p) for p in places) == len(self.all)
        assert set().union(*places) == self.all
        # What live attempts were handed (and did not finish) is disjoint and what the model holds.
        seen: set[str] = set()
        for key, held in self.beliefs.items():
            assert not (held & seen), f"a split is held by two live attempts: {held & seen}"
            seen |= held
            assert held == set(model.held.get(key, {}))
        progress = self.host.progress().result(TIMEOUT)
        assert progress is not None
        done = len(model.finished) + len(model.forgotten)
        assert progress.fully_finished == (done == len(self.all))
        assert progress.splits_finished == done


CoordinatorMachine.TestCase.settings = settings(
    max_examples=400,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCoordinatorProperties = CoordinatorMachine.TestCase
