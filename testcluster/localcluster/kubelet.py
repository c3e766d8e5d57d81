"""A kubelet: runs the pods of an API server through a container runtime (``runtime.py``: the
process runtime, or the container runtime that runs the built image with docker).

It follows the pods through the API (every ``SYNC_SECONDS``), and for each one:

* asks the runtime for the container's image (an unknown image leaves the pod ``Pending`` in
  ``ImagePullBackOff``, as a real kubelet leaves a pod whose image cannot be pulled);
* builds the volumes as host directories (:mod:`volumes`), and waits, ``Pending``, while a
  ConfigMap, Secret or claim it needs is missing;
* resolves the environment: the API server's Service variables (``KUBERNETES_SERVICE_HOST``/
  ``PORT``: pods reach the API with their ServiceAccount token and the cluster CA at
  ``/var/run/secrets/kubernetes.io/serviceaccount``, as in-cluster clients do), ``envFrom`` and
  ``env`` with ``$(VAR)`` expansion;
* gives the pod an address from the runtime before its container starts (``status.podIP``),
  its own host name and an ``/etc/hosts`` that names the cluster's Services and pods (in place
  of cluster DNS), and has the runtime start its container with the volumes at their paths;
* reports ``Running`` (with the runtime's container ID), runs readiness probes (with the probe's
  ``timeoutSeconds`` and its failure and success thresholds; the delay and period at most
  ``PROBE_PERIOD_MAX``, nothing here being slow to start), reports the
  exit code when the container ends (``128 + n`` for a signal; ``StartError`` when it could not
  start), restarts containers of ``restartPolicy: Always/OnFailure`` pods with a back-off, each
  start in a fresh root (the volumes persist, the container's own files do not);
* binds each pod it runs to its node (``spec.nodeName``, as the scheduler would), so that the
  API server deletes the pod gracefully: when it is marked for deletion, stops the container
  (SIGTERM, then SIGKILL after the grace period), then deletes it for good (grace period 0,
  precondition on its uid), as a kubelet does; until then the pod is still there, terminating.

One container per pod (the first); init containers, liveness probes, resource limits, Service
ports that differ from their target ports, and updates of projected files after the container
started are not emulated.
"""

from __future__ import annotations

import base64
import datetime
import logging
import shutil
import socket
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from finishable.kube.api import KubeApi
from testcluster.localcluster.podspec import hosts_file, service_environment
from testcluster.localcluster.runtime import Container, CreateError, ImageUnknown, Launch, Runtime
from testcluster.localcluster.sandbox import Bind
from testcluster.localcluster.volumes import NotReady, PodVolumes

__all__ = ["Container", "ImageUnknown", "Kubelet", "kubeconfig"]

log = logging.getLogger(__name__)

