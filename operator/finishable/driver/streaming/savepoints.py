"""Savepoints: a self-contained, consistent copy of a query's state at one committed batch.

A savepoint (and, in the same format, the periodic checkpoint copy that survives a driver pod) is
one blob in the checkpoint store holding three things:

* ``manifest.json``: job name, committed batch id, the watermark after that batch, whether it was
  drained, fingerprints of the sources and sinks, Spark's version;
* ``checkpoint.tar``: Spark's checkpoint directory cut at batch N: ``metadata``, ``sources/``,
  ``offsets/`` and ``commits/`` up to N, and state store files up to version N + 1 (the version
  batch N wrote). A batch planned or half-run after N is left out, so a query started from the
  copy re-plans nothing: it continues with batch N + 1 from fresh offsets. The cut is taken
  while the query runs and is checked to restore (:mod:`finishable.driver.streaming.cut`);
* ``coordinators/<source>``: each source coordinator's snapshot taken at batch N.

A periodic checkpoint has the same format, except that its tar holds only Spark's small files and
``checkpoint.index`` (path → sha256) names the others, which live once each in the store's
content files (:mod:`finishable.state.contents`), shared with the checkpoints before and after it
(Flink inlines small state the same way). A savepoint always carries everything in its tar, so
that it stays valid whatever happens to the job's checkpoints.

A job of several queries (one per ``write_stream``) takes a *composite* savepoint, format version
3: its top-level manifest names every query and the batch it is cut at (``queries``), and each
query's own savepoint, as above, sits under ``queries/<query>/``. The queries share nothing (each
source feeds one query, each query writes its own sink), so the per-query cuts taken at each
query's batch boundary together are one consistent cut of the job. A single-query job keeps
writing versions 1 and 2.

``check_restorable`` refuses a savepoint of a job with other sources or sinks (the job name may
differ: starting a new job from an old one's savepoint is the point), or a drained one (event
time at its end: a job started from it would emit no more windows) unless forced, each with a
message that says what differs and what to do.
"""

from __future__ import annotations

import io
import json
import logging
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from pydantic import Field, ValidationError

from finishable.api.models import ApiModel
from finishable.driver.streaming.cut import read_cut

log = logging.getLogger(__name__)

FORMAT = "finishable.savepoint"
FORMAT_VERSION = 3
"""The newest format this version reads: 1 is self-contained, 2 has an index of shared files,
3 holds several queries' savepoints."""
SELF_CONTAINED_VERSION = 1
INCREMENTAL_VERSION = 2
COMPOSITE_VERSION = 3
QUERIES = "queries/"
"""Where a composite savepoint keeps each query's entries: ``queries/<query>/<entry>``."""
INDEX = "checkpoint.index"
"""An incremental checkpoint's index of shared files (path → sha256), as JSON, beside the
``checkpoint.tar`` of its small files; its manifest says version 2, so that a finishable too old
to fetch the shared files refuses it instead of restoring half a checkpoint."""


class SavepointError(ValueError):
    """A savepoint that cannot be read or used; the message names the problem."""


class IncompatibleSavepoint(SavepointError):
    """A readable savepoint that this job must not start from."""


class SavepointManifest(ApiModel):
    """What a savepoint is a copy of."""

    format: str = Field(default=FORMAT, description="Always finishable.savepoint.")
    version: int = Field(default=SELF_CONTAINED_VERSION, description="Format version.")
    job: str = Field(description="The job that took it.")
    batch_id: int = Field(ge=0, description="The committed micro-batch it is cut at.")
    watermark_ms: int | None = Field(default=None, description="Event-time watermark after it.")
    drained: bool = Field(default=False, description="Taken by a stop with drain.")
    sources: dict[str, str] = Field(default_factory=dict, description="Source fingerprints.")
    sinks: dict[str, str] = Field(default_factory=dict, description="Sink fingerprints.")
    spark_version: str = Field(default="", description="Spark version that wrote it.")
    queries: dict[str, int] = Field(
        default_factory=dict,
        description="A composite savepoint: each query's committed batch (-1: none yet).",
    )
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))


