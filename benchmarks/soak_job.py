"""The soak benchmark's job: clicks per (10-minute window, user, page), with a one-hour watermark.

The state holds an hour of event time (some 25,000 keys at the benchmark's rates), and each
micro-batch changes a small part of it: the shape that shows whether a checkpoint costs what
changed or what is stored. A window's counts are published once, when the watermark passes it
(append mode), and the drain at the end fires the rest; the benchmark compares them with a
ground truth computed from the input files.
"""

from __future__ import annotations

import argparse

from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

from finishable import FinishableJob, sinks, sources

SCHEMA = "user STRING, page STRING, ts TIMESTAMP"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--files-per-batch", type=int, default=4)
    args = parser.parse_args()
    job = FinishableJob.from_env()
    clicks = job.read_stream(
        sources.Files(
            args.input,
            format="json",
            schema=SCHEMA,
            bounded=False,
            discovery_interval="1s",
            max_splits_per_batch=args.files_per_batch,
        ),
        name="clicks",
    )
    counts = (
        clicks.withWatermark("ts", "1 hour")
        .groupBy(F.window("ts", "10 minutes"), "user", "page")
        .count()
        .select(F.col("window.start").alias("slot"), "user", "page", "count")
    )
    job.write_stream(counts, sinks.TransactionalFiles(args.output, format="parquet", name="counts"))
    job.run()


if __name__ == "__main__":
    main()
