"""The e2e suite's view of a cluster: the local one (default) or any kubeconfig's.

    .venv/bin/pytest e2e                      # starts the local cluster (testcluster/localcluster)
    E2E_KUBECONFIG=~/.kube/config E2E_DATA_DIR=/shared E2E_IMAGE=finishable-spark-operator:0.1.0 \\
        .venv/bin/pytest e2e                  # a cluster where the chart is installed (kind)

Jobs read and write ``/data``, a volume every driver and executor shares: the suite declares it
as a hostPath of ``E2E_DATA_DIR`` with Spark's own ``spark.kubernetes.*.volumes.*`` keys, and
reads the output there to compare it with the ground truth. On kind that directory is mounted
into the node at the same path (e2e/kind/cluster.yaml).

Everything goes through the Kubernetes API, as ``kubectl`` would: apply, patch, delete, watch
the status. The only other act is the crash: SIGKILL of the driver's main process (on the local
cluster the kubelet reports it as ``process://<pid>``, ``docker://<id>`` or, on a real node,
``containerd://<id>``; elsewhere through ``kubectl exec``).
"""

from __future__ import annotations

import abc
import copy
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from finishable.kube.api import KubeApi, KubeResponse
from finishable.state.configmap import ConfigMapBackend
from testcluster.processes import alive
from testcluster.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
JOBS = "finishable.dev/v1alpha1"
MERGE = "application/merge-patch+json"
DATA_MOUNT = "/data"
VOLUME_PREFIX = "spark.kubernetes.{role}.volumes."


def example(path: str, data_dir: Path, image: str, **spec: Any) -> dict[str, Any]:
    """An example manifest as the suite applies it: its /data volume a hostPath of ``data_dir``.

    The example's own ``/data`` volume (a claim) is replaced, for the driver and the executors
    alike; its work volume is the claim ``$E2E_WORK_CLAIM`` where that is set (a cluster whose
    storage offers no ReadWriteMany class, such as kind: ``e2e/kind/run.sh`` makes one);
    ``spec`` overrides top-level spec fields.
    """
    manifest: dict[str, Any] = yaml.safe_load((ROOT / path).read_text())
    manifest["spec"]["image"] = image
    conf = manifest["spec"]["application"].setdefault("sparkConf", {})
    for role in ("driver", "executor"):
        prefix = VOLUME_PREFIX.format(role=role)
        for key in [k for k in conf if k.startswith(prefix)]:
            del conf[key]
        conf[f"{prefix}hostPath.data.mount.path"] = DATA_MOUNT
        conf[f"{prefix}hostPath.data.options.path"] = str(data_dir)
    work_claim = os.environ.get("E2E_WORK_CLAIM")
    if work_claim and "workVolume" in manifest["spec"]:
        manifest["spec"]["workVolume"] = {"claimName": work_claim}
    manifest["spec"].update(spec)
    return manifest


def batch_example(
    data_dir: Path, image: str, name: str, files: int, rows: int | None = None, **spec: Any
) -> dict[str, Any]:
    """``examples/batch/cluster.yaml`` as job ``name``, its input and output under /data/<name>."""
    manifest = example("examples/batch/cluster.yaml", data_dir, image, **spec)
    manifest["metadata"]["name"] = name
    args = [f"--input=/data/{name}/orders", f"--output=/data/{name}/totals", f"--files={files}"]
    manifest["spec"]["application"]["args"] = args + ([f"--rows={rows}"] if rows else [])
    return manifest


def streaming_example(
    data_dir: Path, image: str, name: str, args: list[str], **spec: Any
) -> dict[str, Any]:
    """``examples/streaming/cluster.yaml`` as job ``name``, its input and output under
    /data/<name>, with the program's other arguments ``args``."""
    manifest = example("examples/streaming/cluster.yaml", data_dir, image, **spec)
    manifest["metadata"]["name"] = name
    manifest["spec"]["application"]["args"] = [
        f"--input=/data/{name}/input",
        f"--output=/data/{name}/output",
        *args,
    ]
    return manifest