@dataclass(frozen=True)
class Savepoint:
    """A savepoint in memory."""

    manifest: SavepointManifest
    checkpoint: bytes
    """Spark's checkpoint as a tar: all of it, or in an incremental checkpoint its small files."""
    coordinators: Mapping[str, bytes] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    """An incremental checkpoint's other files: path in Spark's checkpoint → sha256 in the
    store's content files (:mod:`finishable.state.contents`)."""

    queries: Mapping[str, Savepoint | None] = field(default_factory=dict)
    """A composite savepoint: each query's own savepoint (None: it committed no batch yet)."""

    @property
    def incremental(self) -> bool:
        return bool(self.files)

    @property
    def composite(self) -> bool:
        return bool(self.manifest.queries)


# -- Spark's checkpoint directory ------------------------------------------------------------


def pack_checkpoint(checkpoint_dir: Path, batch_id: int) -> bytes:
    """Spark's checkpoint cut at ``batch_id`` as an uncompressed tar."""
    read: dict[str, bytes] = {}
    cut = read_cut(checkpoint_dir, batch_id, visit=lambda name, data, _: read.update({name: data}))
    return pack_files({name: read[name] for name in cut})


def pack_files(files: Mapping[str, bytes]) -> bytes:
    """A cut's files as an uncompressed tar (state files compress themselves; a deterministic
    order keeps equal checkpoints byte-equal)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def unpack_checkpoint(
    data: bytes,
    target: Path,
    files: Mapping[str, str] | None = None,
    fetch: Callable[[str], bytes] | None = None,
) -> None:
    """Recreate a checkpoint directory from its tar and, for an incremental checkpoint, its
    shared ``files`` (``fetch`` reads one by sha256, one at a time); ``target`` must not hold
    another checkpoint."""
    _empty_target(target)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        for member in archive.getmembers():
            if not member.isfile():
                raise SavepointError(f"the savepoint holds an unsafe entry {member.name!r}")
            source = archive.extractfile(member)
            if source is None:
                raise SavepointError(f"cannot read {member.name!r} from the savepoint")
            _write_entry(target, member.name, source.read())
    if files and fetch is None:
        raise SavepointError("an incremental checkpoint needs the store that holds its files")
    for name, digest in sorted((files or {}).items()):
        assert fetch is not None
        _write_entry(target, name, fetch(digest))


def _empty_target(target: Path) -> None:
    if target.exists() and any(target.iterdir()):
        raise SavepointError(f"{target} is not empty: refusing to mix two checkpoints")
    target.mkdir(parents=True, exist_ok=True)


def _write_entry(target: Path, entry: str, data: bytes) -> None:
    name = PurePosixPath(entry)
    if name.is_absolute() or ".." in name.parts or not name.parts:
        raise SavepointError(f"the savepoint holds an unsafe entry {entry!r}")
    destination = target.joinpath(*name.parts)
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_bytes(data)


def latest_committed_batch(checkpoint_dir: Path) -> int | None:
    """The newest batch id with a commit entry, or None for a query that committed nothing."""
    commits = checkpoint_dir / "commits"
    if not commits.is_dir():
        return None
    ids = [int(path.name) for path in commits.iterdir() if path.name.isdigit()]
    return max(ids, default=None)


def committed_watermark(checkpoint_dir: Path, batch_id: int) -> int | None:
    """The event-time watermark Spark recorded after ``batch_id`` (``nextBatchWatermarkMs``)."""
    path = checkpoint_dir / "commits" / str(batch_id)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines[1:]:
        try:
            document = json.loads(line)
        except ValueError:
            continue
        value = document.get("nextBatchWatermarkMs") if isinstance(document, dict) else None
        if isinstance(value, int):
            return value
    return None


# -- the savepoint blob ----------------------------------------------------------------------


def encode_savepoint(savepoint: Savepoint) -> bytes:
    """One blob for the checkpoint store: manifest, checkpoint and enumerator states (of every
    query, in a composite savepoint)."""
    entries = _entries_of(savepoint)
    if savepoint.composite:
        for query, part in sorted(savepoint.queries.items()):
            if part is None:
                continue
            if part.incremental or part.composite:
                raise ValueError(f"query {query!r}: a composite savepoint holds whole savepoints")
            for name, data in _entries_of(part).items():
                entries[f"{QUERIES}{query}/{name}"] = data
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as archive:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def composite_savepoint(
    manifest: SavepointManifest, queries: Mapping[str, Savepoint | None]
) -> Savepoint:
    """The savepoint of a job of several queries: ``manifest`` is the job's (its ``queries`` and
    ``batch_id`` are filled in here), each query's savepoint as taken at its own boundary."""
    batches = {
        name: (-1 if part is None else part.manifest.batch_id) for name, part in queries.items()
    }
    top = manifest.model_copy(
        update={
            "version": COMPOSITE_VERSION,
            "batch_id": max(0, *batches.values()),
            "queries": batches,
        }
    )
    # An empty checkpoint.tar, so that a finishable that cannot read version 3 says so.
    return Savepoint(top, pack_files({}), queries=dict(queries))


