"""The Kafka split enumerator: offsets specs, cuts, restores and adopted splits, with the brokers'
offsets given by a fake poller (the real broker's tests are in tests/connectors/test_kafka.py)."""

from __future__ import annotations

import threading

import pytest

from finishable.coordinator import (
    CoordinatorHost,
    CoordinatorRejection,
    KafkaSplit,
    NoMoreSplits,
    SentinelSplit,
    split_from_json,
)
from finishable.coordinator.enumerator import SplitEnumerator
from finishable.coordinator.kafka import (
    KafkaOffsetsError,
    KafkaSplitEnumerator,
    Polled,
    budget_splits,
    cut_splits,
    parse_offsets,
    resolve_offset,
)
from testcluster.waiting import wait_for

from ._helpers import TIMEOUT, finish, ready, request
from .conftest import HostFactory

pytestmark = pytest.mark.quick


class FakeBrokers:
    """The offsets a poll sees: each partition's earliest and last stable offset."""

    def __init__(self, offsets: Polled) -> None:
        self.offsets = dict(offsets)
        self.polls = 0
        self._lock = threading.Lock()

    def __call__(self) -> Polled:
        with self._lock:
            self.polls += 1
            return dict(self.offsets)

    def set(self, partition: tuple[str, int], earliest: int, latest: int) -> None:
        with self._lock:
            self.offsets[partition] = (earliest, latest)


def provider(brokers: FakeBrokers, **settings: object) -> object:
    defaults: dict[str, object] = {
        "identity": {"topics": ["t"]},
        "split_size": 100,
        "discovery_interval": 0.01,
    }
    return KafkaSplitEnumerator.provider(lambda: brokers, **{**defaults, **settings})


def splits_of(host: CoordinatorHost, max_splits: int = 100) -> list[KafkaSplit]:
    reply = request(host, 0, 0, max_splits)
    return [s for event in reply for s in getattr(event, "splits", ()) if isinstance(s, KafkaSplit)]


def take_when_polled(host: CoordinatorHost, max_splits: int = 100) -> list[KafkaSplit]:
    return wait_for(lambda: splits_of(host, max_splits), "splits cut from a poll", TIMEOUT)


def cursors(host: CoordinatorHost) -> dict[tuple[str, int], int]:
    def probe(coordinator: object) -> dict[tuple[str, int], int]:
        assert isinstance(coordinator, KafkaSplitEnumerator)
        return coordinator.cursors

    return host.inspect(probe).result(TIMEOUT)


# ---------------------------------------------------------------------- pure parts


def test_offsets_take_sparks_forms() -> None:
    assert parse_offsets("earliest", "startingOffsets") == "earliest"
    assert parse_offsets('{"t": {"0": 5, "1": -2}}', "startingOffsets") == {"t": {0: 5, 1: -2}}
    assert parse_offsets({"t": {1: -1}}, "endingOffsets") == {"t": {1: -1}}


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("newest", "startingOffsets='newest': expected 'earliest', 'latest' or JSON"),
        ('{"t": {"x": 1}}', "partition 'x' of 't' is not a number"),
        ('{"t": {"0": -3}}', "offset -3 of t-0 must be an offset, -2 (earliest) or -1 (latest)"),
        ("{}", "expected 'earliest', 'latest' or a mapping"),
    ],
)
def test_a_bad_offsets_spec_is_named(value: str, named: str) -> None:
    with pytest.raises(KafkaOffsetsError, match=__import__("re").escape(named)):
        parse_offsets(value, "startingOffsets")


def test_an_offset_resolves_against_the_polled_ones() -> None:
    spec = parse_offsets({"t": {0: 7, 1: -2, 2: -1}}, "startingOffsets")
    assert [resolve_offset(spec, ("t", p), 3, 50) for p in range(4)] == [7, 3, 50, None]
    assert resolve_offset("latest", ("u", 0), 3, 50) == 50


def test_cuts_give_each_partition_one_split_the_furthest_behind_first() -> None:
    cut = cut_splits(
        {("a", 0): 0, ("a", 1): 90, ("b", 0): 10},
        {("a", 0): 30, ("a", 1): 100, ("b", 0): 500},
        100,
        2,
    )
    assert cut == [KafkaSplit("b", 0, 10, 110), KafkaSplit("a", 0, 0, 30)]
    assert cut_splits({("a", 0): 30}, {("a", 0): 30}, 100, 5) == []