class E2ECluster(abc.ABC):
    """Jobs and pods in one namespace of a cluster, through its API."""

    def __init__(self, api: KubeApi, namespace: str, data_dir: Path, image: str) -> None:
        self.api = api
        self.namespace = namespace
        self.data_dir = data_dir
        self.image = image

    # -- jobs -------------------------------------------------------------------------------

    def job_path(self, name: str | None = None) -> str:
        return self.api.path("finishablesparkjobs", name, api_version=JOBS)

    def apply(self, manifest: dict[str, Any]) -> KubeResponse:
        """``kubectl apply`` of a new job: the API server's answer, accepted or not."""
        return self.api.request("POST", self.job_path(), body=copy.deepcopy(manifest))

    def job(self, name: str) -> dict[str, Any] | None:
        response = self.api.request("GET", self.job_path(name))
        return response.body if response.status == 200 else None

    def status(self, name: str) -> dict[str, Any]:
        job = self.job(name)
        assert job is not None, f"job {name} is gone"
        return dict(job.get("status") or {})

    def set_state(self, name: str, state: str) -> None:
        """``kubectl patch fsj NAME --type merge -p '{"spec":{"state":STATE}}'``."""
        self.patch_spec(name, {"state": state})

    def patch_spec(self, name: str, spec: dict[str, Any]) -> None:
        """``kubectl patch fsj NAME --type merge -p '{"spec":SPEC}'``."""
        body = {"spec": spec}
        response = self.api.request("PATCH", self.job_path(name), body=body, content_type=MERGE)
        assert response.status == 200, response.body

    def delete(self, name: str) -> None:
        assert self.api.request("DELETE", self.job_path(name)).status in (200, 202)

    def wait_phase(self, name: str, phase: str, timeout: float) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            status = self.status(name)
            if status.get("phase") == phase:
                return status
            if status.get("phase") == "Failed" and phase != "Failed":
                raise AssertionError(f"{name} failed: {status.get('message')}{self.logs(name)}")
            return None

        return wait_for(
            reached, f"{name} reaches {phase}", timeout, on_fail=lambda: self.logs(name)
        )

    def state_backend(self, name: str) -> ConfigMapBackend:
        """The job's ConfigMap storage: checkpoints, savepoints, the batch event log."""
        return ConfigMapBackend(self.api, name, namespace=self.namespace)

    # -- objects ----------------------------------------------------------------------------

    def object_storage(self, prefix: str) -> str | None:
        """An object storage URL of ``prefix`` that pods reach, when the cluster has one."""
        return None

    def objects(self, plural: str, selector: str, api_version: str = "v1") -> list[dict[str, Any]]:
        path = self.api.path(plural, api_version=api_version)
        response = self.api.request("GET", path, query={"labelSelector": selector})
        assert response.status == 200, response.body
        return list(response.body.get("items") or [])

    def children(self, job: str) -> dict[str, list[str]]:
        """Every object labelled as the job's, by kind (its snapshots excepted)."""
        selector = f"finishable.dev/job={job},finishable.dev/component!=state"
        found: dict[str, list[str]] = {}
        for api_version, plural in (
            ("v1", "pods"),
            ("v1", "services"),
            ("v1", "configmaps"),
            ("v1", "secrets"),
            ("v1", "serviceaccounts"),
            ("v1", "persistentvolumeclaims"),
            ("apps/v1", "statefulsets"),
            ("rbac.authorization.k8s.io/v1", "roles"),
            ("rbac.authorization.k8s.io/v1", "rolebindings"),
        ):
            names = [o["metadata"]["name"] for o in self.objects(plural, selector, api_version)]
            if names:
                found[plural] = sorted(names)
        return found

    def pod(self, name: str) -> dict[str, Any] | None:
        response = self.api.request("GET", self.api.path("pods", name))
        return response.body if response.status == 200 else None

    def executor_pods(self, job: str, attempt: int | None = None) -> list[dict[str, Any]]:
        """The executor pods Spark's Kubernetes backend created for the job (and attempt)."""
        selector = f"spark-role=executor,finishable.dev/job={job}"
        if attempt is not None:
            selector += f",finishable.dev/attempt={attempt}"
        return self.objects("pods", selector)

    def running_executors(self, job: str, attempt: int) -> set[str]:
        """The attempt's executor pods that run (not the ones going away)."""
        return {
            pod["metadata"]["name"]
            for pod in self.executor_pods(job, attempt)
            if (pod.get("status") or {}).get("phase") == "Running"
            and not pod["metadata"].get("deletionTimestamp")
        }

    def container_id(self, pod: str) -> str | None:
        """The ID of the pod's running container (``<runtime>://<id>``), as its kubelet says."""
        body = self.pod(pod) or {}
        for status in (body.get("status") or {}).get("containerStatuses") or []:
            if "running" in (status.get("state") or {}) and status.get("containerID"):
                return str(status["containerID"])
        return None

    def container_running(self, container_id: str) -> bool | None:
        """Whether that container still runs; None where this suite cannot see containers."""
        return None

    def events(self, name: str) -> list[dict[str, Any]]:
        items = self.api.request("GET", self.api.path("events")).body.get("items") or []
        return [e for e in items if (e.get("involvedObject") or {}).get("name") == name]

    # -- acts outside the API -------------------------------------------------------------

    @abc.abstractmethod
    def kill_driver(self, pod: str) -> None:
        """SIGKILL the driver's main process (its program): a crash, not a deletion."""

    @abc.abstractmethod
    def kill_executor(self, pod: str) -> None:
        """SIGKILL an executor pod's JVM: a crash, not a deletion."""

    @abc.abstractmethod
    def pod_log(self, pod: str) -> str:
        """The whole log of a pod's container, also after the pod is deleted where kept."""

    @abc.abstractmethod
    def logs(self, job: str) -> str:
        """The newest lines of the job's pod logs, for failure messages."""

    def assert_executors_ran_tasks(self, pods: list[str]) -> None:
        """Every executor pod joined its driver and the pods ran the job's tasks: the work was
        not done in the driver. Which pod runs which task is Spark's choice (a stateful query
        prefers the executor holding a partition's state store; a pod that registers late under
        load may find every task taken), so one pod may run them all."""
        logs = {pod: self.pod_log(pod) for pod in pods}
        for pod, log in logs.items():
            assert "KubernetesExecutorBackend" in log, f"{pod} never joined: {log[-2000:]}"
        assert any("Running task" in log for log in logs.values()), {
            pod: log[-1000:] for pod, log in logs.items()
        }