def _entries_of(savepoint: Savepoint) -> dict[str, bytes]:
    manifest = savepoint.manifest
    if savepoint.incremental:
        manifest = manifest.model_copy(update={"version": INCREMENTAL_VERSION})
    exclude = None if manifest.queries else {"queries"}  # one query: exactly as before
    entries: dict[str, bytes] = {
        "manifest.json": manifest.model_dump_json(
            by_alias=True, indent=2, exclude=exclude
        ).encode(),
        "checkpoint.tar": savepoint.checkpoint,
    }
    if savepoint.incremental:
        entries[INDEX] = json.dumps({"files": dict(savepoint.files)}, sort_keys=True).encode()
    for name, snapshot in sorted(savepoint.coordinators.items()):
        entries[f"coordinators/{name}"] = snapshot
    return entries


def decode_savepoint(data: bytes, location: str = "the savepoint") -> Savepoint:
    """Read a blob written by :func:`encode_savepoint`; :class:`SavepointError` if it is not one."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            entries: dict[str, bytes] = {}
            for member in archive.getmembers():
                source = archive.extractfile(member) if member.isfile() else None
                if source is not None:
                    entries[member.name] = source.read()
    except (tarfile.TarError, EOFError, OSError) as error:
        raise SavepointError(f"{location} is not a finishable savepoint: {error}") from None
    savepoint = _from_entries(entries, location)
    if not savepoint.composite:
        return savepoint
    parts: dict[str, Savepoint | None] = {}
    for query, batch in savepoint.manifest.queries.items():
        prefix = f"{QUERIES}{query}/"
        own = {n.removeprefix(prefix): d for n, d in entries.items() if n.startswith(prefix)}
        part = _from_entries(own, f"{location} (query {query!r})") if batch >= 0 else None
        if part is not None and (part.composite or part.manifest.batch_id != batch):
            raise SavepointError(f"{location}: the savepoint of query {query!r} does not fit it")
        parts[query] = part
    return Savepoint(savepoint.manifest, savepoint.checkpoint, queries=parts)


def _from_entries(entries: Mapping[str, bytes], location: str) -> Savepoint:
    missing = [name for name in ("manifest.json", "checkpoint.tar") if name not in entries]
    if missing:
        raise SavepointError(f"{location} is not a finishable savepoint: no {missing[0]}")
    try:
        manifest = SavepointManifest.model_validate_json(entries["manifest.json"])
    except ValidationError as error:
        raise SavepointError(f"{location} has an unreadable manifest: {error}") from None
    if manifest.format != FORMAT or manifest.version > FORMAT_VERSION:
        raise SavepointError(
            f"{location} has format {manifest.format!r} version {manifest.version}; this "
            f"version of finishable reads {FORMAT!r} up to version {FORMAT_VERSION}"
        )
    coordinators = {
        name.removeprefix("coordinators/"): blob
        for name, blob in entries.items()
        if name.startswith("coordinators/")
    }
    files: dict[str, str] = {}
    if INDEX in entries:
        try:
            files = {str(k): str(v) for k, v in json.loads(entries[INDEX])["files"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise SavepointError(f"{location} has an unreadable file index: {error}") from None
    return Savepoint(manifest, entries["checkpoint.tar"], coordinators, files)


def restore_problems(
    manifest: SavepointManifest, *, sources: Mapping[str, str], sinks: Mapping[str, str]
) -> list[str]:
    """What keeps a job with these sources and sinks from restoring ``manifest``'s state."""
    problems: list[str] = []
    for kind, theirs, ours in (
        ("source", manifest.sources, sources),
        ("sink", manifest.sinks, sinks),
    ):
        for name in sorted(set(theirs) | set(ours)):
            if name not in ours:
                problems.append(f"its {kind} {name!r} is not in this job")
            elif name not in theirs:
                problems.append(f"this job's {kind} {name!r} is not in it")
            elif theirs[name] != ours[name]:
                problems.append(f"the {kind} {name!r} changed since it was taken")
    return problems


