"""Dependencies onto the driver's disk: fetched, verified against their sha256, archives unpacked.

The driver's work directory holds them by content: ``dependencies/<sha256>/<file name>``, and an
archive's unpacked tree beside it in ``unpacked/``. A file appears there only once its digest is
known (written to a temporary name, then renamed), so what is there is never half a download, and
two processes that share the directory (a later attempt, a standby, an upgrade check on the work
volume) never replace a file the other is serving: other content is another directory. With a
``sha256`` in the spec a file already there is not fetched again; without one, every attempt
fetches the URL (nothing else says it did not change) and reuses only the unpacked tree.

http and https are read with urllib; s3, s3a, gs and hdfs with ``pyarrow.fs`` and the pod's own
credentials (its environment, its service account); ``local://``, ``file://`` and plain paths are
read where they are.
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import shutil
import tarfile
import time
import urllib.error
import urllib.request
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol
from urllib.parse import urlsplit, urlunsplit

from finishable.driver.dependencies.errors import DriverError, StartRefused
from finishable.driver.dependencies.plan import Dependency, Origin

log = logging.getLogger(__name__)

FILESYSTEM_SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gs", "hdfs": "hdfs"}
"""pyarrow's name of each object store scheme Spark users write."""
FETCH_TIMEOUT_SECONDS = 60
"""For each read of an HTTP response, not the whole download."""
CHUNK = 1 << 20
INCOMING = ".incoming"
UNPACKED = "unpacked"
STALE_INCOMING_SECONDS = 3600
"""A download not written to for this long was left by a driver that died mid-way."""
GONE_HTTP_STATUSES = (404, 410)
"""HTTP answers that mean the URL names nothing: the job fails at once, as for a missing file."""


class Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


@dataclass(frozen=True)
class Fetched:
    """A dependency as a file on the driver, with its digest when it was computed."""

    path: Path
    sha256: str | None


def materialize(dependency: Dependency, root: Path, manifest_dir: str | None) -> Fetched:
    """The dependency as a verified file on the driver (fetched into ``root`` if remote)."""
    if dependency.origin is Origin.REMOTE:
        return _fetch(dependency, root)
    path = dependency.local_path(manifest_dir)
    if not path.is_file():
        hint = "; local:///path names a file inside the image" if path.is_absolute() else ""
        raise StartRefused(f"{dependency.where}: {path} does not exist{hint}")
    if dependency.sha256 is None and dependency.field != "archives":
        return Fetched(path, None)
    with path.open("rb") as stream:
        digest = _digest_of(stream)
    _verify(dependency, digest)
    return Fetched(path, digest)


def _fetch(dependency: Dependency, root: Path) -> Fetched:
    if dependency.sha256 is not None:
        known = root / dependency.sha256 / dependency.name
        if known.is_file():
            log.info(
                "%s: sha256 %s, fetched before: %s", dependency.where, dependency.sha256, known
            )
            return Fetched(known, dependency.sha256)
    incoming = root / INCOMING
    incoming.mkdir(parents=True, exist_ok=True)
    _remove_stale(incoming)
    temporary = incoming / f"{uuid.uuid4().hex}-{dependency.name}"
    started = time.monotonic()
    try:
        with temporary.open("wb") as out:
            digest = _download(dependency, out)
        _verify(dependency, digest)
        target = root / digest / dependency.name
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(temporary, target)  # the same bytes if it was there: nothing changes
    finally:
        temporary.unlink(missing_ok=True)
    log.info(
        "%s: fetched %d bytes in %.1f s, sha256 %s: %s",
        dependency.where,
        target.stat().st_size,
        time.monotonic() - started,
        digest,
        target,
    )
    return Fetched(target, digest)


def _remove_stale(incoming: Path) -> None:
    """Drop what killed drivers left half-downloaded (a live download is written to all along,
    and another process sharing the work volume may be making one)."""
    deadline = time.time() - STALE_INCOMING_SECONDS
    for partial in incoming.iterdir():
        try:
            if partial.stat().st_mtime < deadline:
                partial.unlink()
        except FileNotFoundError:
            continue


