"""Soak: a stateful streaming job under `finishable run` for a long time, with random driver kills.

The job (``benchmarks/soak_job.py``) counts clicks per (10-minute window, user, page) with a
one-hour watermark over clickstream files that arrive every ``--every`` seconds (90 s of event
time each), so its state holds some 25,000 keys and each batch changes a part of them;
Spark's state maintenance runs every few seconds and the job checkpoints every 2 s, so the
SIGKILLs, at random moments, land during batches, checkpoint uploads and maintenance alike. At the
end the input stops, the job is drained (`finishable stop --drain`) and every key's published
count is compared with the count computed from the input files: lost and duplicated clicks.

It prints one JSON line: kills, rows, lost, duplicated, the driver's resident memory (its process
group: Python driver, JVM, Python workers) at the start and end of the run, the bytes a checkpoint
wrote against the state it covers, and the store's size against what ``retained`` full copies
would take.

    .venv/bin/python benchmarks/soak.py [--minutes 20] [--provider hdfs|rocksdb] [--every 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "streaming"))

from clicks import clicks_of, write_file  # noqa: E402 - the example's generator and truth

from finishable.connectors.sinks import TransactionalFiles  # noqa: E402

JOB = "soak"
PROVIDERS = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}
STORED = re.compile(
    r"checkpoint (\d+) stored: (\d+) files, (\d+) bytes of which (\d+) new, index (\d+)"
)
RETAINED = 3


def manifest(work: Path, provider: str, files_per_batch: int) -> Path:
    document = {
        "apiVersion": "finishable.dev/v1alpha1",
        "kind": "FinishableSparkJob",
        "metadata": {"name": JOB},
        "spec": {
            "mode": "Streaming",
            "application": {
                "file": str(ROOT / "benchmarks" / "soak_job.py"),
                "args": [
                    f"--input={work / 'input'}",
                    f"--output={work / 'output'}",
                    f"--files-per-batch={files_per_batch}",
                ],
                "sparkConf": {
                    "spark.sql.shuffle.partitions": "3",
                    "spark.sql.streaming.stateStore.providerClass": PROVIDERS[provider],
                    "spark.sql.streaming.stateStore.maintenanceInterval": "2s",
                    "spark.sql.streaming.stateStore.minDeltasForSnapshot": "5",
                    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
                },
            },
            "checkpointing": {
                "interval": "2s",
                "retained": RETAINED,
                "storage": {"type": "Local", "url": str(work / "store")},
            },
            # Kills come every minute or so: a budget for a soak, not for production.
            "recovery": {"maxAttempts": 100, "failureRateInterval": "1h"},
            "stopTimeout": "10m",
        },
    }
    path = work / "soak.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def slot(ts: str) -> datetime:
    moment = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    return moment - timedelta(
        minutes=moment.minute % 10, seconds=moment.second, microseconds=moment.microsecond
    )


def truth(files: int, rows: int) -> Counter[tuple[str, str, datetime]]:
    counts: Counter[tuple[str, str, datetime]] = Counter()
    for index in range(files):
        for click in clicks_of(index, rows):
            counts[click["user"], click["page"], slot(click["ts"])] += 1
    return counts


def published(output: Path) -> Counter[tuple[str, str, datetime]]:
    """Published clicks per key; a window published twice counts twice."""
    table = TransactionalFiles(str(output), format="parquet", name="counts").read_committed()
    counts: Counter[tuple[str, str, datetime]] = Counter()
    for row in table.to_pylist():
        moment = row["slot"]
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        counts[row["user"], row["page"], moment.astimezone(UTC)] += int(row["count"])
    return counts


def group_rss(pgid: int) -> int:
    """Resident bytes of the live processes of a process group (Linux /proc)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except (OSError, IndexError, ValueError):
            continue
    return total


