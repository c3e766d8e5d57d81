"""The process runtime: a container is a process of this machine in a sandbox of its own
(``sandbox.py``), quick to start and needing no container engine.

* The image is an :class:`podspec.Image`: this environment's interpreter, pyspark and Java stand
  in for the image's, with the files it copies bound at their container paths; an image it was
  not given is unknown (ImagePullBackOff).
* Every pod gets an address of its own in 127.0.0.0/8 (a random /16 per runtime, so two local
  clusters on one machine do not meet), bound by what listens on the wildcard address (Python
  through ``podnet/sitecustomize.py``, Spark through ``SPARK_LOCAL_IP``).
* The container ID is ``process://<pid>``; a container ends with its main process (the rest of
  its process group is killed then); a signal's exit code is ``128 + n``; a command that cannot
  be executed is a ``StartError``.
* ``runAsUser`` and the other securityContext fields are not applied: every process runs as
  the kubelet's user (the container runtime applies them).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from testcluster.localcluster import sandbox
from testcluster.localcluster.podspec import Image, container_command, expand
from testcluster.localcluster.runtime import Container, CreateError, ImageUnknown, Launch, Runtime

PODNET_DIR = Path(__file__).resolve().parent / "podnet"
SANDBOX = Path(sandbox.__file__).resolve()
POD_NET_DIR = "/etc/podnet"  # where a pod sees the kubelet's files for it (hosts, hostname)
# Host variables a container may see: its locale and time zone, nothing more.
HOST_ENV = ("LANG", "LC_ALL", "TZ")


class ProcessRuntime(Runtime):
    """See the module docstring."""

    scheme = "process"

    def __init__(self, images: Mapping[str, Image]) -> None:
        self.images = dict(images)
        self._subnet = random.randint(16, 250)  # 127.<subnet>.0.0/16
        self._next_ip = 2

    @property
    def host_ip(self) -> str:
        return "127.0.0.1"

    def allocate_ip(self) -> str:
        number = self._next_ip
        self._next_ip += 1
        return f"127.{self._subnet}.{number // 250}.{number % 250 + 2}"

    def check_image(self, name: str) -> None:
        if name not in self.images:
            known = ", ".join(sorted(self.images)) or "none"
            raise ImageUnknown(
                f'Back-off pulling image "{name}": the local cluster runs the images it was '
                f"given ({known})"
            )

    def prepare(self, container: Container, launch: Launch, net_dir: Path) -> sandbox.Plan:
        """The container's sandbox: the image's files and the volumes mounted, its environment
        and command."""
        image = self.images[launch.image]
        mounts = [
            sandbox.Bind(str(source), target, read_only=True, directory=source.is_dir())
            for target, source in image.files.items()
        ]
        mounts += [sandbox.Bind(str(path), str(path), read_only=True) for path in image.host_paths]
        mounts += list(launch.mounts)
        mounts.append(sandbox.Bind(str(net_dir), POD_NET_DIR, read_only=True))
        layout = sandbox.plan_layout(
            mounts,
            links={f"/etc/{name}": f"{POD_NET_DIR}/{name}" for name in ("hosts", "hostname")},
            dirs=image.dirs,
            host=sandbox.RealHost(),
        )
        env = {key: os.environ[key] for key in HOST_ENV if key in os.environ}
        env |= dict(image.env)
        env["HOSTNAME"] = launch.hostname
        env |= launch.env
        # The pod network: what binds the wildcard address binds the pod's own address.
        env["PODNET_IP"] = container.ip
        env["SPARK_LOCAL_IP"] = container.ip
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PODNET_DIR), env.get("PYTHONPATH")]))
        command = container_command(image, launch.command, launch.args)
        command = [expand(part, env) for part in command]
        if not command:
            raise CreateError("the container has no command and its image no entrypoint")
        return sandbox.Plan(
            root=str(container.directory / "root"),
            layout=layout,
            hostname=launch.hostname,
            working_dir=launch.working_dir or image.working_dir,
            command=command,
            env=env,
        )

    def start(self, container: Container, log: BinaryIO) -> subprocess.Popen[bytes]:
        plan: sandbox.Plan = container.prepared
        root = Path(plan.root)
        shutil.rmtree(root, ignore_errors=True)  # a fresh container layer for every start
        root.mkdir(parents=True)
        plan_path = container.directory / "sandbox.json"
        plan_path.write_text(plan.to_json())
        (container.directory / sandbox.START_ERROR_FILE).unlink(missing_ok=True)
        process = subprocess.Popen(
            [sys.executable, "-E", "-s", str(SANDBOX), str(plan_path)],
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            cwd=container.directory,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        container.runtime_id = str(process.pid)
        return process

    def start_error(self, container: Container, code: int) -> str | None:
        start_error = container.directory / sandbox.START_ERROR_FILE
        return start_error.read_text() if start_error.exists() else None

    def reap(self, container: Container) -> None:
        if container.process is not None:
            _kill_group(container.process.pid, signal.SIGKILL)

    def kill(self, container: Container, grace: float) -> None:
        process = container.process
        if process is None:
            return
        if process.poll() is None:
            _kill_group(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(grace)
        _kill_group(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(5)

    def close(self) -> None:
        """Nothing outlives a process's container."""


def _kill_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
