"""How much work a driver crash loses, as a function of when it lands.

The batch example (``examples/batch/aggregate.py``: read JSON orders, two stages, a parquet sink)
runs under ``finishable run`` once uninterrupted, then once per crash moment with its driver
SIGKILLed when that share of the input files has been handed to reader tasks (10 %, 30 %, 50 %,
70 %, 90 % by default: a moment in the work, not in time, so a loaded machine moves it less).
Every split a reader task reads is appended to an audit file (``FINISHABLE_SPLIT_AUDIT``), so the
work lost is counted, not estimated: the input splits the killed attempt had read that a later
attempt read again, as a share of all splits; next to it the tasks the recovery skipped and
re-ran (the job's status), when the kill came and the total time, both against the uninterrupted
run.

Prints one JSON line.

    .venv/bin/python benchmarks/batch_crashes.py [--files 150] [--rows 20000] [--at 10,30,50,70,90]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "batch"
sys.path.insert(0, str(EXAMPLE))
sys.path.insert(0, str(ROOT / "benchmarks"))

from batch import manifest  # noqa: E402 - the example's manifest, as benchmarks/batch.py uses it
from orders import write_files  # noqa: E402

from finishable.connectors.batch.datasources import AUDIT_ENV  # noqa: E402


def run(
    work: Path, name: str, inputs: Path, files: int, rows: int, *, kill_after: int
) -> dict[str, Any]:
    """One ``finishable run`` of the example; its driver SIGKILLed once reader tasks have taken
    ``kill_after`` splits (0: never). Its time, and what its attempts read (the split audit)."""
    path = manifest(work, name, inputs, files, rows)
    state = work / "state"
    audit = work / f"{name}.audit"
    started = time.monotonic()
    runner = subprocess.Popen(
        [sys.executable, "-m", "finishable.cli", "run", str(path), "--state-dir", str(state)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env={**os.environ, AUDIT_ENV: str(audit)},
    )
    killed_at = 0.0
    if kill_after > 0:
        while runner.poll() is None and _lines(audit) < kill_after:
            time.sleep(0.01)
        pid_file = state / name / "driver.pid"
        if runner.poll() is None and pid_file.exists():
            _attempt, pid = pid_file.read_text().split()
            os.kill(int(pid), signal.SIGKILL)
            killed_at = time.monotonic() - started
    if runner.wait(1800) != 0:
        raise RuntimeError(f"the job {name} failed: see {state / name}")
    seconds = time.monotonic() - started
    reads = [json.loads(line) for line in audit.read_text().splitlines()] if audit.exists() else []
    first = {r["split"] for r in reads if r["attempt"] == 1}
    later = Counter(r["split"] for r in reads if r["attempt"] > 1)
    status = json.loads((state / name / "status.json").read_text())
    recovery = status.get("recovery") or {}
    return {
        "seconds": seconds,
        "killed_at": killed_at,
        "splits_read": len(reads),
        "splits_read_again": len(first & set(later)),
        "read_by_attempt_1": len(first),
        "tasks_rerun": recovery.get("tasksRerun", 0),
        "tasks_skipped": recovery.get("tasksSkipped", 0),
    }


def _lines(path: Path) -> int:
    try:
        with path.open("rb") as audit:
            return sum(1 for _ in audit)
    except FileNotFoundError:
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=150)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--at", default="10,30,50,70,90", help="crash moments, % of the input")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="finishable-crash-sweep-"))
    try:
        inputs = work / "input"
        write_files(inputs, args.files, args.rows)
        run(work, "warmup", inputs, args.files, args.rows, kill_after=0)  # JVM and disk caches
        plain = run(work, "uninterrupted", inputs, args.files, args.rows, kill_after=0)
        crashes: dict[str, Any] = {}
        for percent in (int(p) for p in args.at.split(",")):
            after = max(1, round(args.files * percent / 100))
            result = run(work, f"crash-{percent}", inputs, args.files, args.rows, kill_after=after)
            crashes[f"{percent}pct"] = {
                "killed_at": round(result["killed_at"] / plain["seconds"], 2),
                "read_before_kill": result["read_by_attempt_1"],
                "lost_splits": result["splits_read_again"],
                "lost_share": round(result["splits_read_again"] / args.files, 3),
                "tasks_rerun": result["tasks_rerun"],
                "tasks_skipped": result["tasks_skipped"],
                "ratio": round(result["seconds"] / plain["seconds"], 2),
            }
        line = {
            "benchmark": "batch_crashes",
            "files": args.files,
            "rows": args.rows,
            "uninterrupted_s": round(plain["seconds"], 1),
            "crashes": crashes,
        }
        sys.stdout.write(json.dumps(line) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
