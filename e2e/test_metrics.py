"""After the suite: the operator's Prometheus metrics agree with the jobs' status (local cluster
only: elsewhere the metrics endpoint is a Service inside the cluster)."""

from __future__ import annotations

from collections import Counter

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testcluster.client import E2ECluster
from testcluster.localcluster.cluster import ClusterAccess

pytestmark = [pytest.mark.e2e, pytest.mark.after_all, pytest.mark.quick]


def samples(cluster: ClusterAccess | None) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    if cluster is None:
        pytest.skip("the local cluster's operator is scraped directly; elsewhere use Prometheus")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(cluster.metrics())
        for sample in family.samples
    }


def test_the_metrics_agree_with_every_jobs_status(
    local_cluster: ClusterAccess | None, cluster: E2ECluster
) -> None:
    scraped = samples(local_cluster)
    jobs = cluster.api.request("GET", cluster.job_path()).body.get("items") or []
    if not jobs:
        pytest.skip("no job ran in this session: run it with the rest of the e2e suite")
    phases = Counter(job["status"]["phase"] for job in jobs)
    for phase, count in phases.items():
        assert scraped[("finishable_jobs", frozenset({("phase", phase)}))] == count, phase

    def per_job(name: str, job: str) -> float:
        key = frozenset({("namespace", cluster.namespace), ("job_name", job)})
        return scraped.get((name, key), 0.0)

    # A counter holds what this operator process saw (Prometheus counters restart at zero with
    # the process, and increase() knows it); the status holds every restart since the job began.
    # e2e/test_disruptions.py replaces the operator's pod mid-stop, so jobs that recovered before
    # that have more in their status than in the counters: never the other way round.
    for job in jobs:
        name, status = job["metadata"]["name"], job["status"]
        recovery = status.get("recovery") or {}
        for metric, total in (
            ("finishable_driver_restarts_total", status.get("restarts", 0)),
            ("finishable_recovery_tasks_skipped_total", recovery.get("tasksSkipped", 0)),
            ("finishable_recovery_tasks_rerun_total", recovery.get("tasksRerun", 0)),
        ):
            assert per_job(metric, name) <= total, (metric, name)
    drained = [job for job in jobs if (job["status"].get("savepoint") or {}).get("drained")]
    if drained:
        stops = scraped[("finishable_stop_duration_seconds_count", frozenset({("drain", "true")}))]
        assert stops >= len(drained)
