"""Split requests per second through the driver endpoint, against the in-process rate.

Readers are separate processes (spawned, so they share no GIL with the driver-side server), each
a ``CoordinatorClient`` over a keep-alive connection doing ``RequestSplit`` one at a time, as a
Spark reader would. The in-process figure calls the ``CoordinatorHost`` directly from one thread
(thread hand-off and bookkeeping, no HTTP). Prints exactly one JSON line.

    .venv/bin/python benchmarks/coordinator.py [--duration 3] [--readers 1,4,16] [--threads]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import queue
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Event as EventType
from typing import Any

from finishable.coordinator import (
    AddSplits,
    CoordinatorClient,
    CoordinatorHost,
    RequestSplit,
)
from finishable.coordinator.endpoint import DriverEndpoint
from finishable.coordinator.ranges import RangeSplitEnumerator

TOKEN = "benchmark-token"
NAME = "bench"
TARGET_REQUESTS_PER_S = 2000


@dataclass(frozen=True)
class ReaderJob:
    """What one reader process needs (picklable, for spawn)."""

    url: str
    subtask: int
    duration: float


def reader(job: ReaderJob, ready: Any, go: EventType, results: Any) -> None:
    """One reader: announce the attempt, wait for the start signal, request splits until time."""
    url, subtask, duration = job.url, job.subtask, job.duration
    client = CoordinatorClient(url, TOKEN)
    client.attempt_ready(NAME, subtask, 0)
    client.request_splits(NAME, subtask, 0)  # warm the connection
    ready.put(subtask)
    go.wait()
    latencies: list[float] = []
    splits = 0
    end = time.perf_counter() + duration
    while True:
        began = time.perf_counter()
        if began >= end:
            break
        reply = client.request_splits(NAME, subtask, 0)
        latencies.append(time.perf_counter() - began)
        splits += sum(len(e.splits) for e in reply if isinstance(e, AddSplits))
    client.close()
    results.put((subtask, len(latencies), splits, latencies[:: max(1, len(latencies) // 2000)]))


def measure_endpoint(
    url: str, readers: int, first_subtask: int, duration: float, use_threads: bool
) -> dict[str, Any]:
    """Run ``readers`` concurrent readers for ``duration`` seconds; aggregate their figures."""
    if use_threads:
        ready_q: Any = queue.Queue()
        results_q: Any = queue.Queue()
        go: Any = threading.Event()
        workers: list[Any] = [
            threading.Thread(
                target=reader,
                args=(ReaderJob(url, first_subtask + i, duration), ready_q, go, results_q),
            )
            for i in range(readers)
        ]
    else:
        context = multiprocessing.get_context("spawn")
        ready_q = context.Queue()
        results_q = context.Queue()
        go = context.Event()
        workers = [
            context.Process(
                target=reader,
                args=(ReaderJob(url, first_subtask + i, duration), ready_q, go, results_q),
            )
            for i in range(readers)
        ]
    for worker in workers:
        worker.start()
    for _ in range(readers):
        ready_q.get(timeout=120)
    began = time.perf_counter()
    go.set()
    results = [results_q.get(timeout=duration + 120) for _ in range(readers)]
    elapsed = time.perf_counter() - began
    for worker in workers:
        worker.join(timeout=30)
    requests = sum(r[1] for r in results)
    latencies = sorted(x for r in results for x in r[3])
    return {
        "requests_per_s": round(requests / elapsed, 1),
        "requests": requests,
        "splits_assigned": sum(r[2] for r in results),
        "latency_p50_ms": round(statistics.median(latencies) * 1000, 3),
        "latency_p99_ms": round(latencies[int(0.99 * (len(latencies) - 1))] * 1000, 3),
    }


def measure_in_process(host: CoordinatorHost, subtask: int, duration: float) -> float:
    """Requests per second calling the host directly from one thread (no HTTP)."""
    host.execution_attempt_ready(subtask, 0).result()
    count = 0
    end = time.perf_counter() + duration
    began = time.perf_counter()
    while time.perf_counter() < end:
        host.handle_event_from_operator(subtask, 0, RequestSplit(subtask, 0)).result()
        count += 1
    return count / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per measurement")
    parser.add_argument("--readers", default="1,4,16", help="comma-separated reader counts")
    parser.add_argument("--threads", action="store_true", help="readers as threads, not processes")
    args = parser.parse_args()
    counts = [int(item) for item in args.readers.split(",")]

    host = CoordinatorHost(NAME, RangeSplitEnumerator.provider(split_size=1000))
    host.start().result()
    endpoint = DriverEndpoint(TOKEN)
    endpoint.add(host)
    url = endpoint.start()
    try:
        in_process = measure_in_process(host, 10_000, args.duration)
        by_readers: dict[str, Any] = {}
        for index, count in enumerate(counts):
            by_readers[str(count)] = measure_endpoint(
                url, count, index * 1000, args.duration, args.threads
            )
        progress = host.progress().result()
    finally:
        endpoint.stop()
        host.close()
    best = max(item["requests_per_s"] for item in by_readers.values())
    result = {
        "benchmark": "coordinator",
        "metric": "split requests per second (RequestSplit -> AddSplits, 1 split each)",
        "readers_are": "threads" if args.threads else "processes",
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "duration_s": args.duration,
        "in_process_requests_per_s": round(in_process, 1),
        "endpoint": by_readers,
        "target_requests_per_s": TARGET_REQUESTS_PER_S,
        "meets_target": best >= TARGET_REQUESTS_PER_S,
        "splits_discovered": progress.splits_discovered if progress else None,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
