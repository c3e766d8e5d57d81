"""Kafka topic partitions as splits (FLIP-27's own example): offsets polled, ranges cut on request.

The enumerator polls the brokers off the coordinator thread (``CoordinatorContext.call_async``):
the topics it reads (named, or matching a pattern) and each partition's earliest offset and last
stable offset (``read_committed``: a reader never waits on an open transaction). A partition seen
for the first time starts where ``starting_offsets`` says on the first poll, and at its earliest
offset when it appears later, as in Spark. Splits are cut when a reader asks for work, with no
I/O: at most one ``[cursor, min(latest, cursor + split_size))`` per partition per request, so a
micro-batch's end offsets are what the coordinator knew of the partitions when Spark planned it.
With ``max_offsets_per_trigger`` a request gets at most that many offsets, shared among the
partitions in proportion to how far behind each is (Spark's rate limit), and nothing new while
splits of an earlier cut are still pending: every partition behind is read in each batch, one
task each, rather than the one furthest behind. A bounded source (``ending_offsets``) resolves its
ends on the first poll and, without a limit, cuts every split at once, which is when a Batch job
may start reading it; with one it cuts as a stream does, up to its ends.

The cursor (the next offset to cut, per partition) and the resolved ends are the enumerator's
state; the polled offsets are not, they are polled again. Cuts depend on when the offsets were
polled, so an adopted split discovery has not cut (after a restore, from Spark's offsets log)
moves the cursor past it: a later cut never reads its records again.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

from finishable.coordinator._json import get_int, get_list
from finishable.coordinator.contract import CoordinatorContext, CoordinatorProvider
from finishable.coordinator.enumerator import SplitEnumerator
from finishable.coordinator.errors import CoordinatorRejection, EnumeratorStateError
from finishable.coordinator.events import AddSplits, OperatorEvent
from finishable.coordinator.splits import KafkaSplit, Split

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
OffsetSpec = Literal["earliest", "latest"] | dict[str, dict[int, int]]
"""Spark's forms: ``earliest``, ``latest``, or per topic and partition an offset, where ``-2``
means earliest and ``-1`` latest."""

EARLIEST, LATEST = -2, -1
DEFAULT_SPLIT_SIZE = 1_000_000
"""Offsets per split: a partition with more to read is cut into several (Spark's
``maxRecordsPerPartition``)."""
INTERNAL_TOPIC = re.compile(r"^__")


class KafkaOffsetsError(ValueError):
    """An offsets specification Spark would refuse: the message names it and what is accepted."""


def parse_offsets(value: object, what: str) -> OffsetSpec:
    """``earliest``, ``latest``, or Spark's JSON (a string or a mapping) of partition offsets."""
    if value in ("earliest", "latest"):
        return "earliest" if value == "earliest" else "latest"
    document = value
    if isinstance(value, str):
        try:
            document = json.loads(value)
        except ValueError:
            raise KafkaOffsetsError(
                f"{what}={value!r}: expected 'earliest', 'latest' or JSON such as "
                '{"topic": {"0": 42, "1": -2}} (-2: earliest, -1: latest)'
            ) from None
    if not isinstance(document, Mapping) or not document:
        raise KafkaOffsetsError(
            f"{what}={value!r}: expected 'earliest', 'latest' or a mapping of topic to "
            "{partition: offset}"
        )
    spec: dict[str, dict[int, int]] = {}
    for topic, partitions in document.items():
        if not isinstance(topic, str) or not isinstance(partitions, Mapping):
            raise KafkaOffsetsError(f"{what}: {topic!r} must map to {{partition: offset}}")
        spec[topic] = {}
        for partition, offset in partitions.items():
            try:
                number = int(partition)
            except (TypeError, ValueError):
                raise KafkaOffsetsError(
                    f"{what}: partition {partition!r} of {topic!r} is not a number"
                ) from None
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise KafkaOffsetsError(
                    f"{what}: offset {offset!r} of {topic}-{partition} must be an offset, "
                    "-2 (earliest) or -1 (latest)"
                )
            spec[topic][number] = offset
    return spec


def resolve_offset(
    spec: OffsetSpec, partition: TopicPartition, earliest: int, latest: int
) -> int | None:
    """Where ``spec`` puts ``partition`` given its polled offsets; ``None`` when it names it not."""
    if spec == "earliest":
        return earliest
    if spec == "latest":
        return latest
    assert isinstance(spec, dict)
    offset = spec.get(partition[0], {}).get(partition[1])
    if offset is None:
        return None
    if offset == EARLIEST:
        return earliest
    if offset == LATEST:
        return latest
    return offset


