"""The streaming runtime end to end: `finishable run` drives a real PySpark driver process.

Each test writes clickstream JSON files, runs ``streaming_program.py`` through the local runner
(the operator's loop, locally), stops, drains, resumes and SIGKILLs the driver, and compares the
published output with a ground truth computed by pandas from the same files.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from finishable.connectors.jvm import STREAMING_DATA_PATH_CONF
from finishable.connectors.sinks import TransactionalFiles
from finishable.driver.streaming.savepoints import decode_savepoint
from finishable.state import CheckpointKind, CheckpointStore, LocalDirBackend
from finishable.state.control import LocalControlChannel
from testcluster.processes import ended, start_runner

pytestmark = pytest.mark.full

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
PROGRAM = HERE / "streaming_program.py"
START = datetime(2026, 1, 1, tzinfo=UTC)
SEED_START = START + timedelta(days=1)  # as in streaming_program.py
ROWS = 300
PAGES = ("home", "search", "cart")


# -- input and ground truth ---------------------------------------------------------------------


def write_clicks(directory: Path, index: int) -> None:
    """File ``index``: ROWS clicks within its own 90 seconds of event time, shuffled."""
    rng = random.Random(index)
    base = START + timedelta(seconds=90 * index)
    lines = []
    for _ in range(ROWS):
        moment = base + timedelta(milliseconds=rng.randrange(90_000))
        lines.append(
            json.dumps(
                {
                    "user": f"u{rng.randrange(50)}",
                    "page": rng.choice(PAGES),
                    "ts": moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                }
            )
        )
    directory.mkdir(parents=True, exist_ok=True)
    temporary = directory / f".clicks-{index:04d}.tmp"
    temporary.write_text("\n".join(lines) + "\n")
    os.replace(temporary, directory / f"clicks-{index:04d}.json")


def ground_truth(directory: Path, seed_rows: int = 0) -> dict[tuple[datetime, str], int]:
    """Clicks per (minute window, page), by pandas over the same files."""
    frames = [pd.read_json(path, lines=True) for path in sorted(directory.glob("clicks-*.json"))]
    clicks = pd.concat(frames, ignore_index=True)
    if seed_rows:
        seeds = pd.DataFrame(
            {
                "page": "seed",
                "ts": [SEED_START + timedelta(milliseconds=10 * v) for v in range(seed_rows)],
            }
        )
        clicks = pd.concat([clicks[["page", "ts"]], seeds], ignore_index=True)
    # ISO8601: a click on a whole second is written without a fraction (isoformat()).
    moments = pd.to_datetime(clicks["ts"], utc=True, format="ISO8601")
    clicks["window_start"] = moments.dt.floor("min")
    counts = clicks.groupby(["window_start", "page"]).size()
    return {(ts.to_pydatetime(), page): int(n) for (ts, page), n in counts.items()}


def published(output: Path) -> Counter[tuple[datetime, str]]:
    """Every published (window, page) row with its count; a key seen twice is a duplicate."""
    table = TransactionalFiles(str(output), format="parquet", name="counts").read_committed()
    rows: Counter[tuple[datetime, str]] = Counter()
    values: dict[tuple[datetime, str], int] = {}
    for row in table.to_pylist():
        key = (row["window_start"].astimezone(UTC), row["page"])
        rows[key] += 1
        values[key] = row["count"]
    duplicates = [key for key, seen in rows.items() if seen > 1]
    assert not duplicates, f"windows published twice: {duplicates[:5]}"
    return Counter(values)


# -- driving the job ----------------------------------------------------------------------------


class Job:
    """One job run by `finishable run` in a subprocess, observed through its local files."""

    def __init__(
        self,
        tmp: Path,
        name: str,
        *args: str,
        max_attempts: int = 8,
        data_path: str = "python",
        program: Path = PROGRAM,
    ) -> None:
        self.name = name
        self.input = tmp / "input"
        self.output = tmp / "output"
        self.state = tmp / "state"
        self.manifest = tmp / f"{name}.yaml"
        tmp.mkdir(parents=True, exist_ok=True)
        self.manifest.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "finishable.dev/v1alpha1",
                    "kind": "FinishableSparkJob",
                    "metadata": {"name": name},
                    "spec": {
                        "mode": "Streaming",
                        "application": {
                            "file": str(program),
                            "args": [f"--input={self.input}", f"--output={self.output}", *args],
                            "sparkConf": {
                                "spark.sql.shuffle.partitions": "2",
                                STREAMING_DATA_PATH_CONF: data_path,
                            },
                        },
                        "checkpointing": {"interval": "500ms", "retained": 3},
                        "recovery": {"maxAttempts": max_attempts},
                        "stopTimeout": "3m",
                    },
                }
            )
        )
        self.runner: subprocess.Popen[str] | None = None

    def run(self, *extra: str) -> None:
        self.runner = start_runner(self.manifest, self.state, *extra)

    def finish(self, timeout: float = 600) -> str:
        assert self.runner is not None
        output, _ = self.runner.communicate(timeout=timeout)
        assert self.runner.returncode == 0, output + self.driver_logs()
        return output

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

    def status(self) -> dict[str, Any]:
        path = self.state / self.name / "status.json"
        try:
            return json.loads(path.read_text())  # type: ignore[no-any-return]
        except (OSError, ValueError):
            return {}

    def wait(
        self, what: str, accept: Callable[[dict[str, Any]], bool], timeout: float = 600
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            if status and accept(status):
                return
            if self.runner is not None and self.runner.poll() is not None:
                output = self.runner.stdout.read() if self.runner.stdout else ""
                raise AssertionError(f"the runner ended before {what}: {output}")
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}: {self.status()}{self.driver_logs()}")

    def wait_read(self, splits: int, newer_than: int | None = None) -> None:
        """Wait until a running attempt (one after attempt ``newer_than``, if given) read enough.

        "After", not "the next": a driver may also fail by itself and be restarted in between.
        """

        def done(status: dict[str, Any]) -> bool:
            progress = status.get("coordinator") or {}
            return (
                status.get("phase") == "Running"
                and (newer_than is None or status.get("attempt", 0) > newer_than)
                and progress.get("splitsFinished", 0) >= splits
            )

        self.wait(f"{splits} splits read", done)

    def driver_pid(self) -> int:
        _attempt, pid = (self.state / self.name / "driver.pid").read_text().split()
        return int(pid)

    def cleanup(self) -> None:
        """What a test leaves running: the runner, and the driver with its JVM and workers."""
        if self.runner is not None and self.runner.poll() is None:
            self.runner.kill()
            self.runner.communicate(timeout=30)
        with contextlib.suppress(OSError, ValueError):
            os.killpg(self.driver_pid(), signal.SIGKILL)

    def kill_driver(self) -> int:
        status = self.status()
        pid = self.driver_pid()
        os.kill(pid, signal.SIGKILL)
        return int(status.get("attempt", 0))

    def driver_logs(self) -> str:
        logs = sorted((self.state / self.name).glob("driver-*.log"))
        return "".join(f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in logs)

    def store(self) -> CheckpointStore:
        return CheckpointStore(LocalDirBackend(self.state / self.name / "state"))


def finished_through_the_final_checkpoint(job: Job) -> None:
    """The runner ended, the job Finished by its final checkpoint, every task CLOSED."""
    output = job.finish()
    assert "Finishing" in output and "Finished" in output
    status = job.status()
    assert status["phase"] == "Finished"
    assert status["lifecycle"]["mode"] == "FINAL_CHECKPOINT"
    assert all(task["taskStatus"] == "CLOSED" for task in status["lifecycle"]["tasks"])


@pytest.fixture
def cleanup() -> Iterator[list[Job]]:
    jobs: list[Job] = []
    yield jobs
    for job in jobs:
        if job.runner is not None and job.runner.poll() is None:
            job.runner.kill()
            job.runner.wait(30)
        with contextlib.suppress(OSError, ValueError):
            os.killpg(job.driver_pid(), signal.SIGKILL)


# -- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("data_path", ["python", "jvm"])
def test_stop_with_savepoint_keeps_windows_pending_and_drain_fires_them(
    tmp_path: Path, cleanup: list[Job], data_path: str
) -> None:
    job = Job(tmp_path, "stopdrain", data_path=data_path)
    cleanup.append(job)
    for index in range(5):
        write_clicks(job.input, index)
    job.run()
    job.wait_read(5)
    taken = job.cli("savepoint", "--timeout", "180")  # without stopping
    assert taken.returncode == 0, taken.stdout + taken.stderr
    assert job.status()["phase"] == "Running"
    assert job.status()["savepoint"]["drained"] is False
    stopped = job.cli("stop", "--timeout", "180")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    output = job.finish()
    assert "Suspended" in output

    # Without drain: every window that fired is exact, and the open ones did not fire.
    truth = ground_truth(job.input)
    before = published(job.output)
    assert before and all(truth[key] == count for key, count in before.items())
    pending = set(truth) - set(before)
    assert pending, "the last windows wait for event time that has not come"
    savepoint = job.status()["savepoint"]
    assert savepoint["drained"] is False
    assert savepoint["id"] >= 0 and savepoint["sizeBytes"] > 0  # what a snapshot resource shows

    # Resume from the savepoint with more input, then drain: exactly the truth, nothing extra.
    for index in range(5, 8):
        write_clicks(job.input, index)
    job.run("--resume")
    job.wait_read(8)  # the coordinator counts the splits finished before the stop too
    drained = job.cli("stop", "--drain", "--timeout", "180")
    assert drained.returncode == 0, drained.stdout + drained.stderr
    job.finish()
    status = job.status()
    assert status["phase"] == "Finished"
    assert status["savepoint"]["drained"] is True
    assert published(job.output) == Counter(ground_truth(job.input))
    assert pending <= set(published(job.output))
    writers = "Spark's own parquet writer" if data_path == "jvm" else "written by Python"
    logs = "".join(p.read_text() for p in (job.state / job.name).glob("driver-*.log"))
    assert f"sink 'counts': {writers}" in logs

    # A new job from the drained savepoint is refused with the reason (event time is at its end).
    again = Job(tmp_path / "again", "again")
    cleanup.append(again)
    document = yaml.safe_load(job.manifest.read_text())  # the same sources and sinks
    document["metadata"]["name"] = "again"
    document["spec"]["recovery"] = {"maxAttempts": 1}
    document["spec"]["restoreFrom"] = {"savepoint": status["savepoint"]["location"]}
    again.manifest.write_text(yaml.safe_dump(document))
    again.run()
    assert again.runner is not None
    refused, _ = again.runner.communicate(timeout=600)
    assert again.runner.returncode == 1
    assert "it was drained" in refused and "allowDrained" in refused


def test_a_driver_asked_to_leave_takes_a_savepoint_and_costs_no_restart(
    tmp_path: Path, cleanup: list[Job]
) -> None:
    """SIGTERM, what a kubelet sends the driver of an evicted, drained or deleted pod: the
    driver stops with a savepoint, the next attempt starts from it at once, and the restart
    budget (one restart here) is never charged; the output stays exact."""
    job = Job(tmp_path, "departures", max_attempts=1)
    cleanup.append(job)
    files = 3
    for index in range(files):
        write_clicks(job.input, index)
    job.run()
    job.wait_read(files)
    for left in (1, 2):
        attempt = int(job.status()["attempt"])
        os.kill(job.driver_pid(), signal.SIGTERM)
        write_clicks(job.input, files)  # arrives while the driver leaves
        files += 1
        job.wait(
            f"the attempt after departure {left}",
            lambda s, a=attempt: s.get("attempt", 0) > a and s.get("phase") == "Running",
        )
        status = job.status()
        departure = status["departure"]
        assert departure["reason"] == "Terminated" and departure["attempt"] == attempt
        assert departure["savepoint"], f"no departure savepoint: {status}{job.driver_logs()}"
        assert status["restoreFrom"] == departure["savepoint"]
        assert status["departures"] == left and status["restarts"] == 0
        assert status["restartsLeft"] == 1
    # A driver its operator stops itself (an upgrade, the job's deletion) leaves at once: no
    # savepoint nobody would restore; its successor resumes from the newest checkpoint.
    attempt = int(job.status()["attempt"])
    restore = job.status()["restoreFrom"]
    LocalControlChannel(job.state / job.name).release(attempt)
    os.kill(job.driver_pid(), signal.SIGTERM)
    job.wait(
        "the attempt after a released driver left",
        lambda s: s.get("attempt", 0) > attempt and s.get("phase") == "Running",
    )
    status = job.status()
    assert status["departure"]["savepoint"] == "" and status["restoreFrom"] == restore
    assert (status["departures"], status["restarts"]) == (3, 0)
    job.wait_read(files)
    drained = job.cli("stop", "--drain", "--timeout", "300")
    assert drained.returncode == 0, drained.stdout + drained.stderr + job.driver_logs()
    job.finish()
    status = job.status()
    assert status["phase"] == "Finished" and status["restarts"] == 0
    assert published(job.output) == Counter(ground_truth(job.input))


@pytest.mark.parametrize("data_path", ["python", "jvm"])
def test_driver_killed_at_random_moments_is_exactly_once(
    tmp_path: Path, cleanup: list[Job], data_path: str
) -> None:
    rng = random.Random(7)
    job = Job(tmp_path, "crashes", "--seed-rows=6000", data_path=data_path)
    cleanup.append(job)
    files = 3
    for index in range(files):
        write_clicks(job.input, index)
    job.run()
    kills = 0
    for _ in range(4):
        attempt = int(job.status().get("attempt", 1))
        job.wait(
            f"attempt {attempt} running",
            lambda s, a=attempt: s.get("phase") == "Running" and s.get("attempt", 0) >= a,
        )
        time.sleep(rng.uniform(1.0, 6.0))  # mid-batch, mid-publish or between batches
        write_clicks(job.input, files)
        files += 1
        killed = job.kill_driver()
        kills += 1
        job.wait(
            "the next attempt",
            lambda s, k=killed: s.get("attempt", 0) > k and s.get("phase") == "Running",
        )

    # The bounded seeds ended long ago; checkpoints went on, and its snapshot says it finished.
    job.wait_read(files + 12)
    newest = job.store().latest(CheckpointKind.CHECKPOINT)
    assert newest is not None
    seeds = json.loads(decode_savepoint(newest.data).coordinators["seeds"])
    assert seeds["fully_finished"] is True

    # A kill during the drain itself: the next attempt drains again.
    drain = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "finishable.cli",
            "stop",
            job.name,
            "--drain",
            "--state-dir",
            str(job.state),
            "--timeout",
            "400",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    job.wait("the drain to start", lambda s: s.get("phase") == "Draining")
    time.sleep(rng.uniform(0.0, 1.5))
    job.kill_driver()
    drain_output, _ = drain.communicate(timeout=420)
    assert drain.returncode == 0, drain_output + job.driver_logs()
    job.finish()
    status = job.status()
    assert status["phase"] == "Finished" and status["restarts"] == kills + 1
    assert published(job.output) == Counter(ground_truth(job.input, seed_rows=6000))


def test_a_driver_superseded_while_it_was_frozen_writes_nothing_and_stops(
    tmp_path: Path, cleanup: list[Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A driver pod outlives an operator that lost it; a local driver dies with its runner unless
    # told otherwise (finishable.local.driver_process.OUTLIVE_ENV).
    monkeypatch.setenv("FINISHABLE_DRIVER_OUTLIVES_RUNNER", "1")
    job = Job(tmp_path, "zombie")
    cleanup.append(job)
    for index in range(2):
        write_clicks(job.input, index)
    job.run()
    job.wait(
        "attempt 1 checkpointing",
        lambda s: s.get("phase") == "Running" and bool(s.get("lastCheckpoint")),
    )
    # Its node is cut off: the driver runs on, unseen, while its runner (the operator, which
    # lost the pod) starts a successor.
    zombie = job.driver_pid()
    os.killpg(zombie, signal.SIGSTOP)
    assert job.runner is not None
    job.runner.kill()
    job.runner.wait(30)
    (job.state / job.name / "driver.pid").unlink()
    write_clicks(job.input, 2)
    job.run()
    job.wait(
        "attempt 2 running", lambda s: s.get("attempt", 0) >= 2 and s.get("phase") == "Running"
    )
    job.wait_read(3, newer_than=1)

    os.killpg(zombie, signal.SIGCONT)
    deadline = time.monotonic() + 600
    while not ended(zombie):
        assert time.monotonic() < deadline, "the superseded driver kept running" + job.driver_logs()
        time.sleep(0.5)
    zombie_log = (job.state / job.name / "driver-1.log").read_text()
    assert "was superseded by attempt 2 of run 1" in zombie_log, zombie_log[-3000:]
    assert job.status().get("attempt") == 2 and job.status().get("phase") == "Running"

    write_clicks(job.input, 3)
    job.wait_read(4)
    drained = job.cli("stop", "--drain", "--timeout", "180")
    assert drained.returncode == 0, drained.stdout + drained.stderr + job.driver_logs()
    job.finish()
    assert job.status()["phase"] == "Finished"
    assert published(job.output) == Counter(ground_truth(job.input))


@pytest.mark.quick
def test_bounded_input_ends_finished_through_its_final_checkpoint(
    tmp_path: Path, cleanup: list[Job]
) -> None:
    job = Job(tmp_path, "bounded", "--bounded")
    cleanup.append(job)
    for index in range(4):
        write_clicks(job.input, index)
    job.run()
    finished_through_the_final_checkpoint(job)
    # The last windows are only published by the final checkpoint's batch.
    assert published(job.output) == Counter(ground_truth(job.input))


def test_bad_input_is_named_a_missing_savepoint_refused_and_unreadable_files_skipped(
    tmp_path: Path, cleanup: list[Job]
) -> None:
    # Errors no restart can cure fail the job after its first attempt, whatever the budget.
    missing = Job(tmp_path / "missing", "missing")
    cleanup.append(missing)
    document = yaml.safe_load(missing.manifest.read_text())
    document["spec"]["restoreFrom"] = {"savepoint": str(tmp_path / "nowhere" / "sp-1.blob")}
    missing.manifest.write_text(yaml.safe_dump(document))
    missing.run()
    assert missing.runner is not None
    refused, _ = missing.runner.communicate(timeout=600)
    assert missing.runner.returncode == 1 and "no savepoint at" in refused
    assert (missing.status()["phase"], missing.status()["attempt"]) == ("Failed", 1), refused

    typo = Job(tmp_path / "typo", "typo", "--group-by=pgae")
    cleanup.append(typo)
    typo.run()
    assert typo.runner is not None
    output, _ = typo.runner.communicate(timeout=600)
    status = typo.status()
    assert typo.runner.returncode == 1, output
    assert (status["phase"], status["attempt"], status["restarts"]) == ("Failed", 1, 0), output
    assert "pgae" in status["message"] and "not restarted" in status["message"], status

    # No restart: one Spark start is all this needs (a restart would read the same bytes).
    failing = Job(tmp_path / "fail", "unreadable", "--bounded", "--format=parquet", max_attempts=0)
    cleanup.append(failing)
    failing.input.mkdir(parents=True)
    (failing.input / "broken.parquet").write_bytes(b"not parquet at all")
    failing.run()
    assert failing.runner is not None
    output, _ = failing.runner.communicate(timeout=600)
    assert failing.runner.returncode == 1
    assert "broken.parquet" in output
    assert (failing.status()["phase"], failing.status()["attempt"]) == ("Failed", 1), output

    skipping = Job(tmp_path / "skip", "skipping", "--bounded", "--on-error=skip")
    cleanup.append(skipping)
    for index in range(2):
        write_clicks(skipping.input, index)
    truth = ground_truth(skipping.input)
    # Not gzip: the file cannot be read (a malformed record would be Spark's to handle).
    (skipping.input / "clicks-0002.json.gz").write_bytes(b'{"user": "u1", "page": tru\n\xff\xfe')
    skipping.run()
    output = skipping.finish()
    assert skipping.status()["phase"] == "Finished"
    assert "skipped" in output and "clicks-0002.json.gz" in output
    assert published(skipping.output) == Counter(truth)
