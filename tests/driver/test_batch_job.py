"""The batch runtime end to end: `finishable run` drives real drivers and real shuffle servers.

The job is the batch example (``examples/batch/aggregate.py``: parse and filter order files, then
total them by customer). Drivers and shuffle servers are killed with SIGKILL; the output is
compared with a ground truth computed by pandas from the same files, and with an uninterrupted run.
Every split a reader task reads is appended to an audit file (``FINISHABLE_SPLIT_AUDIT``), which is
how re-reads are counted at the readers.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from finishable.connectors.batch.datasources import AUDIT_ENV
from finishable.connectors.sinks import TransactionalFiles
from finishable.driver.batch.core import event_log_prefix, logged_runs
from finishable.driver.batch.joblog import TaskFinished, decode_event
from finishable.state import LocalDirBackend
from finishable.state.eventlog import read_events
from testcluster.batchlog import durable_at_crash, read_after_the_newest_snapshot
from testcluster.processes import alive, start_runner

pytestmark = pytest.mark.full

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "batch"
sys.path.insert(0, str(EXAMPLE))
from orders import ground_truth  # noqa: E402

FILES = 24
T = TypeVar("T")
ROWS = 4000


class BatchJob:
    """One Batch job run by `finishable run` in a subprocess, observed through its local files."""

    def __init__(
        self,
        tmp: Path,
        name: str,
        *,
        retain: str = "2m",
        files: int = FILES,
        attempts: int = 5,
        storage: Path | None = None,
        snapshot_min_pause: str | None = "1s",
        rows: int = ROWS,
        standby: bool = False,
    ) -> None:
        self.name = name
        self.files = files
        self.input = tmp / "input"
        self.output = tmp / "output"
        self.state = tmp / "state"
        self.audit = tmp / "audit.jsonl"
        self.manifest = tmp / f"{name}.yaml"
        tmp.mkdir(parents=True, exist_ok=True)
        # The example's own manifest, pointed at this test's files, with short timeouts.
        document = yaml.safe_load((EXAMPLE / "local.yaml").read_text())
        document["metadata"]["name"] = name
        spec = document["spec"]
        spec["application"]["file"] = str(EXAMPLE / "aggregate.py")
        spec["application"]["args"] = [
            f"--input={self.input}",
            f"--output={self.output}",
            f"--files={files}",
            f"--rows={rows}",
        ]
        spec["application"]["sparkConf"] = {"spark.sql.shuffle.partitions": "3"}
        # Reader tasks of a few splits each, whatever their size (readTaskSize), as the recovery
        # tests below count them.
        spec["recovery"].update(
            maxAttempts=attempts,
            eventStore={"flushInterval": "100ms"},
            readTaskSize="1Ki",
            standby=standby,
        )
        spec["shuffle"]["retainTimeout"] = retain
        if snapshot_min_pause is None:  # the default (3m)
            del spec["recovery"]["snapshotMinPause"]
        else:
            spec["recovery"]["snapshotMinPause"] = snapshot_min_pause
        self.storage = storage or self.home / "state"
        if storage is not None:
            spec["checkpointing"]["storage"] = {"type": "Local", "url": str(storage)}
        self.manifest.write_text(yaml.safe_dump(document))
        self.runner: subprocess.Popen[str] | None = None

    # -- running --------------------------------------------------------------------------------

    def run(self, *extra: str) -> None:
        self.runner = start_runner(
            self.manifest, self.state, *extra, env={**os.environ, AUDIT_ENV: str(self.audit)}
        )

    def finish(self, timeout: float = 600, expect: int = 0) -> str:
        assert self.runner is not None
        output, _ = self.runner.communicate(timeout=timeout)
        assert self.runner.returncode == expect, output + self.logs()
        return output

    def status(self) -> dict[str, Any]:
        try:
            return json.loads((self.home / "status.json").read_text())  # type: ignore[no-any-return]
        except (OSError, ValueError):
            return {}

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "finishable.cli",
                *args,
                self.name,
                "--state-dir",
                str(self.state),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
            check=False,
        )

    def cli_status(self) -> dict[str, Any]:
        done = self.cli("status", "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    def wait(
        self, what: str, accept: Callable[[dict[str, Any]], bool], timeout: float = 600
    ) -> None:
        def accepted() -> bool | None:
            status = self.status()
            return True if status and accept(status) else None

        self.wait_until(what, accepted, timeout)

    def wait_until(self, what: str, probe: Callable[[], T | None], timeout: float = 600) -> T:
        """What ``probe`` finds, once it finds it; fails if the runner ends first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = probe()
            if found is not None:
                return found
            if self.runner is not None and self.runner.poll() is not None:
                output = self.runner.stdout.read() if self.runner.stdout else ""
                raise AssertionError(f"the runner ended before {what}: {output}{self.logs()}")
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}: {self.status()}{self.logs()}")

    def wait_splits(self, finished: int) -> None:
        def done(status: dict[str, Any]) -> bool:
            progress = status.get("coordinator") or {}
            return progress.get("splitsFinished", 0) >= finished

        self.wait(f"{finished} splits finished", done)

    @property
    def home(self) -> Path:
        return self.state / self.name

    def kill_driver(self) -> None:
        _attempt, pid = (self.home / "driver.pid").read_text().split()
        os.kill(int(pid), signal.SIGKILL)

    def shuffle_pid(self, index: int) -> int:
        return int((self.home / "shuffle" / str(index) / "pid").read_text())

    def cleanup(self) -> None:
        """What a test leaves running: the runner, the driver's process group, the servers."""
        if self.runner is not None and self.runner.poll() is None:
            self.runner.kill()
            self.runner.wait(30)
        for pid_file in ("driver.pid", "standby.pid"):
            with contextlib.suppress(OSError, ValueError):
                _attempt, pid = (self.home / pid_file).read_text().split()
                os.killpg(int(pid), signal.SIGKILL)
        for index in (0, 1):
            with contextlib.suppress(OSError, ValueError):
                os.kill(self.shuffle_pid(index), signal.SIGKILL)

    def logs(self) -> str:
        logs = sorted(self.home.glob("driver-*.log")) + sorted(self.home.glob("shuffle/*/*.log"))
        return "".join(f"\n--- {p}\n{p.read_text()[-4000:]}" for p in logs)

    # -- what happened --------------------------------------------------------------------------

    def published(self) -> dict[str, tuple[int, int]]:
        table = TransactionalFiles(str(self.output), name="totals").read_committed()
        rows = table.to_pylist()
        customers = [row["customer"] for row in rows]
        assert len(customers) == len(set(customers)), "a customer was published twice"
        return {row["customer"]: (row["orders"], row["amount_cents"]) for row in rows}

    def published_any(self) -> bool:
        return bool(TransactionalFiles(str(self.output), name="totals").committed_batches())

    def events(self) -> list[tuple[int, object]]:
        backend = LocalDirBackend(self.storage)
        runs = logged_runs(backend)
        if not runs:
            return []  # the first driver has not logged anything yet
        (run,) = runs
        return [
            (event.seq, typed)
            for event in read_events(backend, prefix=event_log_prefix(run))
            if (typed := decode_event(event.type, event.data)) is not None
        ]

    def reads(self) -> list[dict[str, Any]]:
        if not self.audit.exists():
            return []
        return [json.loads(line) for line in self.audit.read_text().splitlines() if line]


