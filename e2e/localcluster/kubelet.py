"""A process kubelet: runs the pods of an API server as local processes, each in a sandbox of its
own.

It follows the pods through the API (every ``SYNC_SECONDS``), and for each one:

* finds the container's image among the images it knows (:class:`podspec.Image`; an unknown
  image leaves the pod ``Pending`` in ``ImagePullBackOff``, as a real kubelet leaves a pod whose
  image cannot be pulled), and its command: the image's entrypoint and CMD combined with the
  container's ``command`` and ``args`` (so Spark's executor pods, which carry only
  ``args: [executor]``, run the image's entrypoint);
* builds the volumes as host directories (:mod:`volumes`), and waits, ``Pending``, while a
  ConfigMap, Secret or claim it needs is missing;
* resolves the environment: the image's, the API server's Service variables
  (``KUBERNETES_SERVICE_HOST``/``PORT``: pods reach the API with their ServiceAccount token
  and the cluster CA at ``/var/run/secrets/kubernetes.io/serviceaccount``, as in-cluster clients
  do), ``envFrom`` and ``env`` with ``$(VAR)`` expansion;
* starts the container in a sandbox (:mod:`sandbox`): a mount namespace whose root mirrors the
  host's read-only, with the image's files and the volumes at their container paths, a private
  ``/tmp``, its own host name and an ``/etc/hosts`` that names the cluster's Services and pods;
* gives every pod an address of its own in 127.0.0.0/8 (a random /16 per kubelet, so two local
  clusters on one machine do not meet): reported as ``status.podIP``, and bound by what listens
  on the wildcard address (Python through ``podnet/sitecustomize.py``, Spark through
  ``SPARK_LOCAL_IP``);
* reports ``Running`` (the container ID is ``process://<pid>``), runs readiness probes, reports
  the exit code when the process ends (``128 + n`` for a signal, as a container runtime does;
  ``StartError`` when the command cannot be executed) and kills the rest of the process group: a
  container ends with its main process;
* restarts containers of ``restartPolicy: Always/OnFailure`` pods with a back-off, each start
  in a fresh root (the volumes persist, the container's own files do not);
* binds each pod it runs to its node (``spec.nodeName``, as the scheduler would), so that the
  API server deletes the pod gracefully: when it is marked for deletion, kills the process group
  (SIGTERM, then SIGKILL after the grace period), then deletes it for good (grace period 0,
  precondition on its uid), as a kubelet does; until then the pod is still there, terminating.

One container per pod (the first); init containers, liveness probes, resource limits,
``runAsUser`` (every process runs as the kubelet's user), Service ports that differ from their
target ports, and updates of projected files after the container started are not emulated.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.localcluster import sandbox
from e2e.localcluster.podspec import (
    Image,
    container_command,
    expand,
    hosts_file,
    service_environment,
)
from e2e.localcluster.volumes import NotReady, PodRef, PodVolumes
from finishable.kube.api import KubeApi

log = logging.getLogger(__name__)

SYNC_SECONDS = 0.25
PODNET_DIR = Path(__file__).resolve().parent / "podnet"
SANDBOX = Path(sandbox.__file__).resolve()
MERGE = "application/merge-patch+json"
RESTART_BACKOFF_MAX = 10.0
GRACE_SECONDS_MAX = 10.0
NODE_NAME = "local"  # the one node: pods are bound to it (spec.nodeName) before they start
POD_NET_DIR = "/etc/podnet"  # where a pod sees the kubelet's files for it (hosts, hostname)
# Host variables a container may see: its locale and time zone, nothing more.
HOST_ENV = ("LANG", "LC_ALL", "TZ")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Container(PodRef):
    """The process of a running pod and what is known about it."""

    process: subprocess.Popen[bytes] | None = None
    started: str = ""
    restarts: int = 0
    ready: bool = False
    next_probe: float = 0.0
    restart_at: float | None = None
    last_exit: dict[str, Any] | None = None
    finished: bool = False
    plan: sandbox.Plan | None = None
    reported: dict[str, Any] = field(default_factory=dict)

    @property
    def hostname(self) -> str:
        return str(self.pod["spec"].get("hostname") or self.name)[:63]


class ProcessKubelet:
    """Runs pods as sandboxed processes (see the module docstring)."""

    def __init__(
        self,
        api: KubeApi,
        root: Path,
        *,
        images: Mapping[str, Image],
        api_address: tuple[str, int],
    ) -> None:
        self.api = api
        self.root = root
        self.images = dict(images)
        self.service_env = service_environment(*api_address)
        self.volumes = PodVolumes(api, root)
        self.containers: dict[str, Container] = {}  # by pod uid
        self._waiting: dict[str, str] = {}  # pod uid -> why it is still Pending (as reported)
        self._ips: dict[str, str] = {}  # pod uid -> IP
        self._stopping: set[str] = set()  # uids of deleted pods whose processes are stopping
        self._subnet = random.randint(16, 250)  # 127.<subnet>.0.0/16
        self._next_ip = 2
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="process-kubelet", daemon=True)
        self._names: dict[str, list[str]] = {}

    # -- life -------------------------------------------------------------------------------

    def start(self) -> ProcessKubelet:
        self.root.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        for container in list(self.containers.values()):
            self._kill(container, grace=2.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception:
                log.exception("kubelet sync failed; retrying")
            self._stop.wait(SYNC_SECONDS)

    # -- one pass ---------------------------------------------------------------------------

    def sync(self) -> None:
        pods = self._list("/api/v1/pods")
        services = self._list("/api/v1/services")
        live = {pod["metadata"]["uid"]: pod for pod in pods}
        for gone in set(self._waiting) - set(live):
            del self._waiting[gone]
        for uid, container in list(self.containers.items()):
            pod = live.get(uid)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                self._remove(container, pod)
        names = self._cluster_names(pods, services)
        if names != self._names:
            self._names = names
            for container in self.containers.values():
                self._write_hosts(container)
        for uid, pod in live.items():
            if pod["spec"].get("nodeName") not in (None, NODE_NAME):
                continue  # another node's
            if pod["metadata"].get("deletionTimestamp"):
                if uid not in self._stopping and pod["spec"].get("nodeName"):
                    self._release(pod)  # nothing of it runs here: the grace period is over
                continue
            current = self.containers.get(uid)
            if current is None:
                if (pod.get("status") or {}).get("phase", "Pending") == "Pending" and self._bind(
                    pod
                ):
                    self._start_pod(pod)
            else:
                current.pod = pod
                self._tend(current)
        self._collect_claims()

    def _bind(self, pod: dict[str, Any]) -> bool:
        """Take the pod for this node, as the scheduler binds it (its deletion is graceful from
        then on: it stays until this kubelet has stopped it); False if another took it."""
        if pod["spec"].get("nodeName"):
            return True
        meta = pod["metadata"]
        path = self.api.path(
            "pods", meta["name"], namespace=meta["namespace"], subresource="binding"
        )
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE_NAME},
        }
        response = self.api.request("POST", path, body=binding)
        if response.status != 201:
            log.info("binding %s: %s %s", meta["name"], response.status, response.message)
            return False
        pod["spec"]["nodeName"] = NODE_NAME
        return True

    def _list(self, path: str) -> list[dict[str, Any]]:
        response = self.api.request("GET", path)
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status} {response.message}")
        return list(response.body.get("items") or [])

    # -- starting ---------------------------------------------------------------------------

    def _start_pod(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        if uid not in self._ips:
            self._ips[uid] = self._allocate_ip()
        directory = self.root / "pods" / meta["namespace"] / f"{meta['name']}-{uid[:8]}"
        container = Container(meta["namespace"], meta["name"], uid, self._ips[uid], directory, pod)
        try:
            if not pod["spec"].get("containers"):
                raise NotReady("the pod has no containers")
            image = self._image(container)
            container.plan = self._plan(container, image)
        except NotReady as reason:
            self._report_pending(container, "ContainerCreating", str(reason))
            return
        except ImageUnknown as unknown:
            self._report_pending(container, "ImagePullBackOff", str(unknown))
            return
        self._waiting.pop(uid, None)
        self.containers[uid] = container
        self._write_hosts(container)
        self._launch(container)

    def _allocate_ip(self) -> str:
        number = self._next_ip
        self._next_ip += 1
        return f"127.{self._subnet}.{number // 250}.{number % 250 + 2}"

    def _image(self, container: Container) -> Image:
        name = str(container.spec.get("image") or "")
        if name not in self.images:
            known = ", ".join(sorted(self.images)) or "none"
            raise ImageUnknown(
                f'Back-off pulling image "{name}": the local cluster runs the images it was '
                f"given ({known})"
            )
        return self.images[name]

    def _plan(self, container: Container, image: Image) -> sandbox.Plan:
        """The container's sandbox: its volumes mounted, its environment and command."""
        spec = container.spec
        volumes = {volume["name"]: volume for volume in container.pod["spec"].get("volumes") or []}
        mounts = [
            sandbox.Bind(str(source), target, read_only=True, directory=source.is_dir())
            for target, source in image.files.items()
        ]
        mounts += [sandbox.Bind(str(path), str(path), read_only=True) for path in image.host_paths]
        for mount in spec.get("volumeMounts") or []:
            volume = volumes.get(mount["name"])
            if volume is None:
                raise NotReady(f"volumeMount {mount['name']!r} names no volume of the pod")
            source = self.volumes.volume_dir(container, volume)
            if mount.get("subPath"):
                source = source / mount["subPath"]
                if not source.exists():
                    source.mkdir(parents=True)
            read_only = bool(mount.get("readOnly")) or any(
                kind in volume for kind in ("configMap", "secret", "projected")
            )
            mounts.append(sandbox.Bind(str(source), mount["mountPath"], read_only, source.is_dir()))
        net = container.directory / "net"
        net.mkdir(parents=True, exist_ok=True)
        mounts.append(sandbox.Bind(str(net), POD_NET_DIR, read_only=True))
        layout = sandbox.plan_layout(
            mounts,
            links={f"/etc/{name}": f"{POD_NET_DIR}/{name}" for name in ("hosts", "hostname")},
            dirs=image.dirs,
            host=sandbox.RealHost(),
        )
        env = self._environment(container, image)
        command = container_command(image, spec.get("command"), spec.get("args"))
        command = [expand(part, env) for part in command]
        if not command:
            raise NotReady("the container has no command and its image no entrypoint")
        return sandbox.Plan(
            root=str(container.directory / "root"),
            layout=layout,
            hostname=container.hostname,
            working_dir=spec.get("workingDir") or image.working_dir,
            command=command,
            env=env,
        )

    def _environment(self, container: Container, image: Image) -> dict[str, str]:
        """The image's variables, then the pod's (the pod's win), and the pod network's."""
        env = {key: os.environ[key] for key in HOST_ENV if key in os.environ}
        env |= dict(image.env)
        env["HOSTNAME"] = container.hostname
        env |= self.volumes.environment(container, self.service_env)
        # The pod network: what binds the wildcard address binds the pod's own address.
        env["PODNET_IP"] = container.ip
        env["SPARK_LOCAL_IP"] = container.ip
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PODNET_DIR), env.get("PYTHONPATH")]))
        return env

    def _launch(self, container: Container) -> None:
        assert container.plan is not None
        root = Path(container.plan.root)
        shutil.rmtree(root, ignore_errors=True)  # a fresh container layer for every start
        root.mkdir(parents=True)
        plan_path = container.directory / "sandbox.json"
        plan_path.write_text(container.plan.to_json())
        (container.directory / sandbox.START_ERROR_FILE).unlink(missing_ok=True)
        log_path = container.directory / f"{container.spec['name']}.log"
        with log_path.open("ab") as out:
            container.process = subprocess.Popen(
                [sys.executable, "-E", "-s", str(SANDBOX), str(plan_path)],
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                cwd=container.directory,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        container.started = now()
        container.restart_at = None
        container.ready = False
        container.next_probe = time.monotonic()
        log.info(
            "%s/%s: started pid %d", container.namespace, container.name, container.process.pid
        )
        self._report_running(container)

    # -- running ----------------------------------------------------------------------------

    def _tend(self, container: Container) -> None:
        """Notice an exit, restart if the policy says so, probe readiness."""
        if container.finished:
            return
        process = container.process
        if container.restart_at is not None:
            if time.monotonic() >= container.restart_at:
                container.restarts += 1
                self._launch(container)
            return
        if process is None:
            return
        code = process.poll()
        if code is not None:
            self._exited(container, process, code)
            return
        if time.monotonic() >= container.next_probe:
            ready, period = self._probe(container)
            container.next_probe = time.monotonic() + period
            if ready != container.ready:
                container.ready = ready
                self._report_running(container)

    def _exited(self, container: Container, process: subprocess.Popen[bytes], code: int) -> None:
        self._kill_group(process.pid, signal.SIGKILL)
        exit_code = 128 - code if code < 0 else code
        start_error = container.directory / sandbox.START_ERROR_FILE
        container.last_exit = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": container.started,
            "finishedAt": now(),
        }
        if start_error.exists():
            container.last_exit |= {"reason": "StartError", "message": start_error.read_text()}
        log.info("%s/%s: exited %d", container.namespace, container.name, exit_code)
        policy = container.pod["spec"].get("restartPolicy", "Always")
        if policy == "Always" or (policy == "OnFailure" and exit_code != 0):
            backoff = min(RESTART_BACKOFF_MAX, 1.0 * 2**container.restarts)
            container.restart_at = time.monotonic() + backoff
            self._report_waiting(container)
        else:
            container.finished = True
            self._report_terminated(container, "Succeeded" if exit_code == 0 else "Failed")

    def _probe(self, container: Container) -> tuple[bool, float]:
        probe = container.spec.get("readinessProbe")
        if not probe:
            return True, 1.0
        period = float(probe.get("periodSeconds", 10))
        period = min(period, 2.0)  # probe often: nothing here is slow to answer
        if "httpGet" in probe:
            get = probe["httpGet"]
            url = (
                f"http://{container.ip}:{self._port(container, get['port'])}{get.get('path', '/')}"
            )
            try:
                with urllib.request.urlopen(url, timeout=1) as response:
                    return 200 <= response.status < 400, period
            except OSError:
                return False, period
        if "tcpSocket" in probe:
            port = self._port(container, probe["tcpSocket"]["port"])
            try:
                socket.create_connection((container.ip, port), timeout=1).close()
                return True, period
            except OSError:
                return False, period
        return True, period

    @staticmethod
    def _port(container: Container, port: int | str) -> int:
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for declared in container.spec.get("ports") or []:
            if declared.get("name") == port:
                return int(declared["containerPort"])
        raise ValueError(f"no port named {port!r}")

    # -- status -----------------------------------------------------------------------------

    def _container_status(self, container: Container, state: dict[str, Any]) -> dict[str, Any]:
        status: dict[str, Any] = {
            "name": container.spec["name"],
            "image": container.spec.get("image", ""),
            "ready": container.ready and "running" in state,
            "restartCount": container.restarts,
            "started": "running" in state,
            "state": state,
        }
        if container.process is not None:
            status["containerID"] = f"process://{container.process.pid}"
        if container.last_exit and "terminated" not in state:
            status["lastState"] = {"terminated": container.last_exit}
        return status

    def _conditions(self, ready: bool) -> list[dict[str, Any]]:
        value = "True" if ready else "False"
        return [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "ContainersReady", "status": value},
            {"type": "Ready", "status": value},
        ]

    def _report_pending(self, container: Container, reason: str, message: str) -> None:
        """A pod that cannot start yet: its container waits, saying why (once per reason)."""
        if self._waiting.get(container.uid) == message:
            return
        self._waiting[container.uid] = message
        state = {"waiting": {"reason": reason, "message": message}}
        self._patch_status(
            container,
            {
                "phase": "Pending",
                "conditions": self._conditions(False),
                "containerStatuses": [self._container_status(container, state)],
            },
        )

    def _report_running(self, container: Container) -> None:
        state = {"running": {"startedAt": container.started}}
        self._patch_status(
            container,
            {
                "phase": "Running",
                "podIP": container.ip,
                "podIPs": [{"ip": container.ip}],
                "hostIP": "127.0.0.1",
                "startTime": container.reported.get("startTime") or container.started,
                "conditions": self._conditions(container.ready),
                "containerStatuses": [self._container_status(container, state)],
                "reason": None,
                "message": None,
            },
        )
        container.reported.setdefault("startTime", container.started)

    def _report_waiting(self, container: Container) -> None:
        container.ready = False
        state = {"waiting": {"reason": "CrashLoopBackOff"}}
        self._patch_status(
            container,
            {
                "conditions": self._conditions(False),
                "containerStatuses": [self._container_status(container, state)],
            },
        )

    def _report_terminated(self, container: Container, phase: str) -> None:
        container.ready = False
        assert container.last_exit is not None
        state = {"terminated": container.last_exit}
        self._patch_status(
            container,
            {
                "phase": phase,
                "conditions": self._conditions(False),
                "containerStatuses": [self._container_status(container, state)],
            },
        )

    def _patch_status(self, container: Container, status: dict[str, Any]) -> None:
        path = self.api.path(
            "pods", container.name, namespace=container.namespace, subresource="status"
        )
        body = {"metadata": {"uid": container.uid}, "status": status}
        response = self.api.request("PATCH", path, body=body, content_type=MERGE)
        if response.status not in (200, 404, 409):
            log.warning("status of %s: %s %s", container.name, response.status, response.message)

    # -- stopping ---------------------------------------------------------------------------

    def _remove(self, container: Container, pod: dict[str, Any] | None) -> None:
        """The pod is being deleted (or is gone): stop its processes in the background within
        its grace period, then let the API server delete it; forget it."""
        del self.containers[container.uid]
        spec, meta = container.pod["spec"], (pod or {}).get("metadata") or {}
        grace = float(
            meta.get("deletionGracePeriodSeconds", spec.get("terminationGracePeriodSeconds", 30))
        )
        self._stopping.add(container.uid)
        threading.Thread(
            target=self._stop_pod,
            args=(container, min(grace, GRACE_SECONDS_MAX), pod),
            name=f"stop-{container.name}",
            daemon=True,
        ).start()

    def _stop_pod(self, container: Container, grace: float, pod: dict[str, Any] | None) -> None:
        try:
            self._kill(container, grace)
            if pod is not None:
                self._release(pod)
        finally:
            self._stopping.discard(container.uid)

    def _release(self, pod: dict[str, Any]) -> None:
        """The pod's processes are gone: delete it with no grace left (this pod, by its uid, not
        one created since under the same name), as a kubelet ends a graceful deletion."""
        meta = pod["metadata"]
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": meta["uid"]},
        }
        path = self.api.path("pods", meta["name"], namespace=meta["namespace"])
        response = self.api.request("DELETE", path, body=options)
        if response.status not in (200, 404, 409):
            log.warning("deleting %s: %s %s", meta["name"], response.status, response.message)

    def _kill(self, container: Container, grace: float) -> None:
        process = container.process
        if process is None:
            return
        if process.poll() is None:
            self._kill_group(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(grace)
        self._kill_group(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(5)
        log.info("%s/%s: stopped", container.namespace, container.name)

    @staticmethod
    def _kill_group(pid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)

    # -- cluster DNS and claims -----------------------------------------------------------

    def _cluster_names(
        self, pods: list[dict[str, Any]], services: list[dict[str, Any]]
    ) -> dict[str, list[str]]:
        """Service names to their pods' IPs (newest first); StatefulSet pods by name."""
        names: dict[str, list[str]] = {}
        running = [
            pod
            for pod in pods
            if pod["metadata"]["uid"] in self.containers
            and not pod["metadata"].get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") == "Running"
        ]
        running.sort(key=lambda pod: pod["metadata"].get("creationTimestamp", ""), reverse=True)
        for pod in running:
            meta = pod["metadata"]
            ip = self.containers[meta["uid"]].ip
            hostname, subdomain = pod["spec"].get("hostname"), pod["spec"].get("subdomain")
            if hostname and subdomain:
                names[f"{hostname}.{subdomain}.{meta['namespace']}.svc"] = [ip]
        for service in services:
            meta = service["metadata"]
            spec = service.get("spec") or {}
            selector = spec.get("selector") or {}
            if not selector:
                continue
            ips = [
                self.containers[pod["metadata"]["uid"]].ip
                for pod in running
                if pod["metadata"]["namespace"] == meta["namespace"]
                and all(
                    (pod["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items()
                )
                and (
                    spec.get("publishNotReadyAddresses")
                    or self.containers[pod["metadata"]["uid"]].ready
                )
            ]
            if ips:
                names[f"{meta['name']}.{meta['namespace']}.svc"] = ips
        return names

    def _write_hosts(self, container: Container) -> None:
        """The pod's ``/etc/hosts`` and ``/etc/hostname``, replaced whole (a rename), so a
        reader never sees half a file."""
        subdomain = container.pod["spec"].get("subdomain")
        files = {
            "hosts": hosts_file(
                container.ip, container.hostname, container.namespace, self._names, subdomain
            ),
            "hostname": container.hostname + "\n",
        }
        net = container.directory / "net"
        net.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            partial = net / f".{name}.tmp"
            partial.write_text(text)
            partial.replace(net / name)

    def _collect_claims(self) -> None:
        """Delete the directories of claims that are gone (their data goes with them)."""
        base = self.root / "claims"
        if not base.exists():
            return
        claims = self._list("/api/v1/persistentvolumeclaims")
        kept = {self.volumes.claim_dir(c["metadata"]["namespace"], c) for c in claims}
        for directory in base.glob("*/*"):
            if directory not in kept:
                shutil.rmtree(directory, ignore_errors=True)


class ImageUnknown(Exception):
    """The pod names an image the kubelet cannot run."""


def kubeconfig(server: str, token: str, namespace: str, ca: str | None = None) -> dict[str, Any]:
    """Credentials for the local API (the admin's kubeconfig). ``ca``: the PEM of the cluster
    CA, for an ``https://`` server."""
    cluster: dict[str, Any] = {"server": server}
    if ca:
        cluster["certificate-authority-data"] = base64.b64encode(ca.encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": "local", "user": {"token": token}}],
        "contexts": [
            {
                "name": "local",
                "context": {"cluster": "local", "user": "local", "namespace": namespace},
            }
        ],
        "current-context": "local",
    }
