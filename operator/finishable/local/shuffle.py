"""Shuffle servers for ``finishable run``: the local stand-in for a Batch job's shuffle pods.

Like the StatefulSet in a cluster they are owned by the job, not by a driver: each runs in a
session of its own (it outlives a killed driver and a killed runner), keeps a stable port and data
directory under the job's local directory, and is started again on the same port and data when
it died (as a StatefulSet restarts a pod with its volume). A later ``finishable run`` of the same
manifest finds the live ones and reuses them; that is how a new driver attempt reconnects. Each
server exits by itself once it heard from no driver for the retain timeout and released the job's
partitions, so an abandoned job leaves no process behind for longer than that.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from finishable.api.jobconfig import TOKEN_ENV

log = logging.getLogger(__name__)

START_TIMEOUT = 30.0


@dataclass(frozen=True)
class LocalShuffleServer:
    """One server's files: ``<dir>/<index>/{data/, port, pid, server.log}``."""

    directory: Path
    index: int

    @property
    def home(self) -> Path:
        return self.directory / str(self.index)

    @property
    def port_file(self) -> Path:
        return self.home / "port"

    @property
    def pid_file(self) -> Path:
        return self.home / "pid"

    @property
    def log_file(self) -> Path:
        return self.home / "server.log"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    def port(self) -> int | None:
        try:
            return int(self.port_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port()}"

    def alive(self) -> bool:
        pid, port = self.pid(), self.port()
        if pid is None or port is None or not _pid_alive(pid):
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False


class LocalShuffle:
    """The job's local shuffle servers: started, reused, restarted and stopped by the runner."""

    def __init__(self, directory: Path, job: str, replicas: int, retain_timeout: str) -> None:
        self.directory = directory
        self.job = job
        self.retain_timeout = retain_timeout
        self.servers = [LocalShuffleServer(directory, index) for index in range(replicas)]
        self._started: dict[int, subprocess.Popen[bytes]] = {}  # by index, what this one started

    @property
    def token(self) -> str:
        """The job's bearer token, kept beside the servers so a later run can reuse them."""
        path = self.directory / "token"
        try:
            return path.read_text().strip()
        except OSError:
            self.directory.mkdir(parents=True, exist_ok=True)
            token = secrets.token_urlsafe(24)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w") as out:
                out.write(token)
            return token

    def ensure(self) -> list[str]:
        """Every server up (reused when alive, else started on its old port); their URLs.

        A server this runner started that does not answer yet (just restarted by
        :meth:`restart_dead`, say) is waited for, not started a second time: a second one would
        race it for the port, and the loser, still starting, could create its data directory
        after :meth:`stop` deleted it."""
        for server in self.servers:
            if not server.alive() and not self._starting(server):
                self._start(server)
        deadline = time.monotonic() + START_TIMEOUT
        for server in self.servers:
            while not server.alive():
                if time.monotonic() >= deadline:
                    raise RuntimeError(
                        f"shuffle server {server.index} did not start within {START_TIMEOUT:.0f} "
                        f"s; see {server.log_file}"
                    )
                time.sleep(0.1)
        return [server.url for server in self.servers]

    def urls(self) -> list[str]:
        """The servers' URLs (stable: a restarted server keeps its port)."""
        for server in self.servers:
            if server.port() is None:
                server.home.mkdir(parents=True, exist_ok=True)
                server.port_file.write_text(f"{_free_port()}\n")
        return [server.url for server in self.servers]

    def restart_dead(self) -> list[int]:
        """Start again the servers whose process is gone (a StatefulSet restarting its pod)."""
        restarted = []
        for server in self.servers:
            pid = server.pid()
            if pid is None or not _pid_alive(pid):
                self._start(server)
                restarted.append(server.index)
        return restarted

    def stop(self, *, delete_data: bool = True) -> None:
        """Stop every server (SIGTERM, then SIGKILL) and, by default, delete its partitions."""
        for server in self.servers:
            pid = server.pid()
            if pid is not None and _pid_alive(pid):
                _terminate(pid)
            if delete_data:
                shutil.rmtree(server.data_dir, ignore_errors=True)
            server.pid_file.unlink(missing_ok=True)

    def _starting(self, server: LocalShuffleServer) -> bool:
        process = self._started.get(server.index)
        return process is not None and process.poll() is None

    def _start(self, server: LocalShuffleServer) -> subprocess.Popen[bytes]:
        server.data_dir.mkdir(parents=True, exist_ok=True)
        port = server.port() or _free_port()
        server.port_file.write_text(f"{port}\n")
        command = [
            sys.executable,
            "-m",
            "finishable.cli",
            "shuffle-server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--data-dir",
            str(server.data_dir),
            "--job",
            self.job,
            "--retain-timeout",
            self.retain_timeout,
            "--exit-when-released",
        ]
        with server.log_file.open("ab") as out:
            process = subprocess.Popen(
                command,
                env={**os.environ, TOKEN_ENV: self.token},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        server.pid_file.write_text(f"{process.pid}\n")
        self._started[server.index] = process
        log.debug("shuffle server %d started on port %d (pid %d)", server.index, port, process.pid)
        return process


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of this process is not alive
        finished, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return finished == 0


def _terminate(pid: int, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``grace``; return once the process is gone, so that nothing
    it was still writing lands in a data directory deleted after it (a process finishes the
    system call it is in before a SIGKILL takes it)."""
    for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 30.0)):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _pid_alive(pid):
                return
            time.sleep(0.05)
    log.warning("shuffle server (pid %d) is still there 30 s after SIGKILL", pid)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