@pytest.fixture
def jobs() -> Iterator[list[BatchJob]]:
    started: list[BatchJob] = []
    yield started
    for job in started:
        job.cleanup()


@pytest.fixture(scope="module")
def truth() -> dict[str, tuple[int, int]]:
    return ground_truth(FILES, ROWS)


CRASH_ROWS = 40_000  # a read stage of seconds, so that the crash below lands inside it


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, int]]:
    job = BatchJob(tmp_path_factory.mktemp("plain"), "plain", rows=CRASH_ROWS)
    try:
        job.run()
        output = job.finish()
        assert "Finished" in output
        reads = job.reads()
        assert len(reads) == FILES, "an uninterrupted run reads every file exactly once"
        assert not (job.home / "shuffle" / "0" / "pid").exists(), "servers stopped at the end"
        return job.published()
    finally:
        if job.runner is not None and job.runner.poll() is None:
            job.runner.kill()


def test_driver_killed_half_way_re_reads_no_finished_split(
    tmp_path: Path, jobs: list[BatchJob], uninterrupted: dict[str, Any]
) -> None:
    # The default snapshotMinPause (3m): every read task after the first finishes after the
    # newest snapshot of its source, so its splits are finished again from its TaskFinished.
    job = BatchJob(tmp_path, "crash", snapshot_min_pause=None, rows=CRASH_ROWS)
    jobs.append(job)
    job.run()

    job.wait_until("three read tasks finished in the event log", lambda: _read_tasks_logged(job))
    job.kill_driver()
    output = job.finish()
    assert "Finished" in output

    assert job.published() == ground_truth(FILES, CRASH_ROWS)
    assert job.published() == uninterrupted

    finished_splits, finished_tasks = _assert_nothing_finished_done_again(job)
    assert finished_splits, "the crash came after some reader tasks had finished"
    late = read_after_the_newest_snapshot(job.events())
    assert late, "read tasks finished after the newest snapshot (else: the crash came too late)"
    assert late <= finished_tasks
    later = [r for r in job.reads() if r["attempt"] >= 2]
    assert len(later) < FILES, "the second attempt read less than everything"

    status = job.cli_status()
    assert status["restarts"] == 1
    recovery = status["recovery"]
    assert recovery["tasksSkipped"] >= len(finished_tasks)
    assert recovery["splitsReread"] == 0


