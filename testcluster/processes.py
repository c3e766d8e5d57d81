"""Process helpers shared by tests that SIGKILL things."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def alive(pid: int) -> bool:
    """Whether a process with this id exists (a zombie counts until it is reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def ended(pid: int) -> bool:
    """Gone, or a zombie nobody reaps (an orphan re-parented to an init that does not reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def group_members(pgid: int) -> dict[int, str]:
    """The live processes of a process group (Linux ``/proc``), with their command lines."""
    members: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # ended while we looked
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members[int(entry.name)] = command
    return members


def wait_ended(pids: list[int], timeout: float, what: str) -> None:
    """Wait until every process of ``pids`` ended; generous ``timeout``, fail with ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        left = [pid for pid in pids if not ended(pid)]
        if not left:
            return
        assert time.monotonic() < deadline, f"{what}: still running: {left}"
        time.sleep(0.2)


def terminate(process: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    """SIGTERM, then SIGKILL when it has not ended within ``grace`` seconds; reaped either way."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@dataclass
class LoggedProcesses:
    """Long-running child processes of one directory, each writing its ``<name>.log`` there
    (the control plane's components, a real node's)."""

    directory: Path
    running: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def log_of(self, name: str) -> Path:
        return self.directory / f"{name}.log"

    def spawn(self, name: str, command: list[str]) -> None:
        with self.log_of(name).open("ab") as output:
            self.running[name] = subprocess.Popen(
                command, stdout=output, stderr=subprocess.STDOUT, cwd=self.directory
            )

    def exited(self, name: str) -> str | None:
        """How ``name`` ended, with the end of its log; None while it runs."""
        code = self.running[name].poll()
        return None if code is None else f"{name} exited ({code}):\n{self.tail(name)}"

    def tail(self, name: str) -> str:
        return self.log_of(name).read_text(errors="replace")[-3000:]

    def stop(self, *names: str, grace: float = 10.0) -> None:
        """Terminate ``names`` in that order (every one, the newest first, when none is named)."""
        for name in names or reversed(list(self.running)):
            if name in self.running:
                terminate(self.running.pop(name), grace=grace)


def start_runner(
    manifest: Path, state_dir: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """``finishable run MANIFEST --state-dir STATE_DIR EXTRA...``, as a user starts it, its
    output (runner and driver) in one text pipe."""
    command = [sys.executable, "-m", "finishable.cli", "run", str(manifest)]
    return subprocess.Popen(
        [*command, "--state-dir", str(state_dir), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=env,
    )
