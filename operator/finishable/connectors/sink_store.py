"""Where a two-phase-commit sink keeps its files: the layout, the names, the manifest, the store.

Everything a sink owns lives under ``<url>/<sink name>/`` on any ``pyarrow.fs`` filesystem::

    _staging/<batch:020d>/part-<partition:05d>-t<task attempt id>-a<attempt>-<token>.<ext>
    batch=<batch:020d>/part-<partition:05d>.<ext>          published data of one batch
    _manifests/<batch:020d>.json                           the commit marker of that batch

Executors write only under ``_staging/`` (names unique per task attempt, so retries, speculative
copies and a replay after a crash never collide). The driver-side commit (``staging``) moves the
staged files of the successful attempts to deterministic names under ``batch=<id>/`` and then
writes the batch's manifest in one atomic step (a single PUT on object stores, write-then-rename
elsewhere). The manifest is the only thing that makes a batch visible to ``read_committed``: a
reader sees a batch whole or not at all, and since there is one manifest name per batch id a batch
is never seen twice. Spark's file listing skips names starting with ``_``, so ``spark.read`` on
``<url>/<sink name>`` sees only ``batch=`` directories (it may see a batch whose publish is in
flight or crashed; read through the manifests to be exact).

``SinkStore`` is the one door to those files: primitive operations that turn every ``OSError``
into a ``SinkError`` naming the place without secrets, safe to rebuild in any process. Like the
rest of the sink plumbing (``sink_files``, ``staging``) it has no PySpark in it.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.fs as pafs

from finishable.state.objectstore import redact_url, with_s3_defaults

MANIFEST_VERSION: Final = 1
BATCH_DIGITS: Final = 20
"""Zero-padded batch ids sort lexically in listings (a long has at most 19 digits)."""

STAGING_DIR: Final = "_staging"
MANIFEST_DIR: Final = "_manifests"
LAST_COMMITTED: Final = "_last_committed.json"

_SINK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_BATCH_DIR = re.compile(rf"\d{{{BATCH_DIGITS}}}")
_MANIFEST_NAME = re.compile(rf"(\d{{{BATCH_DIGITS}}})\.json")
_ATOMIC_PUT_TYPES = frozenset({"s3", "gcs"})


class SinkError(RuntimeError):
    """A sink cannot stage, publish or read; the message names the location (without secrets)."""


# --- names ---------------------------------------------------------------------------------------


DEFAULT_SINK_NAME: Final = "default"
"""A sink's name when it is given none."""


def validate_sink_name(name: str) -> str:
    """A sink name is a path segment that stays the same across restarts of the same query."""
    if not _SINK_NAME.fullmatch(name):
        raise ValueError(
            f"invalid sink name {name!r}: use 1-128 characters of A-Z, a-z, 0-9, '.', '_' and '-' "
            "starting with a letter or digit"
        )
    return name


def batch_key(batch_id: int) -> str:
    """The fixed-width text of a batch id, used in every per-batch name."""
    if batch_id < 0:
        raise ValueError(f"batch id must be >= 0, got {batch_id}")
    return f"{batch_id:0{BATCH_DIGITS}d}"


def parse_batch_key(text: str) -> int | None:
    """Inverse of ``batch_key``; ``None`` for names that are not ours (temp files, markers)."""
    return int(text) if _BATCH_DIR.fullmatch(text) else None


def staged_file_name(
    partition: int, task_attempt_id: int, attempt: int, token: str, extension: str
) -> str:
    """Unique per task attempt: retries and replays of a partition never overwrite each other."""
    return f"part-{partition:05d}-t{task_attempt_id}-a{attempt}-{token}.{extension}"


def published_file_name(batch_id: int, partition: int, extension: str) -> str:
    """Deterministic, so a publish that is redone after a crash overwrites rather than adds."""
    return f"batch={batch_key(batch_id)}/part-{partition:05d}.{extension}"


