"""Generated order files: the input of the batch example, and its ground truth.

Each file holds ``rows`` orders ``{"order_id", "customer", "status", "amount_cents", "note"}``;
about one order in a hundred has no amount (the job's first stage drops those). Files are
deterministic per index, so tests recompute exactly what the job must output, with pandas.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

STATUSES = ("paid", "paid", "paid", "refunded", "pending")
CUSTOMERS = 500


def orders_of(index: int, rows: int) -> list[str]:
    """The lines of file ``index`` (JSON Lines)."""
    rng = random.Random(index)
    lines = []
    for number in range(rows):
        order = {
            "order_id": f"{index}-{number}",
            "customer": f"c{rng.randrange(CUSTOMERS):04d}",
            "status": rng.choice(STATUSES),
            "amount_cents": None if rng.random() < 0.01 else rng.randrange(100, 50_000),
            "note": "x" * rng.randrange(0, 40),
        }
        lines.append(json.dumps(order))
    return lines


def write_files(directory: Path, files: int, rows: int) -> list[Path]:
    """Write the files that are missing, each atomically (a reader never sees half a file)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(files):
        target = directory / f"orders-{index:05d}.json"
        if not target.exists():
            temporary = directory / f".orders-{index:05d}.json.tmp"
            temporary.write_text("\n".join(orders_of(index, rows)) + "\n")
            os.replace(temporary, target)
        paths.append(target)
    return paths


def ground_truth(files: int, rows: int) -> dict[str, tuple[int, int]]:
    """customer -> (paid orders, paid cents), computed with pandas, independently of Spark."""
    import pandas as pd  # noqa: PLC0415 - tests and show.py only

    records = [json.loads(line) for index in range(files) for line in orders_of(index, rows)]
    frame = pd.DataFrame.from_records(records)
    paid = frame[(frame["status"] == "paid") & frame["amount_cents"].notna()]
    grouped = paid.groupby("customer")["amount_cents"].agg(["count", "sum"])
    return {str(c): (int(r["count"]), int(r["sum"])) for c, r in grouped.iterrows()}
