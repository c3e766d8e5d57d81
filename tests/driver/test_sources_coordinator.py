"""The coordinator side of the sources without Spark: suspend, sentinel, adopt, skip reports, and
``SourceCoordinator``'s reconciliation with a (hand-written) Spark checkpoint log."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from finishable.connectors import reading
from finishable.connectors.fileformats import RECORD_COLUMN, FileOptions, reader_schema
from finishable.connectors.sources import Files, Range, sentinel_row
from finishable.connectors.streaming import source as ds
from finishable.coordinator import (
    AddSplits,
    CoordinatorHost,
    CoordinatorRejection,
    FileSplit,
    NoMoreSplits,
    RangeSplit,
    RequestSplit,
    SentinelSplit,
    Split,
    SplitFinished,
)
from finishable.coordinator.endpoint import DriverEndpoint
from finishable.coordinator.enumerator import SplitEnumerator
from finishable.coordinator.files import FileSplitEnumerator
from finishable.coordinator.ranges import RangeSplitEnumerator
from finishable.driver.checkpoint_log import CheckpointLog
from finishable.driver.source_coordinator import RestorePoint, SourceCoordinator

pytestmark = pytest.mark.quick

TIMEOUT = 60.0  # a bound for liveness only: events are awaited, never timed
TOKEN = "t0ken"


@pytest.fixture
def hosts() -> Iterator[list[CoordinatorHost]]:
    made: list[CoordinatorHost] = []
    yield made
    for host in made:
        host.close()


def started(hosts: list[CoordinatorHost], provider: object, name: str = "src") -> CoordinatorHost:
    host = CoordinatorHost(name, provider)  # type: ignore[arg-type]
    hosts.append(host)
    host.start().result(TIMEOUT)
    return host


def ask(host: CoordinatorHost, attempt: int, count: int = 1, subtask: int = 0) -> list[str] | None:
    """Request splits; their ids, or ``None`` for NoMoreSplits."""
    reply = host.handle_event_from_operator(
        subtask, attempt, RequestSplit(subtask, attempt, count)
    ).result(TIMEOUT)
    assert len(reply) == 1
    if isinstance(reply[0], NoMoreSplits):
        return None
    assert isinstance(reply[0], AddSplits)
    return [split.split_id for split in reply[0].splits]


def control(host: CoordinatorHost, action: object) -> object:
    def run(coordinator: object) -> object:
        assert isinstance(coordinator, SplitEnumerator)
        return action(coordinator)  # type: ignore[operator]

    return host.call("test", run).result(TIMEOUT)


def ledger_is_sound(host: CoordinatorHost) -> None:
    problems = host.inspect(
        lambda c: c.consistency_problems() if isinstance(c, SplitEnumerator) else []
    ).result(TIMEOUT)
    assert problems == []


SENTINEL = SentinelSplit.of("drain", {"value": -1, "ts": 1})


# ---------------------------------------------------------------------- suspend and sentinel


def test_a_suspended_source_holds_requests_and_counts_them(hosts: list[CoordinatorHost]) -> None:
    host = started(hosts, RangeSplitEnumerator.provider(end=50, split_size=10))
    host.execution_attempt_ready(0, 1).result(TIMEOUT)
    assert ask(host, 1) == ["r-0-10"]
    control(host, lambda e: e.suspend())
    assert ask(host, 1, 3) == [] and ask(host, 1) == []
    state = control(host, lambda e: e.control_state())
    assert state.suspended and state.held_requests == 2 and state.requests == 3  # type: ignore[attr-defined]
    control(host, lambda e: e.resume())
    assert ask(host, 1, 2) == ["r-10-20", "r-20-30"]
    control(host, lambda e: e.suspend())  # the count starts over with each suspension
    assert control(host, lambda e: e.control_state()).held_requests == 0  # type: ignore[attr-defined]


def test_a_sentinel_goes_out_alone_while_suspended_and_is_not_input(
    hosts: list[CoordinatorHost],
) -> None:
    host = started(hosts, RangeSplitEnumerator.provider(end=20, split_size=10))
    host.execution_attempt_ready(0, 1).result(TIMEOUT)
    assert ask(host, 1, 5) == ["r-0-10", "r-10-20"]
    host.handle_event_from_operator(0, 1, SplitFinished(("r-0-10", "r-10-20"))).result(TIMEOUT)
    assert control(host, lambda e: e.control_state()).fully_finished  # type: ignore[attr-defined]
    control(host, lambda e: e.suspend())
    assert control(host, lambda e: e.emit_sentinel(SENTINEL)) is True
    assert control(host, lambda e: e.emit_sentinel(SENTINEL)) is False  # a repeat is a no-op
    assert ask(host, 1, 5) == [SENTINEL.split_id]
    assert ask(host, 1, 5) == []
    progress = host.progress().result(TIMEOUT)
    assert progress is not None and progress.splits_discovered == 2 and progress.fully_finished
    state = control(host, lambda e: e.control_state())
    assert state.sentinel_pending and state.fully_finished  # type: ignore[attr-defined]
    # An unfinished sentinel is a drain in progress, not state: it stays out of the snapshot.
    snapshot = json.loads(host.checkpoint_coordinator(1).result(TIMEOUT))
    assert [split["id"] for split in snapshot["splits"]] == ["r-0-10", "r-10-20"]
    host.handle_event_from_operator(0, 1, SplitFinished((SENTINEL.split_id,))).result(TIMEOUT)
    state = control(host, lambda e: e.control_state())
    assert not state.sentinel_pending and state.sentinels_finished == (SENTINEL.split_id,)  # type: ignore[attr-defined]
    data = host.checkpoint_coordinator(2).result(TIMEOUT)
    assert SENTINEL.split_id in data.decode()
    host.global_failover(2, data).result(TIMEOUT)
    state = control(host, lambda e: e.control_state())
    assert state.fully_finished and state.sentinels_finished == (SENTINEL.split_id,)  # type: ignore[attr-defined]
    assert not state.suspended  # suspension is runtime state, gone after a reset
    ledger_is_sound(host)


# ---------------------------------------------------------------------- adopt


def test_adopt_takes_splits_from_wherever_the_ledger_has_them(
    hosts: list[CoordinatorHost],
) -> None:
    host = started(hosts, RangeSplitEnumerator.provider(end=100, split_size=10))
    host.execution_attempt_ready(0, 1).result(TIMEOUT)
    assert ask(host, 1, 2) == ["r-0-10", "r-10-20"]
    host.handle_event_from_operator(0, 1, SplitFinished(("r-0-10",))).result(TIMEOUT)
    snapshot = host.checkpoint_coordinator(0).result(TIMEOUT)
    host.global_failover(0, snapshot).result(TIMEOUT)  # r-10-20 is now an orphan of subtask 0
    host.execution_attempt_ready(0, 2).result(TIMEOUT)
    wanted: list[Split] = [
        RangeSplit(0, 10),  # finished
        RangeSplit(10, 20),  # orphan
        RangeSplit(20, 30),  # pending
        RangeSplit(5000, 5010),  # unknown (not even discovered)
    ]
    result = control(host, lambda e: e.adopt(0, 2, wanted))
    assert result.adopted == ("r-10-20", "r-20-30", "r-5000-5010")  # type: ignore[attr-defined]
    assert result.already_finished == ("r-0-10",)  # type: ignore[attr-defined]
    assert result.added == ("r-5000-5010",)  # type: ignore[attr-defined]
    ledger_is_sound(host)
    assert ask(host, 2, 2) == ["r-30-40", "r-40-50"]  # nothing adopted is handed out again
    host.execution_attempt_ready(1, 1).result(TIMEOUT)
    with pytest.raises(CoordinatorRejection, match="attempt 2 holds it"):
        control(host, lambda e: e.adopt(1, 1, [RangeSplit(20, 30)]))
    with pytest.raises(CoordinatorRejection, match="not ready"):
        control(host, lambda e: e.adopt(0, 9, [RangeSplit(60, 70)]))
    ledger_is_sound(host)


def test_adopting_an_unknown_byte_range_adds_the_whole_file_once(
    hosts: list[CoordinatorHost], tmp_path: Path
) -> None:
    (tmp_path / "a.json").write_bytes(b"x" * 250)
    host = started(
        hosts, FileSplitEnumerator.provider(str(tmp_path), split_size=100, bounded=False)
    )
    host.execution_attempt_ready(0, 1).result(TIMEOUT)
    url = (tmp_path / "b.json").as_uri()
    middle = FileSplit(url, 100, 100, 250)  # of a file the listing has not seen yet
    result = control(host, lambda e: e.adopt(0, 1, [middle]))
    assert result.added == (middle.split_id,)  # type: ignore[attr-defined]
    (tmp_path / "b.json").write_bytes(b"y" * 250)
    for _ in range(100):
        progress = host.progress().result(TIMEOUT)
        if progress is not None and progress.splits_discovered >= 6:
            break
        time.sleep(0.05)
    taken = ask(host, 1, 50)
    assert taken is not None
    b_ranges = sorted(i for i in taken if i != middle.split_id)
    view = host.inspect(lambda c: c.assignment_view()).result(TIMEOUT)  # type: ignore[attr-defined]
    assert len(view.discovered) == 6  # a.json and b.json, three ranges each, none twice
    assert middle.split_id not in taken and len(b_ranges) == 5
    ledger_is_sound(host)


# ---------------------------------------------------------------------- skip reports


def test_skip_mode_reports_the_unreadable_split_to_the_coordinator(
    hosts: list[CoordinatorHost], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"this is not gzip")
    good = tmp_path / "good.json"
    good.write_text('{"id": 1}\n{"id": 2}\n')
    host = started(hosts, FileSplitEnumerator.provider(str(tmp_path)), "files")
    endpoint = DriverEndpoint(TOKEN)
    endpoint.add(host)
    endpoint.start()
    try:
        host.execution_attempt_ready(0, 4).result(TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        while True:  # the listing, which names both files: a split it has not made is unknown
            progress = host.progress().result(TIMEOUT)
            if progress is not None and progress.discovery_complete:
                break
            assert time.monotonic() < deadline, "the files were not listed"
            time.sleep(0.05)
        assert ask(host, 4, 10) is not None
        schema = ds.StructType.fromJson(
            {
                "type": "struct",
                "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}],
            }
        )
        settings = reading.ReaderSettings(
            coordinator="files",
            endpoint=endpoint.url,
            kind="files",
            schema_json=schema.jsonValue(),
            format="json",
            on_error="skip",
        )
        target = reading.arrow_schema_of(reader_schema(schema, FileOptions("json")))
        splits = (
            FileSplit(bad.as_uri(), 0, bad.stat().st_size, bad.stat().st_size),
            FileSplit(good.as_uri(), 0, good.stat().st_size, good.stat().st_size),
        )
        # No attempt in the partition: the executor asks which attempt the driver made ready.
        rows = pa.Table.from_batches(
            list(
                reading.read_partition(
                    reading.SplitPartition(0, splits, None), settings, TOKEN, target
                )
            ),
            schema=target,
        )
        assert rows[RECORD_COLUMN].to_pylist() == ['{"id": 1}', '{"id": 2}']
        skipped = control(host, lambda e: e.skipped())
        assert list(skipped) == [splits[0].split_id]  # type: ignore[call-overload]
        assert "bad.json.gz as json" in skipped[splits[0].split_id]  # type: ignore[index]
        assert "bad.json.gz" in host.checkpoint_coordinator(0).result(TIMEOUT).decode()
    finally:
        endpoint.stop()


# ---------------------------------------------------------------------- reconciliation


def write_batch(root: Path, batch: int, offset: ds.SplitOffset, *, committed: bool) -> None:
    """A Spark offsets (and commits) entry as Spark 4.3 writes it."""
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "commits").mkdir(parents=True, exist_ok=True)
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}})
    (root / "offsets" / str(batch)).write_text(f"v1\n{meta}\n{json.dumps(offset.to_json())}")
    if committed:
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def plan(coordinator: SourceCoordinator, seq: int, count: int = 2) -> ds.SplitOffset:
    """What the planner's latestOffset does: ask, and embed the splits in the end offset."""
    attempt = coordinator.attempt
    assert attempt is not None
    reply = coordinator.host.handle_event_from_operator(
        0, attempt, RequestSplit(0, attempt, count)
    ).result(TIMEOUT)
    splits = reply[0].splits if isinstance(reply[0], AddSplits) else ()
    return ds.SplitOffset(coordinator.name, seq, attempt, splits)


