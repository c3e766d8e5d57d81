"""Savepoints: a consistent cut of Spark's checkpoint, the blob format, restore checks.

The Spark test runs a real stateful query, cuts its checkpoint at the last committed batch,
restores it into a new directory and shows the query continues there with nothing lost or
repeated.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from finishable.driver.streaming.cut import CutError, checkpoint_files
from finishable.driver.streaming.savepoints import (
    IncompatibleSavepoint,
    Savepoint,
    SavepointError,
    SavepointManifest,
    check_restorable,
    committed_watermark,
    decode_savepoint,
    encode_savepoint,
    latest_committed_batch,
    pack_checkpoint,
    unpack_checkpoint,
)

pytestmark = pytest.mark.quick


def fake_checkpoint(root: Path) -> Path:
    """The layout Spark 4.3 writes (HDFS-backed state store), batches 0-2 committed, 3 planned."""
    files = {
        "metadata": '{"id":"q"}',
        "sources/0/0": "v1",
        "state/0/_metadata/metadata": "m",
        "state/0/0/_metadata/schema": "s",
    }
    for batch in range(4):
        files[f"offsets/{batch}"] = f"offsets {batch}"
        files[f"offsets/.{batch}.crc"] = "crc"
        files[f"state/0/0/{batch + 1}.delta"] = f"state {batch + 1}"
        files[f"state/0/0/.{batch + 1}.delta.crc"] = "crc"
    for batch in range(3):
        files[f"commits/{batch}"] = 'v1\n{"nextBatchWatermarkMs":' + str(1000 * batch) + "}"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_cut_leaves_out_what_came_after_the_batch(tmp_path: Path) -> None:
    root = fake_checkpoint(tmp_path / "ckpt")
    names = {path.as_posix() for path in checkpoint_files(root, 2)}
    assert "offsets/3" not in names and ".4.delta.crc" not in " ".join(names)
    assert "state/0/0/4.delta" not in names
    assert {"offsets/2", "commits/2", "state/0/0/3.delta", "metadata", "sources/0/0"} <= names
    assert {"state/0/_metadata/metadata", "state/0/0/_metadata/schema"} <= names
    assert latest_committed_batch(root) == 2
    assert committed_watermark(root, 2) == 2000


def test_cut_refuses_an_uncommitted_batch(tmp_path: Path) -> None:
    root = fake_checkpoint(tmp_path / "ckpt")
    with pytest.raises(CutError, match="batch 3 is not committed"):
        checkpoint_files(root, 3)


def test_pack_unpack_round_trip_is_deterministic(tmp_path: Path) -> None:
    root = fake_checkpoint(tmp_path / "ckpt")
    packed = pack_checkpoint(root, 1)
    assert packed == pack_checkpoint(root, 1)
    unpack_checkpoint(packed, tmp_path / "copy")
    copied = {
        p.relative_to(tmp_path / "copy").as_posix()
        for p in (tmp_path / "copy").rglob("*")
        if p.is_file()
    }
    assert copied == {path.as_posix() for path in checkpoint_files(root, 1)}
    with pytest.raises(SavepointError, match="not empty"):
        unpack_checkpoint(packed, tmp_path / "copy")


def test_unsafe_entries_are_refused(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        archive.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(SavepointError, match=r"unsafe entry '\.\./escape'"):
        unpack_checkpoint(buffer.getvalue(), tmp_path / "target")


def manifest(**fields: Any) -> SavepointManifest:
    defaults: dict[str, Any] = {
        "job": "clickstream",
        "batch_id": 7,
        "sources": {"events": "files:s3://b/in"},
        "sinks": {"counts": "files:s3://b/out"},
    }
    return SavepointManifest(**{**defaults, **fields})


def test_blob_round_trip(tmp_path: Path) -> None:
    savepoint = Savepoint(manifest(watermark_ms=5), b"tar bytes", {"events": b"\x00snap"})
    decoded = decode_savepoint(encode_savepoint(savepoint))
    assert decoded == savepoint


def test_garbage_is_not_a_savepoint() -> None:
    with pytest.raises(SavepointError, match="s3://x/sp-1 is not a finishable savepoint"):
        decode_savepoint(b"not a tar", "s3://x/sp-1")


def test_restore_checks() -> None:
    ours = {"sources": {"events": "files:s3://b/in"}, "sinks": {"counts": "files:s3://b/out"}}
    check_restorable(manifest(job="other-name"), allow_drained=False, **ours)
    with pytest.raises(IncompatibleSavepoint, match="the source 'events' changed"):
        check_restorable(
            manifest(),
            sources={"events": "files:s3://b/other"},
            sinks=ours["sinks"],
            allow_drained=False,
        )
    with pytest.raises(IncompatibleSavepoint, match="this job's sink 'extra' is not in it"):
        check_restorable(
            manifest(),
            sources=ours["sources"],
            sinks={**ours["sinks"], "extra": "x"},
            allow_drained=False,
        )
    with pytest.raises(IncompatibleSavepoint, match="allowDrained: true"):
        check_restorable(manifest(drained=True), allow_drained=False, **ours)
    check_restorable(manifest(drained=True), allow_drained=True, **ours)


def test_real_query_continues_from_a_restored_cut(spark: Any, tmp_path: Path) -> None:
    """A stateful sum over a file stream: stop, cut, restore elsewhere, continue exactly."""
    from pyspark.sql import functions as sf

    source_dir = tmp_path / "in"
    source_dir.mkdir()
    checkpoint = tmp_path / "ckpt"
    schema = "key STRING, n LONG"

    def add_file(index: int, rows: list[tuple[str, int]]) -> None:
        lines = "\n".join(f'{{"key": "{k}", "n": {n}}}' for k, n in rows)
        (source_dir / f"part-{index}.json").write_text(lines + "\n")

    def run_once(location: Path) -> dict[str, int]:
        counts = (
            spark.readStream.schema(schema)
            .json(str(source_dir))
            .groupBy("key")
            .agg(sf.sum("n").alias("total"))
        )
        collected: dict[str, int] = {}

        def keep(batch: Any, batch_id: int) -> None:
            for row in batch.collect():
                collected[row["key"]] = row["total"]

        query = (
            counts.writeStream.outputMode("update")
            .foreachBatch(keep)
            .option("checkpointLocation", str(location))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        return collected

    add_file(0, [("a", 1), ("b", 2)])
    assert run_once(checkpoint) == {"a": 1, "b": 2}
    add_file(1, [("a", 10)])
    assert run_once(checkpoint) == {"a": 11}
    batch = latest_committed_batch(checkpoint)
    assert batch is not None
    restored = tmp_path / "restored"
    unpack_checkpoint(pack_checkpoint(checkpoint, batch), restored)
    add_file(2, [("a", 100), ("c", 5)])
    # The restored copy remembers the sums and the files already read: only file 2 is new.
    assert run_once(restored) == {"a": 111, "c": 5}