def test_a_batch_driver_asked_to_leave_suspends_and_the_next_attempt_skips_its_work(
    tmp_path: Path, jobs: list[BatchJob], uninterrupted: dict[str, Any]
) -> None:
    """SIGTERM (an evicted or drained driver pod): the driver suspends after its running tasks
    and leaves; the next attempt starts at once, runs nothing finished again, and the restart
    budget is not charged."""
    job = BatchJob(tmp_path, "leaves", snapshot_min_pause=None, rows=CRASH_ROWS)
    jobs.append(job)
    job.run()
    job.wait_until("three read tasks finished in the event log", lambda: _read_tasks_logged(job))
    _attempt, pid = (job.home / "driver.pid").read_text().split()
    os.kill(int(pid), signal.SIGTERM)
    output = job.finish()
    assert "Finished" in output
    assert job.published() == uninterrupted
    _assert_nothing_finished_done_again(job)
    assert _logged(job, 1, "ended DEPARTED"), job.logs()
    status = job.cli_status()
    assert status["restarts"] == 0 and status["departures"] == 1
    assert status["departure"]["reason"] == "Terminated"
    assert status["recovery"]["tasksSkipped"] >= 3


def test_a_warm_standby_driver_takes_over_a_killed_driver(
    tmp_path: Path, jobs: list[BatchJob], uninterrupted: dict[str, Any]
) -> None:
    job = BatchJob(tmp_path, "standby", rows=CRASH_ROWS, standby=True)
    jobs.append(job)
    job.run()
    # The standby starts once attempt 1 runs. The kill does not wait for it to be warm (on a
    # loaded machine the job could end first): an order to a standby still warming is obeyed
    # as soon as it is.
    standby_pid = job.wait_until("a standby of attempt 2", lambda: _pid(job, "standby.pid"))
    assert standby_pid[0] == "2"
    job.wait_until("three read tasks finished in the event log", lambda: _read_tasks_logged(job))
    assert not job.published_any()
    job.kill_driver()
    output = job.finish()

    assert job.published() == ground_truth(FILES, CRASH_ROWS)
    assert job.published() == uninterrupted
    assert f"standby driver took over as attempt 2 (pid {standby_pid[1]})" in output
    assert "standby driver for attempt 3 started" in output, "a new standby after the takeover"
    assert not alive(int(standby_pid[1])), "the promoted standby ended with the job"
    assert _logged(job, 2, "standby taking over as attempt 2")
    assert not _logged(job, 2, "still in flight"), "the lost driver exited: no grace to wait"
    _assert_nothing_finished_done_again(job)
    assert job.cli_status()["restarts"] == 1
    leftover = job.home / "standby.pid"
    assert not leftover.exists() or not alive(int(leftover.read_text().split()[1]))


