"""What the clickstream example published, and whether it is exactly that of its input files.

Files are read in name order and a drain stops the sources where they are (files that arrive
later stay unread), then fires every window. So a drained job's published counts must be those
of a prefix of the input files, at least as long as what it had read before the drain: nothing
lost, nothing twice.
"""

from __future__ import annotations

import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

from finishable.connectors.sinks import TransactionalFiles
from testcluster.client import ROOT

sys.path.insert(0, str(ROOT / "examples" / "streaming"))
from clicks import existing_files, window_counts

ROWS = 2000  # clickstream.py's default rows per generated file

Counts = Counter[tuple[datetime, str]]


def committed(output: Path) -> Counts:
    """The committed counts per (window start, page); a window published twice fails."""
    sink = TransactionalFiles(str(output), name="counts")
    counts: Counts = Counter()
    for row in sink.read_committed().to_pylist():
        key = (row["window_start"].replace(tzinfo=None), row["page"])
        assert key not in counts, f"window {key} published twice"
        counts[key] = row["count"]
    return counts


def assert_prefix_of_input(output: Counts, input_dir: Path, read_before_drain: int) -> None:
    """``output`` is the counts of the first n input files for some n >= what was read."""
    total = len(existing_files(input_dir))
    lower = max(read_before_drain, 1)
    matches = []
    prefix = _naive(window_counts(range(lower), ROWS))
    for n in range(lower, total + 1):  # the prefixes' counts, file by file
        if prefix == output:
            matches.append(n)
        prefix += _naive(window_counts([n], ROWS))
    assert matches, (
        f"the output ({sum(output.values())} clicks in {len(output)} windows) is not that of "
        f"the first n of the {total} input files for any n >= {read_before_drain}"
    )


def assert_closed_windows_exact(output: Counts, input_dir: Path) -> None:
    """``output`` is every window up to its newest, each counted over all the input: what a job
    stopped without a drain has published when nothing was lost and nothing counted twice (a
    window is published once the watermark passed it, and files are read in event-time order)."""
    assert output, "nothing was published"
    newest = max(start for start, _ in output)
    truth = _naive(window_counts(existing_files(input_dir), ROWS))
    expected = Counter({key: n for key, n in truth.items() if key[0] <= newest})
    wrong = sorted(key for key in expected.keys() | output.keys() if output[key] != expected[key])
    assert not wrong, (
        f"{len(wrong)} windows up to {newest} differ from the input's counts, first "
        f"{wrong[0]}: published {output[wrong[0]]}, counted {expected[wrong[0]]}"
    )


def _naive(counts: Counts) -> Counts:
    return Counter({(start.replace(tzinfo=None), page): n for (start, page), n in counts.items()})
