"""Process helpers shared by tests that SIGKILL things."""

from __future__ import annotations

import os
import subprocess
import sys
import time
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