def _assert_nothing_finished_done_again(job: BatchJob) -> tuple[set[str], set[tuple[str, int]]]:
    """No split or task that was durable when the driver died was read or run again; returns
    them (splits, (stage, task))."""
    finished_splits, finished_tasks = durable_at_crash(job.events())
    reread = {r["split"] for r in job.reads() if r["attempt"] >= 2} & finished_splits
    assert reread == set(), f"finished splits read again: {sorted(reread)}"
    redone = {
        (e.stage, e.task) for _, e in job.events() if isinstance(e, TaskFinished) and e.attempt >= 2
    } & finished_tasks
    assert redone == set(), f"finished tasks run again: {sorted(redone)}"
    return finished_splits, finished_tasks


def _read_tasks_logged(job: BatchJob, count: int = 3) -> bool | None:
    logged = [e for _, e in job.events() if isinstance(e, TaskFinished) and e.stage == "paid"]
    return True if len(logged) >= count else None


def _pid(job: BatchJob, name: str) -> list[str] | None:
    try:
        return (job.home / name).read_text().split() or None
    except OSError:
        return None


def _logged(job: BatchJob, attempt: int, text: str) -> bool | None:
    try:
        return True if text in (job.home / f"driver-{attempt}.log").read_text() else None
    except OSError:
        return None


