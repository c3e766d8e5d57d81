"""How the operator copes with many jobs at once: 500 FinishableSparkJobs against the API emulator.

The emulator (testcluster/apiserver/emulator.py) and ``finishable operator`` each run in a child
process; this process creates the jobs as fast as the emulator takes them and polls until every
job is Submitted (its children and driver pod created, its status written). It prints one JSON
line: the seconds from the first create until all are Submitted, the operator's peak resident
memory (VmHWM of its process), and the API requests the operator (its own client and kopf's) made
per job, counted by the emulator per User-Agent.

    python benchmarks/operator_scale.py [--jobs 500]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from event_store import free_port, k8s_emulator  # the sibling benchmark's helpers

from finishable.api.crd import build_crd, build_snapshot_crd
from finishable.kube.api import KubeApi

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "bench"
JOBS = "finishable.dev/v1alpha1"
OPERATOR_AGENTS = ("finishable-operator", "kopf")


@contextlib.contextmanager
def operator(url: str, workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "e", "cluster": {"server": url}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "c", "context": {"cluster": "e", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    liveness = free_port()
    command = [
        sys.executable, "-m", "finishable.cli", "operator", "--namespace", NAMESPACE,
        "--bind", "127.0.0.1", "--liveness-port", str(liveness),
        "--metrics-port", str(free_port()),
    ]  # fmt: skip
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "POD_ID": "bench-operator"}
    with (workdir / "operator.log").open("wb") as log:
        child = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"http://127.0.0.1:{liveness}/healthz", timeout=1)
                break
            if time.monotonic() > deadline or child.poll() is not None:
                raise RuntimeError(f"the operator did not start; see {workdir / 'operator.log'}")
            time.sleep(0.1)
        yield child
    finally:
        child.terminate()
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def stats(api: KubeApi) -> dict[str, int]:
    counts: dict[str, Any] = api.request("GET", "/_emulator/stats").body
    return {str(agent): int(count) for agent, count in counts.items()}


def job_body(index: int) -> dict[str, Any]:
    return {
        "apiVersion": JOBS,
        "kind": "FinishableSparkJob",
        "metadata": {"name": f"job-{index:04d}"},
        "spec": {"image": "finishable-spark:bench", "application": {"file": "local:///app/j.py"}},
    }


def run(jobs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as temp, k8s_emulator() as url:
        api = KubeApi.for_url(url, namespace=NAMESPACE, user_agent="bench")
        peering = yaml.safe_load_all((ROOT / "crds" / "kopf-peering.yaml").read_text())
        crds = [build_crd(), build_snapshot_crd(), *peering]
        for crd in filter(None, crds):
            api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=crd)
        api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})
        with operator(url, Path(temp)) as child:
            time.sleep(1.0)  # let the operator finish its initial listings
            before = stats(api)
            path = api.path("finishablesparkjobs", api_version=JOBS)
            started = time.monotonic()
            with ThreadPoolExecutor(8) as pool:
                codes = list(
                    pool.map(
                        lambda i: api.request("POST", path, body=job_body(i)).status, range(jobs)
                    )
                )
            created = time.monotonic() - started
            assert all(code == 201 for code in codes), codes
            submitted = 0
            while submitted < jobs:
                time.sleep(0.2)
                items = api.request("GET", path).body.get("items") or []
                submitted = sum(
                    (item.get("status") or {}).get("phase") == "Submitted" for item in items
                )
                if time.monotonic() - started > 600:
                    raise RuntimeError(f"only {submitted}/{jobs} Submitted after 600s")
            elapsed = time.monotonic() - started
            after = stats(api)
            rss = peak_rss_mib(child.pid)
    by_client = {agent: after.get(agent, 0) - before.get(agent, 0) for agent in OPERATOR_AGENTS}
    return {
        "benchmark": "operator_scale",
        "jobs": jobs,
        "seconds_to_create": round(created, 2),
        "seconds_to_all_submitted": round(elapsed, 2),
        "operator_peak_rss_mib": rss,
        "api_requests_per_job": round(sum(by_client.values()) / jobs, 2),
        "api_requests_by_client": by_client,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500)
    args = parser.parse_args()
    print(json.dumps(run(args.jobs)))


if __name__ == "__main__":
    main()
