"""The autoscaler on a cluster (docs/autoscaler.md): a Streaming job's executor pods follow a load
step up and back down through savepoint rescales, and a Batch job's follow its waiting tasks by
Spark's dynamic allocation; both outputs are exactly the ground truth.

The clickstream example reads files another process writes: this test, at a rate it changes. At
the high rate the micro-batches keep one executor busy well above the target, so the job is
rescaled to two executor pods (stop with savepoint, attempt 2 with two, resumed from it); at the
low rate they idle, and it is rescaled back to one. Every recommendation must hold for the
stabilization window, and the second rescale may not start within the cooldown of the first:
the count changes twice, never back and forth. The windowed counts are state, carried across
both rescales by the savepoints: the drained output must be the counts of every file written,
nothing lost and nothing twice.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from e2e.clickcounts import ROWS, Counts, committed
from e2e.test_batch import RUN as BATCH_RUN
from e2e.test_batch import published
from testcluster.client import ROOT, E2ECluster, batch_example, streaming_example, wait_for

sys.path.insert(0, str(ROOT / "examples" / "streaming"))
sys.path.insert(0, str(ROOT / "examples" / "batch"))
from clicks import window_counts, write_file
from orders import ground_truth

pytestmark = [pytest.mark.e2e, pytest.mark.full]

NAME = "autoscaled"
START = 240.0
RESCALE = 420.0  # a full metrics window and stabilization window, then the rescale itself
COOLDOWN_SECONDS = 90
HOLD_SECONDS = 45  # the high load goes on this long past the cooldown: no rescale may start
HIGH = (0.25, 10 * ROWS)  # seconds between files, and their rows: ~45k rows/s, as fast as this
# test writes them, and one executor's batches are busy ~45% of the time, well above the target
LOW = (20.0, ROWS)  # a small batch now and then: two executors busy ~5% of the time

AUTOSCALER = {
    "enabled": True,
    "minExecutors": 1,
    "maxExecutors": 2,
    "targetUtilization": 0.25,  # Spark's JSON reader takes ~100k rows/s on one core
    "tolerance": 0.2,
    "metricsWindow": "30s",
    "stabilizationWindow": "20s",
    "cooldown": f"{COOLDOWN_SECONDS}s",
    "catchUpTime": "2m",
}


class Upstream:
    """Writes the job's input files at a rate the test changes: the load."""

    def __init__(self, cluster: E2ECluster) -> None:
        self.directory = cluster.data_dir / NAME / "input"
        for directory in (self.directory.parent, self.directory):
            directory.mkdir(exist_ok=True)
            directory.chmod(0o777)  # the pods' user (uid 1000) writes the output beside it
        self.every, self.rows = LOW
        self.written: list[int] = []
        """The rows of each file written, by index."""
        self._stop = threading.Event()
        self._changed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="upstream", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def rate(self, rate: tuple[float, int]) -> None:
        self.every, self.rows = rate
        self._changed.set()

    def stop(self) -> list[int]:
        self._stop.set()
        self._changed.set()
        self._thread.join()
        return self.written

    def write(self) -> None:
        rows = self.rows
        write_file(self.directory, len(self.written), rows)
        self.written.append(rows)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.write()
            self._changed.clear()
            self._changed.wait(self.every)


def autoscaler(cluster: E2ECluster) -> dict[str, Any]:
    return dict(cluster.status(NAME).get("autoscaler") or {})


def running_with(cluster: E2ECluster, attempt: int, executors: int) -> dict[str, Any] | None:
    """The status once attempt ``attempt`` runs with ``executors`` executor pods."""
    status = cluster.status(NAME)
    if status.get("phase") == "Failed":
        raise AssertionError(f"{NAME} failed: {status.get('message')}")
    if (status.get("attempt"), status.get("phase")) != (attempt, "Running"):
        return None
    if status.get("executors") != executors:
        return None
    pods = cluster.running_executors(NAME, attempt)
    return status if len(pods) == executors else None


def rescale_events(cluster: E2ECluster) -> list[str]:
    events = sorted(cluster.events(NAME), key=lambda e: e.get("firstTimestamp") or "")
    return [e["message"] for e in events if e.get("reason") == "RescaleStarted"]