def _download(dependency: Dependency, out: BinaryIO) -> str:
    """Copy the remote file into ``out``; its sha256."""
    url = dependency.url
    parts = urlsplit(url)
    try:
        if parts.scheme in ("http", "https"):
            with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_SECONDS) as response:
                return _digest_of(response, out)
        import pyarrow.fs as pafs  # noqa: PLC0415 - only object store URLs need it

        scheme = FILESYSTEM_SCHEMES[parts.scheme]
        uri = urlunsplit((scheme, parts.netloc, parts.path, parts.query, ""))
        filesystem, path = pafs.FileSystem.from_uri(uri)
        with filesystem.open_input_stream(path) as stream:
            return _digest_of(stream, out)
    except urllib.error.HTTPError as error:
        if error.code in GONE_HTTP_STATUSES:
            raise StartRefused(f"{dependency.where}: HTTP {error.code} {error.reason}") from None
        raise DriverError(f"{dependency.where}: cannot fetch: HTTP {error.code}") from None
    except FileNotFoundError as error:
        raise StartRefused(f"{dependency.where}: does not exist ({error})") from None
    except (OSError, ValueError) as error:
        raise DriverError(f"{dependency.where}: cannot fetch: {error}") from None


def _digest_of(stream: Readable, out: BinaryIO | None = None) -> str:
    """The sha256 of what ``stream`` holds, copied into ``out`` on the way."""
    digest = hashlib.sha256()
    while chunk := stream.read(CHUNK):
        digest.update(chunk)
        if out is not None:
            out.write(chunk)
    return digest.hexdigest()


def _verify(dependency: Dependency, digest: str) -> None:
    if dependency.sha256 is not None and digest != dependency.sha256:
        raise StartRefused(
            f"{dependency.where}: sha256 mismatch: spec.application.sha256 expects "
            f"{dependency.sha256}, the file has {digest}"
        )


def unpack(dependency: Dependency, fetched: Fetched, root: Path) -> Path:
    """The archive's tree, unpacked once per content into ``root/<sha256>/unpacked``."""
    if fetched.sha256 is None:
        raise ValueError("an archive's digest is computed when it is fetched")
    destination = root / fetched.sha256 / UNPACKED
    if destination.is_dir():
        return destination
    destination.parent.mkdir(parents=True, exist_ok=True)
    temporary = destination.parent / f".{UNPACKED}-{uuid.uuid4().hex}"
    try:
        _extract(fetched.path, temporary)
        try:
            temporary.rename(destination)
        except OSError:  # another process unpacked the same content first
            if not destination.is_dir():
                raise
    except (OSError, tarfile.TarError, zipfile.BadZipFile) as error:
        raise StartRefused(f"{dependency.where}: cannot unpack it: {error}") from None
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    log.info("%s: unpacked into %s", dependency.where, destination)
    return destination


def _extract(archive: Path, destination: Path) -> None:
    """Unpack as Spark does by suffix (.zip and .jar are zip files, the rest tar); members that
    would land outside ``destination`` are refused (tarfile's ``tar`` filter, zipfile's own
    name sanitising)."""
    destination.mkdir()
    if archive.name.lower().endswith((".zip", ".jar")):
        with zipfile.ZipFile(archive) as bundle:
            bundle.extractall(destination)
        return
    with tarfile.open(archive) as bundle:
        if hasattr(tarfile, "tar_filter"):  # Python 3.11.4 and later
            bundle.extractall(destination, filter="tar")
            return
        for member in bundle.getmembers():  # the filter's refusals, before Python 3.11.4
            names = [member.name, *([member.linkname] if member.islnk() else [])]
            for name in names:
                if posixpath.isabs(name) or ".." in PurePosixPath(name).parts:
                    raise tarfile.TarError(
                        f"{archive.name}: {name!r} would land outside the archive's directory"
                    )
        bundle.extractall(destination)
