"""What the operator path costs: the batch example through the operator on the local cluster
(``kubectl apply`` → driver pod → shuffle StatefulSet → Finished) against ``finishable run`` of
the same job on the same machine in the same run, and a driver SIGKILLed half way under the
operator against its own uninterrupted run; both with Spark's executors as pods (the operator's
default ``k8s://`` master: two executor pods per attempt, created by Spark through the API) and
with ``local[2]`` inside the driver pod. The local cluster runs its pods as containers of the
built image (``--runtime container``, the default; ``make image`` first) or as sandboxed
processes (``--runtime process``).

Both generate their input (``--files``, ``--rows``) in the driver, so that time is in both.
Prints one JSON line.

    .venv/bin/python benchmarks/local_cluster.py [--files 40] [--rows 5000] [--runtime process]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from batch import run_job  # noqa: E402 - benchmarks/batch.py: `finishable run` of the example

from testcluster.client import LocalE2ECluster, batch_example, wait_for  # noqa: E402
from testcluster.localcluster.cluster import RUNTIMES, LocalCluster  # noqa: E402

NAMESPACE = "bench"
TIMEOUT = 1800.0


def through_the_operator(
    cluster: LocalE2ECluster, name: str, files: int, rows: int, *, crash: bool
) -> dict[str, float]:
    """Seconds from apply to Running and to Finished (and to the kill, when crashing)."""
    manifest = batch_example(cluster.data_dir, cluster.image, name, files, rows)
    started = time.monotonic()
    response = cluster.apply(manifest)
    if response.status != 201:
        raise RuntimeError(f"apply: {response.message}")
    cluster.wait_phase(name, "Running", TIMEOUT)
    running = time.monotonic() - started
    figures = {"running": running}
    if crash:
        wait_for(
            lambda: (
                cluster.status(name).get("coordinator", {}).get("splitsFinished", 0) >= files // 2
            ),
            "half the splits",
            TIMEOUT,
        )
        if cluster.container_id(f"{name}-driver-1") is None:
            raise RuntimeError("the driver ended before half its splits")
        cluster.kill_driver(f"{name}-driver-1")
        figures["crashed_at"] = time.monotonic() - started
    status = cluster.wait_phase(name, "Finished", TIMEOUT)
    figures["finished"] = time.monotonic() - started
    figures["tasks_skipped"] = float((status.get("recovery") or {}).get("tasksSkipped", 0))
    return figures


def bench_cluster(local: LocalCluster, data: Path) -> LocalE2ECluster:
    """The benchmark's namespace of ``local``, its jobs' /data in ``data``."""
    data.mkdir(mode=0o777)
    data.chmod(0o777)  # the image's user writes there
    return LocalE2ECluster(
        local.api("bench", NAMESPACE),
        NAMESPACE,
        data,
        local.directory / "pods",
        local.operator_logs,
    )


MODES = {"executors": None, "local2": "local[2]"}
"""Spark masters measured: the operator's default (executor pods), and Spark inside the driver."""


def through_a_cluster(
    work: Path,
    mode: str,
    master: str | None,
    *,
    files: int,
    rows: int,
    run_s: float,
    runtime: str,
) -> dict[str, float]:
    """The example, uninterrupted and crashed half way, on a fresh local cluster."""
    with LocalCluster(
        work / f"cluster-{mode}", namespaces=(NAMESPACE,), spark_master=master, runtime=runtime
    ) as local:
        cluster = bench_cluster(local, work / f"data-{mode}")
        plain = through_the_operator(cluster, "plain", files, rows, crash=False)
        crashed = through_the_operator(cluster, "crashed", files, rows, crash=True)
    return {
        f"{mode}_apply_to_running_s": round(plain["running"], 2),
        f"{mode}_apply_to_finished_s": round(plain["finished"], 2),
        f"{mode}_over_finishable_run": round(plain["finished"] / run_s, 2),
        f"{mode}_crash_at_half_s": round(crashed["finished"], 2),
        f"{mode}_crash_ratio": round(crashed["finished"] / plain["finished"], 2),
        f"{mode}_crash_tasks_skipped": int(crashed["tasks_skipped"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--runtime", choices=RUNTIMES, default="container")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    result: dict[str, Any] = {
        "benchmark": "local_cluster",
        "files": args.files,
        "rows": args.rows,
        "runtime": args.runtime,
    }
    with tempfile.TemporaryDirectory(prefix="bench-local-cluster-") as temp:
        work = Path(temp)
        plain = work / "plain-input"
        run_s, _, _ = run_job(work, "plain", plain, args.files, args.rows, crash=False)
        result["finishable_run_s"] = round(run_s, 2)
        for mode, master in MODES.items():
            result |= through_a_cluster(
                work,
                mode,
                master,
                files=args.files,
                rows=args.rows,
                run_s=run_s,
                runtime=args.runtime,
            )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
