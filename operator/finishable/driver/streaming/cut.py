"""A consistent cut of Spark's checkpoint directory while the query and its maintenance run.

A periodic checkpoint copies Spark's checkpoint directory while the query goes on, so three
writers change it under the copy:

* the query thread plans and commits the next batches (``offsets/``, ``commits/``, state deltas
  or RocksDB files of versions after the cut) and purges metadata older than
  ``spark.sql.streaming.minBatchesToRetain`` (``offsets/``, ``commits/``, ``sources/``);
* the state store's maintenance thread writes snapshots (``N.snapshot`` of the HDFS-backed
  provider) and deletes the files no retained version needs (deltas, snapshots, RocksDB ``.zip``,
  ``.changelog`` and ``SSTs/*.sst`` files);
* both write through Hadoop's atomic rename: a file is first ``.<name>.<uuid>.tmp`` (with its
  ``.crc``), then renamed; the final name always holds a whole file.

So the cut skips temporary files, takes a file that vanished between listing and reading as one
Spark deleted (never needed by the cut unless the check below says so), and then checks that what
it read restores: the batch's offsets and commit, and for every state partition a chain that
rebuilds the version the batch wrote (``batch_id + 1``) the way Spark's providers rebuild it: the
newest HDFS snapshot at or below it plus every delta after it; the newest RocksDB zip at or below
it, the SST files its metadata lists, and every changelog after it (or the zip of that version
itself when changelog checkpointing is off). A cut that fails the check is read again; after
``attempts`` reads it is a :class:`TornCut`, which a periodic checkpoint skips (the next one cuts a
newer batch). A cut of a stopped query cannot be torn.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path, PurePosixPath


class CutError(ValueError):
    """Spark's checkpoint cannot be cut at the batch asked for; the message says why."""


class TornCut(CutError):
    """The files of the cut changed under every read of it (Spark deleted what it needed)."""


_VERSIONED = re.compile(r"^\.?(\d+)(\.[a-z]+)*$")  # 7, .7.crc, 8.delta, .8.delta.crc, 9.zip
_TEMPORARY = re.compile(r"^\..*\.tmp(\.crc)?$")  # Hadoop's atomic write: .<name>.<uuid>.tmp
_HDFS = {"delta", "snapshot"}
_ROCKSDB = {"zip", "changelog"}


def version_of(name: str) -> int | None:
    """The batch or state version a checkpoint file is named by, None for other files."""
    match = _VERSIONED.match(name)
    return int(match.group(1)) if match else None


def checkpoint_files(checkpoint_dir: Path, batch_id: int) -> list[Path]:
    """The files that belong to a cut at ``batch_id`` as listed now, relative and sorted.

    Left out: temporary files, offsets and commits after the batch, and state files of versions
    after the one the batch wrote.
    """
    return sorted(Path(name) for name in _cut_names(_listing(checkpoint_dir, batch_id), batch_id))


def _listing(checkpoint_dir: Path, batch_id: int) -> list[str]:
    """Every file but temporary ones, relative; tolerates directories vanishing under the walk."""
    if not (checkpoint_dir / "commits" / str(batch_id)).is_file():
        raise CutError(
            f"batch {batch_id} is not committed in {checkpoint_dir}: a savepoint is cut only at "
            "a committed batch"
        )
    return [
        (Path(directory) / name).relative_to(checkpoint_dir).as_posix()
        for directory, _, names in os.walk(checkpoint_dir)
        for name in names
        if not _TEMPORARY.match(name)
    ]


def _cut_names(listing: Iterable[str], batch_id: int) -> list[str]:
    selected: list[str] = []
    for name in listing:
        path = PurePosixPath(name)
        version = version_of(path.name)
        if path.parts[0] in ("offsets", "commits") and len(path.parts) == 2:
            if version is None or version > batch_id:
                continue
        elif path.parts[0] == "state" and version is not None and version > batch_id + 1:
            continue  # state written by a batch after the cut
        selected.append(name)
    return selected


@dataclass(frozen=True, slots=True)
class CutFile:
    """A file of a cut: its content's sha256 and size, and for a RocksDB zip the SSTs it needs."""

    sha256: str
    size: int
    needs: tuple[str, ...] = ()


Visit = Callable[[str, bytes, CutFile], None]
"""Called with each file the cut reads (name, bytes, digest); a torn read may call it again."""


