"""What the kubelet asks of a container runtime, and what it hands it.

The kubelet (``kubelet.py``) reads a pod from the API and resolves everything Kubernetes decides:
the volumes as host directories, the environment, the pod's address, its host name. A
:class:`Runtime` turns that :class:`Launch` into a running container and ends it. Two runtimes
exist: ``process_runtime.py`` runs the container's command as a sandboxed process of this machine
(the image stood in for by this environment), and ``container_runtime.py`` runs the built image
as a docker container, so that the image's entrypoint, paths and user are what run the pods.
"""

from __future__ import annotations

import abc
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from testcluster.localcluster.sandbox import Bind
from testcluster.localcluster.volumes import PodRef


class ImageUnknown(Exception):
    """The pod names an image the runtime cannot run (a real kubelet: ImagePullBackOff)."""


class CreateError(Exception):
    """The container's configuration cannot run (a real kubelet: CreateContainerConfigError),
    e.g. ``runAsNonRoot`` with an image whose user is root."""


@dataclass(frozen=True)
class Launch:
    """A container as the kubelet resolved it from the pod spec."""

    image: str
    command: tuple[str, ...]  # the spec's command ($(VAR) unexpanded); empty: the image's
    args: tuple[str, ...]  # the spec's args; empty: the image's CMD (when command is empty too)
    env: dict[str, str]  # the pod's variables: the API's Service, envFrom, env (expanded)
    mounts: tuple[Bind, ...]  # volumes at their container paths (host path -> container path)
    working_dir: str  # the spec's workingDir; empty: the image's
    hostname: str
    security: dict[str, Any] = field(default_factory=dict)  # pod's securityContext + container's


@dataclass
class Container(PodRef):
    """A pod's container on this node, and what is known about it."""

    process: subprocess.Popen[bytes] | None = None  # what ends when the container ends
    started: str = ""
    restarts: int = 0
    ready: bool = False
    next_probe: float = 0.0
    probe_streak: int = 0  # consecutive probe results that disagree with ``ready``
    restart_at: float | None = None
    last_exit: dict[str, Any] | None = None
    finished: bool = False
    runtime_id: str = ""  # the runtime's name for the running container (containerID)
    prepared: Any = None  # what the runtime made of the Launch
    reported: dict[str, Any] = field(default_factory=dict)

    @property
    def hostname(self) -> str:
        return str(self.pod["spec"].get("hostname") or self.name)[:63]


class Runtime(abc.ABC):
    """Runs containers (see the module docstring)."""

    scheme: str  # of the containerID the kubelet reports: ``<scheme>://<id>``
    # True: the pod's /etc/hosts is the kubelet's file replaced by a rename (its directory is
    # what is mounted); False: the file itself is mounted, so it is rewritten in place.
    hosts_renamed: bool = True

    @property
    @abc.abstractmethod
    def host_ip(self) -> str:
        """The node's address as pods see it (``status.hostIP``)."""

    @property
    def api_host(self) -> str:
        """Where pods reach the API server (``KUBERNETES_SERVICE_HOST``)."""
        return self.host_ip

    @abc.abstractmethod
    def allocate_ip(self) -> str:
        """A new pod's address, known before its container starts (the downward API's
        ``status.podIP``)."""

    @abc.abstractmethod
    def check_image(self, name: str) -> None:
        """Raise :class:`ImageUnknown` unless the image can run here."""

    @abc.abstractmethod
    def prepare(self, container: Container, launch: Launch, net_dir: Path) -> Any:
        """What :meth:`start` will run, made once per pod (``net_dir`` holds the kubelet's
        ``hosts`` and ``hostname`` files for it); may raise :class:`CreateError`."""

    @abc.abstractmethod
    def start(self, container: Container, log: BinaryIO) -> subprocess.Popen[bytes]:
        """Start the container (a fresh root every time), its output to ``log``: a process
        that ends with the container, with its exit code (``128 + n`` for a signal n, or
        negative -n, as Popen reports it)."""

    @abc.abstractmethod
    def start_error(self, container: Container, code: int) -> str | None:
        """Why the container could not start at all, once its process ended with ``code``."""

    @abc.abstractmethod
    def reap(self, container: Container) -> None:
        """The container's main process has ended: end whatever of it remains."""

    @abc.abstractmethod
    def kill(self, container: Container, grace: float) -> None:
        """SIGTERM, SIGKILL after ``grace`` seconds; return once it has ended."""

    @abc.abstractmethod
    def close(self) -> None:
        """The kubelet stops: remove what the runtime made."""
