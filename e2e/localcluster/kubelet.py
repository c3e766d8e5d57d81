"""A process kubelet: runs the pods of an API server as local processes.

It follows the pods through the API (every ``SYNC_SECONDS``), and for each one:

* builds the container's volumes as host directories (ConfigMap and Secret files, projected
  volumes: token, ConfigMap, downward API; emptyDir, hostPath, and a directory per
  PersistentVolumeClaim that lives as long as the claim), maps the container's paths onto them
  (``paths.PathMap``), and waits, ``Pending``, while a ConfigMap, Secret or claim it needs is
  missing, as a real kubelet does;
* resolves the environment (``value``, ``valueFrom`` Secret/ConfigMap keys and pod fields,
  ``envFrom``), gives the process a kubeconfig with its ServiceAccount's token (that of its
  projected ``kube-api-access-*`` volume, requested through the TokenRequest API and bound to
  the pod, so that its API calls are made as its ServiceAccount, as on a real cluster), and its
  own loopback IP and cluster DNS (``podnet/sitecustomize.py``);
* starts the container's command and args in a new session, reports ``Running`` with the pod IP
  (the container ID is ``process://<pid>``), runs readiness probes, and reports the exit code
  when the process ends (``128 + n`` for a signal, as a container runtime does), killing the
  rest of the process group: a container ends with its main process;
* restarts containers of ``restartPolicy: Always/OnFailure`` pods with a back-off;
* kills the process group (SIGTERM, then SIGKILL after the grace period) when the pod is deleted.

One container per pod (the first); init containers, liveness probes, resource limits, Service
ports that differ from their target ports, and updates of projected files after the container
started are not emulated.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.localcluster.paths import PathMap
from finishable.kube.api import KubeApi

log = logging.getLogger(__name__)

SYNC_SECONDS = 0.25
PODNET_DIR = Path(__file__).resolve().parent / "podnet"
MERGE = "application/merge-patch+json"
RESTART_BACKOFF_MAX = 10.0
GRACE_SECONDS_MAX = 10.0
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# The host environment a container may see: what makes Java and Python work here, nothing more.
HOST_ENV = ("JAVA_HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")


class NotReady(Exception):
    """Something the pod needs does not exist yet: it stays Pending, and is tried again."""


def kubeconfig(server: str, token: str, namespace: str, ca: str | None = None) -> dict[str, Any]:
    """Credentials for the local API: the admin's, and each pod's in place of a token file.
    ``ca``: the PEM of the cluster CA, for an ``https://`` server."""
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


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Container:
    """The process of a running pod and what is known about it."""

    namespace: str
    name: str
    uid: str
    ip: str
    directory: Path
    pod: dict[str, Any]
    process: subprocess.Popen[bytes] | None = None
    started: str = ""
    restarts: int = 0
    ready: bool = False
    next_probe: float = 0.0
    restart_at: float | None = None
    last_exit: dict[str, Any] | None = None
    finished: bool = False
    launch: tuple[list[str], dict[str, str], Path] | None = None
    token: str | None = None  # the pod's ServiceAccount token (its projected volume's)
    reported: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> dict[str, Any]:
        return dict(self.pod["spec"]["containers"][0])


