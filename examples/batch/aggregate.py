"""Paid order totals per customer: a two-stage Batch job that survives a driver crash.

Stage ``paid`` parses the order files and keeps the paid orders; stage ``totals`` aggregates them
by customer; the result is published exactly once into parquet. Both stages live as result
partitions on the shuffle servers, so a new driver attempt re-runs only unfinished tasks and
re-reads no finished input file. Run it with ``finishable run examples/batch/local.yaml``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from orders import write_files  # next to this file: on sys.path as the script's dir
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

from finishable import FinishableJob, sinks, sources

SCHEMA = "order_id STRING, customer STRING, status STRING, amount_cents LONG, note STRING"


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--input", required=True, help="directory (or URL) of orders-*.json")
    parser.add_argument("--output", required=True, help="where the totals are published")
    parser.add_argument("--files", type=int, default=0, help="generate this many files first")
    parser.add_argument("--rows", type=int, default=5000, help="orders per generated file")
    parser.add_argument(
        "--promote",
        action="store_true",
        help="keep the totals as a cluster partition for later jobs (examples/batch/top.py)",
    )
    return parser.parse_args()


def paid_orders(orders: DataFrame) -> DataFrame:
    """Stage one: the paid orders that have an amount (narrow: one reader task, one partition)."""
    paid = orders.where((F.col("status") == "paid") & F.col("amount_cents").isNotNull())
    return paid.select("customer", "amount_cents")


def totals_by_customer(paid: DataFrame) -> DataFrame:
    """Stage two: orders and cents per customer."""
    return paid.groupBy("customer").agg(
        F.count("*").alias("orders"), F.sum("amount_cents").alias("amount_cents")
    )


def build(job: FinishableJob, input_url: str, output_url: str, *, promote: bool = False) -> None:
    """The job graph: read, two stages, the sink; ``promote`` keeps ``totals`` beyond the job."""
    orders = job.read(sources.Files(input_url, format="json", schema=SCHEMA), name="orders")
    paid = job.stage("paid", paid_orders(orders))
    totals = job.stage("totals", totals_by_customer(paid), promote=promote)
    job.write(totals, sinks.TransactionalFiles(output_url, format="parquet", name="totals"))


def main() -> None:
    args = arguments()
    if args.files:
        write_files(Path(args.input), args.files, args.rows)
    job = FinishableJob.from_env()
    build(job, args.input, args.output, promote=args.promote)
    job.run()


if __name__ == "__main__":
    main()
