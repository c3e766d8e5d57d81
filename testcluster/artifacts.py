"""Dependencies as users ship them, built for the tests: a Python environment packed into an
archive, a zip of Python modules, a jar laid out in a Maven repository, and an HTTP server for
them.

The environment is made the way docs/dependencies.md tells users to: a fresh ``python -m venv``
with a package installed by pip (``--no-deps``), packed with ``tar -C env .``. The package's wheel
is written directly rather than by ``pip wheel``: building one offline needs a build backend that
makes wheels, which the test environment does not have. The jar is compiled by ``javac``. The
tests of ``spec.application``'s dependencies (tests/driver, e2e/test_dependencies.py) and their
program (:data:`PROGRAM`) share them.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import subprocess
import sys
import tarfile
import threading
import zipfile
from pathlib import Path
from types import TracebackType
from typing import Self

PROGRAM = Path(__file__).with_name("dependency_program.py")
"""The job program that uses what the tests ship (its docstring says how)."""

PACKAGE = "hellodep"
"""The package only the archived environment holds."""
PACKAGE_VERSION = "1.2.3"
MODULE = "mymod"
"""The module only the pyFiles zip holds."""
MODULE_NAME = "mymod from the zip"
DATA = "the data"
"""What ``data.txt``, shipped in ``files``, holds."""
JAVA_CLASS = "dev.finishable.test.Hello"
COORDINATE = "dev.finishable.test:hello:1.0"
"""The Maven coordinate of the jar of :data:`JAVA_CLASS` in :func:`maven_repository`."""

_JAVA_SOURCE = """package dev.finishable.test;

public class Hello {
    public static String greet(String who) {
        return "hello " + who;
    }
}
"""
_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>{group}</groupId>
  <artifactId>{artifact}</artifactId>
  <version>{version}</version>
  <packaging>jar</packaging>
</project>
"""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wheel(
    directory: Path,
    name: str = PACKAGE,
    version: str = PACKAGE_VERSION,
    source: str = "def greet(who):\n    return f'hello {who}'\n",
) -> Path:
    """A pure wheel of package ``name`` whose ``__init__.py`` is ``source``."""
    files = {
        f"{name}/__init__.py": source.encode(),
        f"{name}-{version}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
        ),
        f"{name}-{version}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: testcluster\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    record = [f"{path},sha256={_record_digest(data)},{len(data)}" for path, data in files.items()]
    record_path = f"{name}-{version}.dist-info/RECORD"
    files[record_path] = "\n".join([*record, f"{record_path},,", ""]).encode()
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(target, "w") as bundle:
        for path, data in files.items():
            bundle.writestr(path, data)
    return target


def _record_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def python_env(directory: Path, *wheels: Path) -> Path:
    """A fresh virtualenv of this interpreter with ``wheels`` installed by pip (no dependencies,
    no index), as a user builds one to ship."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True, timeout=120
    )
    pip = [sys.executable, "-m", "pip", "--python", str(directory / "bin" / "python")]
    install = [*pip, "install", "--no-deps", "--no-index", "--quiet", *map(str, wheels)]
    subprocess.run(install, check=True, timeout=300)
    return directory


def packed(directory: Path, archive: Path) -> Path:
    """``tar -czf ARCHIVE -C DIRECTORY .``: the environment's own layout at the archive's top."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as bundle:
        bundle.add(directory, arcname=".")
    return archive


def python_zip(archive: Path, module: str = MODULE, name: str = MODULE_NAME) -> Path:
    """A zip holding ``module.py``, which defines ``NAME``: what pyFiles ships."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr(f"{module}.py", f"NAME = {name!r}\n")
    return archive


def java_jar(directory: Path) -> Path:
    """A jar of :data:`JAVA_CLASS`, compiled by ``javac``."""
    sources = directory / "src"
    classes = directory / "classes"
    source = sources.joinpath(*JAVA_CLASS.split(".")).with_suffix(".java")
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(_JAVA_SOURCE)
    command = ["javac", "--release", "17", "-d", str(classes), str(source)]
    subprocess.run(command, check=True, timeout=300, capture_output=True)
    target = directory / "hello.jar"
    with zipfile.ZipFile(target, "w") as bundle:
        bundle.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        for compiled in sorted(classes.rglob("*.class")):
            bundle.write(compiled, compiled.relative_to(classes).as_posix())
    return target


def maven_repository(root: Path, jar: Path, coordinate: str = COORDINATE) -> Path:
    """``root`` laid out as a Maven repository holding ``jar`` as ``coordinate`` (its pom
    declares no dependency)."""
    group, artifact, version = coordinate.split(":")
    directory = root.joinpath(*group.split("."), artifact, version)
    directory.mkdir(parents=True, exist_ok=True)
    base = f"{artifact}-{version}"
    (directory / f"{base}.jar").write_bytes(jar.read_bytes())
    pom = _POM.format(group=group, artifact=artifact, version=version)
    (directory / f"{base}.pom").write_text(pom)
    return root


class _Server(http.server.ThreadingHTTPServer):
    requested: list[str]


class _RecordingHandler(http.server.SimpleHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self.server.requested.append(self.path)
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:
        """Requests are recorded, not logged: a test's output is its failures."""


class FileServer:
    """A directory over HTTP on loopback (a thread), as a context manager; ``url``: its root,
    ``requested``: the paths asked for so far."""

    def __init__(self, root: Path, host: str = "127.0.0.1") -> None:
        handler = functools.partial(_RecordingHandler, directory=str(root))
        self._server = _Server((host, 0), handler)
        self._server.requested = []
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def requested(self) -> list[str]:
        return list(self._server.requested)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
