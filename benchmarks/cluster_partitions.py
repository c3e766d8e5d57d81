"""Cluster partitions: what promoting costs the producer, and what reading one saves a consumer.

Every job is run by ``finishable run`` from the command line, as a user runs it:

1. the batch example (``examples/batch/aggregate.py``) without and with ``--promote``: the
   difference is the copy of the promoted totals into the partition storage (the price of keeping
   a result beyond its job in storage instead of in idle shuffle pods);
2. ``examples/batch/top.py`` twice: reading the totals from the cluster partition, and recomputing
   them from the order files, as a job without cluster partitions must. Both publish the same top
   customers (checked).

Prints one JSON line.

    .venv/bin/python benchmarks/cluster_partitions.py [--files 48] [--rows 20000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "batch"
sys.path.insert(0, str(EXAMPLE))

from orders import write_files  # noqa: E402

from finishable.connectors.sinks import TransactionalFiles  # noqa: E402
from finishable.partitions.catalog import PartitionCatalog  # noqa: E402


def manifest(work: Path, example: str, name: str, program: str, args: list[str]) -> Path:
    document = yaml.safe_load((EXAMPLE / example).read_text())
    document["metadata"]["name"] = name
    application = document["spec"]["application"]
    application["file"] = str(EXAMPLE / program)
    application["args"] = args
    application["sparkConf"] = {"spark.sql.shuffle.partitions": "4"}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def run(work: Path, path: Path) -> float:
    state = work / "state"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "finishable.cli", "run", str(path), "--state-dir", str(state)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{path.name} failed:\n{done.stdout[-3000:]}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=48)
    parser.add_argument("--rows", type=int, default=20000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-cp-"))
    try:
        inputs = work / "input"
        write_files(inputs, args.files, args.rows)
        common = [f"--input={inputs}", f"--output={work / 'totals'}"]
        plain = run(work, manifest(work, "local.yaml", "plain", "aggregate.py", common))
        promoting = manifest(
            work, "promote.yaml", "producer", "aggregate.py", [*common, "--promote"]
        )
        promoted = run(work, promoting)
        [partition] = PartitionCatalog(str(work / "state" / "_partitions")).list()

        outputs = {}
        timings = {}
        for name, source in (
            ("from-partition", f"--partition={partition.id}"),
            ("recomputed", f"--input={inputs}"),
        ):
            output = work / name
            path = manifest(work, "top.yaml", name, "top.py", [source, f"--output={output}"])
            timings[name] = run(work, path)
            outputs[name] = TransactionalFiles(str(output), name="top").read_committed().to_pylist()
        if outputs["from-partition"] != outputs["recomputed"]:
            raise RuntimeError("the consumer read something else than it recomputes")
        input_bytes = sum(f.stat().st_size for f in inputs.iterdir())
        print(
            json.dumps(
                {
                    "benchmark": "cluster_partitions",
                    "files": args.files,
                    "input_bytes": input_bytes,
                    "partition_rows": partition.rows,
                    "partition_bytes": partition.bytes,
                    "partition_parts": len(partition.parts),
                    "producer_s": round(plain, 1),
                    "producer_promoting_s": round(promoted, 1),
                    "promotion_cost_s": round(promoted - plain, 1),
                    "consumer_reading_partition_s": round(timings["from-partition"], 1),
                    "consumer_recomputing_s": round(timings["recomputed"], 1),
                    "read_vs_recompute": round(
                        timings["from-partition"] / timings["recomputed"], 2
                    ),
                }
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
