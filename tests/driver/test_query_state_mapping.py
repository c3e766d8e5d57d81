"""A savepoint of a job of two queries, restored by a program that renamed one of them.

As Flink maps operator state: the restore is refused, naming the query whose state would be
lost, unless ``spec.restoreFrom.allowNonRestoredState`` drops it. Then the query kept goes on
exactly where the savepoint left it (its sink holds the pandas ground truth, nothing published
twice) and the renamed query starts from nothing (its own sink holds all of its input's counts),
while the dropped query's sink keeps what it had published.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.driver.test_multi_query_job import (
    QUERIES,
    checkpointed,
    cleanup,
    multi_query_job,
    published_pages,
    published_seeds,
    seed_truth,
)
from tests.driver.test_streaming_job import Job, ground_truth, write_clicks

pytestmark = pytest.mark.full

__all__ = ["cleanup"]  # the fixture, used by name

SEED_ROWS = 12_000  # two minute windows of the generated range, 12 splits
SEED_SPLITS = SEED_ROWS // 1000


def renamed_program(tmp: Path, name: str, savepoint: str, **restore: Any) -> Job:
    """The program with its query ``seeds`` renamed ``minutes``, restored from ``savepoint``."""
    job = multi_query_job(tmp, name, "--mode=renamed", f"--seed-rows={SEED_ROWS}")
    document = yaml.safe_load(job.manifest.read_text())
    document["spec"]["restoreFrom"] = {"savepoint": savepoint, **restore}
    job.manifest.write_text(yaml.safe_dump(document))
    return job


def test_a_renamed_query_is_refused_unless_its_state_is_dropped_by_allow_non_restored_state(
    tmp_path: Path, cleanup: list[Job]
) -> None:
    origin = multi_query_job(tmp_path, "origin", f"--seed-rows={SEED_ROWS}")
    cleanup.append(origin)
    for index in range(3):
        write_clicks(origin.input, index)
    origin.run()
    origin.wait(
        "both queries checkpointed", lambda _: all(checkpointed(origin, q) for q in QUERIES)
    )
    stopped = origin.cli("stop", "--timeout", "180")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr + origin.driver_logs()
    assert "Suspended" in origin.finish()
    location = origin.status()["savepoint"]["location"]
    pages_before = published_pages(origin.output)
    seeds_before = published_seeds(origin.output)

    # Without the flag: refused before any query starts, naming the query and the way out.
    refused = renamed_program(tmp_path, "refused", location)
    cleanup.append(refused)
    refused.run()
    assert refused.runner is not None
    output, _ = refused.runner.communicate(timeout=600)
    status = refused.status()
    assert refused.runner.returncode == 1, output
    assert (status["phase"], status["attempt"]) == ("Failed", 1), status
    assert "its query 'seeds' is not in this job" in status["message"], status
    assert "spec.restoreFrom.allowNonRestoredState: true" in status["message"], status
    assert published_pages(refused.output) == pages_before, "a refused restore publishes nothing"

    # With it: 'pages' resumes from its part of the savepoint, 'minutes' starts from nothing.
    allowed = renamed_program(tmp_path, "allowed", location, allowNonRestoredState=True)
    cleanup.append(allowed)
    for index in range(3, 5):
        write_clicks(allowed.input, index)
    allowed.run()
    allowed.wait_read(5 + SEED_SPLITS)
    drained = allowed.cli("stop", "--drain", "--timeout", "180")
    assert drained.returncode == 0, drained.stdout + drained.stderr + allowed.driver_logs()
    allowed.finish()
    assert allowed.status()["phase"] == "Finished"
    assert published_pages(allowed.output) == Counter(ground_truth(allowed.input))
    assert published_seeds(allowed.output, "minutes") == seed_truth(SEED_ROWS)
    assert published_seeds(allowed.output) == seeds_before, "the dropped query's sink is kept"
