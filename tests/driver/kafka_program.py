"""The PySpark program of the Kafka job tests: clicks from a Kafka topic (the page in the value,
the event time in the record's timestamp), counted per page and minute, exactly once into parquet
or, with ``--output-topic``, into a Kafka topic (one JSON record per window and page).

It is a user's program in every respect: it only uses ``FinishableJob``, sources and sinks.
"""

from __future__ import annotations

import argparse

from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

from finishable import FinishableJob, sinks, sources


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", help="unused: the clicks are in Kafka")
    parser.add_argument("--output", required=True)
    parser.add_argument("--output-topic", help="write the counts to this Kafka topic instead")
    parser.add_argument("--transaction-timeout-ms", help="the Kafka sink's transaction timeout")
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--bounded", action="store_true", help="read to the offsets of now")
    parser.add_argument("--max-offsets-per-trigger", type=int)
    parser.add_argument("--max-records-per-partition", type=int)
    parser.add_argument("--watermark-delay", default="1 minute")
    args = parser.parse_args()

    job = FinishableJob.from_env()
    clicks = job.read_stream(
        sources.Kafka(
            args.bootstrap_servers,
            topics=args.topic,
            starting_offsets="earliest",
            ending_offsets="latest" if args.bounded else None,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
            max_records_per_partition=args.max_records_per_partition,
            discovery_interval="200ms",
        ),
        name="clicks",
    )
    counts = (
        clicks.select(F.col("value").cast("string").alias("page"), F.col("timestamp").alias("ts"))
        .withWatermark("ts", args.watermark_delay)
        .groupBy(F.window("ts", "1 minute"), "page")
        .count()
        .select(F.col("window.start").alias("window_start"), "page", "count")
    )
    if args.output_topic:
        options = (
            {"kafka.transaction.timeout.ms": args.transaction_timeout_ms}
            if args.transaction_timeout_ms
            else {}
        )
        records = counts.select(
            F.concat_ws("|", F.col("window_start").cast("string"), "page").alias("key"),
            F.to_json(F.struct("window_start", "page", "count")).alias("value"),
        )
        sink = sinks.Kafka(
            args.output_topic, args.bootstrap_servers, options=options, name="counts"
        )
        job.write_stream(records, sink)
    else:
        job.write_stream(
            counts, sinks.TransactionalFiles(args.output, format="parquet", name="counts")
        )
    job.run()


if __name__ == "__main__":
    main()
