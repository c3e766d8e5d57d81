"""Clicks for the Kafka example (kafka.py): ``--clicks`` page views, in transactions.

Each record's value is the page and its timestamp the click's event time, spread over
``--minutes`` minutes from now; every fourth transaction is aborted, so a ``read_committed``
reader (the job's source is one) never sees its clicks. Prints how many clicks were committed
per page, the ground truth the job's output adds up to.

    python examples/streaming/kafka_producer.py --bootstrap-servers localhost:9092 --topic clicks
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

PAGES = ("home", "search", "product", "cart", "checkout")
TIMEOUT = 60.0


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        try:
            future.result(TIMEOUT)
        except KafkaException as error:
            if "TOPIC_ALREADY_EXISTS" not in str(error):
                raise


def produce(
    bootstrap: str,
    topic: str,
    *,
    clicks: int,
    minutes: float,
    seed: int,
    per_transaction: int = 500,
) -> Counter[str]:
    """Produce the clicks; return the committed ones per page."""
    rng = random.Random(seed)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"example-clicks-{seed}"}
    )
    producer.init_transactions(TIMEOUT)
    start_ms = int(time.time() * 1000)
    committed: Counter[str] = Counter()
    for number, first in enumerate(range(0, clicks, per_transaction)):
        pages = [rng.choice(PAGES) for _ in range(first, min(clicks, first + per_transaction))]
        producer.begin_transaction()
        for page in pages:
            moment = start_ms + rng.randrange(int(minutes * 60_000))
            producer.produce(topic, value=page.encode(), timestamp=moment)
        producer.flush(TIMEOUT)
        if number % 4 == 3:
            producer.abort_transaction(TIMEOUT)
        else:
            producer.commit_transaction(TIMEOUT)
            committed.update(pages)
    return committed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap-servers", default="localhost:9092")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--clicks", type=int, default=20_000)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    ensure_topic(args.bootstrap_servers, args.topic, args.partitions)
    committed = produce(
        args.bootstrap_servers,
        args.topic,
        clicks=args.clicks,
        minutes=args.minutes,
        seed=args.seed,
    )
    print(json.dumps({"committed_clicks_per_page": dict(sorted(committed.items()))}))  # noqa: T201


if __name__ == "__main__":
    main()
