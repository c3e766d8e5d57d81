"""What the autoscaler saves a Batch job: Spark's dynamic allocation (``spec.autoscaler``: from one
executor pod up to ``--max`` while tasks wait, an idle one released after ``--idle``) against
static allocation (``--max`` executor pods from start to end), on the local cluster with executor
pods, the same batch example, in the same run.

For each: seconds from ``kubectl apply`` to Finished, and executor-seconds (the running executor
pods, sampled every half second, times the time): what a cluster bills. Alternating rounds;
medians. Prints one JSON line.

    .venv/bin/python benchmarks/autoscaler.py [--files 120] [--rows 5000] [--max 2] [--idle 10s]
                                              [--rounds 1] [--runtime container]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from local_cluster import NAMESPACE, bench_cluster  # noqa: E402 - benchmarks/local_cluster.py

from testcluster.client import LocalE2ECluster, batch_example  # noqa: E402
from testcluster.localcluster.cluster import RUNTIMES, LocalCluster  # noqa: E402

TIMEOUT = 1800.0
SAMPLE_SECONDS = 0.5


def executor_seconds(cluster: LocalE2ECluster, job: str, done: threading.Event) -> list[float]:
    """Integrates the job's running executor pods over time until ``done``; the total is
    appended to the list it returns (filled in by the thread)."""
    total: list[float] = []

    def sample() -> None:
        seconds = 0.0
        last = time.monotonic()
        while not done.wait(SAMPLE_SECONDS):
            now = time.monotonic()
            pods = cluster.executor_pods(job)
            running = sum(
                1
                for pod in pods
                if (pod.get("status") or {}).get("phase") == "Running"
                and not pod["metadata"].get("deletionTimestamp")
            )
            seconds += running * (now - last)
            last = now
        total.append(seconds)

    threading.Thread(target=sample, name=f"executors-{job}", daemon=True).start()
    return total


def one_run(
    cluster: LocalE2ECluster, name: str, args: argparse.Namespace, *, dynamic: bool
) -> dict[str, float]:
    spec: dict[str, Any] = {
        "executor": {"instances": 1 if dynamic else args.max, "cores": 1, "memory": "1g"}
    }
    if dynamic:
        spec["autoscaler"] = {
            "enabled": True,
            "minExecutors": 1,
            "maxExecutors": args.max,
            "idleTimeout": args.idle,
        }
    manifest = batch_example(cluster.data_dir, cluster.image, name, args.files, args.rows, **spec)
    done = threading.Event()
    started = time.monotonic()
    total = executor_seconds(cluster, name, done)
    response = cluster.apply(manifest)
    if response.status != 201:
        raise RuntimeError(f"apply: {response.message}")
    cluster.wait_phase(name, "Finished", TIMEOUT)
    finished = time.monotonic() - started
    done.set()
    while not total:
        time.sleep(0.05)
    return {"finished_s": finished, "executor_s": total[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=120)
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--max", type=int, default=2, help="executor pods at most (static: all)")
    parser.add_argument("--idle", default="10s", help="spec.autoscaler.idleTimeout")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--runtime", choices=RUNTIMES, default="container")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    runs: dict[str, list[dict[str, float]]] = {"static": [], "dynamic": []}
    with tempfile.TemporaryDirectory(prefix="bench-autoscaler-") as temp:
        work = Path(temp)
        with LocalCluster(work / "cluster", namespaces=(NAMESPACE,), runtime=args.runtime) as local:
            cluster = bench_cluster(local, work / "data")
            for index in range(args.rounds):
                for variant in ("static", "dynamic"):
                    name = f"{variant}-{index}"
                    runs[variant].append(one_run(cluster, name, args, dynamic=variant == "dynamic"))
    result: dict[str, Any] = {
        "benchmark": "autoscaler",
        "files": args.files,
        "rows": args.rows,
        "max_executors": args.max,
        "idle_timeout": args.idle,
        "rounds": args.rounds,
        "runtime": args.runtime,
    }
    for variant, measured in runs.items():
        for figure in ("finished_s", "executor_s"):
            result[f"{variant}_{figure}"] = round(
                statistics.median(run[figure] for run in measured), 2
            )
    result["time_ratio"] = round(result["dynamic_finished_s"] / result["static_finished_s"], 2)
    result["executor_seconds_ratio"] = round(
        result["dynamic_executor_s"] / max(result["static_executor_s"], 1e-9), 2
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
