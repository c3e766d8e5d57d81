"""The start of a Batch driver attempt (recovery) and the inspection of a failed round.

Start of an attempt (FLIP-383 "JobMaster failover"): register with every shuffle server and wait
up to ``previousWorkerRecoveryTimeout`` for them, ending early once every partition the event log
names is listed; list the partitions (checksums verified); replay the log; keep a task finished
when all its partitions survived (:func:`~finishable.driver.batch.joblog.recover`); restore each
source's enumerator from its newest snapshot and ``subtask_reset`` every unfinished reader
subtask.

A round that fails is looked at, not blindly retried: partitions are listed again with their
checksums, and if a shuffle server went away or a partition is gone or corrupt, the lost tasks
are finished no more and the walk runs again; a failure that lost nothing (an unreadable input
file, a bug in the program) fails the job with its message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from finishable.connectors.sink_store import SinkError
from finishable.coordinator.contract import NO_CHECKPOINT
from finishable.driver.batch.core import BatchSink, DeclaredRead, RuntimeCore
from finishable.driver.batch.joblog import (
    JobLog,
    Listed,
    Recovery,
    StageKind,
    TaskReset,
    decode_event,
    recover,
    replay,
)
from finishable.driver.outcome import JobFailed

log = logging.getLogger(__name__)


class RecoveryMixin(RuntimeCore):
    """What survived: the event log replayed, the shuffle servers listed, lost tasks reset."""

    # -- the attempt's start: replay and reconnect ------------------------------------------

    def _replay(self) -> JobLog:
        pairs = []
        for event in self.events.replay():
            typed = decode_event(event.type, event.data)
            if typed is not None:
                pairs.append((event.seq, typed))
        job = replay(pairs)
        if job.stages:
            log.info(
                "attempt %d: the event log holds %d stage(s), %d finished task(s)",
                self.attempt,
                len(job.stages),
                sum(len(s.finished) for s in job.stages.values()),
            )
        return job

    def _reconnect(self) -> Recovery:
        """Wait for the shuffle servers: all of them, or (recovering) every logged partition."""
        needed = {
            (p.dataset, p.partition)
            for record in self._log.stages.values()
            for _, event in record.finished.values()
            for p in event.partitions
        }
        timeout = self.config.spec.recovery.previous_worker_recovery_timeout.total_seconds()
        started = time.monotonic()
        self.shuffle.wait_for(None, timeout, needed or None)
        answered = self.shuffle.register_all(self.attempt, run=self.config.run)
        self._servers = sorted(answered)
        if not self._servers:
            raise JobFailed(
                f"no shuffle server answered within {timeout:.0f} s: {self.shuffle.urls}"
            )
        # Metadata only: a corrupt partition is caught by the checksum of the read that uses it,
        # and the failed round's listing verifies (a start stays O(partitions), not O(bytes)).
        listed = self._listing(verify=False)
        recovery = recover(self._log, listed, self._staged_exists)
        if self._log.stages:
            log.info(
                "attempt %d reconnected to %d/%d shuffle server(s) in %.1f s; %d partition(s) "
                "listed",
                self.attempt,
                len(self._servers),
                len(self.shuffle.urls),
                time.monotonic() - started,
                len(listed),
            )
        return recovery

    def _listing(self, *, verify: bool = True) -> dict[tuple[str, int], Listed]:
        listing = self.shuffle.list_all(verify=verify)
        for corrupt in listing.corrupt:
            log.warning(
                "partition %s/%s on %s failed its checksum and was dropped: %s",
                corrupt.dataset,
                corrupt.partition,
                corrupt.server,
                corrupt.error,
            )
        self._servers = sorted(listing.answered)
        return {
            (info.dataset, info.partition): Listed(info.server, info.sha256)
            for info in listing.partitions
        }

    @staticmethod
    def _staged_exists_in(sink: BatchSink, staged: Mapping[str, Any]) -> bool:
        path = staged.get("path")
        if path is None:
            return True  # the task had no rows: nothing to lose
        try:
            return sink.store.size(str(path)) == int(staged.get("size", -1))
        except (SinkError, OSError):
            return False

    def _staged_exists(self, stage: str, staged: Mapping[str, Any]) -> bool:
        sink = next((s.sink for s in self._stages if s.name == stage), None)
        if sink is None:
            return True  # checked again when the program declares the sink
        return self._staged_exists_in(sink, staged)

    def _recovery_message(self) -> str:
        if not self._log.stages:
            return f"attempt {self.attempt} running"
        kept = sum(len(t) for t in self._recovery.finished.values())
        return f"attempt {self.attempt} recovered: {kept} finished task(s) survive"

    # -- recovery bookkeeping ---------------------------------------------------------------

    def _reset_unfinished_readers(self) -> None:
        """``subtask_reset`` every reader subtask without surviving output (FLIP-383 step 5),
        then finish again the splits of surviving tasks the restored snapshot does not know
        finished (``Recovery.late``); one whose splits cannot be is reset and runs again."""
        for stage in self._stages:
            if stage.read is None:
                continue
            host = stage.read.coordinator.host
            before = host.progress().result(30)
            view = host.inspect(lambda c: c.assignment_view()).result(30)  # type: ignore[attr-defined]
            subtasks = set(view.orphaned) | set(view.finished.values())
            subtasks |= set(range(stage.shape.parallelism))
            for subtask in sorted(subtasks - set(stage.finished)):
                host.subtask_reset(subtask, NO_CHECKPOINT).result(30)
            for task, splits in sorted(self._recovery.late.get(stage.name, {}).items()):
                if task not in stage.finished:
                    continue
                if not stage.read.coordinator.finish_restored(task, splits):
                    log.warning(
                        "stage %s: task %d finished after the newest snapshot of %s, which "
                        "cannot take its splits back: it runs again",
                        stage.name,
                        task,
                        stage.read.name,
                    )
                    del stage.finished[task]
                    host.subtask_reset(task, NO_CHECKPOINT).result(30)
            after = host.progress().result(30)
            if before is not None and after is not None:
                self.figures.splits_reread += max(0, before.splits_finished - after.splits_finished)

    def _log_resets(self) -> int:
        """``TaskReset`` for each logged finished task this attempt does not keep; how many."""
        count = 0
        for stage in self._stages:
            record = self._log.stages.get(stage.name)
            for task in sorted(set(record.finished) - set(stage.finished)) if record else ():
                self.events.append(TaskReset(stage.name, task), type="TaskReset")
                count += 1
        return count

    def _reset_reader(self, read: DeclaredRead, subtask: int) -> None:
        host = read.coordinator.host
        for old in host.live_attempts().result(30).get(subtask, []):
            host.execution_attempt_failed(subtask, old, None).result(30)
        host.subtask_reset(subtask, NO_CHECKPOINT).result(30)

    def _count_recovery(self, *, resets: int) -> None:
        if not self._log.stages:
            return
        self.figures.tasks_skipped = len(self._finished_tasks())
        self.figures.tasks_rerun = resets
        log.info(
            "recovery: %d task(s) skipped, %d re-run, %d finished split(s) to read again",
            self.figures.tasks_skipped,
            self.figures.tasks_rerun,
            self.figures.splits_reread,
        )

    # -- after a failed round ---------------------------------------------------------------

    def _lost_something(self) -> bool:
        """After a failed round: drop finished tasks whose output is gone; True if any was."""
        before = len(self._servers)
        try:
            listed = self._listing()
        except Exception as error:  # every server down is a loss too
            log.warning("cannot list partitions: %s", error)
            return True
        lost = before != len(self._servers) or len(self._servers) < len(self.shuffle.urls)
        for stage in self._stages:
            if stage.kind is StageKind.SINK:
                continue
            for task, event in list(stage.finished.items()):
                if not all(
                    (found := listed.get((p.dataset, p.partition))) is not None
                    and found.sha256 == p.sha256
                    for p in event.partitions
                ):
                    del stage.finished[task]
                    self.events.append(TaskReset(stage.name, task), type="TaskReset")
                    lost = True
                    if stage.read is not None:
                        self._reset_reader(stage.read, task)
        return lost