class ProcessKubelet:
    """Runs pods as processes (see the module docstring)."""

    def __init__(
        self,
        api: KubeApi,
        root: Path,
        *,
        server: str,
        token: str,
        image_paths: Mapping[str, Path],
        bin_dir: Path,
    ) -> None:
        self.api = api
        self.root = root
        self.server = server
        self.token = token
        self.image_paths = dict(image_paths)
        self.bin_dir = bin_dir
        self.hosts_file = root / "hosts.json"
        self.containers: dict[str, Container] = {}  # by pod uid
        self._waiting: dict[str, str] = {}  # pod uid -> why it is still Pending (as reported)
        self._ips: dict[str, str] = {}  # pod uid -> IP
        self._next_ip = 2
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="process-kubelet", daemon=True)
        self._hosts_text = ""

    # -- life -------------------------------------------------------------------------------

    def start(self) -> ProcessKubelet:
        self.root.mkdir(parents=True, exist_ok=True)
        self._write_hosts({})
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
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
                self._remove(container)
        for uid, pod in live.items():
            if pod["metadata"].get("deletionTimestamp"):
                continue
            current = self.containers.get(uid)
            if current is None:
                if (pod.get("status") or {}).get("phase", "Pending") == "Pending":
                    self._start_pod(pod)
            else:
                current.pod = pod
                self._tend(current)
        self._write_hosts(self._cluster_names(pods, services))
        self._collect_claims()

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
        ip = self._ips[uid]
        directory = self.root / "pods" / meta["namespace"] / f"{meta['name']}-{uid[:8]}"
        container = Container(meta["namespace"], meta["name"], uid, ip, directory, pod)
        try:
            if not pod["spec"].get("containers"):
                raise NotReady("the pod has no containers")
            command, env, cwd = self._prepare(container)
        except NotReady as reason:
            if self._waiting.get(uid) != str(reason):  # report a new reason once, not each pass
                self._waiting[uid] = str(reason)
                self._patch_status(
                    container,
                    {"phase": "Pending", "reason": "ContainerCreating", "message": str(reason)},
                )
            return
        self._waiting.pop(uid, None)
        self.containers[uid] = container
        self._launch(container, command, env, cwd)

    def _allocate_ip(self) -> str:
        number = self._next_ip
        self._next_ip += 1
        return f"127.1.{number // 250}.{number % 250 + 2}"

    def _prepare(self, container: Container) -> tuple[list[str], dict[str, str], Path]:
        """Volumes, path map, environment and command of the pod's first container."""
        pod = container.pod
        spec = container.spec
        home = container.directory / "home"
        home.mkdir(parents=True, exist_ok=True)
        mounts: dict[str, Path | str] = dict(self.image_paths)
        volumes = {volume["name"]: volume for volume in pod["spec"].get("volumes") or []}
        for mount in spec.get("volumeMounts") or []:
            volume = volumes.get(mount["name"])
            if volume is None:
                raise NotReady(f"volumeMount {mount['name']!r} names no volume of the pod")
            source = self._volume_dir(container, volume)
            sub = mount.get("subPath")
            mounts[mount["mountPath"]] = source / sub if sub else source
        paths = PathMap(mounts)
        # Projected files name container paths too (a job config's work_dir, say).
        for mount in spec.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            if "configMap" in volume or "secret" in volume:
                self._project(container, volume, paths)
            if "projected" in volume:
                self._project_sources(container, volume, paths)
        env = self._environment(container, paths, home)
        command = [paths.translate(part) for part in spec.get("command") or []]
        command += [paths.translate(part) for part in spec.get("args") or []]
        if not command:
            raise NotReady("the container has no command (image entrypoints are not known here)")
        executable = shutil.which(command[0], path=env["PATH"])
        if executable is None:
            raise NotReady(f"{command[0]!r} is not on the container's PATH")
        command[0] = executable
        cwd = paths.host_path(spec["workingDir"]) if spec.get("workingDir") else home
        return command, env, cwd

    def _volume_dir(self, container: Container, volume: dict[str, Any]) -> Path:
        name = str(volume["name"])
        local = container.directory / "volumes" / name
        if any(kind in volume for kind in ("emptyDir", "configMap", "secret", "projected")):
            local.mkdir(parents=True, exist_ok=True)
            return local
        if "hostPath" in volume:
            path = Path(volume["hostPath"]["path"])
            path.mkdir(parents=True, exist_ok=True)
            return path
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            response = self.api.request(
                "GET",
                self.api.path("persistentvolumeclaims", claim, namespace=container.namespace),
            )
            if response.status != 200:
                raise NotReady(f"persistentvolumeclaim {claim!r} not found")
            directory = self._claim_dir(container.namespace, response.body)
            directory.mkdir(parents=True, exist_ok=True)
            return directory
        raise NotReady(f"volume {name!r}: only configMap, secret, emptyDir, hostPath and claims")

    def _claim_dir(self, namespace: str, claim: dict[str, Any]) -> Path:
        meta = claim["metadata"]
        return self.root / "claims" / namespace / f"{meta['name']}-{meta['uid'][:8]}"

    def _project(self, container: Container, volume: dict[str, Any], paths: PathMap) -> None:
        """Write a ConfigMap's or Secret's keys as files (their container paths translated)."""
        kind = "configMap" if "configMap" in volume else "secret"
        source = volume[kind]
        name = source.get("name") or source.get("secretName")
        plural = "configmaps" if kind == "configMap" else "secrets"
        response = self.api.request(
            "GET", self.api.path(plural, name, namespace=container.namespace)
        )
        if response.status != 200:
            if source.get("optional"):
                return
            raise NotReady(f"{plural[:-1]} {name!r} not found")
        files = self._data_of(plural, response.body)
        items = source.get("items") or []
        missing = [item["key"] for item in items if item["key"] not in files]
        if missing:
            raise NotReady(f"{plural[:-1]} {name!r} has no key {', '.join(missing)}")
        selected = {item["path"]: files[item["key"]] for item in items} if items else files
        target = container.directory / "volumes" / volume["name"]
        for relative, content in selected.items():
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                path.write_text(paths.translate(content.decode()))
            except UnicodeDecodeError:
                path.write_bytes(content)

    def _project_sources(
        self, container: Container, volume: dict[str, Any], paths: PathMap
    ) -> None:
        """A projected volume: a ServiceAccount token (requested through the TokenRequest API,
        bound to the pod), ConfigMap and Secret keys, downward API fields."""
        target = container.directory / "volumes" / volume["name"]
        for source in volume["projected"].get("sources") or []:
            if "serviceAccountToken" in source:
                token = self._request_token(container, source["serviceAccountToken"])
                (target / source["serviceAccountToken"]["path"]).write_text(token)
                container.token = token
            for kind in ("configMap", "secret"):
                if kind in source:
                    ref = source[kind]
                    as_volume = {"name": volume["name"], kind: ref}
                    if kind == "secret":
                        as_volume[kind] = {**ref, "secretName": ref.get("name")}
                    self._project(container, as_volume, paths)
            for item in (source.get("downwardAPI") or {}).get("items") or []:
                if "fieldRef" not in item:
                    raise NotReady(f"downwardAPI {item.get('path')!r}: only fieldRef")
                path = target / item["path"]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(self._field(container, item["fieldRef"]["fieldPath"]))

    def _request_token(self, container: Container, source: dict[str, Any]) -> str:
        """``POST .../serviceaccounts/NAME/token`` for the pod's account, bound to the pod."""
        account = container.pod["spec"].get("serviceAccountName") or "default"
        spec: dict[str, Any] = {
            "expirationSeconds": int(source.get("expirationSeconds") or 3600),
            "boundObjectRef": {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": container.name,
                "uid": container.uid,
            },
        }
        if source.get("audience"):
            spec["audiences"] = [source["audience"]]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        path = self.api.path(
            "serviceaccounts", account, namespace=container.namespace, subresource="token"
        )
        response = self.api.request("POST", path, body=body)
        if response.status != 201:
            raise NotReady(f"no token for serviceaccount {account!r}: {response.message}")
        return str(response.body["status"]["token"])

    @staticmethod
    def _data_of(plural: str, obj: dict[str, Any]) -> dict[str, bytes]:
        """A ConfigMap's or Secret's keys as bytes."""
        if plural == "secrets":
            data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
            data |= {k: str(v).encode() for k, v in (obj.get("stringData") or {}).items()}
            return data
        data = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
        data |= {k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()}
        return data

    def _environment(self, container: Container, paths: PathMap, home: Path) -> dict[str, str]:
        spec = container.spec
        pod = container.pod
        credentials = container.directory / "kubeconfig"
        # The pod's API calls are made as its ServiceAccount, with the token of its projected
        # volume, as on a real cluster (a pod that mounts no token gets none: anonymous).
        token = container.token or ""
        credentials.write_text(json.dumps(kubeconfig(self.server, token, container.namespace)))
        env = {key: os.environ[key] for key in HOST_ENV if key in os.environ}
        env |= {
            "PATH": f"{self.bin_dir}:{os.environ.get('PATH', DEFAULT_PATH)}",
            "HOME": str(home),
            "HOSTNAME": pod["spec"].get("hostname") or container.name,
            "KUBECONFIG": str(credentials),
            "FINISHABLE_POD_IP": container.ip,
            "FINISHABLE_CLUSTER_HOSTS": str(self.hosts_file),
            "SPARK_LOCAL_IP": container.ip,
        }
        for source in spec.get("envFrom") or []:
            for kind, plural in (("secretRef", "secrets"), ("configMapRef", "configmaps")):
                if kind in source:
                    ref = source[kind]
                    obj = self._get(plural, ref["name"], container.namespace, ref.get("optional"))
                    prefix = source.get("prefix", "")
                    for key, data in self._data_of(plural, obj).items() if obj else ():
                        env[prefix + key] = data.decode()
        for variable in spec.get("env") or []:
            value = self._env_value(container, variable)
            if value is not None:
                env[variable["name"]] = paths.translate(value)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(PODNET_DIR), env.get("PYTHONPATH", "")])
        )
        return env

    def _get(
        self, plural: str, name: str, namespace: str, optional: bool | None
    ) -> dict[str, Any] | None:
        response = self.api.request("GET", self.api.path(plural, name, namespace=namespace))
        if response.status == 200:
            return response.body
        if optional:
            return None
        raise NotReady(f"{plural[:-1]} {name!r} not found")

    def _env_value(self, container: Container, variable: dict[str, Any]) -> str | None:
        if "valueFrom" not in variable:
            return str(variable.get("value", ""))
        source = variable["valueFrom"]
        for kind, plural in (("secretKeyRef", "secrets"), ("configMapKeyRef", "configmaps")):
            if kind in source:
                ref = source[kind]
                obj = self._get(plural, ref["name"], container.namespace, ref.get("optional"))
                data = self._data_of(plural, obj) if obj else {}
                if ref["key"] not in data:
                    if ref.get("optional"):
                        return None
                    raise NotReady(f"{plural[:-1]} {ref['name']!r} has no key {ref['key']!r}")
                return data[ref["key"]].decode()
        if "fieldRef" in source:
            return self._field(container, source["fieldRef"]["fieldPath"])
        raise NotReady(f"env {variable['name']}: unsupported valueFrom {sorted(source)}")

    def _field(self, container: Container, path: str) -> str:
        meta = container.pod["metadata"]
        fields = {
            "metadata.name": meta["name"],
            "metadata.namespace": meta["namespace"],
            "metadata.uid": meta["uid"],
            "spec.nodeName": "local",
            "spec.serviceAccountName": container.pod["spec"].get("serviceAccountName", "default"),
            "status.podIP": container.ip,
            "status.hostIP": "127.0.0.1",
        }
        if path.startswith("metadata.labels['"):
            return str((meta.get("labels") or {}).get(path[17:-2], ""))
        if path not in fields:
            raise NotReady(f"fieldRef {path!r} is not supported")
        return str(fields[path])

    def _launch(
        self, container: Container, command: list[str], env: dict[str, str], cwd: Path
    ) -> None:
        container.directory.mkdir(parents=True, exist_ok=True)
        log_path = container.directory / f"{container.spec['name']}.log"
        with log_path.open("ab") as out:
            container.process = subprocess.Popen(
                command,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        container.started = now()
        container.restart_at = None
        container.ready = False
        container.next_probe = time.monotonic()
        container.launch = (command, env, cwd)
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
            if time.monotonic() >= container.restart_at and container.launch is not None:
                container.restarts += 1
                self._launch(container, *container.launch)
            return
        if process is None:
            return
        code = process.poll()
        if code is not None:
            self._kill_group(process.pid, signal.SIGKILL)
            exit_code = 128 - code if code < 0 else code
            container.last_exit = {
                "exitCode": exit_code,
                "reason": "Completed" if exit_code == 0 else "Error",
                "startedAt": container.started,
                "finishedAt": now(),
            }
            log.info("%s/%s: exited %d", container.namespace, container.name, exit_code)
            policy = container.pod["spec"].get("restartPolicy", "Always")
            if policy == "Always" or (policy == "OnFailure" and exit_code != 0):
                backoff = min(RESTART_BACKOFF_MAX, 1.0 * 2**container.restarts)
                container.restart_at = time.monotonic() + backoff
                self._report_waiting(container)
            else:
                container.finished = True
                self._report_terminated(container, "Succeeded" if exit_code == 0 else "Failed")
            return
        if time.monotonic() >= container.next_probe:
            ready, period = self._probe(container)
            container.next_probe = time.monotonic() + period
            if ready != container.ready:
                container.ready = ready
                self._report_running(container)

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
            import socket  # noqa: PLC0415

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

    def _remove(self, container: Container) -> None:
        """The pod was deleted: stop its processes in the background, forget it."""
        del self.containers[container.uid]
        grace = float(container.pod["spec"].get("terminationGracePeriodSeconds", 30))
        threading.Thread(
            target=self._kill,
            args=(container, min(grace, GRACE_SECONDS_MAX)),
            name=f"stop-{container.name}",
            daemon=True,
        ).start()

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

    def _write_hosts(self, names: dict[str, list[str]]) -> None:
        text = json.dumps(names, sort_keys=True)
        if text == self._hosts_text:
            return
        partial = self.hosts_file.with_suffix(".tmp")
        partial.write_text(text)
        partial.replace(self.hosts_file)
        self._hosts_text = text

    def _collect_claims(self) -> None:
        """Delete the directories of claims that are gone (their data goes with them)."""
        base = self.root / "claims"
        if not base.exists():
            return
        claims = self._list("/api/v1/persistentvolumeclaims")
        kept = {self._claim_dir(c["metadata"]["namespace"], c) for c in claims}
        for directory in base.glob("*/*"):
            if directory not in kept:
                shutil.rmtree(directory, ignore_errors=True)
