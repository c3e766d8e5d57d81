"""The best customers, read from the cluster partition the batch example promoted.

``finishable run examples/batch/promote.yaml`` runs ``aggregate.py --promote``: its ``totals``
stage outlives the job as the cluster partition ``paid-totals-promoted/totals``. This job reads it
(``sources.ClusterPartition``: its parts are the splits, nothing is recomputed) and publishes the
customers with the highest totals: ``finishable run examples/batch/top.yaml``. With ``--input``
instead of ``--partition`` it recomputes the totals from the order files (what a job without
cluster partitions does; ``benchmarks/cluster_partitions.py`` compares the two).
"""

from __future__ import annotations

import argparse

from aggregate import SCHEMA, paid_orders, totals_by_customer  # next to this file
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

from finishable import FinishableJob, sinks, sources


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--partition", help="the totals' cluster partition: id or <job>/<dataset>")
    source.add_argument("--input", help="or recompute the totals from these order files")
    parser.add_argument("--output", required=True, help="where the top customers are published")
    parser.add_argument("--top", type=int, default=10, help="how many customers")
    return parser.parse_args()


def totals(job: FinishableJob, partition: str | None, input_url: str | None) -> DataFrame:
    """Per-customer totals: read from the cluster partition, or computed from the orders."""
    if partition is not None:
        return job.stage("totals", job.read(sources.ClusterPartition(partition), name="totals"))
    orders = job.read(sources.Files(str(input_url), format="json", schema=SCHEMA), name="orders")
    return job.stage("totals", totals_by_customer(job.stage("paid", paid_orders(orders))))


def build(job: FinishableJob, totals: DataFrame, output_url: str, top: int) -> None:
    best = totals.orderBy(F.col("amount_cents").desc(), F.col("customer")).limit(top)
    job.write(best, sinks.TransactionalFiles(output_url, format="json", name="top"))


def main() -> None:
    args = arguments()
    job = FinishableJob.from_env()
    build(job, totals(job, args.partition, args.input), args.output, args.top)
    job.run()


if __name__ == "__main__":
    main()
