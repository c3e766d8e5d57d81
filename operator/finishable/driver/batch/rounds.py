"""Running a Batch job's stages in rounds, and the final commit of its output.

``run`` walks up from the unfinished sinks (:func:`~finishable.driver.batch.joblog.schedule`) and
runs only those tasks, stage by stage, one Spark job per stage run ("round"): a round is at most
as many tasks as the stage has slots, told to the tasks through a Spark local property. When
nothing is left to run, the final checkpoint publishes every sink task's staged file, once,
sink by sink.
"""

from __future__ import annotations

import logging
import os
import time

from finishable.connectors.batch.datasources import (
    ROUND_PROPERTY,
    SUMMARY_SCHEMA,
    ArrowFunction,
    Round,
    sink_writer,
    stage_writer,
)
from finishable.connectors.jvm import (
    JVM_SINK_WRITE,
    JVM_STAGE_WRITE,
    sink_write_options,
    stage_write_options,
    why_not_jvm_sink,
)
from finishable.connectors.reading import arrow_schema_of
from finishable.connectors.sinks import Iceberg, TransactionalFiles
from finishable.connectors.staging import (
    publish_files,
    read_staged_parts,
    retire_replaced,
    staged_from_json,
)
from finishable.connectors.streaming.sink import StagedMessage, _output_schema
from finishable.driver.batch.core import DeclaredStage, JobSuspended, RuntimeCore
from finishable.driver.batch.joblog import OutputCommitted, StageInitialized, StageKind
from finishable.driver.outcome import JobFailed

log = logging.getLogger(__name__)