@pytest.fixture
def coordinators() -> Iterator[list[SourceCoordinator]]:
    made: list[SourceCoordinator] = []
    yield made
    for coordinator in made:
        coordinator.close()


def new_coordinator(
    made: list[SourceCoordinator], restore: RestorePoint | None = None, end: int = 200
) -> SourceCoordinator:
    coordinator = SourceCoordinator("clicks", Range(0, end, split_size=10))
    made.append(coordinator)
    coordinator.start(restore)
    return coordinator


def test_an_in_flight_batch_is_adopted_after_a_restart_and_never_handed_out_again(
    coordinators: list[SourceCoordinator], tmp_path: Path
) -> None:
    first = new_coordinator(coordinators)
    assert first.begin_run(1, str(tmp_path)).in_flight_batch is None
    batch0 = plan(first, 1)
    write_batch(tmp_path, 0, batch0, committed=True)
    # The race: batch 1 is planned (and logged) before the listener snapshots batch 0, so the
    # snapshot lists its splits as assigned: restored, they would be orphans for any request.
    batch1 = plan(first, 2)
    write_batch(tmp_path, 1, batch1, committed=False)
    committed = first.on_batch_committed(0)
    assert committed is not None and committed.split_ids == ("r-0-10", "r-10-20")
    snapshot = first.last_snapshot
    first.close()  # the driver dies

    second = new_coordinator(coordinators, restore=snapshot)
    reconciliation = second.begin_run(2, str(tmp_path))
    assert reconciliation.in_flight_batch == 1
    assert reconciliation.in_flight_splits == ("r-20-30", "r-30-40")
    batch2 = plan(second, 3)  # a request after the restart: not the in-flight splits
    assert [s.split_id for s in batch2.splits] == ["r-40-50", "r-50-60"]
    write_batch(tmp_path, 1, batch1, committed=True)  # Spark re-ran batch 1 from its log
    write_batch(tmp_path, 2, batch2, committed=True)
    done = second.on_batch_committed(2)
    assert done is not None
    assert done.split_ids == ("r-20-30", "r-30-40", "r-40-50", "r-50-60")
    progress = second.host.progress().result(TIMEOUT)
    assert progress is not None and progress.splits_finished == 6
    assert progress.splits_assigned == 0