def cut_splits(
    cursors: Mapping[TopicPartition, int],
    limits: Mapping[TopicPartition, int],
    split_size: int,
    wanted: int,
) -> list[KafkaSplit]:
    """At most one split per partition, up to ``wanted``, the partitions furthest behind first:
    ``[cursor, min(limit, cursor + split_size))`` where the limit is past the cursor."""
    behind = sorted(
        (
            (limits[partition] - cursor, partition)
            for partition, cursor in cursors.items()
            if limits.get(partition, cursor) > cursor
        ),
        key=lambda lag: (-lag[0], lag[1]),
    )
    splits = []
    for _, (topic, number) in behind[: max(wanted, 0)]:
        start = cursors[(topic, number)]
        end = min(limits[(topic, number)], start + split_size)
        splits.append(KafkaSplit(topic, number, start, end))
    return splits


def budget_splits(
    cursors: Mapping[TopicPartition, int],
    limits: Mapping[TopicPartition, int],
    split_size: int,
    budget: int,
) -> list[KafkaSplit]:
    """One split per partition behind, ``budget`` offsets in all shared in proportion to each
    partition's backlog (a share under one offset rounds up, as Spark's rate limit does), none
    longer than ``split_size``."""
    backlog = {
        partition: limits[partition] - cursor
        for partition, cursor in sorted(cursors.items())
        if limits.get(partition, cursor) > cursor
    }
    total = sum(backlog.values())
    splits = []
    for (topic, number), behind in backlog.items():
        share = budget * behind / total
        size = min(behind, split_size, math.ceil(share) if share < 1 else math.floor(share))
        start = cursors[(topic, number)]
        splits.append(KafkaSplit(topic, number, start, start + size))
    return splits


Polled = dict[TopicPartition, tuple[int, int]]
"""Each partition's earliest offset and last stable offset."""
Poller = Callable[[], Polled]


