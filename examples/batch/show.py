"""Print the batch example's published totals next to the pandas ground truth."""

from __future__ import annotations

import argparse
import sys

from orders import ground_truth

from finishable import sinks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", default=".finishable/paid-totals/output")
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--rows", type=int, default=5000)
    args = parser.parse_args()
    table = sinks.TransactionalFiles(args.output, name="totals").read_committed()
    published = {row["customer"]: (row["orders"], row["amount_cents"]) for row in table.to_pylist()}
    truth = ground_truth(args.files, args.rows)
    orders = sum(count for count, _ in published.values())
    sys.stdout.write(f"{len(published)} customers, {orders} paid orders published\n")
    if published != truth:
        sys.stderr.write("the output differs from the pandas ground truth\n")
        return 1
    sys.stdout.write("equal to the pandas ground truth\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
