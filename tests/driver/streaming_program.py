"""The PySpark program of the streaming job tests: windowed counts over JSON files, optionally
unioned with a bounded generated range (``--seed-rows``), exactly once into parquet.

It is a user's program in every respect: it only uses ``FinishableJob``, sources and sinks.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

from finishable import FinishableJob, sinks, sources

SCHEMA = "user STRING, page STRING, ts TIMESTAMP"
SEED_START = datetime(2026, 1, 2, tzinfo=UTC)
"""A day after the clicks: each input has its own watermark and Spark's global watermark is the
minimum, so the seeds' windows wait for the drain and neither input's rows are ever late."""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--format", default="json")
    parser.add_argument("--bounded", action="store_true")
    parser.add_argument("--on-error", default="fail")
    parser.add_argument("--seed-rows", type=int, default=0)
    parser.add_argument("--group-by", default="page", help="the column counted per window")
    args = parser.parse_args()

    job = FinishableJob.from_env()
    clicks = job.read_stream(
        sources.Files(
            args.input,
            format=args.format,
            schema=SCHEMA,
            bounded=args.bounded,
            discovery_interval="0.5s",
            max_splits_per_batch=1,
            on_error=args.on_error,
        ),
        name="clicks",
    )
    clicks = clicks.withWatermark("ts", "1 minute")
    if args.seed_rows:
        seeds = job.read_stream(
            sources.Range(
                0,
                args.seed_rows,
                split_size=500,
                max_splits_per_batch=1,
                event_time_start=SEED_START,
                event_time_step="10ms",
            ),
            name="seeds",
        )
        clicks = clicks.unionByName(
            seeds.withWatermark("ts", "1 minute").select(
                F.concat(F.lit("s"), F.col("value").cast("string")).alias("user"),
                F.lit("seed").alias("page"),
                "ts",
            )
        )
    counts = (
        clicks.groupBy(F.window("ts", "1 minute"), args.group_by)
        .count()
        .select(F.col("window.start").alias("window_start"), args.group_by, "count")
    )
    job.write_stream(counts, sinks.TransactionalFiles(args.output, format="parquet", name="counts"))
    job.run()


if __name__ == "__main__":
    main()
