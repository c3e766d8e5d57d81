"""From the program's ``write_stream`` calls to the queries an attempt runs.

``QueryPlan`` decides what each query reads, where its state lives and where it starts from
(``restores``), then builds its Spark writer and checkpoint keeper (``build``). A job of one
query lives exactly where it always did (the attempt's ``checkpoint`` directory, the store's
``snapshots/`` prefix, Spark query name = job name); one of several keeps each query under
``checkpoint/queries/<query>`` and ``snapshots/queries/<query>``, and names the Spark query
``<job>-<query>`` (the first keeps the job's name).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from finishable.api.jobconfig import PREFLIGHT_REFUSED_EXIT_CODE
from finishable.connectors.jvm import jvm_sink_stream
from finishable.connectors.kafka_transactions import KafkaTransactionLost
from finishable.connectors.streaming.commit_hook import HOOK_OPTION, BatchHookClient
from finishable.driver.failures import PermanentFailure, ProgramError
from finishable.driver.source_coordinator import SourceCoordinator
from finishable.driver.streaming import preflight
from finishable.driver.streaming.checkpoints import (
    PENDING_OFFSETS,
    CheckpointKeeper,
    Fingerprints,
    Restored,
    find_restore,
    newest_checkpoint,
    sink_ahead_problem,
)
from finishable.driver.streaming.queries import (
    Output,
    Query,
    QuerySet,
    assign_sources,
    check_query_name,
    checkpointed_queries,
    find_query_restores,
    pending_key,
    query_store,
)
from finishable.state import CheckpointStore
from finishable.timings import PhaseTimings

log = logging.getLogger(__name__)


class QueryPlan:
    """The queries of one attempt: what each reads, where its state is, where it starts."""

    def __init__(
        self,
        outputs: Sequence[Output],
        coordinators: Sequence[SourceCoordinator],
        *,
        job: str,
        store: CheckpointStore,
        checkpoint_dir: Path,
    ) -> None:
        if not outputs:
            raise ProgramError("the program called run() without write_stream(): nothing to run")
        if not coordinators:
            raise ProgramError("the program called run() without read_stream(): nothing to read")
        self.outputs = list(outputs)
        self._job = job
        self._store = store
        single = len(self.outputs) == 1
        if not single:
            for output in self.outputs:
                check_query_name(output.name)
        self.sources = assign_sources(self.outputs, coordinators)
        self.fingerprints = {
            output.name: Fingerprints(
                sources={c.name: c.source.fingerprint() for c in self.sources[output.name]},
                sinks={
                    output.sink.sink_name: json.dumps(output.sink.fingerprint(), sort_keys=True)
                },
            )
            for output in self.outputs
        }
        self.stores = {
            o.name: store if single else query_store(store, o.name) for o in self.outputs
        }
        self.pending = {o.name: PENDING_OFFSETS if single else pending_key(o.name) for o in outputs}
        self.dirs = {
            o.name: checkpoint_dir if single else checkpoint_dir / "queries" / o.name
            for o in self.outputs
        }

    @property
    def single(self) -> bool:
        return len(self.outputs) == 1

    def all_fingerprints(self) -> Fingerprints:
        """Every query's sources and sinks, for the manifest of a composite savepoint."""
        return Fingerprints(
            sources={k: v for f in self.fingerprints.values() for k, v in f.sources.items()},
            sinks={k: v for f in self.fingerprints.values() for k, v in f.sinks.items()},
        )

    def restores(
        self,
        *,
        lineage: str,
        restore_from: str,
        allow_drained: bool,
        allow_sink_ahead: bool,
        allow_non_restored: bool = False,
        reach_like: str = "",
    ) -> dict[str, Restored]:
        """Where each query starts; a sink ahead of its query's start is a PermanentFailure."""
        if self.single:
            name = self.outputs[0].name
            restored = {
                name: find_restore(
                    self._store,
                    lineage=lineage,
                    restore_from=restore_from,
                    allow_drained=allow_drained,
                    fingerprints=self.fingerprints[name],
                    reach_like=reach_like,
                )
            }
        else:
            restored = find_query_restores(
                self._store,
                stores=self.stores,
                lineage=lineage,
                restore_from=restore_from,
                allow_drained=allow_drained,
                fingerprints=self.fingerprints,
                allow_non_restored=allow_non_restored,
                reach_like=reach_like,
            )
        for output in self.outputs:
            problem = sink_ahead_problem(
                restored[output.name],
                output.sink.sink_name,
                output.sink.last_committed_batch(),
                allowed=allow_sink_ahead,
            )
            if problem is not None:
                raise PermanentFailure(problem)
        return restored

    def check_upgrade(self, lineage: str, *, allow_non_restored: bool = False) -> tuple[str, int]:
        """The upgrade check's verdict (``preflight.verdict``) against the running job's newest
        checkpoints of ``lineage``, query by query. A query the program adds starts from
        nothing; one it drops is refused unless ``allow_non_restored`` (as a restore does)."""
        running = sorted(
            name
            for name in checkpointed_queries(self._store)
            if newest_checkpoint(query_store(self._store, name), lineage) is not None
        )
        refusal = query_set_refusal(
            running,
            sorted(self.stores),
            single=self.single,
            one_query_running=newest_checkpoint(self._store, lineage) is not None,
            allow_non_restored=allow_non_restored,
        )
        if refusal:
            return refusal, PREFLIGHT_REFUSED_EXIT_CODE
        if self.single:
            return preflight.verdict(self._store, lineage, self.fingerprints[self.outputs[0].name])
        ours = sorted(self.stores)
        verdicts = {
            name: preflight.verdict(self.stores[name], lineage, self.fingerprints[name])
            for name in ours
        }
        refused = [(name, m, c) for name, (m, c) in verdicts.items() if c != 0]
        shown = refused or [(name, m, c) for name, (m, c) in verdicts.items()]
        message = "; ".join(f"query {name!r}: {m}" for name, m, _ in shown)
        return message, refused[0][2] if refused else 0

    def build(
        self,
        restored: dict[str, Restored],
        *,
        lineage: str,
        hook_url: str,
        token: str,
        interval_seconds: float,
        timings: PhaseTimings,
    ) -> QuerySet:
        """Unpack each query's start into its (empty) directory, start its coordinators from it,
        and make its writer and checkpoint keeper."""
        queries: list[Query] = []
        for index, output in enumerate(self.outputs):
            start = restored[output.name]
            directory = self.dirs[output.name]
            log.info("query %s starts from %s", output.name, start.origin)
            start.apply(directory)
            coordinators = self.sources[output.name]
            for coordinator in coordinators:
                coordinator.start(start.restore_point(coordinator.name))
            keeper = CheckpointKeeper(
                store=self.stores[output.name],
                job=self._job,
                lineage=lineage,
                checkpoint_dir=directory,
                coordinators=coordinators,
                fingerprints=self.fingerprints[output.name],
                restored=start,
                timings=timings,
                pending_key=self.pending[output.name],
            )
            try:
                writer = jvm_sink_stream(
                    output.sink, output.dataframe, endpoint=hook_url, token=token
                ) or output.sink.write_stream(output.dataframe).option(
                    HOOK_OPTION,
                    BatchHookClient(hook_url, token, output.sink.sink_name).to_option(),
                )
            except KafkaTransactionLost as error:  # a restart cannot bring those records back
                raise PermanentFailure(str(error)) from None
            writer = (
                writer.option("checkpointLocation", str(directory))
                .outputMode(output.output_mode)
                .queryName(self._job if index == 0 else f"{self._job}-{output.name}")
                .trigger(processingTime=f"{int(interval_seconds * 1000)} milliseconds")
            )
            queries.append(
                Query(
                    name=output.name,
                    writer=writer,
                    sink=output.sink,
                    coordinators=coordinators,
                    keeper=keeper,
                    checkpoint_dir=directory,
                )
            )
        return QuerySet(
            queries,
            store=self._store,
            job=self._job,
            lineage=lineage,
            fingerprints=self.all_fingerprints(),
        )


def query_set_refusal(
    running: Sequence[str],
    ours: Sequence[str],
    *,
    single: bool,
    one_query_running: bool,
    allow_non_restored: bool,
) -> str:
    """Why the running job's queries (``running``: those of a job of several with a checkpoint;
    ``one_query_running``: a job of one query has one) cannot move into this program's
    (``ours``), or "" when they can. A query the program adds starts from nothing; one it
    drops is refused unless ``allow_non_restored``; the two layouts do not convert."""
    if single and running:
        return (
            f"the running job has {len(running)} queries ({', '.join(running)}) and this "
            "program has one: a job's state does not move between the two layouts"
        )
    if single:
        return ""
    if not running and one_query_running:
        return (
            f"the running job has one query and this program has {len(ours)} "
            f"({', '.join(ours)}): a job's state does not move between the two layouts"
        )
    dropped = sorted(set(running) - set(ours))
    if dropped and not allow_non_restored:
        return (
            f"the running job's queries {', '.join(dropped)} are not in this program (whose "
            f"queries are {', '.join(ours)}): keep their names (write_stream(name=...)), or "
            "drop their state with spec.restoreFrom.allowNonRestoredState: true"
        )
    return ""
