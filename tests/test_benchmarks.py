"""Every benchmark runs to its end on a small input and prints its JSON line (``make test-all``).

The figures themselves are for people (docs/benchmarks.md); these runs keep the scripts working
as the code under them changes, and check what a benchmark reports about correctness (the soak's
clicks lost and duplicated).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.full

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 1800  # a bound on a hang only: each takes a few minutes at these sizes

# The smallest inputs each benchmark runs to its end with: the streaming one waits for three data
# batches before it stops a query, so it needs files for more than that; the batch one kills its
# driver once a warm standby is ready and half the input is read, so it keeps its default input
# (a standby's start takes longer than a small input's first half); the local cluster's kills its
# driver pod half way, after the executor pods' start.
SMALL: dict[str, list[str]] = {
    "event_store": ["--events", "2000"],
    "coordinator": ["--duration", "0.3", "--readers", "1,2"],
    "operator_scale": ["--jobs", "10"],
    "batch": ["--mb", "16", "--rounds", "1", "--larger", "2"],
    "batch_crashes": ["--files", "8", "--rows", "500", "--at", "50"],
    "cluster_partitions": ["--files", "4", "--rows", "500"],
    "streaming": ["--files", "12", "--rows", "500", "--files-per-batch", "2", "--rounds", "1"],
    "soak": ["--minutes", "0.5"],
    "local_cluster": ["--files", "16", "--rows", "2000", "--runtime", "process"],
    "autoscaler": ["--files", "16", "--rows", "2000", "--idle", "5s", "--runtime", "process"],
    "kafka": [
        *("--records", "20000", "--partitions", "2", "--per-trigger", "5000", "--rounds", "1"),
        *("--live-rate", "500", "--live-seconds", "6"),
    ],
}


def run(script: str, args: list[str]) -> list[dict[str, Any]]:
    """The JSON lines ``benchmarks/<script>.py`` printed; its stderr when it failed."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{script}.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"{script} exited {done.returncode}:\n{done.stderr[-4000:]}"
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines, f"{script} printed nothing:\n{done.stderr[-2000:]}"
    return [json.loads(line) for line in lines]


def test_every_benchmark_has_a_small_run() -> None:
    scripts = {path.stem for path in (ROOT / "benchmarks").glob("*.py")} - {"soak_job"}
    assert scripts == set(SMALL)


@pytest.mark.parametrize("script", sorted(SMALL))
def test_a_benchmark_runs_and_prints_json(script: str) -> None:
    results = run(script, SMALL[script])
    assert all(isinstance(result, dict) and result for result in results), results
    if script == "soak":
        (result,) = results
        assert (result["lost"], result["duplicated"]) == (0, 0), result


def test_the_operator_scale_benchmark_runs_on_the_real_api_server_too() -> None:
    """``--server real``: the pinned kube-apiserver with etcd (testcluster/controlplane), its
    requests counted by the server's audit log rather than the emulator's counters."""
    (result,) = run("operator_scale", [*SMALL["operator_scale"], "--server", "real"])
    assert result["server"] == "real" and result["jobs"] == 10, result
    assert result["api_requests_per_job"] > 0, result
