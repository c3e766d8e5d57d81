"""How the operator copes with many jobs at once: 500 FinishableSparkJobs against an API server.

The server is the API emulator (testcluster/apiserver/emulator.py) or a real kube-apiserver of the
pinned release with etcd, its controller-manager and scheduler (testcluster/controlplane,
``--server real``; built on the first run). It and ``finishable operator`` run in child
processes; this process creates the jobs as fast as the server takes them and polls until every
job is Submitted (its children and driver pod created, its status written). It prints one JSON
line: the seconds from the first create until all are Submitted, the operator's peak resident
memory (VmHWM of its process), and the API requests the operator (its own client and kopf's) made
per job, counted by the emulator per User-Agent, or by the real server's audit log.

    python benchmarks/operator_scale.py [--jobs 500] [--server emulator|real]
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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from event_store import free_port, k8s_emulator  # the sibling benchmark's helpers

from finishable.api.crd import build_crd, build_snapshot_crd
from finishable.kube.api import KubeApi

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from testcluster.controlplane.audit import AuditLog  # noqa: E402
from testcluster.controlplane.cluster import ControlPlane  # noqa: E402

NAMESPACE = "bench"
JOBS = "finishable.dev/v1alpha1"
OPERATOR_AGENTS = ("finishable-operator", "kopf")


@dataclass
class Server:
    """An API server as the benchmark uses it."""

    api: KubeApi  # the benchmark's own client
    operator_kubeconfig: Path
    operator_requests: Callable[[], int]  # the operator's requests so far


@contextlib.contextmanager
def emulator(workdir: Path) -> Iterator[Server]:
    with k8s_emulator() as url:
        api = KubeApi.for_url(url, namespace=NAMESPACE, user_agent="bench")
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

        def requests() -> int:
            counts: dict[str, Any] = api.request("GET", "/_emulator/stats").body
            return sum(int(counts.get(agent, 0)) for agent in OPERATOR_AGENTS)

        yield Server(api, kubeconfig, requests)


@contextlib.contextmanager
def real_server(workdir: Path) -> Iterator[Server]:
    with ControlPlane(workdir / "controlplane") as plane:
        api = KubeApi.from_kubeconfig(plane.admin.kubeconfig, namespace=NAMESPACE)
        operator_user = "bench-operator"  # an admin of its own, told apart in the audit log
        kubeconfig = plane.identity(operator_user, ["system:masters"]).kubeconfig
        audit = AuditLog(plane.audit_log)
        yield Server(api, kubeconfig, lambda: len(audit.requests(operator_user)))


@contextlib.contextmanager
def operator(kubeconfig: Path, workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
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


def job_body(index: int) -> dict[str, Any]:
    return {
        "apiVersion": JOBS,
        "kind": "FinishableSparkJob",
        "metadata": {"name": f"job-{index:04d}"},
        "spec": {"image": "finishable-spark:bench", "application": {"file": "local:///app/j.py"}},
    }


def run(jobs: int, kind: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as temp:
        workdir = Path(temp)
        with (real_server if kind == "real" else emulator)(workdir) as server:
            api = server.api
            peering = yaml.safe_load_all((ROOT / "crds" / "kopf-peering.yaml").read_text())
            crds = [build_crd(), build_snapshot_crd(), *peering]
            for crd in filter(None, crds):
                path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
                api.request("POST", path, body=crd)
            api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})
            path = api.path("finishablesparkjobs", api_version=JOBS)
            while api.request("GET", path).status == 404:  # a real server serves a new CRD soon
                time.sleep(0.1)
            with operator(server.operator_kubeconfig, workdir) as child:
                time.sleep(1.0)  # let the operator finish its initial listings
                before = server.operator_requests()
                started = time.monotonic()
                with ThreadPoolExecutor(8) as pool:
                    codes = list(
                        pool.map(
                            lambda i: api.request("POST", path, body=job_body(i)).status,
                            range(jobs),
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
                    if time.monotonic() - started > 900:
                        raise RuntimeError(f"only {submitted}/{jobs} Submitted after 900s")
                elapsed = time.monotonic() - started
                rss = peak_rss_mib(child.pid)
            time.sleep(2.0 if kind == "real" else 0.0)  # the audit log is written in batches
            requests = server.operator_requests() - before
    return {
        "benchmark": "operator_scale",
        "server": kind,
        "jobs": jobs,
        "seconds_to_create": round(created, 2),
        "seconds_to_all_submitted": round(elapsed, 2),
        "operator_peak_rss_mib": rss,
        "api_requests_per_job": round(requests / jobs, 2),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument(
        "--server",
        choices=("emulator", "real"),
        default="emulator",
        help="the API emulator, or a real kube-apiserver (testcluster/controlplane)",
    )
    args = parser.parse_args()
    print(json.dumps(run(args.jobs, args.server)))


if __name__ == "__main__":
    main()