SYNC_SECONDS = 0.25
MERGE = "application/merge-patch+json"
RESTART_BACKOFF_MAX = 10.0
NODE_NAME = "local"  # the one node: pods are bound to it (spec.nodeName) before they start
# securityContext fields only a pod has; a container's own context overrides the others.
POD_ONLY_SECURITY = ("fsGroup", "supplementalGroups")
PROBE_PERIOD_MAX = 2.0


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Kubelet:
    """Runs pods through a :class:`Runtime` (see the module docstring). ``api_port``: the API
    server's HTTPS port, on the runtime's ``api_host``. ``api``: the admin's on the emulator, the
    node's own identity (``system:node:local``) on a real control plane."""

    def __init__(
        self,
        api: KubeApi,
        root: Path,
        *,
        runtime: Runtime,
        api_port: int,
        binds: bool = True,
        keeps_claims: bool = True,
    ) -> None:
        self.api = api
        # Without a scheduler it binds the pods it runs itself; on a real control plane the
        # scheduler binds them, and a provisioner deletes the directories of deleted claims.
        self.binds = binds
        self.keeps_claims = keeps_claims
        self.root = root
        self.runtime = runtime
        self.service_env = service_environment(runtime.api_host, api_port)
        self.volumes = PodVolumes(api, root, host_ip=runtime.host_ip)
        self.containers: dict[str, Container] = {}  # by pod uid
        self._waiting: dict[str, str] = {}  # pod uid -> why it is still Pending (as reported)
        self._ips: dict[str, str] = {}  # pod uid -> IP
        self._stopping: set[str] = set()  # uids of deleted pods whose containers are stopping
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubelet", daemon=True)
        self._names: dict[str, list[str]] = {}

    # -- life -------------------------------------------------------------------------------

    def start(self) -> Kubelet:
        self.root.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        stopping = [
            threading.Thread(target=self._kill, args=(container, 2.0), daemon=True)
            for container in self.containers.values()
        ]
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join(30)
        self.runtime.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception:
                log.exception("kubelet sync failed; retrying")
            self._stop.wait(SYNC_SECONDS)

    # -- one pass ---------------------------------------------------------------------------

    def sync(self) -> None:
        # A node may list only the pods bound to it (the Node authorizer); unbound ones it binds.
        mine = None if self.binds else {"fieldSelector": f"spec.nodeName={NODE_NAME}"}
        pods = self._list("/api/v1/pods", mine)
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
        if self.keeps_claims:
            self._collect_claims()

    def _bind(self, pod: dict[str, Any]) -> bool:
        """Take the pod for this node, as the scheduler binds it (its deletion is graceful from
        then on: it stays until this kubelet has stopped it); False if another took it."""
        if pod["spec"].get("nodeName"):
            return True
        if not self.binds:
            return False  # the scheduler's to bind
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

    def _list(self, path: str, query: dict[str, str] | None = None) -> list[dict[str, Any]]:
        response = self.api.request("GET", path, query=query)
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status} {response.message}")
        return list(response.body.get("items") or [])

    # -- starting ---------------------------------------------------------------------------

    def _start_pod(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        if uid not in self._ips:
            self._ips[uid] = self.runtime.allocate_ip()
        directory = self.root / "pods" / meta["namespace"] / f"{meta['name']}-{uid[:8]}"
        container = Container(meta["namespace"], meta["name"], uid, self._ips[uid], directory, pod)
        try:
            if not pod["spec"].get("containers"):
                raise NotReady("the pod has no containers")
            self.runtime.check_image(str(container.spec.get("image") or ""))
            launch = self.launch_spec(container)
            self._write_hosts(container)
            container.prepared = self.runtime.prepare(container, launch, self._net(container))
        except NotReady as reason:
            self._report_pending(container, "ContainerCreating", str(reason))
            return
        except ImageUnknown as unknown:
            self._report_pending(container, "ImagePullBackOff", str(unknown))
            return
        except CreateError as error:
            self._report_pending(container, "CreateContainerConfigError", str(error))
            return
        self._waiting.pop(uid, None)
        self.containers[uid] = container
        self._launch(container)

    def launch_spec(self, container: Container) -> Launch:
        """The container as Kubernetes resolves it: its volumes (written) at their paths, its
        environment, command, host name and security context."""
        spec = container.spec
        volumes = {volume["name"]: volume for volume in container.pod["spec"].get("volumes") or []}
        mounts = []
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
            mounts.append(Bind(str(source), mount["mountPath"], read_only, source.is_dir()))
        pod_security = dict(container.pod["spec"].get("securityContext") or {})
        own = spec.get("securityContext") or {}
        container_security = {k: v for k, v in own.items() if k not in POD_ONLY_SECURITY}
        return Launch(
            image=str(spec.get("image") or ""),
            command=tuple(spec.get("command") or ()),
            args=tuple(spec.get("args") or ()),
            env=self.volumes.environment(container, self.service_env),
            mounts=tuple(mounts),
            working_dir=str(spec.get("workingDir") or ""),
            hostname=container.hostname,
            security=pod_security | container_security,
        )

    def _launch(self, container: Container) -> None:
        log_path = self._log_path(container)
        with log_path.open("ab") as out:
            container.process = self.runtime.start(container, out)
        container.started = now()
        container.restart_at = None
        container.ready = False
        container.probe_streak = 0
        delay = float((container.spec.get("readinessProbe") or {}).get("initialDelaySeconds", 0))
        container.next_probe = time.monotonic() + min(delay, PROBE_PERIOD_MAX)
        log.info("%s/%s: started %s", container.namespace, container.name, self._id(container))
        self._report_running(container)

    @staticmethod
    def _log_path(container: Container) -> Path:
        return container.directory / f"{container.spec['name']}.log"

    def _id(self, container: Container) -> str:
        return f"{self.runtime.scheme}://{container.runtime_id}"

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
            self._exited(container, code)
            return
        if time.monotonic() >= container.next_probe:
            passed, period = self._probe(container)
            container.next_probe = time.monotonic() + period
            probe = container.spec.get("readinessProbe") or {}
            ready, container.probe_streak = readiness(
                probe, container.ready, container.probe_streak, passed
            )
            if ready != container.ready:
                container.ready = ready
                self._report_running(container)

    def _exited(self, container: Container, code: int) -> None:
        self.runtime.reap(container)
        exit_code = 128 - code if code < 0 else code
        container.last_exit = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": container.started,
            "finishedAt": now(),
        }
        start_error = self.runtime.start_error(container, exit_code)
        if start_error is not None:
            container.last_exit |= {"reason": "StartError", "message": start_error}
        elif exit_code != 0 and container.spec.get("terminationMessagePolicy") == (
            "FallbackToLogsOnError"
        ):
            # As the kubelet does when the termination message file is empty (no container
            # here gets one): the log's tail, at most 80 lines and 2048 bytes.
            container.last_exit["message"] = _log_tail(self._log_path(container))
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
        period = min(float(probe.get("periodSeconds", 10)), PROBE_PERIOD_MAX)
        timeout = float(probe.get("timeoutSeconds", 1))
        if "httpGet" in probe:
            get = probe["httpGet"]
            url = (
                f"http://{container.ip}:{self._port(container, get['port'])}{get.get('path', '/')}"
            )
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    return 200 <= response.status < 400, period
            except OSError:
                return False, period
        if "tcpSocket" in probe:
            port = self._port(container, probe["tcpSocket"]["port"])
            try:
                socket.create_connection((container.ip, port), timeout=timeout).close()
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
        if container.runtime_id:
            status["containerID"] = self._id(container)
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
                "hostIP": self.runtime.host_ip,
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
            args=(container, grace, pod),  # all of it, as a real kubelet gives
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
        if container.process is not None:
            self.runtime.kill(container, grace)
            log.info("%s/%s: stopped", container.namespace, container.name)

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
        """The pod's ``/etc/hosts`` and ``/etc/hostname``: replaced whole (a rename) where the
        runtime mounts their directory, so a reader never sees half a file; rewritten in place
        where it mounts the file itself (a rename would leave the container the old inode)."""
        subdomain = container.pod["spec"].get("subdomain")
        files = {
            "hosts": hosts_file(
                container.ip, container.hostname, container.namespace, self._names, subdomain
            ),
            "hostname": container.hostname + "\n",
        }
        net = self._net(container)
        for name, text in files.items():
            if self.runtime.hosts_renamed:
                partial = net / f".{name}.tmp"
                partial.write_text(text)
                partial.replace(net / name)
            else:
                _rewrite(net / name, text)

    @staticmethod
    def _net(container: Container) -> Path:
        net = container.directory / "net"
        net.mkdir(parents=True, exist_ok=True)
        return net

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


