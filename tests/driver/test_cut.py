"""The checkpoint cut against a directory that changes under it, as Spark changes it.

The fake writers below do what Spark's query thread and state maintenance do to the files (atomic
writes through a temporary name, snapshots, deletion of what no retained version needs). The real
query is in ``test_cut_spark.py``.
"""

from __future__ import annotations

import io
import json
import threading
import zipfile
from functools import partial
from pathlib import Path

import pytest

from finishable.driver.streaming.cut import (
    CutFile,
    TornCut,
    checkpoint_files,
    cut_problem,
    read_cut,
)

pytestmark = pytest.mark.quick

PARTITION = "state/0/0"


def atomic_write(path: Path, text: str) -> None:
    """Hadoop's atomic write: a hidden temporary file and its checksum, then renamed."""
    temporary = path.with_name(f".{path.name}.5c1e.tmp")
    temporary.write_text(text)
    temporary.with_name(f".{temporary.name}.crc").write_text("crc")
    temporary.rename(path)
    temporary.with_name(f".{temporary.name}.crc").rename(path.with_name(f".{path.name}.crc"))


def commit_batch(root: Path, batch: int) -> None:
    """What the query thread writes for one batch: offsets, the state delta, the commit."""
    for directory in ("offsets", "commits", PARTITION):
        (root / directory).mkdir(parents=True, exist_ok=True)
    atomic_write(root / "offsets" / str(batch), f"offsets {batch}")
    atomic_write(root / PARTITION / f"{batch + 1}.delta", f"+{batch + 1}")
    atomic_write(root / "commits" / str(batch), "v1\n{}")


def maintain(root: Path, retain: int) -> None:
    """What maintenance does: snapshot the newest version, delete what older versions need."""
    partition = root / PARTITION
    versions = sorted(int(p.name.split(".")[0]) for p in partition.glob("*.delta"))
    if not versions:
        return
    newest = versions[-1]
    atomic_write(partition / f"{newest}.snapshot", json.dumps(list(range(1, newest + 1))))
    for path in list(partition.iterdir()):
        name = path.name.lstrip(".")
        if name[0].isdigit() and int(name.split(".")[0]) < newest - retain:
            path.unlink(missing_ok=True)


def rebuilt(files: dict[str, bytes], version: int) -> list[int]:
    """The state a restore rebuilds from a cut, the way the HDFS-backed provider does."""
    base = max((v for v in range(version + 1) if f"{PARTITION}/{v}.snapshot" in files), default=0)
    state = json.loads(files[f"{PARTITION}/{base}.snapshot"]) if base else []
    for delta in range(base + 1, version + 1):
        state.append(int(files[f"{PARTITION}/{delta}.delta"].decode().lstrip("+")))
    return list(state)


def cut_bytes(root: Path, batch: int, *, attempts: int = 3) -> dict[str, bytes]:
    """A checked cut with each file's bytes, as a savepoint packs it."""
    read: dict[str, bytes] = {}
    cut = read_cut(root, batch, attempts=attempts, visit=lambda n, d, _: read.update({n: d}))
    return {name: read[name] for name in cut}


def digests(*names: str, needs: tuple[str, ...] = ()) -> dict[str, CutFile]:
    return {name: CutFile("0" * 64, 0, needs if name.endswith(".zip") else ()) for name in names}


def test_temporary_files_and_orphan_checksums_stay_out_of_the_cut(tmp_path: Path) -> None:
    commit_batch(tmp_path, 0)
    (tmp_path / PARTITION / ".2.snapshot.77ab-01.tmp").write_text("half")
    (tmp_path / PARTITION / "..2.snapshot.77ab-01.tmp.crc").write_text("crc")
    (tmp_path / PARTITION / ".9.delta.crc").write_text("crc of a deleted delta")
    names = {path.as_posix() for path in checkpoint_files(tmp_path, 0)}
    assert not any(".tmp" in name for name in names)
    files = cut_bytes(tmp_path, 0)
    assert f"{PARTITION}/.1.delta.crc" in files
    assert f"{PARTITION}/.9.delta.crc" not in files


def test_a_chain_with_a_gap_is_named() -> None:
    files = digests("offsets/4", "commits/4", f"{PARTITION}/2.snapshot")
    files |= digests(*(f"{PARTITION}/{v}.delta" for v in (3, 5)))
    assert cut_problem(files, 4) == f"{PARTITION}: version 5 needs the delta files of [4] after 2"
    files |= digests(f"{PARTITION}/4.snapshot")
    assert cut_problem(files, 4) is None
    assert cut_problem(digests("offsets/4"), 4) == "commits/4 is missing"