def manifest_file_name(batch_id: int) -> str:
    return f"{MANIFEST_DIR}/{batch_key(batch_id)}.json"


def parse_manifest_file_name(leaf: str) -> int | None:
    """The batch id of a manifest's leaf name, ``None`` for temporary or foreign files."""
    match = _MANIFEST_NAME.fullmatch(leaf)
    return int(match.group(1)) if match else None


# --- manifest ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PublishedFile:
    """One published data file, its path relative to the sink root."""

    path: str
    partition: int
    rows: int
    bytes: int


@dataclass(frozen=True)
class Manifest:
    """The commit marker of one batch: written last, it alone makes the batch visible."""

    sink: str
    batch_id: int
    format: str
    files: tuple[PublishedFile, ...]
    schema: pa.Schema
    overwrite: bool = False
    committed_at: str = ""
    run: str = ""
    """The run that published it (``JobConfig.run_key``), when the writer knows one."""

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    def to_json(self) -> bytes:
        doc = {
            "version": MANIFEST_VERSION,
            "sink": self.sink,
            "batch_id": self.batch_id,
            "format": self.format,
            "overwrite": self.overwrite,
            "rows": self.rows,
            "files": [dataclasses.asdict(f) for f in self.files],
            "schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode("ascii"),
            "committed_at": self.committed_at,
            "run": self.run,
        }
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str = "manifest") -> Manifest:
        """Parse and check a manifest; a damaged or future one is an error, never a guess."""
        try:
            doc = json.loads(data)
            version = doc["version"]
            if version != MANIFEST_VERSION:
                raise SinkError(
                    f"{where}: manifest version {version} is not supported "
                    f"(this finishable reads version {MANIFEST_VERSION})"
                )
            files = tuple(
                PublishedFile(
                    path=str(f["path"]),
                    partition=int(f["partition"]),
                    rows=int(f["rows"]),
                    bytes=int(f["bytes"]),
                )
                for f in doc["files"]
            )
            schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(doc["schema"])))
            manifest = cls(
                sink=str(doc["sink"]),
                batch_id=int(doc["batch_id"]),
                format=str(doc["format"]),
                files=files,
                schema=schema,
                overwrite=bool(doc.get("overwrite", False)),
                committed_at=str(doc.get("committed_at", "")),
                run=str(doc.get("run", "")),
            )
        except SinkError:
            raise
        except (ValueError, KeyError, TypeError, pa.ArrowException) as exc:
            raise SinkError(f"{where}: damaged manifest: {exc}") from exc
        if manifest.rows != int(doc.get("rows", manifest.rows)):
            raise SinkError(f"{where}: damaged manifest: row total does not match its files")
        return manifest


# --- filesystem ----------------------------------------------------------------------------------