def readiness(probe: dict[str, Any], ready: bool, streak: int, passed: bool) -> tuple[bool, int]:
    """Readiness after one probe result, as the kubelet decides it: a ready container turns
    unready after ``failureThreshold`` failures in a row (3), an unready one ready after
    ``successThreshold`` successes in a row (1). Returns (ready, the new streak)."""
    if passed == ready:
        return ready, 0
    threshold = int(
        probe.get("successThreshold" if passed else "failureThreshold", 1 if passed else 3)
    )
    if streak + 1 >= threshold:
        return passed, 0
    return ready, streak + 1


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


TERMINATION_LOG_LINES = 80
TERMINATION_LOG_BYTES = 2048


def _log_tail(path: Path) -> str:
    """The kubelet's FallbackToLogsOnError message: the last 80 lines, at most 2048 bytes."""
    try:
        with path.open("rb") as file:
            size = file.seek(0, 2)
            file.seek(max(0, size - 64 * 1024))
            data = file.read()
    except OSError:
        return ""
    tail = b"\n".join(data.splitlines()[-TERMINATION_LOG_LINES:])[-TERMINATION_LOG_BYTES:]
    return tail.decode("utf-8", errors="replace")


def _rewrite(path: Path, text: str) -> None:
    """Write ``text`` over the file in one write, then cut what is left of a longer old text
    (padded with spaces to the old length first, so no reader sees the old text's tail as
    lines of its own)."""
    data = text.encode()
    with path.open("r+b" if path.exists() else "wb") as file:
        old = file.seek(0, 2)
        file.seek(0)
        file.write(data + b" " * max(0, old - len(data)))
        file.flush()
        file.truncate(len(data))