def test_batches_committed_after_the_snapshot_are_finished_on_restart(
    coordinators: list[SourceCoordinator], tmp_path: Path
) -> None:
    first = new_coordinator(coordinators, end=60)
    first.begin_run(1, str(tmp_path))
    offsets = []
    for batch in range(3):
        offsets.append(plan(first, batch + 1))
        write_batch(tmp_path, batch, offsets[-1], committed=True)
        if batch == 0:
            first.on_batch_committed(0)  # the last snapshot the driver kept
    snapshot = first.last_snapshot
    assert snapshot.checkpoint_id == 0
    first.close()

    second = new_coordinator(coordinators, restore=snapshot, end=60)
    reconciliation = second.begin_run(2, str(tmp_path))
    assert reconciliation.recovered_batches == (1, 2)
    assert reconciliation.last_committed == 2 and reconciliation.in_flight_batch is None
    assert [s.split_id for s in plan(second, 4, 5).splits] == []  # all six splits were read
    assert second.exhausted()
    assert second.on_batch_committed(2) is None  # already reconciled


def test_a_fresh_coordinator_relearns_everything_from_the_log(
    coordinators: list[SourceCoordinator], tmp_path: Path
) -> None:
    first = new_coordinator(coordinators, end=40)
    first.begin_run(1, str(tmp_path))
    write_batch(tmp_path, 0, plan(first, 1), committed=True)
    write_batch(tmp_path, 1, plan(first, 2), committed=False)
    first.close()  # ... and its snapshots are lost

    second = new_coordinator(coordinators, end=40)
    reconciliation = second.begin_run(5, str(tmp_path))
    assert reconciliation.recovered_batches == (0,)
    assert reconciliation.in_flight_splits == ("r-20-30", "r-30-40")
    assert second.state().fully_finished is False
    assert plan(second, 3).splits == ()


