"""The local cluster's pure parts: container paths and StatefulSet children."""

from __future__ import annotations

from typing import Any

from e2e.localcluster.paths import PathMap
from e2e.localcluster.statefulsets import orphaned, stateful_claim, stateful_pod

PATHS = PathMap({"/data": "/h/data", "/tmp/finishable": "/h/work", "/opt/app/": "/repo/app"})


def test_paths_are_rewritten_at_path_boundaries_only() -> None:
    cases = {
        "--input=/data/orders": "--input=/h/data/orders",
        "/data": "/h/data",
        '{"work_dir": "/tmp/finishable/work"}': '{"work_dir": "/h/work/work"}',
        "local:///opt/app/main.py": "local:///repo/app/main.py",
        "file:///data/x": "file:///h/data/x",
        "a:/data/b": "a:/h/data/b",
        "/database": "/database",
        "/tmp/finishable2": "/tmp/finishable2",
        "http://host/data": "http://host/data",
        "s3://bucket/data/x": "s3://bucket/data/x",
    }
    assert {text: PATHS.translate(text) for text in cases} == cases
    assert str(PATHS.host_path("/data/in")) == "/h/data/in"
    assert str(PATHS.host_path("/elsewhere")) == "/elsewhere"


def stateful_set(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "job-shuffle", "namespace": "ns", "uid": "sts-1"},
        "spec": {
            "replicas": 2,
            "serviceName": "job-shuffle-headless",
            "template": {
                "metadata": {"labels": {"app": "shuffle"}},
                "spec": {"containers": [{"name": "shuffle", "image": "i"}]},
            },
            "volumeClaimTemplates": [
                {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
            ],
            **spec,
        },
    }


def test_stateful_pods_have_stable_names_dns_and_their_own_claims() -> None:
    sts = stateful_set(persistentVolumeClaimRetentionPolicy={"whenDeleted": "Delete"})
    pod = stateful_pod(sts, 1)
    assert pod["metadata"]["name"] == "job-shuffle-1"
    assert pod["metadata"]["labels"] == {
        "app": "shuffle",
        "statefulset.kubernetes.io/pod-name": "job-shuffle-1",
    }
    assert pod["spec"]["hostname"] == "job-shuffle-1"
    assert pod["spec"]["subdomain"] == "job-shuffle-headless"
    assert pod["spec"]["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-job-shuffle-1"}}
    ]
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "sts-1"
    claim = stateful_claim(sts, sts["spec"]["volumeClaimTemplates"][0], 1)
    assert claim["metadata"]["name"] == "data-job-shuffle-1"
    assert claim["metadata"]["ownerReferences"][0]["uid"] == "sts-1"
    retained = stateful_claim(stateful_set(), sts["spec"]["volumeClaimTemplates"][0], 0)
    assert "ownerReferences" not in retained["metadata"]  # whenDeleted: Retain (the default)
    assert "volumes" not in sts["spec"]["template"]["spec"], "the template is not changed"


def test_only_dependents_of_deleted_stateful_sets_are_orphans() -> None:
    pod = stateful_pod(stateful_set(), 0)
    assert orphaned(pod, set())
    assert not orphaned(pod, {"sts-1"})
    assert not orphaned({"metadata": {"name": "bare"}}, set())
