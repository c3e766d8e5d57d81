"""A pod's own file system view for the process runtime: a mount namespace rooted in the pod's
own directory.

The root holds the host's top-level directories, bound read-only (so the interpreter, Java and
the project are where they are on the host, as if the host were the image), the image's files
and the pod's volumes at their container paths, a private ``/tmp`` and home, and an
``/etc/hosts`` that names the cluster's Services and pods. The pod gets its own host name too.

Why: a container sees its volumes at the paths its spec names, and nothing of another pod's
files. If pods shared the host's file system, a path one pod hands to another (Spark's checkpoint
location, which the driver passes to its executors) would reach the first pod's files, and the
local cluster would hide exactly what breaks on a real one.

:func:`plan_layout` decides the layout (pure: it reads the host through a :class:`HostView`);
:func:`enter` carries a plan out and replaces itself with the container's command. This file is
run as a script (``python -E -s sandbox.py PLAN.json``) before anything of the project is
importable, so it uses the standard library only.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import posixpath
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

# Directories a pod has of its own, empty at start (a container's writable layer).
PRIVATE_DIRS = ("/tmp",)
# The host's kernel file systems: bound with their submounts, and writable.
KERNEL_DIRS = ("/dev", "/proc", "/sys")
START_ERROR_FILE = "start-error"  # written into the plan's directory when the command cannot run

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWUSER = 0x10000000
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18


class HostView(Protocol):
    """What the planner reads of the host's file system."""

    def kind(self, path: str) -> str | None:
        """``dir``, ``file``, ``link`` or ``other``; None when nothing is there."""

    def listdir(self, path: str) -> list[str]: ...

    def readlink(self, path: str) -> str: ...

    def realpath(self, path: str) -> str: ...


class RealHost:
    """The host's file system, as the kubelet sees it."""

    def kind(self, path: str) -> str | None:
        if os.path.islink(path):
            return "link"
        if os.path.isdir(path):
            return "dir"
        if os.path.isfile(path):
            return "file"
        return "other" if os.path.lexists(path) else None

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def readlink(self, path: str) -> str:
        return os.readlink(path)

    def realpath(self, path: str) -> str:
        return os.path.realpath(path)


@dataclass(frozen=True)
class Bind:
    """A bind mount of a host path onto a path of the pod's root."""

    source: str
    target: str
    read_only: bool = False
    directory: bool = True


@dataclass
class Layout:
    """The pod's root, in the order it is built: directories of its own, symbolic links, then
    bind mounts (the host's directories first, then the image's files and the volumes, parents
    before children)."""

    dirs: list[str] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)
    binds: list[Bind] = field(default_factory=list)


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _ancestors(path: str) -> list[str]:
    """``/a/b/c`` -> ``["/", "/a", "/a/b"]``."""
    parts = [part for part in path.split("/") if part]
    return ["/" + "/".join(parts[:depth]) for depth in range(len(parts))]


def plan_layout(
    mounts: Iterable[Bind],
    *,
    links: Mapping[str, str] | None = None,
    dirs: Iterable[str] = (),
    host: HostView,
    private: Iterable[str] = PRIVATE_DIRS,
) -> Layout:
    """The layout of a pod whose root mirrors the host's, with ``mounts`` (container paths),
    ``links`` (container path -> link text) and empty ``dirs`` of its own.

    A host directory is bound whole unless something must be made inside it that the host does
    not have (a mount point, a link, a directory): then it is "opened", made a directory of the
    pod's own, and its entries are bound one by one, recursively. So nothing is ever created in
    the host's directories, and a container path that the host also has is mounted over.
    """
    links = dict(links or {})
    private = tuple(private)

    def resolve(path: str) -> str:
        path = posixpath.normpath(path)
        if any(_under(path, p) for p in private):
            return path
        return host.realpath(path)

    mounts = [dataclasses.replace(mount, target=resolve(mount.target)) for mount in mounts]
    own = [resolve(path) for path in dirs]
    link_paths = {resolve(path): target for path, target in links.items()}
    opened = {"/"}
    for path in [
        *(mount.target for mount in mounts if host.kind(mount.target) is None),
        *link_paths,
        *own,
    ]:
        opened |= {
            ancestor
            for ancestor in _ancestors(path)
            if not any(_under(ancestor, p) for p in private) and host.kind(ancestor) == "dir"
        }
    layout = Layout()

    def walk(directory: str) -> None:
        layout.dirs.append(directory)
        for name in host.listdir(directory):
            path = posixpath.join(directory, name)
            if path in link_paths or path in private:
                continue
            if path in opened:
                walk(path)
                continue
            kind = host.kind(path)
            if kind == "link":
                layout.links.append((path, host.readlink(path)))
            elif kind in ("dir", "file"):
                kernel = path in KERNEL_DIRS
                layout.binds.append(Bind(path, path, not kernel, kind == "dir"))

    walk("/")
    layout.dirs += sorted({*private, *own} - set(layout.dirs))
    layout.links += sorted(link_paths.items())
    layout.binds += sorted(mounts, key=lambda mount: (mount.target.count("/"), mount.target))
    return layout


