"""A cluster for operator tests: the API emulator over HTTP, the real `finishable operator` in a
child process (so it can really be killed), and the test playing kubelet and driver.

The test writes pod phases through the status subresource (as a kubelet would) and the driver's
report through the real control channel (as the runtime would), then waits for what the operator
must do. Waits poll with a generous upper bound; they never assert on how long something took.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from finishable.api.control import DriverReport, DriverState, RequestReport
from finishable.api.crd import build_crd, build_snapshot_crd
from finishable.api.status import ControlRequest
from finishable.kube.api import KubeApi
from finishable.state.control import ConfigMapControlChannel
from testcluster.network import free_port
from testcluster.processes import terminate
from testcluster.waiting import WAIT_SECONDS, wait_for

ROOT = Path(__file__).resolve().parents[2]
JOBS = "finishable.dev/v1alpha1"
MERGE = "application/merge-patch+json"


def install(api: KubeApi, namespaces: list[str]) -> None:
    """What `kubectl apply -f crds/` and `kubectl create namespace` would do."""
    crds = [
        build_crd(),
        build_snapshot_crd(),
        *yaml.safe_load_all((ROOT / "crds" / "kopf-peering.yaml").read_text()),
    ]
    for crd in filter(None, crds):
        response = api.request(
            "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=crd
        )
        assert response.status in (201, 409), response.body
    for namespace in namespaces:
        response = api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
        assert response.status in (201, 409), response.body


class Cluster:
    """The test's side of the API: jobs, pods, the driver's report."""

    def __init__(self, url: str, token: str, namespace: str) -> None:
        self.url = url
        self.token = token
        self.namespace = namespace
        self.api = KubeApi.for_url(url, token=token, namespace=namespace, user_agent="tests")

    # -- jobs -------------------------------------------------------------------------------

    def job_path(self, name: str | None = None, subresource: str | None = None) -> str:
        return self.api.path("finishablesparkjobs", name, api_version=JOBS, subresource=subresource)

    def create_job(self, name: str, spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
        body = {
            "apiVersion": JOBS,
            "kind": "FinishableSparkJob",
            "metadata": {"name": name, **metadata},
            "spec": {"image": "finishable-spark:test", **spec},
        }
        response = self.api.request("POST", self.job_path(), body=body)
        assert response.status == 201, response.body
        return response.body

    def job(self, name: str) -> dict[str, Any] | None:
        response = self.api.request("GET", self.job_path(name))
        return response.body if response.status == 200 else None

    def status(self, name: str) -> dict[str, Any]:
        job = self.job(name)
        assert job is not None, f"job {name} is gone"
        return dict(job.get("status") or {})

    def edit(self, name: str, **spec: Any) -> None:
        response = self.api.request(
            "PATCH", self.job_path(name), body={"spec": spec}, content_type=MERGE
        )
        assert response.status == 200, response.body

    def delete_job(self, name: str) -> None:
        assert self.api.request("DELETE", self.job_path(name)).status == 200

    def wait_phase(self, name: str, phase: str, timeout: float = WAIT_SECONDS) -> dict[str, Any]:
        return wait_for(
            lambda: (status := self.status(name)).get("phase") == phase and status,
            f"{name} reaches {phase}",
            timeout,
        )

    def condition(self, name: str, kind: str) -> dict[str, Any]:
        conditions = self.status(name).get("conditions") or []
        return next((c for c in conditions if c["type"] == kind), {})

    def events(self, name: str) -> list[dict[str, Any]]:
        items = self.api.request("GET", self.api.path("events")).body.get("items") or []
        return [e for e in items if (e.get("involvedObject") or {}).get("name") == name]

    def event_reasons(self, name: str) -> list[str]:
        return [str(event.get("reason")) for event in self.events(name)]

    # -- objects ----------------------------------------------------------------------------

    def get(self, plural: str, name: str, api_version: str = "v1") -> dict[str, Any] | None:
        response = self.api.request("GET", self.api.path(plural, name, api_version=api_version))
        return response.body if response.status == 200 else None

    def list(self, plural: str, selector: str, api_version: str = "v1") -> list[dict[str, Any]]:
        path = self.api.path(plural, api_version=api_version)
        response = self.api.request("GET", path, query={"labelSelector": selector})
        return list(response.body.get("items") or [])

    def components(self, plural: str, job: str, component: str) -> list[dict[str, Any]]:
        """A job's objects of one component, by their labels."""
        return self.list(plural, f"finishable.dev/job={job},finishable.dev/component={component}")

    def create(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.api.request("POST", self.api.path(plural), body=body)
        assert response.status == 201, response.body
        return response.body

    # -- playing the kubelet and the driver ------------------------------------------------------

    def set_pod_phase(
        self,
        name: str,
        phase: str,
        exit_code: int | None = None,
        *,
        message: str = "",
        missing_ok: bool = False,
    ) -> None:
        """Play the kubelet, which acts on a pod once it exists (the operator stores a decision
        before it creates the pod); ``missing_ok``: the operator may have deleted it already."""
        if not missing_ok:
            wait_for(lambda: self.get("pods", name), f"pod {name} exists")
        status: dict[str, Any] = {"phase": phase}
        if exit_code is not None:
            terminated: dict[str, Any] = {"exitCode": exit_code, "reason": "Error"}
            if message:
                terminated["message"] = message
            status["containerStatuses"] = [{"name": "driver", "state": {"terminated": terminated}}]
        response = self.api.request(
            "PATCH",
            self.api.path("pods", name, subresource="status"),
            body={"status": status},
            content_type=MERGE,
        )
        assert response.status == 200 or (missing_ok and response.status == 404), response.body

    def evict(self, pod: str, *, node: str = "node-1") -> None:
        """Play the scheduler (bind the pod to ``node``) and the eviction API (the
        DisruptionTarget condition, then a graceful deletion, which leaves the pod terminating
        on its node until its kubelet ends it)."""
        binding = {"target": {"kind": "Node", "name": node}}
        path = self.api.path("pods", pod, subresource="binding")
        assert self.api.request("POST", path, body=binding).status == 201
        reason = "EvictionByEvictionAPI"
        condition = {"type": "DisruptionTarget", "status": "True", "reason": reason}
        body = {"status": {"conditions": [condition]}}
        path = self.api.path("pods", pod, subresource="status")
        assert self.api.request("PATCH", path, body=body, content_type=MERGE).status == 200
        assert self.api.request("DELETE", self.api.path("pods", pod)).status == 200

    def channel(self, job: str) -> ConfigMapControlChannel:
        return ConfigMapControlChannel(self.api, job, namespace=self.namespace)

    def report(self, job: str, attempt: int, state: DriverState, **fields: Any) -> None:
        self.channel(job).write_report(DriverReport(attempt=attempt, state=state, **fields))

    def request_for(self, job: str, attempt: int) -> ControlRequest:
        return wait_for(
            lambda: self.channel(job).read_request(attempt), f"a request to {job} #{attempt}"
        )

    def answer(
        self, job: str, attempt: int, request: ControlRequest, state: DriverState, **fields: Any
    ) -> None:
        from finishable.api.control import RequestOutcome

        answer = RequestReport(id=request.id, outcome=RequestOutcome.COMPLETED)
        self.report(job, attempt, state, request=answer, **fields)

    def start_running(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        """Create a job and play its first driver up to Running."""
        self.create_job(name, spec)
        self.wait_phase(name, "Submitted")
        self.set_pod_phase(f"{name}-driver-1", "Running")
        self.report(name, 1, DriverState.RUNNING)
        return self.wait_phase(name, "Running")


class OperatorProcess:
    """`finishable operator` as a child process, pointed at the emulator by a kubeconfig."""

    def __init__(
        self,
        workdir: Path,
        url: str,
        token: str,
        namespaces: list[str],
        *,
        identity: str = "operator-1",
        priority: int = 100,
        name: str = "operator",
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.extra_args = list(extra_args)
        self.env = dict(env or {})
        self.namespaces = namespaces
        self.identity = identity
        self.priority = priority
        self.log_path = workdir / f"{name}.log"
        self.kubeconfig = workdir / "kubeconfig"
        self.kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "emulator", "cluster": {"server": url}}],
                    "users": [{"name": "tests", "user": {"token": token}}],
                    "contexts": [
                        {"name": "tests", "context": {"cluster": "emulator", "user": "tests"}}
                    ],
                    "current-context": "tests",
                }
            )
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.liveness_port = 0
        self.metrics_port = 0

    def start(self) -> OperatorProcess:
        self.liveness_port, self.metrics_port = free_port(), free_port()
        command = [sys.executable, "-m", "finishable.cli", "operator"]
        for namespace in self.namespaces:
            command += ["--namespace", namespace]
        command += [
            "--bind", "127.0.0.1",
            "--liveness-port", str(self.liveness_port),
            "--metrics-port", str(self.metrics_port),
            "--priority", str(self.priority),
            "--resync", "5",
            *self.extra_args,
        ]  # fmt: skip
        env = {
            **os.environ,
            **self.env,
            "KUBECONFIG": str(self.kubeconfig),
            "POD_ID": self.identity,
        }
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir
            )
        wait_for(self.alive, f"{self.identity} serves /healthz", timeout=60)
        return self

    def alive(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"the operator exited: {self.log()[-3000:]}")
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=1
            ) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL: no clean-up, no farewell to the peers; as a node failure would."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None:
            terminate(self.process)
