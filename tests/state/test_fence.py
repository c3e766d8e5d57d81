"""Fencing of stale driver attempts, on every backend: a superseded attempt writes nothing."""

from __future__ import annotations

import pytest

from finishable.state import CheckpointKind, CheckpointStore, JobEventStore, read_events
from finishable.state.errors import EventStoreError, Fenced
from finishable.state.fence import Epoch, Fence, FencedBackend, fenced_cause

from .conftest import BackendCase

pytestmark = pytest.mark.quick

JOB = "0b9e3c1a-job"


def claimed(case: BackendCase, run: int, attempt: int) -> FencedBackend:
    fence = Fence(case.reopen(), JOB, Epoch(run, attempt), grace=30.0)
    fence.claim()  # the grace is only waited out by wait_out_predecessor
    return FencedBackend(case.reopen(), fence)


def test_epochs_order_by_run_then_attempt() -> None:
    assert Epoch(1, 9) < Epoch(2, 1) < Epoch(2, 3)
    assert Epoch.parse(Epoch(12, 345).name) == Epoch(12, 345)
    assert Epoch.parse("not-an-epoch") is None
    assert str(Epoch(2, 3)) == "attempt 3 of run 2"


def test_a_superseded_attempt_writes_nothing_and_its_successor_everything(
    case: BackendCase,
) -> None:
    first = claimed(case, 1, 1)
    first.put("data/a", b"first")
    second = claimed(case, 1, 2)

    with pytest.raises(Fenced) as refused:
        first.put("data/a", b"zombie")
    assert "attempt 1 of run 1" in str(refused.value)
    assert "attempt 2 of run 1" in str(refused.value)
    with pytest.raises(Fenced):
        first.delete("data/a")
    with pytest.raises(Fenced):
        first.put("data/b", b"zombie")
    assert first.fence.fenced() is not None

    second.put("data/a", b"second")
    assert case.backend.get("data/a") == b"second"
    assert "data/b" not in case.backend.list("data/")
    assert second.fence.fenced() is None
    # A new run supersedes every attempt of the one before.
    claimed(case, 2, 1)
    with pytest.raises(Fenced):
        second.put("data/a", b"stale run")


def test_an_older_attempt_that_claims_late_is_refused_at_once(case: BackendCase) -> None:
    claimed(case, 1, 3)
    late = Fence(case.reopen(), JOB, Epoch(1, 2), grace=0.0)
    with pytest.raises(Fenced, match="attempt 2 of run 1 was superseded by attempt 3 of run 1"):
        late.claim()


def test_a_claim_names_its_predecessor_and_waits_out_its_writes_in_flight(
    case: BackendCase,
) -> None:
    now = [100.0]
    first = Fence(case.reopen(), JOB, Epoch(1, 1), grace=5.0, clock=lambda: now[0])
    assert first.claim() is None
    assert first.wait_out_predecessor() == 0.0  # nobody wrote before the first attempt
    # The grace runs from the claim on the fence's clock: held still here, so that a claim
    # slowed down by a loaded machine cannot use the grace up before the wait.
    second = Fence(case.reopen(), JOB, Epoch(1, 2), grace=0.2, clock=lambda: now[0])
    assert second.claim() == Epoch(1, 1)
    assert second.wait_out_predecessor() == pytest.approx(0.2)


def test_a_superseded_event_store_fails_and_the_log_holds_only_the_live_writer(
    case: BackendCase,
) -> None:
    first = claimed(case, 1, 1)
    zombie = JobEventStore(first, prefix="events/run", flush_interval=0.05)
    zombie.append({"type": "Done", "task": 1})
    zombie.flush(timeout=10)

    second = claimed(case, 1, 2)
    zombie.append({"type": "Done", "task": 2})
    with pytest.raises(EventStoreError) as failed:
        zombie.flush(timeout=10)
    assert isinstance(fenced_cause(failed.value), Fenced)
    with pytest.raises(EventStoreError):
        zombie.append({"type": "Done", "task": 3})
    with pytest.raises(EventStoreError):
        zombie.close()

    live = JobEventStore(second, prefix="events/run", flush_interval=0.05)
    live.append({"type": "Done", "task": 4})
    live.flush(timeout=10)
    live.close()
    tasks = [event.data["task"] for event in read_events(case.backend, prefix="events/run")]
    assert tasks == [1, 4]


def test_a_superseded_attempt_stores_no_checkpoint(case: BackendCase) -> None:
    zombie = CheckpointStore(claimed(case, 1, 1))
    zombie.put_checkpoint(1, b"one")
    claimed(case, 1, 2)
    with pytest.raises(Fenced):
        zombie.put_checkpoint(2, b"two")
    assert CheckpointStore(case.backend).ids(CheckpointKind.CHECKPOINT) == [1]
