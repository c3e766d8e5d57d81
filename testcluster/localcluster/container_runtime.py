"""The container runtime: a pod's container is a docker container of the built image, so the
image's entrypoint (tini, ``entrypoint.sh``), its paths, its environment and its non-root user
are what run the operator, the drivers, Spark's executors and the shuffle servers.

* **Network.** The runtime makes a docker network of its own with a subnet it chose (docker
  assigns a container a fixed address, ``--ip``, only there), so a pod's address is known before
  its container starts (the downward API's ``status.podIP``). The network's gateway is the
  node: it is ``status.hostIP``, and the API server listens there too (``api_host``). The
  machine reaches every pod at its address (readiness probes, Prometheus' scrape).
* **Names.** The kubelet's ``/etc/hosts`` for the pod (its Services and StatefulSet pods, in
  place of cluster DNS) is bind-mounted as the container's, so docker does not write its own;
  the kubelet rewrites it in place (a mounted file keeps its inode).
* **Files.** Volumes are bind mounts of the kubelet's host directories at their container
  paths (read-only as Kubernetes mounts them).
* **Security.** ``runAsUser``/``runAsGroup`` (``--user``), ``fsGroup`` and
  ``supplementalGroups`` (``--group-add``), ``readOnlyRootFilesystem`` (``--read-only``),
  ``allowPrivilegeEscalation: false`` (``no-new-privileges``), capabilities, and
  ``runAsNonRoot``, refused as a real kubelet refuses it when the user would be root.
* **Life.** ``docker run --rm`` attached, its output the container's log: it ends with the
  container, with its exit code (``137`` for SIGKILL); the container ID is docker's
  (``docker://<id>``). Deletion is ``docker stop -t <grace>`` (SIGTERM, then SIGKILL).
  Every container and the network carry a label of this runtime; :meth:`close` removes them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import math
import os
import random
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from testcluster.localcluster.podspec import expand
from testcluster.localcluster.runtime import Container, CreateError, ImageUnknown, Launch, Runtime
from testcluster.processes import alive

log = logging.getLogger(__name__)

LABEL = "dev.finishable.localcluster"
OWNER_LABEL = f"{LABEL}.owner"  # the pid of the process whose runtime made the object
CLI_TIMEOUT = 120.0
CREATE_TIMEOUT = 60.0  # until docker has created a started container (its cidfile written)
CLI_ERROR_CODES = (125, 126, 127)  # docker run's own failures (daemon, cannot invoke, not found)


class EngineError(RuntimeError):
    """The container engine refused or failed a call that must work."""


class ContainerRuntime(Runtime):
    """See the module docstring. ``images``: the images pods may name (they must exist)."""

    scheme = "docker"
    hosts_renamed = False

    def __init__(self, images: Iterable[str], *, engine: str = "docker") -> None:
        found = shutil.which(engine)
        if found is None:
            raise EngineError(f"{engine} is not installed (apt-get install docker.io)")
        self.engine = found
        self.images = frozenset(images)
        self.id = secrets.token_hex(4)
        self.network = f"finishable-{self.id}"
        self._labels = ["--label", f"{LABEL}={self.id}", "--label", f"{OWNER_LABEL}={os.getpid()}"]
        self._remove_orphans()
        self._subnet = self._create_network()
        hosts = self._subnet.hosts()
        self._gateway = str(next(hosts))
        self._free = hosts
        self._users: dict[str, str] = {}  # image -> its configured user

    # -- the node ---------------------------------------------------------------------------

    def _create_network(self) -> ipaddress.IPv4Network:
        """A bridge network on a free /20 of 10.128.0.0/9 (docker refuses overlapping pools)."""
        for _ in range(20):
            second, third = random.randint(128, 254), 16 * random.randint(0, 15)
            subnet = ipaddress.IPv4Network(f"10.{second}.{third}.0/20")
            done = self._cli(
                "network", "create", "--driver", "bridge", "--subnet", str(subnet),
                *self._labels, self.network, check=False,
            )  # fmt: skip
            if done.returncode == 0:
                return subnet
            if "overlap" not in done.stderr:
                raise EngineError(f"docker network create: {done.stderr.strip()}")
        raise EngineError("no free subnet for the local cluster's docker network")

    def _remove_orphans(self) -> None:
        """Containers and networks of local clusters whose process is gone (killed before it
        could clean up): nothing else would ever end them."""
        owner = f'{{{{.Label "{OWNER_LABEL}"}}}}'
        for kind, listing, removal in (
            ("containers", ["ps", "-a", "--format", f"{{{{.ID}}}} {owner}"], ["rm", "-f"]),
            (
                "networks",
                ["network", "ls", "--format", f"{{{{.Name}}}} {owner}"],
                ["network", "rm"],
            ),
        ):
            listed = self._cli(*listing, "--filter", f"label={LABEL}", check=False).stdout
            orphans = [
                name
                for name, _, pid in (line.partition(" ") for line in listed.splitlines())
                if not pid.strip().isdigit() or not alive(int(pid))
            ]
            if orphans:
                log.info("removing %d %s of ended local clusters", len(orphans), kind)
                self._cli(*removal, *orphans, check=False)

    @property
    def host_ip(self) -> str:
        return self._gateway

    def allocate_ip(self) -> str:
        return str(next(self._free))

    def close(self) -> None:
        listed = self._cli("ps", "-aq", "--filter", f"label={LABEL}={self.id}", check=False)
        leftover = listed.stdout.split()
        if leftover:
            self._cli("rm", "-f", *leftover, check=False)
        self._cli("network", "rm", self.network, check=False)

    # -- images -----------------------------------------------------------------------------

    def check_image(self, name: str) -> None:
        if name not in self.images or (name not in self._users and not self._inspect(name)):
            raise ImageUnknown(
                f'Back-off pulling image "{name}": the local cluster runs the images it was '
                f"given, once built ({', '.join(sorted(self.images)) or 'none'})"
            )

    def _inspect(self, name: str) -> bool:
        done = self._cli("image", "inspect", "--format", "{{json .Config.User}}", name, check=False)
        if done.returncode != 0:
            return False
        self._users[name] = str(json.loads(done.stdout) or "")
        return True

    # -- containers -------------------------------------------------------------------------

    def prepare(self, container: Container, launch: Launch, net_dir: Path) -> list[str]:
        """``docker run``'s arguments for the container (all but its name and cidfile)."""
        args = [
            "--rm",
            "--network", self.network,
            "--ip", container.ip,
            "--hostname", launch.hostname,
            *self._labels,
            "--label", f"{LABEL}.pod={container.namespace}/{container.name}",
            "--mount", f"type=bind,source={net_dir / 'hosts'},target=/etc/hosts,readonly",
        ]  # fmt: skip
        for mount in launch.mounts:
            spec = f"type=bind,source={mount.source},target={mount.target}"
            args += ["--mount", spec + (",readonly" if mount.read_only else "")]
        for name, value in launch.env.items():
            args += ["--env", f"{name}={value}"]
        args += security_args(launch.security, self._users.get(launch.image, ""))
        if launch.working_dir:
            args += ["--workdir", launch.working_dir]
        command = [expand(part, launch.env) for part in launch.command]
        rest = [expand(part, launch.env) for part in launch.args]
        if command:
            args += ["--entrypoint", command[0], launch.image, *command[1:], *rest]
        else:
            args += [launch.image, *rest]
        return args

    def start(self, container: Container, log_file: BinaryIO) -> subprocess.Popen[bytes]:
        name = f"{self.network}-{container.name}-{container.uid[:8]}-{container.restarts}"[:120]
        cidfile = container.directory / f"container-{container.restarts}.id"
        cidfile.unlink(missing_ok=True)
        self._cli("rm", "-f", name, check=False)  # a container of an earlier, interrupted start
        process = subprocess.Popen(
            [self.engine, "run", "--name", name, "--cidfile", str(cidfile), *container.prepared],
            env=_cli_env(),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        container.runtime_id = name
        deadline = time.monotonic() + CREATE_TIMEOUT
        while process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError):
                if cid := cidfile.read_text().strip():
                    container.runtime_id = cid
                    break
            time.sleep(0.05)
        return process

    def start_error(self, container: Container, code: int) -> str | None:
        if code not in CLI_ERROR_CODES:
            return None
        logged = (container.directory / f"{container.spec['name']}.log").read_text(errors="replace")
        last = (logged.strip().splitlines() or [""])[-1]
        return last.removeprefix("docker: ") if last.startswith("docker: ") else None

    def reap(self, container: Container) -> None:
        """``--rm`` removes an ended container; one whose ``docker run`` died goes here."""
        if container.runtime_id:
            self._cli("rm", "-f", container.runtime_id, check=False)

    def kill(self, container: Container, grace: float) -> None:
        process = container.process
        if process is None or not container.runtime_id:
            return
        if process.poll() is None:
            self._cli("stop", "--time", str(math.ceil(grace)), container.runtime_id, check=False)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)
        self.reap(container)

    # -- the engine -------------------------------------------------------------------------

    def _cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [self.engine, *args],
            env=_cli_env(),
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT,
            check=False,
        )
        if check and done.returncode != 0:
            raise EngineError(f"docker {' '.join(args[:2])}: {done.stderr.strip()}")
        return done


