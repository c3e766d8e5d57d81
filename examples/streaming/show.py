"""Print what the clickstream example published: ``python examples/streaming/show.py OUTPUT``."""

from __future__ import annotations

import sys

from finishable.connectors.sinks import TransactionalFiles


def main() -> None:
    output = sys.argv[1] if len(sys.argv) > 1 else ".finishable/clickstream-bounded/output"
    sink = TransactionalFiles(output, format="parquet", name="counts")
    table = sink.read_committed().sort_by([("window_start", "ascending"), ("page", "ascending")])
    batches = sink.committed_batches()
    lines = [f"{table.num_rows} windowed counts, {len(batches)} batches, under {output}/counts"]
    for row in table.slice(0, 5).to_pylist():
        lines.append(f"  {row['window_start']:%Y-%m-%d %H:%M}  {row['page']:<9} {row['count']}")
    if table.num_rows > 5:
        lines.append("  ...")
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
