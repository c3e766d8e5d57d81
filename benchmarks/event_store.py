"""Job event store: buffered append throughput and latency per backend.

Prints one JSON line. For each backend (local directory; S3 through a moto server; ConfigMaps
through the Kubernetes API emulator) it appends ``--events`` TaskFinished-like events through
``JobEventStore.append`` with the defaults of the spec (writeBufferSize 1Mi, flushInterval 1s),
timing every call, while the flusher thread writes 1 MiB segments to the backend concurrently.
Then it closes the store (the final flush), replays the log and checks that every event came back.

* ``append_events_per_s``: appends / wall time of the append loop (timing overhead included);
* ``append_p50_us`` / ``append_p99_us`` / ``append_p999_us`` / ``append_max_us``: per call;
* ``durable_events_per_s``: appends / (append loop + close), i.e. until everything is on the
  backend: what the backend sustains, not what the caller waits for;
* ``fenced_durable_events_per_s``: the same through a ``FencedBackend``, as a driver writes (one
  fence check, a ``get``, before each segment): the cost of fencing stale drivers.

The servers run in child processes, as a real API server or object store would, so their Python
work does not compete with the appending thread for the GIL. Aims (issue 3): p99 < 50 us and
>= 50,000 events/s buffered on the 2-core machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from finishable.kube.api import KubeApi
from finishable.state import JobEventStore, LocalDirBackend, ObjectBackend, read_events
from finishable.state.configmap import ConfigMapBackend
from finishable.state.fence import Epoch, Fence, FencedBackend
from finishable.state.objectstore import ObjectStoreBackend

ROOT = Path(__file__).resolve().parent.parent
BUCKET = "bench-events"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """A moto S3 server in a child process; yields the pyarrow URL of an empty bucket."""
    port = free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}
    child = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        wait_for_port(port)
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
        url = (
            f"s3://{BUCKET}/events?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
        )
        fs, _ = pafs.FileSystem.from_uri(url + "&allow_bucket_creation=true")
        fs.create_dir(BUCKET)
        yield url
    finally:
        child.terminate()
        child.wait(10)


@contextlib.contextmanager
def k8s_emulator() -> Iterator[str]:
    """The test suite's API emulator in a child process; yields its URL."""
    child = subprocess.Popen(
        [sys.executable, "-m", "testcluster.apiserver.emulator"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        if child.stdin is not None:
            child.stdin.close()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()


def percentile(sorted_values: list[int], fraction: float) -> float:
    index = min(len(sorted_values) - 1, int(len(sorted_values) * fraction))
    return round(sorted_values[index] / 1000, 2)


def measure_both(
    backend: ObjectBackend, events: int, write_buffer_size: int, flush_interval: float
) -> dict[str, Any]:
    """Plain, then fenced (under another prefix of the same backend)."""
    plain = measure(backend, events, write_buffer_size, flush_interval, prefix="events")
    fence = Fence(backend, "bench-job", Epoch(1, 1))
    fence.claim()
    fenced = measure(
        FencedBackend(backend, fence), events, write_buffer_size, flush_interval, prefix="fenced"
    )
    return {**plain, "fenced_durable_events_per_s": fenced["durable_events_per_s"]}


def measure(
    backend: ObjectBackend,
    events: int,
    write_buffer_size: int,
    flush_interval: float,
    *,
    prefix: str,
) -> dict[str, Any]:
    segments = 0

    def on_flush(_segment: object) -> None:
        nonlocal segments
        segments += 1

    store = JobEventStore(
        backend,
        prefix=prefix,
        write_buffer_size=write_buffer_size,
        flush_interval=flush_interval,
        on_flush=on_flush,
    )
    event: dict[str, Any] = {
        "type": "TaskFinished",
        "stage": 3,
        "task": 0,
        "attempt": 0,
        "rows": 123_456,
        "bytes": 7_890_123,
        "location": "fsj-shuffle-1.fsj-shuffle:7337/job/3/0",
        "durationMs": 812,
    }
    latencies = [0] * events
    clock = time.perf_counter_ns
    append = store.append
    started = time.perf_counter()
    for index in range(events):
        event["task"] = index
        before = clock()
        append(event)
        latencies[index] = clock() - before
    appended = time.perf_counter()
    store.close(timeout=300)
    closed = time.perf_counter()
    replayed = sum(1 for _ in read_events(backend, prefix=prefix))
    if replayed != events:
        raise RuntimeError(f"replayed {replayed} events of {events}")
    latencies.sort()
    return {
        "append_events_per_s": round(events / (appended - started)),
        "append_p50_us": percentile(latencies, 0.50),
        "append_p99_us": percentile(latencies, 0.99),
        "append_p999_us": percentile(latencies, 0.999),
        "append_max_us": round(latencies[-1] / 1000, 1),
        "durable_events_per_s": round(events / (closed - started)),
        "final_flush_s": round(closed - appended, 3),
        "segments": segments,
        "replayed": replayed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--write-buffer-size", type=int, default=1024 * 1024)
    parser.add_argument("--flush-interval", type=float, default=1.0)
    parser.add_argument("--backends", default="local,s3,configmap")
    args = parser.parse_args()

    results: dict[str, Any] = {}
    runs: dict[str, Callable[[], dict[str, Any]]] = {}

    def run_local() -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as directory:
            return measure_both(
                LocalDirBackend(directory), args.events, args.write_buffer_size, args.flush_interval
            )

    def run_s3() -> dict[str, Any]:
        with moto_server() as url:
            return measure_both(
                ObjectStoreBackend(url), args.events, args.write_buffer_size, args.flush_interval
            )

    def run_configmap() -> dict[str, Any]:
        with k8s_emulator() as url:
            api = KubeApi.for_url(url, namespace="bench")
            return measure_both(
                ConfigMapBackend(api, "bench-job"),
                args.events,
                args.write_buffer_size,
                args.flush_interval,
            )

    runs = {"local": run_local, "s3": run_s3, "configmap": run_configmap}
    for name in args.backends.split(","):
        results[name] = runs[name]()

    print(
        json.dumps(
            {
                "benchmark": "event_store",
                "events": args.events,
                "write_buffer_size": args.write_buffer_size,
                "flush_interval_s": args.flush_interval,
                "aims": {"append_p99_us_below": 50, "append_events_per_s_at_least": 50_000},
                "met": {
                    name: r["append_p99_us"] < 50 and r["append_events_per_s"] >= 50_000
                    for name, r in results.items()
                },
                "backends": results,
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