def _cli_env() -> dict[str, str]:
    """The docker client's environment: where its daemon and its configuration are."""
    keep = ("PATH", "HOME", "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT", "XDG_RUNTIME_DIR")
    return {key: os.environ[key] for key in keep if key in os.environ}


def security_args(context: Mapping[str, Any], image_user: str) -> list[str]:
    """``docker run``'s options for a pod's and container's securityContext (merged), the
    image's own user being ``image_user`` (``USER``, "" for root); raises :class:`CreateError`
    where a real kubelet refuses to start the container."""
    args: list[str] = []
    user, group = context.get("runAsUser"), context.get("runAsGroup")
    image_uid = image_user.split(":", maxsplit=1)[0]
    if user is not None or group is not None:
        chosen = str(user) if user is not None else image_uid or "0"
        args += ["--user", chosen + (f":{group}" if group is not None else "")]
    effective = str(user) if user is not None else image_uid
    if context.get("runAsNonRoot"):
        if effective in ("", "0", "root"):
            raise CreateError("container has runAsNonRoot and image will run as root")
        if not effective.isdigit():
            raise CreateError(
                f"container has runAsNonRoot and image has non-numeric user ({effective}), "
                "cannot verify user is non-root"
            )
    for extra in [context.get("fsGroup"), *(context.get("supplementalGroups") or [])]:
        if extra is not None:
            args += ["--group-add", str(extra)]
    if context.get("readOnlyRootFilesystem"):
        args.append("--read-only")
    if context.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    if context.get("privileged"):
        args.append("--privileged")
    capabilities = context.get("capabilities") or {}
    for flag, key in (("--cap-drop", "drop"), ("--cap-add", "add")):
        args += [part for name in capabilities.get(key) or [] for part in (flag, str(name))]
    return args
