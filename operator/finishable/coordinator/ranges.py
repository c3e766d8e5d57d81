"""A generated source of row ranges, bounded or arriving at a rate: for tests and benchmarks.

``[start, end)`` is cut into ``split_size`` rows per split; without ``end`` the source is
unbounded. With ``rows_per_second`` a range only appears once the clock says all its rows exist,
which is how an unbounded stream looks to a reader. Ranges are generated on demand on the
coordinator thread: it is arithmetic, not I/O, and keeps a huge bounded range cheap.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, ClassVar

from finishable.coordinator._json import get_int
from finishable.coordinator.contract import CoordinatorContext, CoordinatorProvider
from finishable.coordinator.enumerator import SplitEnumerator
from finishable.coordinator.errors import EnumeratorStateError
from finishable.coordinator.splits import RangeSplit

DEFAULT_DISCOVERY_BATCH = 256


class RangeSplitEnumerator(SplitEnumerator):
    """Splits ``RangeSplit(k, k + split_size)`` of a bounded or unbounded row range."""

    source_kind: ClassVar[str] = "ranges"
    forgets_finished_splits: ClassVar[bool] = True  # the cursor says what was cut

    def __init__(
        self,
        context: CoordinatorContext,
        *,
        start: int = 0,
        end: int | None = None,
        split_size: int,
        rows_per_second: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        discovery_batch: int = DEFAULT_DISCOVERY_BATCH,
    ) -> None:
        if split_size < 1:
            raise ValueError(f"split_size must be at least 1 row, got {split_size}")
        if end is not None and end < start:
            raise ValueError(f"range [{start}, {end}) ends before it starts")
        if rows_per_second is not None and rows_per_second <= 0:
            raise ValueError(f"rows_per_second must be positive, got {rows_per_second}")
        if discovery_batch < 1:
            raise ValueError("discovery_batch must be at least 1")
        self._first = start
        self._end = end
        self._split_size = split_size
        self._rate = rows_per_second
        self._clock = clock
        self._discovery_batch = discovery_batch
        self._cursor = start
        self._anchor: tuple[float, int] | None = None
        super().__init__(context, bounded=end is not None)

    @classmethod
    def provider(
        cls,
        *,
        start: int = 0,
        end: int | None = None,
        split_size: int,
        rows_per_second: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        discovery_batch: int = DEFAULT_DISCOVERY_BATCH,
    ) -> CoordinatorProvider:
        """A provider for ``CoordinatorHost`` with this configuration."""

        def create(context: CoordinatorContext) -> RangeSplitEnumerator:
            return cls(
                context,
                start=start,
                end=end,
                split_size=split_size,
                rows_per_second=rows_per_second,
                clock=clock,
                discovery_batch=discovery_batch,
            )

        return create

    @property
    def cursor(self) -> int:
        """The first row not yet cut into a split."""
        return self._cursor

    def _source_identity(self) -> dict[str, Any]:
        return {"start": self._first, "end": self._end, "split_size": self._split_size}

    def _cursor_json(self) -> dict[str, Any]:
        return {"next_start": self._cursor}

    def _restore_cursor(self, cursor: dict[str, Any]) -> None:
        value = get_int(cursor, "next_start", "snapshot.cursor")
        if value < self._first or (self._end is not None and value > self._end):
            raise EnumeratorStateError(
                f"snapshot.cursor.next_start: {value} is outside the source's range"
            )
        self._cursor = value

    def _reset_cursor(self) -> None:
        self._cursor = self._first

    def _start_discovery(self) -> None:
        self._anchor = (self._clock(), self._cursor)
        self._complete_if_done()

    def _after_restore(self) -> None:
        # The rate applies from the restore on: rows 'produced' while the job was down are not
        # made up at once.
        if self._anchor is not None:
            self._anchor = (self._clock(), self._cursor)
        self._complete_if_done()

    def _splits_total_hint(self) -> int | None:
        if self._end is None:
            return None
        return math.ceil((self._end - self._first) / self._split_size)

    def _available_end(self) -> int | None:
        """The first row that does not exist yet (``None``: no limit)."""
        if self._rate is None:
            return self._end
        if self._anchor is None:
            return self._cursor
        since, row = self._anchor
        produced = row + math.floor(self._rate * max(0.0, self._clock() - since))
        return produced if self._end is None else min(produced, self._end)

    def _discover_on_demand(self, wanted: int) -> None:
        limit = self._available_end()
        count = max(wanted, self._discovery_batch)
        new: list[RangeSplit] = []
        cursor = self._cursor
        while len(new) < count:
            if self._end is not None and cursor >= self._end:
                break
            split_end = cursor + self._split_size
            if self._end is not None:
                split_end = min(split_end, self._end)
            if limit is not None and split_end > limit:
                break
            new.append(RangeSplit(cursor, split_end))
            cursor = split_end
        self._cursor = cursor
        self._add_discovered(new)
        self._complete_if_done()

    def _complete_if_done(self) -> None:
        if self._end is not None and self._cursor >= self._end and not self.discovery_complete:
            self._mark_discovery_complete()