# -- carrying a plan out (in the pod's process, before its command) -------------------------------


@dataclass
class Plan:
    """Everything :func:`enter` needs, as written by the kubelet."""

    root: str  # the host directory that becomes the pod's root
    layout: Layout
    hostname: str
    working_dir: str
    command: list[str]
    env: dict[str, str]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Plan:
        data: dict[str, Any] = json.loads(text)
        raw = data.pop("layout")
        layout = Layout(
            dirs=list(raw["dirs"]),
            links=[(path, target) for path, target in raw["links"]],
            binds=[Bind(**bind) for bind in raw["binds"]],
        )
        return cls(layout=layout, **data)


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _mount(libc: Any, source: str | None, target: str, flags: int) -> None:
    encoded = source.encode() if source is not None else None
    _check(libc.mount(encoded, target.encode(), None, flags, None), f"mount {source} on {target}")


def _read_only(libc: Any, target: str) -> None:
    """Remount a bind read-only, keeping the flags a user namespace may not drop."""
    kept = os.statvfs(target).f_flag & (_MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _mount(libc, None, target, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | kept)


def _enter_namespaces(libc: Any) -> None:
    """A mount and a UTS namespace (and a user namespace when not root, to be allowed them)."""
    uid, gid = os.geteuid(), os.getegid()
    flags = _CLONE_NEWNS | _CLONE_NEWUTS | (0 if uid == 0 else _CLONE_NEWUSER)
    _check(libc.unshare(flags), "unshare")
    if uid != 0:
        with open("/proc/self/setgroups", "w") as file:
            file.write("deny")
        with open("/proc/self/uid_map", "w") as file:
            file.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as file:
            file.write(f"{gid} {gid} 1")
    # Nothing mounted from here on may reach the host's namespace.
    _mount(libc, None, "/", _MS_REC | _MS_PRIVATE)


def _make(root: str, layout: Layout) -> None:
    for directory in layout.dirs:
        os.makedirs(root + directory, exist_ok=True)
    for path, target in layout.links:
        if os.path.lexists(root + path):
            os.remove(root + path)
        os.symlink(target, root + path)


def enter(plan: Plan) -> None:
    """Build the pod's root, enter it, and replace this process with the container's command."""
    libc = _libc()
    _enter_namespaces(libc)
    root = plan.root.rstrip("/")
    _make(root, plan.layout)
    for bind in plan.layout.binds:
        target = root + bind.target
        if bind.directory:
            os.makedirs(target, exist_ok=True)
        elif not os.path.exists(target):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "a").close()
        _mount(libc, bind.source, target, _MS_BIND | _MS_REC)
        if bind.read_only:
            _read_only(libc, target)
    name = plan.hostname.encode()
    _check(libc.sethostname(name, len(name)), "sethostname")
    os.chroot(root)
    os.chdir(plan.working_dir or "/")
    os.execvpe(plan.command[0], plan.command, plan.env)


def main(argv: list[str]) -> int:
    path = argv[1]
    with open(path, encoding="utf-8") as file:
        plan = Plan.from_json(file.read())
    # Opened before the root changes: a start error is written next to the plan.
    plan_dir = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        enter(plan)
    except OSError as error:  # no exec happened: tell the kubelet why the container cannot run
        message = f"{plan.command[0]}: {error.strerror or error}"
        if isinstance(error, FileNotFoundError) and error.filename is None:
            message = f"exec: {plan.command[0]!r}: executable file not found in $PATH"
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        descriptor = os.open(START_ERROR_FILE, flags, 0o644, dir_fd=plan_dir)
        os.write(descriptor, message.encode())
        os.close(descriptor)
        sys.stderr.write(f"cannot start the container: {message}\n")
        return 128
    return 0  # not reached: enter() replaces the process


if __name__ == "__main__":
    sys.exit(main(sys.argv))