def test_a_split_travels_as_json_with_an_id_of_its_contents() -> None:
    split = KafkaSplit("orders", 3, 100, 200)
    assert split_from_json(split.to_json()) == split
    assert split.split_id != KafkaSplit("orders", 3, 100, 201).split_id
    with pytest.raises(ValueError, match="empty"):
        KafkaSplit("orders", 3, 200, 200)


# ---------------------------------------------------------------------- the enumerator


def test_a_stream_from_latest_reads_what_arrives_after_its_first_poll(
    make_host: HostFactory,
) -> None:
    brokers = FakeBrokers({("t", 0): (0, 40), ("t", 1): (0, 10)})
    host = make_host(provider(brokers))
    ready(host, 0, 0)
    wait_for(lambda: cursors(host) == {("t", 0): 40, ("t", 1): 10}, "the first poll", TIMEOUT)
    assert splits_of(host) == []
    brokers.set(("t", 0), 0, 340)
    assert take_when_polled(host) == [KafkaSplit("t", 0, 40, 140)]  # one per partition per ask
    assert splits_of(host) == [KafkaSplit("t", 0, 140, 240)]


def test_a_partition_added_later_is_read_from_its_earliest_offset(make_host: HostFactory) -> None:
    brokers = FakeBrokers({("t", 0): (0, 5)})
    host = make_host(provider(brokers))
    ready(host, 0, 0)
    wait_for(lambda: cursors(host).get(("t", 0)) == 5, "the first poll", TIMEOUT)
    brokers.set(("t", 1), 2, 9)
    assert take_when_polled(host) == [KafkaSplit("t", 1, 2, 9)]


def test_a_bounded_source_cuts_every_split_to_the_ends_of_its_first_poll(
    make_host: HostFactory,
) -> None:
    brokers = FakeBrokers({("t", 0): (0, 250), ("t", 1): (0, 0)})
    host = make_host(
        provider(brokers, starting_offsets="earliest", ending_offsets="latest", split_size=100)
    )
    ready(host, 0, 0)
    wait_for(
        lambda: host.progress().result(TIMEOUT).splits_total == 3,  # type: ignore[union-attr]
        "discovery of a bounded source",
        TIMEOUT,
    )
    brokers.set(("t", 0), 0, 900)  # after the ends were resolved: not read
    got = splits_of(host)
    assert got == [
        KafkaSplit("t", 0, 0, 100),
        KafkaSplit("t", 0, 100, 200),
        KafkaSplit("t", 0, 200, 250),
    ]
    assert request(host, 0, 0) == [NoMoreSplits()]


def test_a_restore_keeps_the_cursor_and_an_adopted_split_moves_it_past_its_records(
    make_host: HostFactory,
) -> None:
    brokers = FakeBrokers({("t", 0): (0, 0)})
    host = make_host(provider(brokers, starting_offsets="earliest"))
    ready(host, 0, 0)
    wait_for(lambda: cursors(host) == {("t", 0): 0}, "the first poll", TIMEOUT)
    brokers.set(("t", 0), 0, 1000)
    [first] = take_when_polled(host)
    assert first == KafkaSplit("t", 0, 0, 100)
    finish(host, 0, 0, first.split_id)  # its batch committed
    snapshot = host.checkpoint_coordinator(1).result(TIMEOUT)
    # After the checkpoint a batch took [100, 200) and Spark logged it; then the driver died.
    assert splits_of(host) == [KafkaSplit("t", 0, 100, 200)]

    restored = make_host(provider(brokers, starting_offsets="earliest"), "restored")
    restored.reset_to_checkpoint(1, snapshot).result(TIMEOUT)
    ready(restored, 0, 0)
    assert cursors(restored) == {("t", 0): 100}

    def adopt(split: KafkaSplit) -> object:
        def probe(coordinator: object) -> object:
            assert isinstance(coordinator, SplitEnumerator)
            return coordinator.adopt(0, 0, [split])

        return restored.inspect(probe).result(TIMEOUT)

    adopt(KafkaSplit("t", 0, 100, 200))  # the logged batch, replayed
    assert cursors(restored) == {("t", 0): 200}
    assert take_when_polled(restored) == [KafkaSplit("t", 0, 200, 300)]  # never [100, ...) again
    adopt(KafkaSplit("t", 0, 350, 400))  # a cut lost in between: [300, 350) is read too
    assert splits_of(restored, 1) == [KafkaSplit("t", 0, 300, 350)]
    with pytest.raises(CoordinatorRejection, match="would be read twice"):
        adopt(KafkaSplit("t", 0, 120, 180))


