"""Windowed page-view counts over clickstream JSON files, exactly once into parquet.

Run it with ``finishable run examples/streaming/bounded.yaml`` (a fixed set of files; the job ends
Finished through its final checkpoint) or ``examples/streaming/job.yaml`` (new files keep arriving
until the job is stopped). The program is an ordinary PySpark program plus ``FinishableJob``.
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

from clicks import existing_files, write_file  # next to this file: on sys.path as the script's dir
from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

from finishable import FinishableJob, sinks, sources

SCHEMA = "user STRING, page STRING, ts TIMESTAMP"


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--input", required=True, help="directory (or URL) of clicks-*.json")
    parser.add_argument("--output", required=True, help="where the counts are published")
    parser.add_argument("--files", type=int, default=0, help="generate this many files first")
    parser.add_argument("--rows", type=int, default=2000, help="clicks per generated file")
    parser.add_argument("--files-per-batch", type=int, default=2, help="files per micro-batch")
    parser.add_argument(
        "--keep-generating",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="unbounded input: write one more file every SECONDS until the job ends",
    )
    parser.add_argument(
        "--unbounded",
        action="store_true",
        help="unbounded input written by another process: read new files until the job ends",
    )
    return parser.parse_args()


def generate(directory: Path, files: int, rows: int, every: float, done: threading.Event) -> None:
    """Play the upstream system: the initial files, then (unbounded) one more now and then."""
    index = max(existing_files(directory), default=-1) + 1
    while index < files:
        write_file(directory, index, rows)
        index += 1
    if every > 0:

        def keep_writing() -> None:
            nonlocal index
            while not done.wait(every):
                write_file(directory, index, rows)
                index += 1

        threading.Thread(target=keep_writing, name="click-generator", daemon=True).start()


def main() -> None:
    args = arguments()
    done = threading.Event()
    job = FinishableJob.from_env()
    if not job.checking_upgrade:  # an upgrade check only declares the job: it writes no input
        generate(Path(args.input), args.files, args.rows, args.keep_generating, done)
    clicks = job.read_stream(
        sources.Files(
            args.input,
            format="json",
            schema=SCHEMA,
            bounded=args.keep_generating <= 0 and not args.unbounded,
            discovery_interval="2s",
            max_splits_per_batch=args.files_per_batch,
        ),
        name="clicks",
    )
    counts = (
        clicks.withWatermark("ts", "1 minute")
        .groupBy(F.window("ts", "1 minute"), "page")
        .count()
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "page",
            "count",
        )
    )
    job.write_stream(counts, sinks.TransactionalFiles(args.output, format="parquet", name="counts"))
    try:
        job.run()
    finally:
        done.set()


if __name__ == "__main__":
    main()
