"""Pod logs kept as the local cluster keeps them, from a real kubelet's log files.

A real kubelet writes a container's output to ``<podLogsDir>/<namespace>_<pod>_<uid>/<container>/
<restart>.log`` in the CRI format (``<time> <stream> <P|F> <text>``: ``P`` a part of a line, ``F``
its end) and deletes the pod's directory with the pod. The e2e flows read a deleted pod's log
(an executor's after its job ended, the driver a crash replaced) from the local cluster's layout,
``<pods>/<namespace>/<pod>-<uid[:8]>/<container>.log``, plain text, every restart appended. The
keeper follows each file from the moment it appears and holds it open, so what the container
wrote is read to the end even after the kubelet has unlinked the file.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Self

log = logging.getLogger(__name__)

POLL_SECONDS = 0.25


def cri_text(line: bytes) -> bytes:
    """The container's text of one CRI log line: its output with the newline a full line ends
    with, without the time, stream and tag the runtime put before it."""
    parts = line.rstrip(b"\n").split(b" ", 3)
    if len(parts) < 3 or parts[2] not in (b"P", b"F"):
        return line if line.endswith(b"\n") else line + b"\n"  # not CRI: kept as it is
    text = parts[3] if len(parts) == 4 else b""
    return text if parts[2] == b"P" else text + b"\n"


def kept_path(source: Path, pods: Path) -> Path | None:
    """Where the log file ``source`` (``.../<ns>_<pod>_<uid>/<container>/<n>.log``) is kept
    under ``pods``; None for a path the kubelet does not write."""
    container = source.parent.name
    pod_dir = source.parent.parent.name.split("_")
    if len(pod_dir) != 3 or not source.name.endswith(".log"):
        return None
    namespace, pod, uid = pod_dir
    return pods / namespace / f"{pod}-{uid[:8]}" / f"{container}.log"


@dataclass
class _Followed:
    source: BinaryIO
    target: Path
    rest: bytes = b""  # a line not yet ended in the file


class PodLogKeeper:
    """Copies what appears in each of ``sources`` (kubelets' pod log directories) into ``pods``,
    from :meth:`start` until :meth:`stop`, which reads every file to its end first."""

    def __init__(self, sources: list[Path], pods: Path) -> None:
        self.sources = sources
        self.pods = pods
        self._followed: dict[tuple[int, int], _Followed] = {}  # by (device, inode)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-log-keeper", daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        self.sync()
        for followed in self._followed.values():
            followed.source.close()
        self._followed.clear()

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                self.sync()
            except OSError:
                log.exception("pod logs not kept this round")

    def sync(self) -> None:
        """Open the files that appeared, copy what every followed file gained, and let go of
        the ones the kubelet deleted once they are read."""
        for source in self.sources:
            for path in source.glob("*/*/*.log"):
                self._follow(path)
        for key, followed in list(self._followed.items()):
            deleted = os.fstat(followed.source.fileno()).st_nlink == 0
            self._copy(followed)  # to its end: a deleted file has no writer left
            if deleted:
                followed.source.close()
                del self._followed[key]

    def _follow(self, path: Path) -> None:
        target = kept_path(path, self.pods)
        if target is None:
            return
        try:
            status = path.stat()
        except FileNotFoundError:
            return
        key = (status.st_dev, status.st_ino)
        if key in self._followed:
            return
        try:
            source = path.open("rb")
        except FileNotFoundError:
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        self._followed[key] = _Followed(source, target)

    @staticmethod
    def _copy(followed: _Followed) -> None:
        data = followed.source.read()
        if not data:
            return
        data, followed.rest = followed.rest + data, b""
        lines = data.split(b"\n")
        followed.rest = lines.pop()  # b"" when the data ended with a full line
        if lines:
            with followed.target.open("ab") as out:
                out.write(b"".join(cri_text(line) for line in lines))