def test_stop_suspends_a_batch_job_and_resuming_recovers_it(
    tmp_path: Path, jobs: list[BatchJob], truth: dict[str, Any]
) -> None:
    job = BatchJob(tmp_path, "suspend")
    jobs.append(job)
    job.run()
    job.wait_splits(FILES // 3)
    stopped = job.cli("stop", "--timeout", "180")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    output = job.finish()
    assert "Suspended" in output
    assert alive(job.shuffle_pid(0)), "the shuffle servers keep the partitions for the resume"
    finished_splits, _ = durable_at_crash(job.events())
    assert finished_splits, "some reader tasks finished before the stop"

    job.run("--resume")
    output = job.finish()
    assert "Finished" in output
    assert job.published() == truth
    reread = {r["split"] for r in job.reads() if r["attempt"] >= 2} & finished_splits
    assert reread == set(), f"finished splits read again after the resume: {sorted(reread)}"


def test_a_lost_shuffle_server_and_a_corrupt_partition_are_recomputed(
    tmp_path: Path, jobs: list[BatchJob], truth: dict[str, Any]
) -> None:
    job = BatchJob(tmp_path, "lost")
    jobs.append(job)
    job.run()
    # A partition on server 1 that the next attempt will not recompute (its task is durably
    # finished) but must read: it will rot on disk, and only its checksum can tell.
    damaged = job.wait_until(
        "a durably finished partition on shuffle server 1",
        lambda: _durable_partition_file(job, server=1),
    )
    assert job.runner is not None
    # The runner is paused while the faults are arranged, so no new attempt reads or replaces
    # a partition before the damage is done.
    os.kill(job.runner.pid, signal.SIGSTOP)
    try:
        job.kill_driver()
        # server 0's machine is gone (process and volume); the runner starts it again, empty
        os.kill(job.shuffle_pid(0), signal.SIGKILL)
        shutil.rmtree(job.home / "shuffle" / "0" / "data", ignore_errors=True)
        data = bytearray(damaged.read_bytes())
        data[len(data) // 2] ^= 0xFF
        damaged.write_bytes(bytes(data))
    finally:
        os.kill(job.runner.pid, signal.SIGCONT)
    output = job.finish()
    assert "Finished" in output
    assert job.published() == truth
    server_log = (job.home / "shuffle" / "1" / "server.log").read_text()
    assert f"{damaged.parent.name}/{damaged.stem} is corrupt" in server_log, server_log[-4000:]


def _durable_partition_file(job: BatchJob, server: int) -> Path | None:
    """A committed partition on shuffle server ``server`` whose task the event log says is
    durably finished (the next attempt keeps it and reads it instead of recomputing it), if
    there is one yet."""
    _, tasks = durable_at_crash(job.events())
    data = job.home / "shuffle" / str(server) / "data"
    for _, event in job.events():
        if isinstance(event, TaskFinished) and (event.stage, event.task) in tasks:
            for ref in event.partitions:
                # <data-dir>/<job>/<dataset>/<partition>.arrow
                path = next(data.glob(f"*/{ref.dataset}/{ref.partition}.arrow"), None)
                if path is not None:
                    return path
    return None


def test_a_driver_after_the_retain_timeout_recomputes_everything(
    tmp_path: Path, jobs: list[BatchJob], truth: dict[str, Any]
) -> None:
    job = BatchJob(tmp_path, "late", retain="3s")
    jobs.append(job)
    job.run()
    job.wait_splits(FILES // 2)
    assert job.runner is not None
    job.runner.kill()  # the runner and its driver are gone; the servers stay, without heartbeat
    job.runner.wait(30)
    with contextlib.suppress(ProcessLookupError):  # the driver dies with its runner
        job.kill_driver()
    pids = [job.shuffle_pid(index) for index in (0, 1)]
    deadline = time.monotonic() + 300
    while any(alive(pid) for pid in pids):  # they release and exit after 3 s without a driver
        assert time.monotonic() < deadline, "shuffle servers outlived their retain timeout"
        time.sleep(0.2)
    job.run()  # the same command again: the next driver attempt
    output = job.finish()
    assert "Finished" in output
    assert job.published() == truth
    later = {r["split"] for r in job.reads() if r["attempt"] >= 2}
    assert len(later) == FILES, "every split is read again: no partition survived"


def test_an_unreadable_input_file_fails_the_job_naming_it(
    tmp_path: Path, jobs: list[BatchJob]
) -> None:
    job = BatchJob(tmp_path, "broken", files=3, attempts=1)
    jobs.append(job)
    job.input.mkdir(parents=True)
    # Not gzip: the file cannot be read (a malformed record would be Spark's to handle).
    (job.input / "orders-99999.json.gz").write_bytes(b"\x00\x01 not gzip at all\n")
    job.run()
    output = job.finish(expect=1)
    assert "Failed" in output
    status = job.status()
    assert status["phase"] == "Failed"
    assert "orders-99999.json.gz" in json.dumps(status)
    assert not job.published_any(), "nothing is published without all of the input"


def test_a_job_created_again_under_its_name_runs_again_and_replaces_its_output(
    tmp_path: Path, jobs: list[BatchJob], truth: dict[str, Any]
) -> None:
    """State kept outside the job (as ConfigMaps outlive a deleted custom resource) belongs to
    the run that wrote it: a new job of the same name reads everything again and publishes
    again, and readers see one run's output."""
    shared = tmp_path / "shared-state"
    job = BatchJob(tmp_path, "again", files=6, storage=shared)
    jobs.append(job)
    job.run()
    assert "Finished" in job.finish()
    first = TransactionalFiles(str(job.output), name="totals")
    assert first.committed_batches() == [0]
    first_run = first.manifest(0).run  # type: ignore[union-attr]

    job.run("--fresh")  # a new job under the same name: a new uid, the state store kept
    output = job.finish()
    assert "Finished" in output
    assert len(job.reads()) == 2 * job.files, "the new run read every file again"
    assert job.published() == ground_truth(job.files, ROWS)
    sink = TransactionalFiles(str(job.output), name="totals")
    assert sink.committed_batches() == [1], "the earlier run's output was replaced"
    manifest = sink.manifest(1)
    assert manifest is not None and manifest.overwrite
    assert manifest.run not in ("", first_run)
    assert len(logged_runs(LocalDirBackend(shared))) == 2, "each run kept its own event log"
