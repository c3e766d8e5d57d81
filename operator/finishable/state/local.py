"""A local directory as a state backend (local mode and tests).

Writes go to a hidden temporary file in the target's directory, are fsynced, then renamed over
the target, so a reader (or a process killed mid-write) never sees a partial object: the rename is
atomic on POSIX file systems, and the directory is fsynced so the rename itself survives a crash.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from pathlib import Path

from finishable.state.backends import ObjectBackend, validate_name
from finishable.state.errors import BackendError, ObjectNotFound

log = logging.getLogger(__name__)

_TMP_MARK = ".tmp-"


class LocalDirBackend(ObjectBackend):
    """Objects are files under ``root``; "/" in a name is a subdirectory."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root).expanduser().absolute()
        self.fsync = fsync
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BackendError(f"cannot create state directory {self.root}: {exc}") from exc

    def _path(self, name: str) -> Path:
        return self.root / validate_name(name)

    def put(self, name: str, data: bytes) -> None:
        path = self._path(name)
        tmp = path.with_name(f".{path.name}{_TMP_MARK}{uuid.uuid4().hex}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as out:
                out.write(data)
                if self.fsync:
                    out.flush()
                    os.fsync(out.fileno())
            os.replace(tmp, path)
            if self.fsync:
                _fsync_dir(path.parent)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise BackendError(f"cannot write {path}: {exc}") from exc

    def get(self, name: str) -> bytes:
        path = self._path(name)
        try:
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ObjectNotFound(name, self.location(name)) from None
        except OSError as exc:
            raise BackendError(f"cannot read {path}: {exc}") from exc

    def list(self, prefix: str = "") -> list[str]:
        # Walk only the deepest directory the prefix pins down, not the whole root.
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self.root / base if base else self.root
        names: list[str] = []
        try:
            for dirpath, dirnames, filenames in os.walk(start):
                dirnames[:] = [d for d in dirnames if not d.startswith(".")]
                rel_dir = Path(dirpath).relative_to(self.root).as_posix()
                for filename in filenames:
                    if filename.startswith(".") or _TMP_MARK in filename:
                        continue  # in-flight or abandoned temporary files are never objects
                    name = filename if rel_dir == "." else f"{rel_dir}/{filename}"
                    if name.startswith(prefix):
                        names.append(name)
        except OSError as exc:
            raise BackendError(f"cannot list {start}: {exc}") from exc
        return sorted(names)

    def delete(self, name: str) -> None:
        path = self._path(name)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise BackendError(f"cannot delete {path}: {exc}") from exc

    def location(self, name: str = "") -> str:
        return (self.root / name).as_uri() if name else self.root.as_uri()

    def __repr__(self) -> str:
        return f"LocalDirBackend({str(self.root)!r})"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
