"""The PySpark program of the multi-query tests: two queries in one job, each over its own source
into its own sink, exactly once.

* ``pages``: clicks (JSON files) counted per (minute window, page);
* ``seeds``: a bounded generated range counted per minute window of its event time.

With ``--bounded`` both inputs are bounded and the job ends through its final checkpoint.

``--mode=shared`` feeds the clicks to both queries and ``--mode=duplicate`` names both queries
alike: programs the runtime must refuse. ``--mode=renamed`` names the second query ``minutes``
(into a sink of its own): a program that no longer has the query ``seeds`` of its savepoint. A
user's program in every respect.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

from finishable import FinishableJob, sinks, sources

SCHEMA = "user STRING, page STRING, ts TIMESTAMP"
SEED_START = datetime(2026, 1, 2, tzinfo=UTC)
SEED_STEP_MS = 10


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--seed-rows", type=int, default=30_000)
    parser.add_argument("--mode", default="two", choices=("two", "shared", "duplicate", "renamed"))
    parser.add_argument("--bounded", action="store_true", help="the clicks end with the listing")
    args = parser.parse_args()

    job = FinishableJob.from_env()
    clicks = job.read_stream(
        sources.Files(
            args.input,
            format="json",
            schema=SCHEMA,
            bounded=args.bounded,
            discovery_interval="0.5s",
            max_splits_per_batch=1,
        ),
        name="clicks",
    ).withWatermark("ts", "1 minute")
    pages = (
        clicks.groupBy(F.window("ts", "1 minute"), "page")
        .count()
        .select(F.col("window.start").alias("window_start"), "page", "count")
    )
    job.write_stream(
        pages, sinks.TransactionalFiles(f"{args.output}/pages", format="parquet", name="pages")
    )

    if args.mode == "shared":
        seeds = clicks.select("ts")
    else:
        seeds = job.read_stream(
            sources.Range(
                0,
                args.seed_rows,
                split_size=1000,
                max_splits_per_batch=1,
                event_time_start=SEED_START,
                event_time_step=f"{SEED_STEP_MS}ms",
            ),
            name="seeds",
        ).withWatermark("ts", "1 minute")
    minutes = (
        seeds.groupBy(F.window("ts", "1 minute"))
        .count()
        .select(F.col("window.start").alias("window_start"), "count")
    )
    sink = "minutes" if args.mode == "renamed" else "seeds"
    job.write_stream(
        minutes,
        sinks.TransactionalFiles(f"{args.output}/{sink}", format="parquet", name=sink),
        name={"duplicate": "pages", "renamed": "minutes"}.get(args.mode, "seeds"),
    )
    job.run()


if __name__ == "__main__":
    main()
