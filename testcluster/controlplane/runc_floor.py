"""runc as containerd runs it for the real node, with one change: no OOM score below this
machine's own.

The kubelet asks an OOM score adjustment of -998 for every pod sandbox (and lower than its own
for guaranteed pods); lowering a score needs CAP_SYS_RESOURCE, which a machine that is itself a
container may not have, and then runc's child fails with "failed to update
/proc/self/oom_score_adj: Permission denied" and every pod stays ContainerCreating. A real node
has the capability; here the bundle's score is raised to the floor, then runc runs as asked.

usage (containerd's ``BinaryName``, through a two-line script): runc_floor.py RUNC ARGS...
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any


def floored(config: dict[str, Any], floor: int) -> bool:
    """Raise ``config``'s ``process.oomScoreAdj`` to ``floor`` when below it; whether it was."""
    process = config.get("process") or {}
    if process.get("oomScoreAdj", floor) >= floor:
        return False
    process["oomScoreAdj"] = floor
    return True


def bundle_of(args: list[str]) -> Path | None:
    """The ``--bundle`` directory of a runc command line (``create`` and ``run`` have one)."""
    for flag, value in itertools.pairwise(args):
        if flag in ("--bundle", "-b"):
            return Path(value)
    return None


def main(argv: list[str]) -> None:
    runc, args = argv[0], argv[1:]
    bundle = bundle_of(args)
    if bundle is not None and (bundle / "config.json").exists():
        floor = int(Path("/proc/self/oom_score_adj").read_text())
        config = json.loads((bundle / "config.json").read_text())
        if floored(config, floor):
            (bundle / "config.json").write_text(json.dumps(config))
    os.execv(runc, [runc, *args])


if __name__ == "__main__":
    main(sys.argv[1:])