def test_a_snapshot_of_other_topics_is_refused(make_host: HostFactory) -> None:
    brokers = FakeBrokers({("t", 0): (0, 10)})
    host = make_host(provider(brokers))
    snapshot = host.checkpoint_coordinator(1).result(TIMEOUT)
    other = make_host(provider(brokers, identity={"topics": ["u"]}), "other")
    with pytest.raises(Exception, match="belongs to source"):
        other.reset_to_checkpoint(1, snapshot).result(TIMEOUT)


def test_a_drain_reads_to_the_offsets_of_its_request_and_then_the_sentinel_alone(
    make_host: HostFactory,
) -> None:
    brokers = FakeBrokers({("t", 0): (0, 0), ("t", 1): (0, 0)})
    host = make_host(provider(brokers, starting_offsets="earliest"))
    ready(host, 0, 0)
    wait_for(lambda: cursors(host) == {("t", 0): 0, ("t", 1): 0}, "the first poll", TIMEOUT)
    brokers.set(("t", 0), 0, 150)
    brokers.set(("t", 1), 0, 30)

    def drain(coordinator: object) -> None:
        assert isinstance(coordinator, KafkaSplitEnumerator)
        coordinator.begin_drain()
        coordinator.emit_sentinel(SentinelSplit.of("drain-job", {"timestamp": 1}))

    host.inspect(drain).result(TIMEOUT)

    def horizon(coordinator: object) -> object:
        assert isinstance(coordinator, KafkaSplitEnumerator)
        return coordinator.drain_horizon

    wait_for(lambda: host.inspect(horizon).result(TIMEOUT), "the drain's end offsets", TIMEOUT)
    brokers.set(("t", 0), 0, 900)  # after the drain was asked: not read
    got = wait_for(lambda: splits_of(host, 10), "the drain's splits", TIMEOUT)
    assert got == [KafkaSplit("t", 0, 0, 100), KafkaSplit("t", 1, 0, 30)]
    assert splits_of(host, 10) == [KafkaSplit("t", 0, 100, 150)]
    [sentinel] = request(host, 0, 0, 10)
    assert [split.split_id for split in sentinel.splits] == [
        SentinelSplit.of("drain-job", {"timestamp": 1}).split_id
    ]  # type: ignore[attr-defined]
    assert splits_of(host, 10) == []  # held: the boundary may be cut

    def resume(coordinator: object) -> None:
        assert isinstance(coordinator, KafkaSplitEnumerator)
        coordinator.resume()

    host.inspect(resume).result(TIMEOUT)  # a failed stop resumes: reading goes on past it
    assert take_when_polled(host, 1) == [KafkaSplit("t", 0, 150, 250)]


def test_a_long_stream_keeps_the_splits_of_its_last_checkpoints_not_of_every_batch(
    make_host: HostFactory,
) -> None:
    """A stream's state would grow with every batch if finished splits were kept: the cursor
    already says they were cut. Their count stays for the progress, and a restore from the
    compacted state reads on from the cursor."""
    brokers = FakeBrokers({("t", 0): (0, 0)})
    host = make_host(provider(brokers, starting_offsets="earliest", split_size=10))
    ready(host, 0, 0)
    wait_for(lambda: cursors(host) == {("t", 0): 0}, "the first poll", TIMEOUT)
    brokers.set(("t", 0), 0, 10_000)
    sizes: list[int] = []
    for batch in range(1, 41):  # a batch: a split read, finished, then its checkpoint
        [split] = take_when_polled(host, 1)
        finish(host, 0, 0, split.split_id)
        snapshot = host.checkpoint_coordinator(batch).result(TIMEOUT)
        host.notify_checkpoint_complete(batch).result(TIMEOUT)
        sizes.append(len(snapshot))
    assert sizes[-1] == sizes[20], "the state grows with the number of batches"
    progress = host.progress().result(TIMEOUT)
    assert progress.splits_finished == 40 and progress.splits_discovered == 40

    restored = make_host(provider(brokers, starting_offsets="earliest", split_size=10), "again")
    restored.reset_to_checkpoint(40, snapshot).result(TIMEOUT)
    ready(restored, 0, 0)
    assert cursors(restored) == {("t", 0): 400}
    assert restored.progress().result(TIMEOUT).splits_finished == 40
    assert take_when_polled(restored, 1) == [KafkaSplit("t", 0, 400, 410)]