def rocksdb_zip(ssts: list[str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        entries = [{"localFileName": "x.sst", "dfsSstFileName": name} for name in ssts]
        bundle.writestr("metadata", "v1\n" + json.dumps({"sstFiles": entries}))
    return buffer.getvalue()


def test_a_rocksdb_cut_needs_the_ssts_of_its_zip_and_the_changelogs_after_it() -> None:
    files = digests("offsets/6", "commits/6", f"{PARTITION}/5.zip", needs=("0009-a.sst",))
    files |= digests(*(f"{PARTITION}/{v}.changelog" for v in (6, 7)))
    assert cut_problem(files, 6) == f"{PARTITION}: 5.zip needs SSTs/0009-a.sst"
    files |= digests(f"{PARTITION}/SSTs/0009-a.sst")
    assert cut_problem(files, 6) is None
    del files[f"{PARTITION}/6.changelog"]
    assert "changelog files of [6]" in (cut_problem(files, 6) or "")
    without_changelogs = {k: v for k, v in files.items() if not k.endswith(".changelog")}
    assert cut_problem(without_changelogs, 6) == f"{PARTITION}: 7.zip is missing"


def test_a_rocksdb_zip_is_read_for_the_ssts_it_needs(tmp_path: Path) -> None:
    commit_batch(tmp_path, 0)
    (tmp_path / PARTITION / "1.delta").unlink()
    (tmp_path / PARTITION / "1.zip").write_bytes(rocksdb_zip(["0001-b.sst"]))
    with pytest.raises(TornCut, match=r"1.zip needs SSTs/0001-b.sst"):
        read_cut(tmp_path, 0)
    (tmp_path / PARTITION / "SSTs").mkdir()
    (tmp_path / PARTITION / "SSTs" / "0001-b.sst").write_bytes(b"sst")
    assert read_cut(tmp_path, 0)[f"{PARTITION}/1.zip"].needs == ("0001-b.sst",)


def test_cuts_taken_while_batches_commit_and_maintenance_deletes_restore_or_are_torn(
    tmp_path: Path,
) -> None:
    """Hundreds of cuts against a live directory: each one restores, or is refused as torn.

    The writer runs at most four batches ahead of the newest cut started (far enough for
    maintenance to delete what a cut still reads), and at every tenth batch it waits for the cut
    of that batch to end: those cuts read a quiet directory and must restore, however the
    machine schedules the two threads.
    """
    commit_batch(tmp_path, 0)
    progress = threading.Condition()
    committed, started, finished = [0], [-1], [-1]
    done = threading.Event()

    def quiet(batch: int) -> bool:
        return batch > 0 and batch % 10 == 0

    def reached(counter: list[int], batch: int) -> bool:
        return counter[0] >= batch or done.is_set()

    def spark() -> None:
        for batch in range(1, 401):
            commit_batch(tmp_path, batch)
            if batch % 2 == 0:
                maintain(tmp_path, retain=2)
            with progress:
                committed[0] = batch
                progress.notify_all()
                if quiet(batch):
                    awaited = partial(reached, finished, batch)
                else:
                    awaited = partial(reached, started, batch - 4)
                if not progress.wait_for(awaited, 120):
                    break
        done.set()
        with progress:
            progress.notify_all()

    thread = threading.Thread(target=spark, daemon=True)
    thread.start()
    restored: list[int] = []
    torn: list[int] = []
    try:
        while True:
            with progress:
                progress.wait_for(lambda: committed[0] > started[0] or done.is_set(), 120)
                if committed[0] <= started[0]:
                    break
                batch = started[0] = committed[0]
                progress.notify_all()
            try:
                files = cut_bytes(tmp_path, batch, attempts=1)
            except TornCut:
                torn.append(batch)
            else:
                assert rebuilt(files, batch + 1) == list(range(1, batch + 2)), f"cut at {batch}"
                restored.append(batch)
            with progress:
                finished[0] = batch
                progress.notify_all()
    finally:
        done.set()
        thread.join(30)
    assert committed[0] == finished[0] == 400, f"stalled: {committed[0]} batches, {finished[0]} cut"
    assert not [batch for batch in torn if quiet(batch)], f"cuts of a quiet directory torn: {torn}"
    assert [batch for batch in restored if quiet(batch)] == list(range(10, 401, 10))


def test_a_torn_cut_says_what_went_missing(tmp_path: Path) -> None:
    for batch in range(4):
        commit_batch(tmp_path, batch)
    (tmp_path / PARTITION / "2.delta").unlink()
    with pytest.raises(TornCut, match=r"version 3 needs the delta files of \[2\] after nothing"):
        read_cut(tmp_path, 2)


def test_a_cut_holds_the_chain_a_restore_reads_not_every_retained_version(tmp_path: Path) -> None:
    for batch in range(6):
        commit_batch(tmp_path, batch)
        if batch == 2:
            maintain(tmp_path, retain=100)  # 3.snapshot; every delta stays, as Spark retains them
    names = set(cut_bytes(tmp_path, 5))
    state = {n.removeprefix(f"{PARTITION}/") for n in names if n.startswith(PARTITION)}
    assert state == {
        "3.snapshot",
        ".3.snapshot.crc",
        *(f"{v}.delta" for v in (4, 5, 6)),
        *(f".{v}.delta.crc" for v in (4, 5, 6)),
    }
    assert {f"offsets/{b}" for b in range(6)} <= names  # the logs stay whole


def test_a_rocksdb_cut_keeps_only_the_ssts_its_zip_lists(tmp_path: Path) -> None:
    commit_batch(tmp_path, 0)
    partition = tmp_path / PARTITION
    (partition / "1.delta").unlink()
    (partition / ".1.delta.crc").unlink()
    (partition / "SSTs").mkdir()
    for sst in ("0001-old.sst", "0002-new.sst"):
        (partition / "SSTs" / sst).write_bytes(b"sst")
        (partition / "SSTs" / f".{sst}.crc").write_bytes(b"crc")
    (partition / "1.zip").write_bytes(rocksdb_zip(["0002-new.sst"]))
    names = set(cut_bytes(tmp_path, 0))
    assert (
        f"{PARTITION}/SSTs/0002-new.sst" in names and f"{PARTITION}/SSTs/.0002-new.sst.crc" in names
    )
    assert not any("0001-old" in name for name in names)