@dataclass
class DigestCache:
    """Digests of files already read, by name, size, mtime and inode: Spark never rewrites a
    checkpoint file in place, so a file whose stat is unchanged need not be read again."""

    min_size: int = 0
    """Smaller files are read every time (their bytes are needed, not just their digest)."""
    entries: dict[str, tuple[tuple[int, int, int], CutFile]] = field(default_factory=dict)

    def lookup(self, path: Path, name: str) -> CutFile | None:
        stat = path.stat()
        entry = self.entries.get(name)
        if entry is not None and entry[0] == (stat.st_size, stat.st_mtime_ns, stat.st_ino):
            return entry[1]
        return None

    def remember(self, name: str, digest: CutFile, stat: os.stat_result) -> None:
        if digest.size >= self.min_size:
            self.entries[name] = ((stat.st_size, stat.st_mtime_ns, stat.st_ino), digest)

    def keep_only(self, names: Iterable[str]) -> None:
        keep = set(names)
        self.entries = {name: entry for name, entry in self.entries.items() if name in keep}


def read_cut(
    checkpoint_dir: Path,
    batch_id: int,
    *,
    attempts: int = 3,
    visit: Visit | None = None,
    cache: DigestCache | None = None,
) -> dict[str, CutFile]:
    """The cut's files, checked to restore (see the module's docstring).

    Each file is read once and handed to ``visit``, so a caller can store it and let it go:
    memory holds one file at a time. Files ``cache`` knows are not read (nor visited) at all.
    """
    problem = ""
    for _ in range(attempts):
        listing = _listing(checkpoint_dir, batch_id)
        names = _cut_names(listing, batch_id)
        files: dict[str, CutFile] = {}
        bases = _rocksdb_bases(names, batch_id)
        for name in bases:  # read first: they name the SSTs to keep
            digest = _read(checkpoint_dir / name, name, visit, cache)
            if digest is not None:
                files[name] = digest
                bases[name] = digest.needs
        for name in _restore_chain(names, batch_id, bases):
            if name not in files and (digest := _read(checkpoint_dir / name, name, visit, cache)):
                files[name] = digest
        files = {
            n: d for n, d in files.items() if not n.endswith(".crc") or _checksummed(n) in files
        }
        found = cut_problem(files, batch_id, listing)
        if found is None:
            if cache is not None:
                cache.keep_only(files)
            return files
        problem = found
    raise TornCut(
        f"the checkpoint cut at batch {batch_id} of {checkpoint_dir} changed under {attempts} "
        f"reads: {problem}"
    )


def _state_partitions(names: Iterable[str]) -> dict[str, dict[str, set[int]]]:
    """State partition directories → versions of their HDFS or RocksDB files, by kind."""
    partitions: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for name in names:
        path = PurePosixPath(name)
        kind = path.suffix.lstrip(".")
        number = version_of(path.name)
        if path.parts[0] == "state" and kind in _HDFS | _ROCKSDB and number is not None:
            partitions[str(path.parent)][kind].add(number)  # (a checksum's kind is "crc")
    return partitions


def _base(versions: set[int], version: int) -> int:
    return max((v for v in versions if v <= version), default=0)


def _rocksdb_bases(names: Iterable[str], batch_id: int) -> dict[str, tuple[str, ...] | None]:
    """The zip each RocksDB partition restores from (the newest at or below the batch's
    version), mapped to the SSTs it needs once read (None until then)."""
    return {
        f"{directory}/{base}.zip": None
        for directory, kinds in _state_partitions(names).items()
        if (base := _base(kinds["zip"], batch_id + 1))
    }


def _restore_chain(
    names: list[str], batch_id: int, bases: Mapping[str, tuple[str, ...] | None]
) -> list[str]:
    """``names`` without the state files no restore of the batch reads.

    Spark keeps ``minBatchesToRetain`` versions of every partition (to roll back to any of
    them); a restore of batch N reads one chain: the newest HDFS snapshot (or RocksDB zip) at or
    below version N + 1 and the deltas (or changelogs) after it, and for a zip the SST files its
    metadata lists. Leaving the rest out keeps a checkpoint the size of what it restores.
    Checksums of the files left out go with them.
    """
    version = batch_id + 1
    drop: set[str] = set()
    for directory, kinds in _state_partitions(names).items():
        rocksdb = bool(kinds["zip"] or kinds["changelog"])
        base_kind, step_kind = ("zip", "changelog") if rocksdb else ("snapshot", "delta")
        base = _base(kinds[base_kind], version)
        drop |= {f"{directory}/{v}.{base_kind}" for v in kinds[base_kind] if v != base}
        drop |= {f"{directory}/{v}.{step_kind}" for v in kinds[step_kind] if v <= base}
        needs = bases.get(f"{directory}/{base}.zip") if rocksdb and base else None
        if needs is not None:
            kept = {f"{directory}/SSTs/{sst}" for sst in needs}
            drop |= {
                n
                for n in names
                if n.startswith(f"{directory}/SSTs/") and _checksummed(n) not in kept
            }
    return [name for name in names if name not in drop and _checksummed(name) not in drop]


