"""Clicks from a Kafka topic, counted per page and minute, exactly once into another Kafka topic.

The source is ``sources.Kafka``: the topic's partitions cut into splits by its coordinator in the
driver, read ``read_committed``. The sink is ``sinks.Kafka``: each write task writes its rows in a
Kafka transaction, and the micro-batch's commit commits them all once it has recorded them, so a
consumer reading ``read_committed`` sees each window's count once, whatever crashes. A window is
one record: the key ``<window start>|<page>``, the value ``{"window_start", "page", "count"}`` as
JSON.

    python examples/streaming/kafka_producer.py --bootstrap-servers localhost:9092 --topic clicks
    finishable run examples/streaming/kafka.yaml          # runs until stopped:
    finishable stop clickstream-kafka --drain             # every window fires, then Finished

With ``--bounded`` the job reads to the offsets of its start and ends Finished by itself.
"""

from __future__ import annotations

import argparse

from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

from finishable import FinishableJob, sinks, sources


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--output-topic", default="page-counts")
    parser.add_argument("--bounded", action="store_true", help="read to the offsets of the start")
    args = parser.parse_args()

    job = FinishableJob.from_env()
    clicks = job.read_stream(
        sources.Kafka(
            args.bootstrap_servers,
            topics=args.topic,
            starting_offsets="earliest",
            ending_offsets="latest" if args.bounded else None,
        ),
        name="clicks",
    )
    counts = (
        clicks.select(F.col("value").cast("string").alias("page"), F.col("timestamp").alias("ts"))
        .withWatermark("ts", "1 minute")
        .groupBy(F.window("ts", "1 minute"), "page")
        .count()
        .select(F.col("window.start").alias("window_start"), "page", "count")
    )
    records = counts.select(
        F.concat_ws("|", F.col("window_start").cast("string"), "page").alias("key"),
        F.to_json(F.struct("window_start", "page", "count")).alias("value"),
    )
    job.write_stream(records, sinks.Kafka(args.output_topic, args.bootstrap_servers, name="counts"))
    job.run()


if __name__ == "__main__":
    main()