class LocalE2ECluster(E2ECluster):
    """The local cluster: pods are containers or processes of this machine."""

    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        data_dir: Path,
        pods_dir: Path,
        operator_logs: Callable[[], str],
        *,
        object_storage: Callable[[str], str] | None = None,
        containerd_sockets: tuple[Path, ...] = (),
    ) -> None:
        super().__init__(api, namespace, data_dir, "finishable-spark-operator:0.1.0")
        self.pods_dir = pods_dir
        self.operator_logs = operator_logs
        self._object_storage = object_storage
        self.containerd_sockets = containerd_sockets  # the real nodes' (containerd:// IDs)

    def object_storage(self, prefix: str) -> str | None:
        return self._object_storage(prefix) if self._object_storage is not None else None

    def container_running(self, container_id: str) -> bool:
        """Whether the container still runs (an ended process, a removed container)."""
        scheme, _, name = container_id.partition("://")
        if scheme == "process":
            return alive(int(name))
        if scheme == "containerd":
            return any(
                line.split()[:1] == [name] and line.split()[-1:] == ["RUNNING"]
                for socket in self.containerd_sockets
                for line in self._ctr(socket, "task", "ls").stdout.splitlines()
            )
        command = [scheme, "inspect", "--format", "{{.State.Running}}", name]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        return done.returncode == 0 and done.stdout.strip() == "true"

    def kill_driver(self, pod: str) -> None:
        """SIGKILL of the container's main process: the process runtime's sandboxed process,
        or (``docker kill``) the container's init, tini, which the kernel ends with everything
        in the container."""
        container_id = self.container_id(pod)
        assert container_id is not None, f"{pod} has no running container"
        scheme, _, name = container_id.partition("://")
        if scheme == "process":
            os.kill(int(name), signal.SIGKILL)
        elif scheme == "containerd":  # its node's containerd: the others do not know the ID
            killed = [
                self._ctr(socket, "task", "kill", "--signal", "SIGKILL", name).returncode == 0
                for socket in self.containerd_sockets
            ]
            assert any(killed), f"no node's containerd knows {container_id}"
        else:
            command = [scheme, "kill", "--signal", "KILL", name]
            subprocess.run(command, capture_output=True, timeout=60, check=True)

    def kill_executor(self, pod: str) -> None:
        self.kill_driver(pod)  # the container's main process is (or runs) the executor's JVM

    @staticmethod
    def _ctr(socket: Path, *args: str) -> subprocess.CompletedProcess[str]:
        """containerd's CLI on a real node's socket, in the kubelet's namespace."""
        command = ["ctr", "--address", str(socket), "--namespace", "k8s.io", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    def pod_log(self, pod: str) -> str:
        """The kubelet keeps a deleted pod's directory: its log outlives the pod."""
        logs = sorted((self.pods_dir / self.namespace).glob(f"{pod}-*/*.log"))
        return "".join(log.read_text() for log in logs if log.parent.name[:-9] == pod)

    def logs(self, job: str) -> str:
        parts = []
        for log in sorted((self.pods_dir / self.namespace).glob(f"{job}-*/*.log")):
            parts.append(f"\n--- {log.parent.name}/{log.name} ---\n{log.read_text()[-4000:]}")
        parts.append(f"\n--- the operator's log ---\n{self.operator_logs()[-3000:]}")
        return "".join(parts)


class KubeconfigE2ECluster(E2ECluster):
    """Any cluster the kubeconfig names, the chart installed; the crash through kubectl."""

    def __init__(
        self, api: KubeApi, namespace: str, data_dir: Path, image: str, kubeconfig: str
    ) -> None:
        super().__init__(api, namespace, data_dir, image)
        self.kubeconfig = kubeconfig

    def _kubectl(self, *args: str) -> str:
        kubectl = shutil.which("kubectl")
        assert kubectl, "kubectl is needed to run the suite against a kubeconfig"
        command = [kubectl, "--kubeconfig", self.kubeconfig, "-n", self.namespace, *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        return done.stdout + done.stderr

    def kill_driver(self, pod: str) -> None:
        # The program is the container's main process under tini: kill it, tini exits with it.
        script = "kill -KILL $(pgrep -o -f 'python.*\\.py')"
        self._kubectl("exec", pod, "-c", "driver", "--", "sh", "-c", script)

    def kill_executor(self, pod: str) -> None:
        script = "kill -KILL $(pgrep -o java)"
        self._kubectl("exec", pod, "-c", "executor", "--", "sh", "-c", script)

    def pod_log(self, pod: str) -> str:
        return self._kubectl("logs", pod)

    def logs(self, job: str) -> str:
        return self._kubectl("logs", "-l", f"finishable.dev/job={job}", "--tail", "40")[-6000:]
