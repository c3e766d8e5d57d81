"""Checkpoint cuts taken while a real stateful query and its state maintenance run, restored.

State maintenance is made to run all the time (every 100 ms, a snapshot after every delta,
two batches retained), so cuts race snapshot writes, renames and deletions as they do in a job
that runs for months. Every cut either restores or is refused as torn; cuts taken while files
changed under them are restored into new directories, and a query continued from each one
ends with sums equal to the ground truth computed from the input files: nothing lost, nothing
counted twice. Both state store providers, RocksDB with changelog checkpointing.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from finishable.driver.streaming.cut import TornCut
from finishable.driver.streaming.savepoints import (
    latest_committed_batch,
    pack_files,
    unpack_checkpoint,
)
from tests.driver.test_cut import cut_bytes
from tests.support.spark import start_session

pytestmark = pytest.mark.full

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
FILES = 120
KEYS = 12


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    session = start_session(
        tmp_path_factory.mktemp("warehouse"),
        {
            "spark.sql.shuffle.partitions": "3",
            "spark.sql.streaming.stateStore.maintenanceInterval": "100ms",
            "spark.sql.streaming.stateStore.minDeltasForSnapshot": "1",
            "spark.sql.streaming.minBatchesToRetain": "2",
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        },
    )
    try:
        yield session
    finally:
        session.stop()


@dataclass
class Cut:
    batch: int
    files: dict[str, bytes]
    raced: bool  # state maintenance wrote a snapshot or deleted files while the cut was read


def write_input(directory: Path, index: int, rng: random.Random, truth: Counter[str]) -> None:
    keys = [f"k{rng.randrange(KEYS)}" for _ in range(20)]
    truth.update(keys)
    text = "".join(json.dumps({"key": key, "n": 1}) + "\n" for key in keys)
    temporary = directory / f".part-{index:04d}.tmp"
    temporary.write_text(text)
    temporary.rename(directory / f"part-{index:04d}.json")  # the file source sees whole files


def listing(root: Path) -> set[str]:
    """The state store's files, without the temporary ones of Hadoop's atomic writes."""
    return {
        os.path.join(directory, name)
        for directory, _, names in os.walk(root / "state")
        for name in names
        if not name.endswith((".tmp", ".tmp.crc"))
    }


def maintained(before: set[str], after: set[str]) -> bool:
    """Files deleted, or a snapshot written: what maintenance does (a batch only adds deltas)."""
    return bool(before - after) or any(n.endswith((".snapshot", ".zip")) for n in after - before)


def sums(spark: Any, source: Path, checkpoint: Path, provider: str) -> Any:
    """The stateful query of this module: running sums per key, files two at a time."""
    from pyspark.sql import functions as sf

    spark.conf.set("spark.sql.streaming.stateStore.providerClass", provider)
    return (
        spark.readStream.schema("key STRING, n LONG")
        .option("maxFilesPerTrigger", 2)
        .json(str(source))
        .groupBy("key")
        .agg(sf.sum("n").alias("total"))
    )


def continue_from(
    spark: Any, cut: Cut, source: Path, target: Path, provider: str
) -> dict[str, int]:
    """Restore ``cut`` into ``target`` and run the query to the end of the input."""
    unpack_checkpoint(pack_files(cut.files), target)
    totals: dict[str, int] = {}

    def keep(batch: Any, _batch_id: int) -> None:
        totals.update({row["key"]: row["total"] for row in batch.collect()})

    query = (
        sums(spark, source, target, provider)
        .writeStream.outputMode("complete")
        .foreachBatch(keep)
        .option("checkpointLocation", str(target))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300), "the restored query did not finish"
    assert query.exception() is None, query.exception()
    return totals


@pytest.mark.parametrize("provider", [HDFS, ROCKSDB], ids=["hdfs", "rocksdb"])
def test_cuts_taken_during_maintenance_restore_exactly(
    spark: Any, tmp_path: Path, provider: str
) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    rng, truth = random.Random(7), Counter[str]()
    write_input(source, 0, rng, truth)
    query = (
        sums(spark, source, checkpoint, provider)
        .writeStream.outputMode("update")
        .format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="0 seconds")
        .start()
    )
    written = threading.Event()

    def writer() -> None:
        for index in range(1, FILES):
            write_input(source, index, rng, truth)
            if written.wait(0.05):
                return
        written.set()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    cuts: list[Cut] = []
    torn = 0
    deadline = time.monotonic() + 600
    try:
        while not written.is_set() or (latest_committed_batch(checkpoint) or 0) < FILES // 2 - 1:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, "the query did not read the input in 10 minutes"
            batch = latest_committed_batch(checkpoint)
            if batch is None:
                time.sleep(0.05)
                continue
            before = listing(checkpoint)
            try:
                files = cut_bytes(checkpoint, batch)
            except TornCut:
                torn += 1
                continue
            cuts.append(Cut(batch, files, maintained(before, listing(checkpoint))))
    finally:
        written.set()
        thread.join(30)
        query.stop()
    state_files = [name for cut in cuts for name in cut.files if name.startswith("state/")]
    snapshots = [name for name in state_files if name.endswith((".snapshot", ".zip"))]
    assert snapshots, "state maintenance never wrote a snapshot: the cuts raced nothing"
    raced = [cut for cut in cuts if cut.raced]
    assert raced, f"no cut of {len(cuts)} (and {torn} torn) was read while Spark changed files"
    chosen = [raced[0], raced[len(raced) // 2], raced[-1]]
    write_input(source, FILES, rng, truth)  # every continued query has a batch to run
    for number, cut in enumerate(chosen):
        totals = continue_from(spark, cut, source, tmp_path / f"restored-{number}", provider)
        assert totals == dict(truth), f"continued from batch {cut.batch}"