def admin_poller(
    bootstrap_servers: str,
    client_options: Mapping[str, str],
    matches: Callable[[str], bool],
    timeout: float = 30.0,
) -> Poller:
    """Polls with confluent-kafka's admin client (imported here: only the driver needs it)."""
    from confluent_kafka import IsolationLevel  # noqa: PLC0415
    from confluent_kafka import TopicPartition as KafkaPartition  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415
    from confluent_kafka.admin._listoffsets import OffsetSpec  # noqa: PLC0415

    admin = AdminClient({**client_options, "bootstrap.servers": bootstrap_servers})

    def offsets(partitions: list[KafkaPartition], spec: Any) -> dict[TopicPartition, int]:
        futures = admin.list_offsets(
            dict.fromkeys(partitions, spec),
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=timeout,
        )
        return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}

    def poll() -> Polled:
        metadata = admin.list_topics(timeout=timeout)
        partitions = [
            KafkaPartition(name, number)
            for name, topic in metadata.topics.items()
            if topic.error is None and not INTERNAL_TOPIC.match(name) and matches(name)
            for number in topic.partitions
        ]
        if not partitions:
            return {}
        earliest = offsets(partitions, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        latest = offsets(partitions, OffsetSpec.latest())  # type: ignore[no-untyped-call]
        return {key: (earliest[key], latest[key]) for key in earliest}

    return poll


class KafkaSplitEnumerator(SplitEnumerator):
    """Cuts the polled offsets of Kafka topic partitions into splits on request."""

    source_kind: ClassVar[str] = "kafka"
    forgets_finished_splits: ClassVar[bool] = True  # the cursor says what was cut

    def __init__(
        self,
        context: CoordinatorContext,
        poller: Poller,
        *,
        identity: Mapping[str, Any],
        starting_offsets: OffsetSpec = "latest",
        ending_offsets: OffsetSpec | None = None,
        split_size: int = DEFAULT_SPLIT_SIZE,
        max_offsets_per_trigger: int | None = None,
        discovery_interval: float = 1.0,
        retry_delay: float = 1.0,
        max_poll_failures: int = 10,
    ) -> None:
        if split_size < 1:
            raise ValueError(f"split_size must be at least 1 offset, got {split_size}")
        if discovery_interval <= 0:
            raise ValueError(f"discovery_interval must be positive, got {discovery_interval}")
        self._poller = poller
        # as a snapshot reads it back: JSON keys are strings
        self._identity = json.loads(json.dumps(dict(identity), sort_keys=True))
        self._starting = starting_offsets
        self._ending = ending_offsets
        self._split_size = split_size
        if max_offsets_per_trigger is not None and max_offsets_per_trigger < 1:
            raise ValueError(
                f"max_offsets_per_trigger must be at least 1 offset, got {max_offsets_per_trigger}"
            )
        self._budget = max_offsets_per_trigger
        self._interval = discovery_interval
        self._retry_delay = retry_delay
        self._max_poll_failures = max_poll_failures
        self._cursors: dict[TopicPartition, int] = {}
        self._ends: dict[TopicPartition, int] | None = None
        self._latest: dict[TopicPartition, int] = {}
        self._polls = 0
        self._poll_failures = 0
        self._draining = False
        self._horizon: dict[TopicPartition, int] | None = None
        super().__init__(context, bounded=ending_offsets is not None)

    @classmethod
    def provider(cls, poller: Callable[[], Poller], **settings: Any) -> CoordinatorProvider:
        """A provider for ``CoordinatorHost``; ``poller`` builds the poller in the driver."""

        def create(context: CoordinatorContext) -> KafkaSplitEnumerator:
            return cls(context, poller(), **settings)

        return create

    @property
    def cursors(self) -> dict[TopicPartition, int]:
        """The next offset to cut, per partition."""
        return dict(self._cursors)

    @property
    def drain_horizon(self) -> dict[TopicPartition, int] | None:
        """The offsets a drain reads up to, once polled."""
        return None if self._horizon is None else dict(self._horizon)

    @property
    def polls(self) -> int:
        """How many polls completed."""
        return self._polls

    # ------------------------------------------------------------------ state

    def _source_identity(self) -> dict[str, Any]:
        return dict(self._identity)

    def _cursor_json(self) -> dict[str, Any]:
        def rows(offsets: Mapping[TopicPartition, int]) -> list[list[Any]]:
            return [[topic, number, offset] for (topic, number), offset in sorted(offsets.items())]

        return {
            "next": rows(self._cursors),
            "ends": None if self._ends is None else rows(self._ends),
            "polls": self._polls,
        }

    def _restore_cursor(self, cursor: dict[str, Any]) -> None:
        self._cursors = _offsets_of(get_list(cursor, "next", "snapshot.cursor"), "next")
        ends = cursor.get("ends")
        self._ends = None if ends is None else _offsets_of(ends, "ends")
        self._polls = get_int(cursor, "polls", "snapshot.cursor")
        for split in self._splits.values():
            if isinstance(split, KafkaSplit):
                key = (split.topic, split.partition)
                if self._cursors.get(key, 0) < split.end:
                    raise EnumeratorStateError(
                        f"snapshot.cursor.next: {split.topic}-{split.partition} is at "
                        f"{self._cursors.get(key)}, before split {split.split_id}'s end {split.end}"
                    )

    def _reset_cursor(self) -> None:
        self._cursors = {}
        self._ends = None
        self._polls = 0

    def _discovered_with(self, split: Split) -> list[Split]:
        """An adopted split no cut made here: the cursor moves past it, and offsets between the
        cursor and its start (a cut lost with the driver that made it) become a split too."""
        if not isinstance(split, KafkaSplit):
            return [split]
        key = (split.topic, split.partition)
        cursor = self._cursors.get(key)
        if cursor is not None and split.start < cursor:
            raise CoordinatorRejection(
                self.context.name,
                f"split {split.split_id} ({split.topic}-{split.partition} "
                f"[{split.start}, {split.end})) overlaps offsets already cut up to {cursor}: "
                "its records would be read twice",
            )
        self._cursors[key] = split.end
        if cursor is not None and split.start > cursor:
            return [KafkaSplit(split.topic, split.partition, cursor, split.start), split]
        return [split]

    # ------------------------------------------------------------------ discovery

    def _start_discovery(self) -> None:
        if self.bounded and self.discovery_complete:
            return
        self._schedule_poll(0.0, None if self.bounded else self._interval)

    def backlog(self) -> tuple[str, int, int]:
        """Offsets up to each partition's last stable offset (the newest poll's) not cut into
        splits yet, and the offsets cut so far: Kafka's consumer lag, at no extra request."""
        cursors = self._cursors
        behind = sum(
            max(0, latest - cursors.get(key, latest)) for key, latest in self._latest.items()
        )
        return "offsets", behind, sum(self._cursors.values())

    def _schedule_poll(self, delay: float, period: float | None) -> None:
        self.context.call_async(self._poller, self._on_poll, initial_delay=delay, period=period)

    def _on_poll(self, polled: Polled | None, error: BaseException | None) -> None:
        if self.bounded and self.discovery_complete:
            return
        if error is not None or polled is None:
            self._poll_failures += 1
            if self._poll_failures >= self._max_poll_failures:
                self.context.fail_job(
                    RuntimeError(
                        f"polling the Kafka brokers failed {self._poll_failures} times: {error}"
                    )
                )
                return
            logger.warning("%s: polling Kafka failed (will retry): %s", self.context.name, error)
            if self.bounded:
                self._schedule_poll(self._retry_delay, None)
            return
        self._poll_failures = 0
        first = self._polls == 0
        for key, (earliest, latest) in polled.items():
            self._latest[key] = latest
            if key not in self._cursors:
                start = resolve_offset(self._starting, key, earliest, latest) if first else None
                self._cursors[key] = earliest if start is None else start
                logger.info(
                    "%s: reading %s-%d from offset %d",
                    self.context.name,
                    key[0],
                    key[1],
                    self._cursors[key],
                )
        self._polls += 1
        if self.bounded and self._ends is None:
            self._resolve_ends(polled)  # once: a restored source keeps the ends it resolved

    def _resolve_ends(self, polled: Polled) -> None:
        """A bounded source's ends, resolved on this poll; without a limit per trigger, every
        split is cut at once from them."""
        assert self._ending is not None
        ends: dict[TopicPartition, int] = {}
        for key, (earliest, latest) in polled.items():
            end = resolve_offset(self._ending, key, earliest, latest)
            ends[key] = latest if end is None else end
        self._ends = ends
        if self._budget is None:
            while True:
                cut = cut_splits(self._cursors, ends, self._split_size, len(ends))
                if not cut:
                    break
                self._cut(cut)
        self._complete_if_cut_to_the_ends()

    def _complete_if_cut_to_the_ends(self) -> None:
        ends = self._ends
        if ends is not None and all(self._cursors.get(k, end) >= end for k, end in ends.items()):
            self._mark_discovery_complete()

    def _discover_on_demand(self, wanted: int) -> None:
        limits = self._ends if self.bounded else self._latest
        if not limits:
            return
        self._cut(self._next_cut(limits, wanted))
        if self.bounded:
            self._complete_if_cut_to_the_ends()

    def _next_cut(self, limits: Mapping[TopicPartition, int], wanted: int) -> list[KafkaSplit]:
        """The splits a request may add: one per partition up to ``wanted``; with a limit per
        trigger, none while an earlier cut is pending, else the limit shared out."""
        if self._budget is None:
            return cut_splits(self._cursors, limits, self._split_size, wanted)
        if self._pending - self._sentinels:
            return []
        return budget_splits(self._cursors, limits, self._split_size, self._budget)

    # ------------------------------------------------------------------ drain

    def begin_drain(self) -> None:
        """Suspend, then read up to the last stable offsets of this moment (polled now) before
        the drain's sentinel goes out: a drain ends the input where it was when it was asked."""
        self.suspend()
        self._draining = True
        self._horizon = dict(self._ends) if self._ends is not None else None
        if self._horizon is None:
            self.context.call_async(self._poller, self._on_horizon)

    def _on_horizon(self, polled: Polled | None, error: BaseException | None) -> None:
        if not self._draining or self._horizon is not None:
            return
        if error is not None or polled is None:
            logger.warning(
                "%s: polling the drain's end offsets failed (will retry): %s",
                self.context.name,
                error,
            )
            self.context.call_async(self._poller, self._on_horizon, initial_delay=self._retry_delay)
            return
        for key, (earliest, _) in polled.items():
            self._cursors.setdefault(key, earliest)
        self._horizon = {key: latest for key, (_, latest) in polled.items()}
        logger.info(
            "%s: draining to %s",
            self.context.name,
            ", ".join(f"{t}-{n}@{offset}" for (t, n), offset in sorted(self._horizon.items())),
        )

    def resume(self) -> None:
        self._draining = False
        self._horizon = None
        super().resume()

    def _drain_work(self, key: tuple[int, int], max_splits: int) -> OperatorEvent | None:
        if not self._draining:
            return None
        if self._horizon is None:
            return AddSplits(())  # the end offsets are on their way: not a held request
        real = {split_id for split_id in self._pending if split_id not in self._sentinels}
        if len(real) < max_splits:
            cut = self._next_cut(self._horizon, max_splits - len(real))
            self._cut(cut)
            real.update(split.split_id for split in cut)
        first = sorted(real, key=self._seq.__getitem__)[:max_splits]
        if not first:
            return None
        return self._give(key, self._take_pending_in_order(set(first)))

    def _cut(self, splits: list[KafkaSplit]) -> None:
        for split in splits:
            self._cursors[(split.topic, split.partition)] = split.end
        self._add_discovered(splits)


def _offsets_of(rows: object, what: str) -> dict[TopicPartition, int]:
    if not isinstance(rows, list):
        raise EnumeratorStateError(f"snapshot.cursor.{what}: not a list")
    offsets: dict[TopicPartition, int] = {}
    for row in rows:
        if (
            not isinstance(row, list)
            or len(row) != 3
            or not isinstance(row[0], str)
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in row[1:])
        ):
            raise EnumeratorStateError(f"snapshot.cursor.{what}: {row!r} is not [topic, n, offset]")
        offsets[(row[0], row[1])] = row[2]
    return offsets
