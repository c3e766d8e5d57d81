"""Fixtures of the shuffle tests: real ``finishable shuffle-server`` processes on free ports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from finishable.shuffle import ShuffleClient

TOKEN = "shuffle-test-token"
JOB = "etl"
START_TIMEOUT = 20.0
ROOT = Path(__file__).resolve().parents[2]


class ServerProcess:
    """One shuffle server process; ``restart`` starts it again on the same data directory."""

    def __init__(
        self,
        data_dir: Path,
        *,
        job: str = JOB,
        retain_timeout: str = "5m",
        token: str = TOKEN,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.data_dir = data_dir
        self.job = job
        self.retain_timeout = retain_timeout
        self.token = token
        self.extra = extra
        self.port_file = data_dir.parent / f"{data_dir.name}.port"
        self.log = data_dir.parent / f"{data_dir.name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.fixed_port = 0

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "finishable.cli",
            "shuffle-server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.fixed_port),
            "--port-file",
            str(self.port_file),
            "--data-dir",
            str(self.data_dir),
            "--job",
            self.job,
            "--retain-timeout",
            self.retain_timeout,
            *self.extra,
        ]

    def start(self) -> ServerProcess:
        self.port_file.unlink(missing_ok=True)
        env = {**os.environ, "FINISHABLE_TOKEN": self.token}
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT
            )
        deadline = time.monotonic() + START_TIMEOUT
        while not self.port_file.exists():
            if self.process.poll() is not None:
                raise AssertionError(f"the shuffle server exited early:\n{self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the shuffle server did not start:\n{self.output()}")
            time.sleep(0.02)
        self.port = int(self.port_file.read_text())
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, **options: Any) -> ShuffleClient:
        return ShuffleClient(self.url, self.token, **options)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def metrics(self) -> dict[str, float]:
        """The samples of ``/metrics`` by name and labels, such as ``x_total{reason="request"}``."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=5) as response:
            text = response.read().decode()
        samples: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        return samples

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, as when a pod's node dies."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def terminate(self, timeout: float = 15.0) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def restart(self, *, same_port: bool = False) -> ServerProcess:
        self.kill()
        self.fixed_port = self.port if same_port else 0
        return self.start()


ServerFactory = Callable[..., ServerProcess]


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[ServerFactory]:
    """Start shuffle servers (each on a data directory of its own unless given); kill them after."""
    servers: list[ServerProcess] = []

    def start(data_dir: Path | None = None, **options: Any) -> ServerProcess:
        directory = data_dir or tmp_path / f"server{len(servers)}"
        server = ServerProcess(directory, **options).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.kill()


@pytest.fixture
def server(start_server: ServerFactory) -> ServerProcess:
    """A started server with the default options."""
    return start_server()