def check_restorable(
    manifest: SavepointManifest,
    *,
    sources: Mapping[str, str],
    sinks: Mapping[str, str],
    allow_drained: bool,
    location: str = "the savepoint",
) -> None:
    """Refuse, with a reason, a savepoint this job must not start from."""
    problems = restore_problems(manifest, sources=sources, sinks=sinks)
    if problems:
        raise IncompatibleSavepoint(
            f"cannot start from {location}: "
            + "; ".join(problems)
            + ". Start without spec.restoreFrom, or from a savepoint of a job with the same "
            "sources and sinks."
        )
    if manifest.drained and not allow_drained:
        raise _drained(location)


def _drained(location: str) -> IncompatibleSavepoint:
    return IncompatibleSavepoint(
        f"cannot start from {location}: it was drained (event time is at its end, so no "
        "window would fire again); set spec.restoreFrom.allowDrained: true to use it anyway"
    )


def check_queries_restorable(
    savepoint: Savepoint,
    *,
    queries: Mapping[str, tuple[Mapping[str, str], Mapping[str, str]]],
    allow_drained: bool,
    allow_non_restored: bool = False,
    location: str = "the savepoint",
) -> None:
    """Refuse, naming the query, a savepoint whose queries are not this job's: ``queries`` maps
    each of the program's queries to its (source, sink) fingerprints.

    As Flink does with operators: a query of the program that the savepoint does not hold
    starts from nothing; a query of the savepoint that the program does not have is refused (a
    renamed query would lose its state silently) unless ``allow_non_restored`` drops it."""
    ours = ", ".join(sorted(queries))
    if not savepoint.composite:
        raise IncompatibleSavepoint(
            f"cannot start from {location}: it holds the state of a job of one query, and this "
            f"job has {len(queries)} ({ours}). Start without spec.restoreFrom, or from a "
            "savepoint of a job with the same queries."
        )
    dropped = sorted(set(savepoint.queries) - set(queries))
    if dropped and not allow_non_restored:
        named = ", ".join(repr(name) for name in dropped)
        which = f"its query {named} is" if len(dropped) == 1 else f"its queries {named} are"
        raise IncompatibleSavepoint(
            f"cannot start from {location}: {which} not in this job (whose queries are "
            f"{ours}). Keep the names (write_stream(name=...)), or drop that state with "
            "spec.restoreFrom.allowNonRestoredState: true."
        )
    if dropped:
        log.warning("%s: the state of the queries %s is dropped", location, dropped)
    for name in sorted(set(queries) - set(savepoint.queries)):
        log.info("%s does not hold query %r: it starts from nothing", location, name)
    for name, part in sorted(savepoint.queries.items()):
        if part is not None and name in queries:
            sources, sinks = queries[name]
            check_restorable(
                part.manifest,
                sources=sources,
                sinks=sinks,
                allow_drained=True,
                location=f"{location} (query {name!r})",
            )
    if savepoint.manifest.drained and not allow_drained:
        raise _drained(location)
