"""Generated clickstream JSON files: the input of the streaming example, and its ground truth.

Each file holds ``rows`` clicks ``{"user", "page", "ts"}`` whose event times advance through the
day, so a windowed count has many windows and the last ones are still open when the input ends.
Files are deterministic per index, so a test can recompute exactly what the job must output.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

START = datetime(2026, 1, 1, tzinfo=UTC)
PAGES = ("home", "search", "product", "cart", "checkout")
SECONDS_PER_FILE = 90


def clicks_of(index: int, rows: int) -> list[dict[str, str]]:
    """The clicks of file ``index``: event times within its 90 seconds, a little out of order."""
    rng = random.Random(index)
    base = START + timedelta(seconds=index * SECONDS_PER_FILE)
    clicks = []
    for _ in range(rows):
        moment = base + timedelta(milliseconds=rng.randrange(SECONDS_PER_FILE * 1000))
        clicks.append(
            {
                "user": f"u{rng.randrange(1000)}",
                "page": rng.choice(PAGES),
                "ts": moment.isoformat().replace("+00:00", "Z"),
            }
        )
    return clicks


def write_file(directory: Path, index: int, rows: int) -> Path:
    """Write file ``index`` atomically (a reader never sees half a file)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"clicks-{index:05d}.json"
    temporary = directory / f".clicks-{index:05d}.json.tmp"
    temporary.write_text("".join(json.dumps(c) + "\n" for c in clicks_of(index, rows)))
    os.replace(temporary, target)
    return target


def existing_files(directory: Path) -> list[int]:
    return sorted(int(p.stem.split("-")[1]) for p in directory.glob("clicks-*.json"))


def window_counts(
    indexes: Iterable[int], rows: int, minutes: int = 1
) -> Counter[tuple[datetime, str]]:
    """Ground truth: clicks per (window start, page) over the given files."""
    counts: Counter[tuple[datetime, str]] = Counter()
    for index in indexes:
        for click in clicks_of(index, rows):
            moment = datetime.fromisoformat(click["ts"].replace("Z", "+00:00"))
            start = moment.replace(second=0, microsecond=0)
            start -= timedelta(minutes=start.minute % minutes)
            counts[start, click["page"]] += 1
    return counts