def driver_pid(state: Path) -> int | None:
    try:
        return int((state / JOB / "driver.pid").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def caught_up(state: Path, timeout: float = 900) -> None:
    """Wait until every split is read and no new one was discovered for a few listings."""
    deadline = time.monotonic() + timeout
    seen: list[int] = []
    while time.monotonic() < deadline:
        try:
            progress = json.loads((state / JOB / "status.json").read_text()).get("coordinator")
        except (OSError, ValueError):
            progress = None
        progress = progress or {}
        total = int(progress.get("splitsTotal", 0))
        if total and total == progress.get("splitsFinished"):
            seen.append(total)
            if len(seen) >= 4 and len(set(seen[-4:])) == 1:
                return
        else:
            seen.clear()
        time.sleep(1)
    raise SystemExit("the job did not read its input within 15 minutes")


def running(pid: int) -> bool:
    """A live process (not a zombie) with this pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def cli(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "finishable.cli", *args, JOB, "--state-dir", str(state)],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--provider", choices=sorted(PROVIDERS), default="hdfs")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between input files")
    parser.add_argument("--rows", type=int, default=2000, help="clicks per input file")
    parser.add_argument("--files-per-batch", type=int, default=10)
    parser.add_argument(
        "--kill-every",
        type=float,
        nargs=2,
        default=(45.0, 90.0),
        metavar=("MIN", "MAX"),
        help="seconds between driver kills",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="finishable-soak-"))
    state = work / "state"
    written = [0]
    stop_input = threading.Event()

    def generate() -> None:
        while not stop_input.is_set():
            write_file(work / "input", written[0], args.rows)
            written[0] += 1
            stop_input.wait(args.every)

    for _ in range(4):  # something to read from the first batch on
        write_file(work / "input", written[0], args.rows)
        written[0] += 1
    runner_log = (work / "runner.log").open("w")  # read at the end; a pipe would fill up
    runner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "finishable.cli",
            "run",
            str(manifest(work, args.provider, args.files_per_batch)),
            "--state-dir",
            str(state),
        ],
        stdout=runner_log,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    generator = threading.Thread(target=generate, daemon=True)
    generator.start()
    started = time.monotonic()
    end = started + args.minutes * 60
    kills = 0
    rss: list[tuple[float, int]] = []
    next_kill = started + rng.uniform(*args.kill_every)
    try:
        while time.monotonic() < end:
            if runner.poll() is not None:
                raise SystemExit(f"the runner ended early: {(work / 'runner.log').read_text()}")
            pid = driver_pid(state)
            if pid is not None and not running(pid):
                pid = None  # between attempts
            if pid is not None and time.monotonic() >= next_kill:
                os.kill(pid, signal.SIGKILL)
                kills += 1
                next_kill = time.monotonic() + rng.uniform(*args.kill_every)
            elif pid is not None:
                rss.append((time.monotonic() - started, group_rss(pid)))
            time.sleep(5)
    finally:
        stop_input.set()
        generator.join(30)
    # A drain reads no file the source has not discovered yet (FLIP-34): let it catch up first.
    caught_up(state)
    drained = cli("stop", "--drain", "--timeout", "900", state=state)
    runner.wait(timeout=900)
    runner_log.close()
    output = (work / "runner.log").read_text()
    if drained.returncode != 0 or runner.returncode != 0:
        raise SystemExit(f"the drain failed: {drained.stdout}{drained.stderr}\n{output[-4000:]}")

    restarts = int(json.loads((state / JOB / "status.json").read_text()).get("restarts", 0))
    expected = truth(written[0], args.rows)
    got = published(work / "output")
    lost = sum(max(0, n - got.get(key, 0)) for key, n in expected.items())
    duplicated = sum(max(0, n - expected.get(key, 0)) for key, n in got.items())
    stored = [
        tuple(int(x) for x in match.groups())
        for log in sorted((state / JOB).glob("driver-*.log"))
        for match in STORED.finditer(log.read_text(errors="replace"))
    ]
    written_bytes = [new + index for _, _, _, new, index in stored]
    state_bytes = [size for _, _, size, _, _ in stored]
    store_bytes = sum(p.stat().st_size for p in (work / "store").rglob("*") if p.is_file())
    fifth = max(1, len(rss) // 5)
    result: dict[str, Any] = {
        "benchmark": "soak",
        "provider": args.provider,
        "minutes": args.minutes,
        "kills": kills,
        "driver_attempts": len(list((state / JOB).glob("driver-*.log"))),
        # Restarts the kills do not explain: drivers that failed by themselves.
        "spontaneous_failures": restarts - kills,
        "files": written[0],
        "rows": written[0] * args.rows,
        "lost": lost,
        "duplicated": duplicated,
        "keys": len(expected),
        "driver_rss_mb_start": round(statistics.median(r for _, r in rss[:fifth]) / 2**20),
        "driver_rss_mb_end": round(statistics.median(r for _, r in rss[-fifth:]) / 2**20),
        "checkpoints": len(stored),
        "checkpoint_bytes_median": int(statistics.median(written_bytes)) if stored else 0,
        "state_bytes_median": int(statistics.median(state_bytes)) if stored else 0,
        "state_bytes_last": state_bytes[-1] if stored else 0,
        "checkpoint_over_state": (
            round(
                statistics.median(w / s for w, s in zip(written_bytes, state_bytes, strict=True)), 3
            )
            if stored
            else None
        ),
        "store_bytes": store_bytes,
        "retained_full_copies_bytes": RETAINED * (state_bytes[-1] if stored else 0),
        "work": str(work) if args.keep else None,
    }
    print(json.dumps(result))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