def test_a_snapshot_newer_than_the_query_checkpoint_is_refused(
    coordinators: list[SourceCoordinator], tmp_path: Path
) -> None:
    first = new_coordinator(coordinators)
    first.begin_run(1, str(tmp_path))
    write_batch(tmp_path, 0, plan(first, 1), committed=True)
    first.on_batch_committed(0)
    snapshot = first.last_snapshot
    other = tmp_path / "other"
    other.mkdir()
    second = new_coordinator(coordinators, restore=snapshot)
    with pytest.raises(RuntimeError, match="do not belong together"):
        second.begin_run(2, str(other))
    assert second.attempt is None  # the failed run was ended again
    assert second.begin_run(3, str(tmp_path)).last_committed == 0


def test_end_run_restores_the_last_snapshot_for_an_in_process_restart(
    coordinators: list[SourceCoordinator], tmp_path: Path
) -> None:
    coordinator = new_coordinator(coordinators, end=60)
    coordinator.begin_run(1, str(tmp_path))
    write_batch(tmp_path, 0, plan(coordinator, 1), committed=True)
    coordinator.on_batch_committed(0)
    in_flight = plan(coordinator, 2)
    write_batch(tmp_path, 1, in_flight, committed=False)
    plan(coordinator, 3)  # planned, but the query stopped before Spark logged it
    coordinator.end_run("query failed")
    reconciliation = coordinator.begin_run(2, str(tmp_path))
    assert reconciliation.in_flight_splits == tuple(s.split_id for s in in_flight.splits)
    # The unlogged batch's splits went back to the pool and are handed out again.
    assert [s.split_id for s in plan(coordinator, 3).splits] == ["r-40-50", "r-50-60"]
    with pytest.raises(RuntimeError, match="still running"):
        coordinator.begin_run(3, str(tmp_path))


