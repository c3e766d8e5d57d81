"""Cluster partitions end to end: `finishable run` promotes, a later job reads, delete releases.

The producer is the batch example with ``--promote`` (``examples/batch/promote.yaml``), the
consumer ``examples/batch/top.py``. What they publish is compared with a ground truth pandas
computes from the same generated files; the driver is SIGKILLed in the middle of a promotion.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from finishable.connectors.sinks import TransactionalFiles
from finishable.partitions.catalog import PartitionCatalog, PartitionInUse
from finishable.partitions.manifest import now_utc

pytestmark = pytest.mark.full

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "batch"
sys.path.insert(0, str(EXAMPLE))
from orders import ground_truth  # noqa: E402

FILES, ROWS, TOP = 6, 2000, 7
CLI = (sys.executable, "-m", "finishable.cli")


class Job:
    """A manifest of the examples, pointed at this test's directory, run by `finishable run`."""

    def __init__(self, tmp: Path, example: str, name: str, args: list[str]) -> None:
        self.tmp, self.name, self.state = tmp, name, tmp / "state"
        document = yaml.safe_load((EXAMPLE / example).read_text())
        document["metadata"]["name"] = name
        spec = document["spec"]
        spec["application"]["file"] = str(EXAMPLE / spec["application"]["file"])
        spec["application"]["args"] = args
        spec["application"]["sparkConf"] = {"spark.sql.shuffle.partitions": "3"}
        spec["recovery"] = {"maxAttempts": 3, "eventStore": {"flushInterval": "100ms"}}
        self.manifest = tmp / f"{name}.yaml"
        self.manifest.write_text(yaml.safe_dump(document))
        self.runner: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.runner = subprocess.Popen(
            [*CLI, "run", str(self.manifest), "--state-dir", str(self.state)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )

    def finish(self, expect: int = 0, timeout: float = 600) -> str:
        assert self.runner is not None
        output, _ = self.runner.communicate(timeout=timeout)
        logs = "".join(p.read_text()[-3000:] for p in (self.state / self.name).glob("driver-*.log"))
        assert self.runner.returncode == expect, output + logs
        return output

    def run(self, expect: int = 0) -> str:
        self.start()
        return self.finish(expect)

    def status(self) -> dict[str, Any]:
        return json.loads((self.state / self.name / "status.json").read_text())  # type: ignore[no-any-return]


def partitions(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "partitions", *args, "--state-dir", str(tmp / "state")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def producer(tmp: Path, name: str = "producer") -> Job:
    args = [f"--input={tmp / 'input'}", f"--output={tmp / 'output'}"]
    return Job(
        tmp, "promote.yaml", name, [*args, f"--files={FILES}", f"--rows={ROWS}", "--promote"]
    )


def consumer(tmp: Path, reference: str, name: str = "consumer") -> Job:
    args = [f"--partition={reference}", f"--output={tmp / name}", f"--top={TOP}"]
    return Job(tmp, "top.yaml", name, args)


def expected_top() -> list[dict[str, Any]]:
    truth = ground_truth(FILES, ROWS)
    ranked = sorted(truth.items(), key=lambda item: (-item[1][1], item[0]))[:TOP]
    return [{"customer": c, "orders": o, "amount_cents": a} for c, (o, a) in ranked]


def test_a_promoted_dataset_outlives_its_job_is_read_by_another_and_is_released(
    tmp_path: Path,
) -> None:
    producer_job = producer(tmp_path)
    producer_job.run()
    catalog = PartitionCatalog(str(tmp_path / "state" / "_partitions"))
    [manifest] = catalog.list()
    truth = ground_truth(FILES, ROWS)
    assert (manifest.name, manifest.rows) == ("producer/totals", len(truth))
    assert manifest.expires_at is not None  # the example's ttl: 7d
    rows = [
        row
        for part in manifest.parts
        for row in pq.read_table(catalog.part_url(manifest, part)).to_pylist()
    ]
    assert {r["customer"]: (r["orders"], r["amount_cents"]) for r in rows} == truth
    assert not list((tmp_path / "state").glob("_partitions/*/staged.json"))
    [listed_in_status] = producer_job.status()["clusterPartitions"]
    assert (listed_in_status["id"], listed_in_status["rows"]) == (manifest.id, manifest.rows)

    listed = partitions(tmp_path, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [entry] = json.loads(listed.stdout)["partitions"]
    assert (entry["id"], entry["rows"], entry["bytes"]) == (
        manifest.id,
        manifest.rows,
        manifest.bytes,
    )

    reader = consumer(tmp_path, "producer/totals")
    reader.start()
    lease = tmp_path / "state" / "_partitions" / manifest.id / "readers"
    deadline = time.monotonic() + 600
    while not list(lease.glob("*.json")):  # the consumer resolved the partition: it holds a lease
        assert reader.runner is not None and reader.runner.poll() is None, reader.finish()
        assert time.monotonic() < deadline, "the consumer took no lease"
        time.sleep(0.01)
    with pytest.raises(PartitionInUse, match="being read by"):
        catalog.delete(manifest.id)
    reader.finish()
    assert catalog.readers(manifest.id, now_utc()) == []  # given back at the end
    published = TransactionalFiles(str(tmp_path / "consumer"), name="top").read_committed()
    assert published.to_pylist() == expected_top()

    deleted = partitions(tmp_path, "delete", manifest.id)
    assert deleted.returncode == 0 and manifest.id in deleted.stdout, deleted.stderr
    assert not list((tmp_path / "state" / "_partitions").glob(f"{manifest.id}/*"))  # freed
    gone = partitions(tmp_path, "get", manifest.id)
    assert gone.returncode == 1 and "no cluster partition" in gone.stderr

    # A job that reads a partition that is gone fails at once, naming it, with no restart.
    late = consumer(tmp_path, manifest.id, name="late")
    output = late.run(expect=1)
    status = late.status()
    assert status["phase"] == "Failed" and status.get("attempt", 1) == 1, status
    assert f"no cluster partition {manifest.id!r}" in output + json.dumps(status)


def test_a_driver_killed_during_promotion_promotes_once_with_the_same_rows(
    tmp_path: Path,
) -> None:
    job = producer(tmp_path, name="killed")
    storage = tmp_path / "state" / "_partitions"
    job.start()
    deadline = time.monotonic() + 600
    while not list(storage.glob("*/part-*.parquet")):  # the promotion began
        assert job.runner is not None and job.runner.poll() is None, job.finish()
        assert time.monotonic() < deadline, "no promotion began"
        time.sleep(0.01)
    _attempt, pid = (tmp_path / "state" / "killed" / "driver.pid").read_text().split()
    os.kill(int(pid), signal.SIGKILL)
    job.finish()
    assert job.status()["attempt"] >= 2
    catalog = PartitionCatalog(str(storage))
    [manifest] = catalog.list()
    rows = [
        row
        for part in manifest.parts
        for row in pq.read_table(catalog.part_url(manifest, part)).to_pylist()
    ]
    truth = ground_truth(FILES, ROWS)
    assert len(rows) == len(truth)
    assert {r["customer"]: (r["orders"], r["amount_cents"]) for r in rows} == truth
    assert not list(storage.glob("*/staged.json"))


def test_a_producer_that_fails_after_staging_its_promotion_leaves_no_partition(
    tmp_path: Path,
) -> None:
    job = producer(tmp_path, name="failing")
    document = yaml.safe_load(job.manifest.read_text())
    document["spec"]["recovery"]["maxAttempts"] = 0  # the first failure fails the job
    job.manifest.write_text(yaml.safe_dump(document))
    # The output's first batch cannot be published: a file stands where its directory goes, so
    # the job fails at its final checkpoint, after the promotion was staged, on every attempt.
    blocked = tmp_path / "output" / "totals" / "batch=00000000000000000000"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("in the way")
    output = job.run(expect=1)
    assert job.status()["phase"] == "Failed"
    assert "the failed run promotes nothing: released cp-" in output, output
    storage = tmp_path / "state" / "_partitions"
    assert PartitionCatalog(str(storage)).list() == []
    assert not [path for path in storage.rglob("*") if path.is_file()]