def _read(path: Path, name: str, visit: Visit | None, cache: DigestCache | None) -> CutFile | None:
    """One file's digest (None: Spark deleted it after the listing)."""
    try:
        if cache is not None and (known := cache.lookup(path, name)) is not None:
            return known
        with path.open("rb") as handle:
            stat = os.fstat(handle.fileno())
            data = handle.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    needs = tuple(_rocksdb_sst_files(data)) if _is_rocksdb_zip(name) else ()
    digest = CutFile(hashlib.sha256(data).hexdigest(), len(data), needs)
    if visit is not None:
        visit(name, data, digest)
    if cache is not None:
        cache.remember(name, digest, stat)
    return digest


def _is_rocksdb_zip(name: str) -> bool:
    path = PurePosixPath(name)
    return path.parts[0] == "state" and path.suffix == ".zip" and version_of(path.name) is not None


def _checksummed(crc_name: str) -> str:
    """The file a Hadoop ``.<name>.crc`` checksums (``a/.7.delta.crc`` → ``a/7.delta``)."""
    path = PurePosixPath(crc_name)
    name = path.name
    if name.startswith(".") and name.endswith(".crc"):
        return str(path.with_name(name[1 : -len(".crc")]))
    return crc_name


def cut_problem(
    files: Mapping[str, CutFile], batch_id: int, listed: Iterable[str] = ()
) -> str | None:
    """What keeps these files from restoring batch ``batch_id``, or None when they restore.

    ``listed`` are all the names the cut saw before reading, so that a state partition none of
    whose files the cut holds (all deleted, or all newer than the cut) is still one to restore.
    """
    for needed in (f"offsets/{batch_id}", f"commits/{batch_id}"):
        if needed not in files:
            return f"{needed} is missing"
    version = batch_id + 1
    partitions: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for name in [*files, *listed]:
        path = PurePosixPath(name)
        if path.parts[0] != "state" or path.name.startswith("."):
            continue
        kind = path.suffix.lstrip(".")
        number = version_of(path.name)
        if kind in _HDFS | _ROCKSDB and number is not None:
            kinds = partitions[str(path.parent)]
            kinds.setdefault(kind, set())
            if name in files:
                kinds[kind].add(number)
    for directory, kinds in sorted(partitions.items()):
        if kinds.keys() & _ROCKSDB:
            problem = _rocksdb_problem(files, directory, kinds, version)
        else:
            problem = _chain_problem(kinds["snapshot"], kinds["delta"], "delta", version)
        if problem is not None:
            return f"{directory}: {problem}"
    return None


def _chain_problem(bases: set[int], steps: set[int], step: str, version: int) -> str | None:
    """Version ``version`` rebuilds from the newest base at or below it (0: empty) and steps."""
    base = max((b for b in bases if b <= version), default=0)
    missing = [v for v in range(base + 1, version + 1) if v not in steps]
    if missing:
        return f"version {version} needs the {step} files of {missing} after {base or 'nothing'}"
    return None


def _rocksdb_problem(
    files: Mapping[str, CutFile], directory: str, kinds: Mapping[str, set[int]], version: int
) -> str | None:
    zips = {v for v in kinds["zip"] if v <= version}
    if not kinds["changelog"]:  # changelog checkpointing off: every version is a zip
        if version not in zips:
            return f"{version}.zip is missing"
        base = version
    else:
        problem = _chain_problem(zips, kinds["changelog"], "changelog", version)
        if problem is not None:
            return problem
        base = max(zips, default=0)
    if base == 0:
        return None
    for sst in files[f"{directory}/{base}.zip"].needs:
        if f"{directory}/SSTs/{sst}" not in files:
            return f"{base}.zip needs SSTs/{sst}"
    return None


def _rocksdb_sst_files(archive: bytes) -> list[str]:
    """The SST files a RocksDB checkpoint zip's ``metadata`` (``v1`` + JSON) refers to."""
    try:
        with zipfile.ZipFile(BytesIO(archive)) as bundle:
            lines = bundle.read("metadata").decode().splitlines()
        document = json.loads(lines[1])
        return [str(entry["dfsSstFileName"]) for entry in document.get("sstFiles", [])]
    except (zipfile.BadZipFile, KeyError, IndexError, ValueError, TypeError) as error:
        raise CutError(f"a RocksDB checkpoint zip without readable metadata: {error}") from None