def test_a_limit_per_trigger_is_shared_among_the_partitions_by_their_backlog() -> None:
    cursors = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    limits = {("t", 0): 300, ("t", 1): 200, ("t", 2): 5}
    assert budget_splits(cursors, limits, 1_000, 40) == [
        KafkaSplit("t", 0, 0, 30),  # 300 of the 400 behind: 3/4 of the limit
        KafkaSplit("t", 1, 100, 110),
    ]
    assert budget_splits(cursors, limits, 20, 400) == [  # no split over split_size
        KafkaSplit("t", 0, 0, 20),
        KafkaSplit("t", 1, 100, 120),
    ]
    assert budget_splits({("t", 0): 0, ("t", 1): 0}, {("t", 0): 1, ("t", 1): 999}, 99, 2) == [
        KafkaSplit("t", 0, 0, 1),  # a share under one offset rounds up
        KafkaSplit("t", 1, 0, 1),
    ]


def test_with_a_limit_per_trigger_each_batch_reads_every_partition_behind(
    make_host: HostFactory,
) -> None:
    brokers = FakeBrokers({("t", 0): (0, 0), ("t", 1): (0, 0)})
    host = make_host(provider(brokers, starting_offsets="earliest", max_offsets_per_trigger=100))
    ready(host, 0, 0)
    wait_for(lambda: cursors(host) == {("t", 0): 0, ("t", 1): 0}, "the first poll", TIMEOUT)
    brokers.set(("t", 0), 0, 1000)
    brokers.set(("t", 1), 0, 1000)
    first = take_when_polled(host)
    assert first == [KafkaSplit("t", 0, 0, 50), KafkaSplit("t", 1, 0, 50)]
    assert splits_of(host) == [KafkaSplit("t", 0, 50, 100), KafkaSplit("t", 1, 50, 100)]


def test_a_bounded_source_with_a_limit_cuts_batch_by_batch_to_the_ends_it_resolved_once(
    make_host: HostFactory,
) -> None:
    brokers = FakeBrokers({("t", 0): (0, 150)})
    settings = {
        "starting_offsets": "earliest",
        "ending_offsets": "latest",
        "max_offsets_per_trigger": 100,
    }
    host = make_host(provider(brokers, **settings))
    ready(host, 0, 0)
    [first] = take_when_polled(host)
    assert first == KafkaSplit("t", 0, 0, 100)
    finish(host, 0, 0, first.split_id)
    snapshot = host.checkpoint_coordinator(1).result(TIMEOUT)
    brokers.set(("t", 0), 0, 900)  # after the ends were resolved: not read, even after a restore

    restored = make_host(provider(brokers, **settings), "restored")
    restored.reset_to_checkpoint(1, snapshot).result(TIMEOUT)
    ready(restored, 0, 0)
    [last] = take_when_polled(restored)
    assert last == KafkaSplit("t", 0, 100, 150)
    finish(restored, 0, 0, last.split_id)
    assert request(restored, 0, 0) == [NoMoreSplits()]


def test_the_progress_says_how_many_offsets_are_behind_the_last_stable_ones(
    make_host: HostFactory,
) -> None:
    """The autoscaler's Kafka lag: offsets up to each partition's newest last stable offset not
    cut into splits yet, and the offsets cut so far, from the polls the source makes anyway."""
    brokers = FakeBrokers({("t", 0): (0, 40), ("t", 1): (0, 10)})
    host = make_host(provider(brokers, starting_offsets="earliest"))
    ready(host, 0, 0)

    def backlog() -> tuple[str, int, int]:
        progress = host.progress().result(TIMEOUT)
        assert progress is not None
        return progress.backlog_unit, progress.backlog, progress.consumed

    wait_for(lambda: backlog() == ("offsets", 50, 0), "the first poll's lag", TIMEOUT)
    taken = take_when_polled(host)
    assert set(taken) == {KafkaSplit("t", 0, 0, 40), KafkaSplit("t", 1, 0, 10)}
    assert backlog() == ("offsets", 0, 50)
    brokers.set(("t", 1), 0, 310)
    wait_for(lambda: backlog() == ("offsets", 300, 50), "the lag of a new poll", TIMEOUT)