def when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_load_step_up_and_down_rescales_once_each_way_and_keeps_the_output_exact(
    cluster: E2ECluster,
) -> None:
    manifest = streaming_example(
        cluster.data_dir,
        cluster.image,
        NAME,
        ["--unbounded", "--files-per-batch=1000"],
        executor={"instances": 1, "cores": 1, "memory": "1g"},
    )
    manifest["spec"]["checkpointing"]["interval"] = "2s"
    manifest["spec"]["autoscaler"] = AUTOSCALER
    upstream = Upstream(cluster)
    upstream.write()
    assert cluster.apply(manifest).status == 201
    upstream.start()
    cluster.wait_phase(NAME, "Running", START)
    wait_for(lambda: running_with(cluster, 1, 1), "attempt 1 with one executor", START)

    # The load steps up: one executor's batches are busy beyond the target; two are asked for.
    upstream.rate(HIGH)
    up = wait_for(
        lambda: running_with(cluster, 2, 2),
        "the job rescaled to two executors",
        RESCALE,
        on_fail=lambda: f"\nautoscaler: {autoscaler(cluster)}{cluster.logs(NAME)}",
    )
    assert (up["restarts"], up["autoscaler"]["rescales"]) == (0, 1), up["autoscaler"]
    first = up["autoscaler"]["lastRescale"]
    assert (first["fromExecutors"], first["toExecutors"]) == (1, 2), first
    assert up["restoreFrom"] == up["savepoint"]["location"], "resumed from the rescale's savepoint"

    # Still high: the first batches after the restart read what piled up meanwhile, and two
    # executors stay busy; past the cooldown, nothing asks for fewer.
    held_until = when(first["startedAt"]) + timedelta(seconds=COOLDOWN_SECONDS + HOLD_SECONDS)
    wait_for(
        lambda: datetime.now(UTC) >= held_until or cluster.status(NAME)["attempt"] != 2,
        "the high load held past the cooldown",
        COOLDOWN_SECONDS + HOLD_SECONDS + 60,
    )
    held = cluster.status(NAME)
    assert (held["attempt"], held["autoscaler"]["rescales"]) == (2, 1), held["autoscaler"]

    # The load steps down: two executors idle; one is enough.
    upstream.rate(LOW)
    down = wait_for(
        lambda: running_with(cluster, 3, 1),
        "the job rescaled back to one executor",
        RESCALE + COOLDOWN_SECONDS,
        on_fail=lambda: f"\nautoscaler: {autoscaler(cluster)}{cluster.logs(NAME)}",
    )
    second = down["autoscaler"]["lastRescale"]
    assert (second["fromExecutors"], second["toExecutors"]) == (2, 1), second
    gap = (when(second["startedAt"]) - when(first["startedAt"])).total_seconds()
    assert gap >= COOLDOWN_SECONDS, f"the second rescale started {gap:.0f}s after the first"

    # Input ends; once all of it is read, a drain fires every window.
    written = upstream.stop()
    wait_for(
        lambda: cluster.status(NAME)["coordinator"].get("splitsFinished", 0) >= len(written),
        f"all {len(written)} files read",
        START,
        on_fail=lambda: f"\n{cluster.status(NAME)['coordinator']}{cluster.logs(NAME)}",
    )
    cluster.set_state(NAME, "Finished")
    finished = cluster.wait_phase(NAME, "Finished", START)

    # Exactly two rescales, one each way: no flapping.
    assert finished["autoscaler"]["rescales"] == 2, finished["autoscaler"]
    assert finished["restarts"] == 0 and finished["attempt"] == 3, finished
    started = rescale_events(cluster)
    assert len(started) == 2, started
    assert "from 1 to 2 executors" in started[0] and "from 2 to 1 executors" in started[1]
    rescaled = [e for e in cluster.events(NAME) if e.get("reason") == "Rescaled"]
    assert len(rescaled) == 2, [e["message"] for e in rescaled]

    # Nothing lost, nothing twice, across both rescales.
    output: Counts = committed(cluster.data_dir / NAME / "output")
    truth: Counts = Counter()
    for index, rows in enumerate(written):
        for (start, page), n in window_counts([index], rows).items():
            truth[start.replace(tzinfo=None), page] += n
    assert output == truth, (
        f"{sum(output.values())} clicks in {len(output)} windows published, "
        f"{sum(truth.values())} in {len(truth)} written"
    )


BATCH = "elastic-totals"
BATCH_FILES = 1
BATCH_ROWS = 300_000  # one file: its read is one task of ~10 s, and the second executor idles


class ExecutorWatch:
    """Polls a job's executor pods: which ran, and which went while the job still ran."""

    def __init__(self, cluster: E2ECluster, job: str) -> None:
        self.cluster = cluster
        self.job = job
        self.seen: set[str] = set()
        self.released: set[str] = set()
        self.job_done = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="executor-watch", daemon=True)

    def __enter__(self) -> ExecutorWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        alive: set[str] = set()
        while not self._stop.wait(0.5):
            running = self.cluster.running_executors(self.job, 1)
            if not self.job_done.is_set():
                self.released |= alive - running
            alive = running
            self.seen |= running


def test_a_batch_job_releases_an_idle_executor_and_its_output_stays_exact(
    cluster: E2ECluster,
) -> None:
    """spec.autoscaler on a Batch job: Spark's dynamic allocation. The job starts with two
    executor pods, but its read is one task: the idle one is released while that task runs, and
    the stages after it run on what Spark asks for then. Its stage outputs are on the shuffle
    pods, so an executor that goes takes nothing the job needs."""
    autoscaler = {"enabled": True, "minExecutors": 1, "maxExecutors": 2, "idleTimeout": "1s"}
    manifest = batch_example(
        cluster.data_dir,
        cluster.image,
        BATCH,
        BATCH_FILES,
        BATCH_ROWS,
        executor={"instances": 2, "cores": 1, "memory": "1g"},
        autoscaler=autoscaler,
    )
    assert cluster.apply(manifest).status == 201
    with ExecutorWatch(cluster, BATCH) as watch:
        status = cluster.wait_phase(BATCH, "Finished", BATCH_RUN)
        watch.job_done.set()
    assert (status["attempt"], status["restarts"], status["executors"]) == (1, 0, 2), status
    assert watch.released, f"no executor was released before the job ended: {watch.seen}"
    assert published(cluster, f"{BATCH}/totals") == ground_truth(BATCH_FILES, BATCH_ROWS)