class RoundsMixin(RuntimeCore):
    """Stage runs as Spark jobs, and the publication of the output at the end."""

    def _run_stage(self, stage: DeclaredStage, tasks: list[int]) -> None:
        if not stage.initialized:
            self.events.append(
                StageInitialized(
                    stage=stage.name,
                    kind=stage.kind.value,
                    parallelism=stage.parallelism,
                    inputs=stage.inputs,
                    narrow=stage.narrow,
                    source=stage.read.name if stage.read else None,
                    attempt=self.attempt,
                ),
                type="StageInitialized",
            )
            stage.initialized = True
        todo = [t for t in tasks if t not in stage.finished]
        slots = stage.read.slots if stage.read is not None else stage.parallelism
        while todo:
            if self._stop_request is not None:
                raise JobSuspended()
            batch, todo = todo[:slots], todo[slots:]
            self._round += 1
            plan = Round(
                stage=stage.name,
                round=self._round,
                attempt=self.attempt,
                run=self.config.run,
                tasks=batch,
                servers=self._servers,
                quota=stage.read.quota if stage.read is not None else 0,
                narrow=stage.narrow and stage.read is None,
            )
            log.info("stage %s: running %d task(s) %s", stage.name, len(batch), _ranges(batch))
            started = time.monotonic()
            self._execute(stage, plan)
            log.info(
                "stage %s: %d task(s) done in %.1f s (%d/%d finished)",
                stage.name,
                len(batch),
                time.monotonic() - started,
                len(stage.finished),
                stage.shape.parallelism,
            )
        self._report_progress(stage, force=True)
        if stage.read is not None:
            self._snapshot(stage.read, force=True)
            progress = stage.read.coordinator.host.progress().result(30)
            if progress is not None and not progress.fully_finished:
                raise JobFailed(
                    f"stage {stage.name}: every reader task finished but only "
                    f"{progress.splits_finished} of {progress.splits_discovered} splits are done"
                )

    def _execute(self, stage: DeclaredStage, plan: Round) -> None:
        context = self.spark.sparkContext
        context.setLocalProperty(ROUND_PROPERTY, plan.to_property())
        context.setJobDescription(f"{self.config.name}: stage {stage.name} round {plan.round}")
        try:
            if self._jvm_writes(stage):
                self._jvm_write(stage)
            else:
                stage.dataframe.mapInArrow(self._python_writer(stage), SUMMARY_SCHEMA).collect()
        finally:
            context.setLocalProperty(ROUND_PROPERTY, None)  # type: ignore[arg-type]
        self._check_finished(stage, plan)

    def _jvm_writes(self, stage: DeclaredStage) -> bool:
        """Whether Spark's own writers write ``stage``'s tasks (``StageWrite``, ``SinkWrite``);
        the first round of each stage logs which writers and why."""
        reason = self._jvm_refused
        if reason is None and stage.kind is StageKind.SINK:
            assert stage.sink is not None
            reason = why_not_jvm_sink(stage.sink)
        if stage.name not in self._writers_logged:
            self._writers_logged.add(stage.name)
            if reason is None:
                log.info("stage %s: written by Spark's own writers", stage.name)
            else:
                log.info("stage %s: written by Python writers: %s", stage.name, reason)
        return reason is None

    def _jvm_write(self, stage: DeclaredStage) -> None:
        if stage.kind is StageKind.SINK:
            assert isinstance(stage.sink, TransactionalFiles)
            source = JVM_SINK_WRITE
            options = sink_write_options(
                stage.sink,
                endpoint=self.endpoint.url,
                token=self.token,
                batch_id=stage.output_batch,
                environ=os.environ,
            )
        else:
            source = JVM_STAGE_WRITE
            options = stage_write_options(
                endpoint=self.endpoint.url,
                token=self.token,
                dataset=stage.name,
                slotted=stage.read is not None,
            )
        stage.dataframe.write.format(source).options(**options).mode("append").save()

    def _python_writer(self, stage: DeclaredStage) -> ArrowFunction:
        """The ``mapInArrow`` function that writes a task of ``stage``: a sink writer, or a stage
        writer where the JVM's (``StageWrite``) cannot be used."""
        if stage.kind is StageKind.SINK:
            assert stage.sink is not None
            sink = stage.sink
            return sink_writer(
                self.endpoint.url,
                self.token,
                sink.store.url,
                sink.sink_name,
                sink.format if isinstance(sink, TransactionalFiles) else "arrow",
                batch_id=stage.output_batch,
            )
        # The schema of an empty partition: timestamps need a zone (Spark's are UTC).
        schema = arrow_schema_of(stage.dataframe.schema).serialize().to_pybytes()
        return stage_writer(
            self.endpoint.url, self.token, stage.name, schema, slotted=stage.read is not None
        )

    @staticmethod
    def _check_finished(stage: DeclaredStage, plan: Round) -> None:
        missing = [t for t in plan.tasks if t not in stage.finished]
        if missing:
            raise JobFailed(f"stage {stage.name}: task(s) {missing} ended without output")

    def _commit(self, sink_stages: list[DeclaredStage]) -> None:
        """The final checkpoint: publish every sink task's staged file, once, sink by sink in
        the order the program declared them. A sink an earlier attempt published is not
        published again; each sink is exactly once on its own (a reader of two sinks may see
        one published before the other is)."""
        todo = [s for s in sink_stages if s.sink_name not in self._log.committed]
        if not todo:
            return
        for read in self._reads.values():
            progress = read.coordinator.host.progress().result(30)
            if progress is None or not progress.fully_finished:
                raise JobFailed(
                    f"read {read.name!r} is not fully finished at the final checkpoint "
                    f"({progress}): refusing to publish output that misses input"
                )
        self.fence.check()  # a superseded attempt publishes nothing
        for stage in self._stages:
            if stage.promote:
                self.promotion.stage(stage)
        for sink_stage in todo:
            self._publish(sink_stage)

    def _publish(self, sink_stage: DeclaredStage) -> None:
        sink = sink_stage.sink
        assert sink is not None
        parts = [
            StagedMessage(staged_from_json(event.staged))
            for _, event in sorted(sink_stage.finished.items())
            if event.staged is not None
        ]
        self.fence.check()  # again per sink: a newer attempt may take over between two publishes
        if isinstance(sink, Iceberg):
            rows = self._commit_iceberg(sink, sink_stage, parts)
        else:
            rows = self._publish_files(sink, sink_stage, parts)
        committed = OutputCommitted(sink.sink_name, rows)
        self.events.append(committed, type="OutputCommitted")
        self.events.flush(timeout=60)
        self._log.committed[sink.sink_name] = committed

    def _publish_files(
        self, sink: TransactionalFiles, sink_stage: DeclaredStage, parts: list[StagedMessage]
    ) -> int:
        manifest = publish_files(
            sink.store,
            sink_stage.output_batch,
            parts,
            sink.format,
            _output_schema(sink_stage.dataframe.schema),
            overwrite=True,
            run=self.config.run_key,
        )
        retired = retire_replaced(sink.store, sink_stage.output_batch)
        if retired:
            log.info("output of earlier runs retired from %s: batches %s", sink.sink_name, retired)
        log.info("published %d row(s) to %s", manifest.rows, sink.store.display)
        return manifest.rows

    def _commit_iceberg(
        self, sink: Iceberg, sink_stage: DeclaredStage, parts: list[StagedMessage]
    ) -> int:
        """One Iceberg commit of the job's output, recorded as the run's planned batch: a driver
        that crashed after the catalog commit finds it in the table and commits nothing."""
        store = sink.store
        batch_id = sink_stage.output_batch
        staged = [message.part for message in parts]
        target = sink.target
        if target.is_committed(batch_id):
            rows = sum(part.rows for part in staged)
            log.info("the output of run %s is already in %s", self.config.run_key, sink.table)
        else:
            table = read_staged_parts(store, staged, _output_schema(sink_stage.dataframe.schema))
            target.commit(batch_id, table, overwrite=sink.mode == "overwrite")
            rows = table.num_rows
        store.delete_staging_up_to(batch_id)
        log.info("committed %d row(s) to Iceberg table %s", rows, sink.table)
        return rows


def _ranges(tasks: list[int]) -> str:
    if len(tasks) <= 6:
        return str(tasks)
    return f"[{tasks[0]}..{tasks[-1]}]"
