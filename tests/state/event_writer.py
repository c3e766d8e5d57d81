"""Child process of the SIGKILL test: append events until killed, log every flushed segment.

Usage, from the repository root: ``python -m tests.state.event_writer SPEC SIDE_FILE SIZE``.
Each acknowledged flush appends ``first_seq last_seq`` to SIDE_FILE and fsyncs it before the
next one, so after a SIGKILL the parent knows which events the store had promised were durable.
"""

from __future__ import annotations

import json
import os
import sys
import time

from finishable.state import FlushedSegment, JobEventStore
from tests.state.specs import open_spec


def main() -> None:
    spec = json.loads(sys.argv[1])
    side = open(sys.argv[2], "a", buffering=1)  # noqa: SIM115 - lives until the kill

    def on_flush(segment: FlushedSegment) -> None:
        side.write(f"{segment.first_seq} {segment.last_seq}\n")
        side.flush()
        os.fsync(side.fileno())

    store = JobEventStore(
        open_spec(spec),
        write_buffer_size=int(sys.argv[3]),
        flush_interval=0.05,
        on_flush=on_flush,
    )
    n = store.last_seq + 1
    while True:
        seq = store.append({"type": "Tick", "n": n, "pad": "x" * (n % 64)})
        if seq != n:
            raise SystemExit(f"sequence {seq} != {n}")
        n += 1
        if n % 20 == 0:
            time.sleep(0.001)  # a driver appends between tasks, not in a hot loop


if __name__ == "__main__":
    main()
