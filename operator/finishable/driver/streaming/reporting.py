"""The streaming driver's reports to the control channel (:class:`Reporter`).

A report says what the driver does, its newest checkpoint, savepoint and answer, the sources'
split progress and, with ``spec.autoscaler``, the load over its metrics window. Reports are
written when the newest checkpoint moved, when forced (a change of state) and otherwise every
:data:`REPORT_EVERY_SECONDS`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from finishable.api.control import DriverReport, DriverState, RequestReport
from finishable.api.status import (
    CoordinatorStatus,
    LifecycleStatus,
    LoadReport,
    SavepointStatus,
)
from finishable.coordinator.contract import CoordinatorProgress
from finishable.driver.streaming.checkpoints import StoredCheckpoint
from finishable.driver.streaming.load import LoadMeter, source_samples
from finishable.driver.streaming.queries import (
    QuerySet,
    checkpoint_status,
    progress_of,
    splits,
)
from finishable.state.control import ControlChannel

REPORT_EVERY_SECONDS = 10.0


class Reporter:
    """Writes one attempt's reports; ``load_window``: the autoscaler's metrics window, if on."""

    def __init__(
        self,
        control: ControlChannel,
        attempt: int,
        queries: QuerySet,
        load_window: float | None = None,
    ) -> None:
        self._control = control
        self._attempt = attempt
        self._queries = queries
        self._coordinators = queries.coordinators
        self._meter = LoadMeter(load_window) if load_window is not None else None
        self._reported_checkpoint: int | None = None
        self._reported_at = 0.0

    def write(
        self,
        state: DriverState,
        *,
        lifecycle: LifecycleStatus | None,
        savepoint: SavepointStatus | None,
        request: RequestReport | None,
        force: bool = False,
        message: str = "",
        permanent: bool = False,
    ) -> None:
        latest = self._queries.latest
        checkpoint = latest.batch_id if latest is not None else None
        now = time.monotonic()
        if (
            not force
            and checkpoint == self._reported_checkpoint
            and now - self._reported_at < REPORT_EVERY_SECONDS
        ):
            return
        self._reported_checkpoint = checkpoint
        self._reported_at = now
        progress = progress_of(self._coordinators)
        self._control.write_report(
            DriverReport(
                attempt=self._attempt,
                state=state,
                lifecycle=lifecycle,
                last_checkpoint=checkpoint_status(latest),
                savepoint=savepoint,
                request=request,
                coordinator=self._progress(latest, progress),
                queries=self._queries.statuses(),
                message=message or self._skipped(),
                permanent=permanent,
                updated_at=datetime.now(UTC),
                load=self._load(progress) if state is DriverState.RUNNING else None,
            )
        )

    def _load(self, progress: dict[str, CoordinatorProgress]) -> LoadReport | None:
        """The load over the autoscaler's window (``spec.autoscaler``), once it is full."""
        meter = self._meter
        if meter is None:
            return None
        now = time.time()
        for query in self._queries.queries:
            if query.handle is not None:
                meter.take_progress(query.name, query.handle, now)
        return meter.measure(now, source_samples(progress))

    def _skipped(self) -> str:
        """Input a source skipped (``on_error="skip"``), named, for the status."""
        skipped = {
            split: reason
            for coordinator in self._coordinators
            for split, reason in coordinator.state().skipped.items()
        }
        if not skipped:
            return ""
        named = "; ".join(f"{split}: {reason}" for split, reason in sorted(skipped.items())[:5])
        more = f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
        return f"skipped {len(skipped)} unreadable input split(s): {named}{more}"

    def _progress(
        self, latest: StoredCheckpoint | None, progress: dict[str, CoordinatorProgress]
    ) -> CoordinatorStatus:
        total, finished = splits(progress)
        return CoordinatorStatus(
            snapshot=latest.location if latest is not None else None,
            splits_total=total,
            splits_finished=finished,
        )