def test_the_checkpoint_log_reader_lists_batches_and_finds_offsets(tmp_path: Path) -> None:
    log = CheckpointLog(str(tmp_path))
    assert log.batch_ids("offsets") == [] and log.last_committed() == -1
    offset = ds.SplitOffset("clicks", 1, 0, (RangeSplit(0, 1),))
    write_batch(tmp_path, 0, offset, committed=True)
    write_batch(tmp_path, 1, offset, committed=False)
    (tmp_path / "offsets" / ".1.crc").write_text("x")
    assert log.batch_ids("offsets") == [0, 1] and log.last_committed() == 0
    assert log.source_offset(1, "clicks") == offset
    assert log.source_offset(1, "views") is None and log.source_offset(7, "clicks") is None
    assert CheckpointLog(tmp_path.as_uri()).batch_ids("offsets") == [0, 1]
    raw = log.read_entry("offsets", 1)
    assert raw is not None and log.read_entry("commits", 1) is None
    restored = CheckpointLog(str(tmp_path / "restored"))
    restored.write_entry("offsets", 1, raw)
    assert restored.batch_ids("offsets") == [1] and restored.source_offset(1, "clicks") == offset


def test_emit_sentinel_uses_the_sources_schema(coordinators: list[SourceCoordinator]) -> None:
    coordinator = new_coordinator(coordinators, end=10)
    coordinator.begin_run(1)
    coordinator.suspend()
    split = coordinator.emit_sentinel("drain-7")
    assert split.row == sentinel_row(Range(0, 10).schema)
    assert [s.split_id for s in plan(coordinator, 1).splits] == [split.split_id]
    assert coordinator.state().sentinel_pending
    done = coordinator.finish_batch(0, plan_offset(coordinator, split))
    assert done is not None and done.sentinel and done.split_ids == (split.split_id,)
    assert not coordinator.state().sentinel_pending


def plan_offset(coordinator: SourceCoordinator, split: SentinelSplit) -> dict[str, object]:
    return ds.SplitOffset(coordinator.name, 1, coordinator.attempt, (split,)).to_json()


def test_files_descriptor_builds_a_working_enumerator(
    coordinators: list[SourceCoordinator], tmp_path: Path
) -> None:
    (tmp_path / "a.json").write_text('{"id": 1}\n')
    source = Files(str(tmp_path), schema=ds.StructType([]), bounded=True)
    coordinator = SourceCoordinator("files", source)
    coordinators.append(coordinator)
    coordinator.start()
    coordinator.begin_run(1)  # waits for the first listing
    progress = coordinator.host.progress().result(TIMEOUT)
    assert progress is not None and progress.discovery_complete and progress.splits_total == 1


def test_a_batch_finished_before_its_commit_entry_is_rolled_back_by_end_run(
    coordinators: list[SourceCoordinator], tmp_path: Path
) -> None:
    coordinator = new_coordinator(coordinators, end=100)
    coordinator.begin_run(1, str(tmp_path))
    write_batch(tmp_path, 0, plan(coordinator, 1), committed=True)
    assert coordinator.on_batch_committed(0) is not None
    batch1 = plan(coordinator, 2)
    write_batch(tmp_path, 1, batch1, committed=False)
    # Synchronously from the sink's publish of batch 1, before Spark writes commits/1.
    published = coordinator.finish_batch(1)
    assert published is not None and published.split_ids == ("r-20-30", "r-30-40")
    assert coordinator.on_batch_committed(7) is None  # capped at commits/: 0 is done already
    coordinator.end_run("the query failed before commits/1")  # back to the snapshot of batch 0
    reconciliation = coordinator.begin_run(2, str(tmp_path))
    assert reconciliation.in_flight_batch == 1
    assert reconciliation.in_flight_splits == ("r-20-30", "r-30-40")
    assert [s.split_id for s in plan(coordinator, 3).splits] == ["r-40-50", "r-50-60"]