def display_location(url: str, name: str = "") -> str:
    """``scheme://host/path[/name]`` without credentials or query (endpoint options, keys)."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/") + (f"/{name}" if name else "")
    if not parts.scheme:
        return path
    return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[-1], path, "", ""))


def normalize_url(url: str) -> str:
    """Absolute local paths for plain paths, so executors and workers resolve the same place."""
    if not url:
        raise ValueError("a sink URL is required (a local path or a pyarrow.fs URL such as s3://)")
    if "://" in url:
        return url
    return os.path.abspath(os.path.expanduser(url))


class SinkStore:
    """The files of one sink (``<url>/<name>``) on its filesystem; safe to rebuild anywhere."""

    def __init__(self, url: str, name: str) -> None:
        self.url = normalize_url(url)
        self.name = validate_sink_name(name)
        self.display = display_location(self.url, name)
        try:
            fs, path = pafs.FileSystem.from_uri(with_s3_defaults(self.url))
        except (ValueError, OSError, pa.ArrowException) as exc:
            raise SinkError(f"cannot open sink URL {redact_url(self.url)}: {exc}") from exc
        self.fs: pafs.FileSystem = fs
        self.root = f"{str(path).rstrip('/')}/{name}"
        self.atomic_put = fs.type_name in _ATOMIC_PUT_TYPES

    def __repr__(self) -> str:
        return f"SinkStore({self.display!r})"

    def path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def url_of(self, relative: str) -> str:
        """A URL other readers understand: a plain path locally, ``s3://bucket/key`` and so on."""
        scheme = {"local": "", "gcs": "gs"}.get(self.fs.type_name, self.fs.type_name)
        return f"{scheme}://{self.path(relative)}" if scheme else self.path(relative)

    def where(self, relative: str = "") -> str:
        """A location for messages: the redacted URL, never a secret."""
        return f"{self.display}/{relative}" if relative else self.display

    def staging_dir(self, batch_id: int) -> str:
        return f"{STAGING_DIR}/{batch_key(batch_id)}"

    # -- primitive operations; every OSError becomes a SinkError naming the place --

    def _fail(self, action: str, relative: str, exc: BaseException) -> SinkError:
        return SinkError(f"cannot {action} {self.where(relative)}: {exc}")

    def ensure_dir(self, relative: str) -> None:
        if self.atomic_put:
            return  # object stores have no directories to create
        try:
            self.fs.create_dir(self.path(relative) if relative else self.root, recursive=True)
        except OSError as exc:
            raise self._fail("create directory", relative, exc) from exc

    def open_output(self, relative: str) -> Any:
        parent = relative.rsplit("/", 1)[0] if "/" in relative else ""
        if parent:
            self.ensure_dir(parent)
        try:
            return self.fs.open_output_stream(self.path(relative))
        except OSError as exc:
            raise self._fail("write", relative, exc) from exc

    def put_atomic(self, relative: str, data: bytes) -> None:
        """Readers see the old state or all of ``data``, never a prefix of it."""
        try:
            if self.atomic_put:
                with self.fs.open_output_stream(self.path(relative)) as out:
                    out.write(data)
                return
            parent, leaf = relative.rsplit("/", 1) if "/" in relative else ("", relative)
            self.ensure_dir(parent)
            hidden = f".{leaf}.tmp-{uuid.uuid4().hex}"
            tmp = f"{parent}/{hidden}" if parent else hidden
            with self.fs.open_output_stream(self.path(tmp)) as out:
                out.write(data)
            self.fs.move(self.path(tmp), self.path(relative))
        except OSError as exc:
            raise self._fail("write", relative, exc) from exc

    def get(self, relative: str) -> bytes | None:
        """The object's bytes, ``None`` if it does not exist."""
        try:
            with self.fs.open_input_stream(self.path(relative)) as stream:
                return bytes(stream.read())
        except FileNotFoundError:
            return None
        except OSError as exc:
            text = str(exc).lower()
            if "not found" in text or "no such file" in text or "is a directory" in text:
                return None
            raise self._fail("read", relative, exc) from exc

    def size(self, relative: str) -> int:
        try:
            info = self.fs.get_file_info(self.path(relative))
        except OSError as exc:
            raise self._fail("stat", relative, exc) from exc
        if info.type != pafs.FileType.File:
            raise SinkError(f"staged file {self.where(relative)} is missing")
        return int(info.size or 0)

    def list_names(self, relative: str, *, recursive: bool = False) -> list[str]:
        """Entry paths under ``relative`` (relative to the sink root); empty if it is absent."""
        selector = pafs.FileSelector(self.path(relative), recursive=recursive, allow_not_found=True)
        try:
            infos = self.fs.get_file_info(selector)
        except OSError as exc:
            raise self._fail("list", relative, exc) from exc
        cut = len(self.root) + 1
        return sorted(info.path[cut:] for info in infos)

    def move(self, source: str, target: str) -> None:
        parent = target.rsplit("/", 1)[0] if "/" in target else ""
        if parent:
            self.ensure_dir(parent)
        try:
            self.fs.move(self.path(source), self.path(target))
        except FileNotFoundError as exc:
            raise SinkError(f"staged file {self.where(source)} is missing: {exc}") from exc
        except OSError as exc:
            raise self._fail(f"move {self.where(source)} to", target, exc) from exc

    def delete_file(self, relative: str) -> None:
        try:
            self.fs.delete_file(self.path(relative))
        except FileNotFoundError:
            return
        except OSError as exc:
            if "not found" in str(exc).lower() or "no such file" in str(exc).lower():
                return
            raise self._fail("delete", relative, exc) from exc

    def delete_tree(self, relative: str) -> None:
        """Delete a directory (or key prefix) and everything under it; absent is fine."""
        try:
            info = self.fs.get_file_info(self.path(relative))
            if info.type == pafs.FileType.NotFound:
                return
            self.fs.delete_dir(self.path(relative))
        except FileNotFoundError:
            return
        except OSError as exc:
            if "not found" in str(exc).lower() or "does not exist" in str(exc).lower():
                return
            raise self._fail("delete", relative, exc) from exc

    def probe(self) -> None:
        """Fail early, in the driver, with the URL in the message, if executors could not write."""
        name = f"{STAGING_DIR}/.probe-{uuid.uuid4().hex}"
        try:
            if not self.atomic_put:
                self.fs.create_dir(self.path(STAGING_DIR), recursive=True)
            with self.fs.open_output_stream(self.path(name)) as out:
                out.write(b"probe")
            self.fs.delete_file(self.path(name))
        except OSError as exc:
            raise SinkError(f"sink location {self.display} is not writable: {exc}") from exc

    # -- staging --

    def staged_batches(self) -> list[int]:
        """Batch ids that have something under ``_staging/``."""
        ids = (parse_batch_key(n.rsplit("/", 1)[-1]) for n in self.list_names(STAGING_DIR))
        return sorted(i for i in ids if i is not None)

    def delete_staging(self, batch_id: int) -> None:
        self.delete_tree(self.staging_dir(batch_id))

    def delete_staging_up_to(self, batch_id: int) -> list[int]:
        """Leftovers of batches that are committed can never be needed again."""
        done = [b for b in self.staged_batches() if b <= batch_id]
        for b in done:
            self.delete_staging(b)
        return done

    def delete_all_staging(self) -> None:
        """Between query runs nothing staged is reusable: Spark re-runs every uncommitted task."""
        self.delete_tree(STAGING_DIR)

    # -- manifests --

    def read_manifest(self, batch_id: int) -> Manifest | None:
        relative = manifest_file_name(batch_id)
        data = self.get(relative)
        return None if data is None else Manifest.from_json(data, self.where(relative))

    def committed_batches(self) -> list[int]:
        ids = (
            parse_manifest_file_name(n.rsplit("/", 1)[-1]) for n in self.list_names(MANIFEST_DIR)
        )
        return sorted(i for i in ids if i is not None)

    def manifests(self, batches: Iterable[int] | None = None) -> list[Manifest]:
        wanted = self.committed_batches() if batches is None else sorted(set(batches))
        found: list[Manifest] = []
        for batch_id in wanted:
            manifest = self.read_manifest(batch_id)
            if manifest is None:
                raise SinkError(f"batch {batch_id} is not committed in {self.display}")
            found.append(manifest)
        return found

    # -- the callback sink's marker --

    def last_committed(self) -> int | None:
        data = self.get(LAST_COMMITTED)
        if data is None:
            return None
        try:
            return int(json.loads(data)["batch_id"])
        except (ValueError, KeyError, TypeError) as exc:
            raise SinkError(f"{self.where(LAST_COMMITTED)}: damaged marker: {exc}") from exc

    def set_last_committed(self, batch_id: int) -> None:
        doc = {"batch_id": batch_id, "committed_at": now_text()}
        self.put_atomic(LAST_COMMITTED, json.dumps(doc).encode())


def now_text() -> str:
    """The current UTC time as ISO 8601 text (milliseconds, ``Z``), as manifests record it."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
