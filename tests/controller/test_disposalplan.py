"""Disposing of a deleted snapshot's savepoint, the pure part: decisions, the pod, its outcome."""

from __future__ import annotations

from typing import Any

import pytest

from finishable.api.spec import FinishableSparkJobSpec
from finishable.controller.job import builders
from finishable.controller.snapshot.disposalplan import (
    Action,
    PodOutcome,
    decide,
    disposal_pod,
    disposal_pod_name,
    pod_outcome,
)
from finishable.kube.objects import JobRef

pytestmark = pytest.mark.quick

JOB = JobRef(name="clicks", namespace="analytics", uid="uid-1")
S3 = "s3://bucket/clicks/snapshots/sp-000000000007.blob"
CM = "configmap://analytics/clicks-snapshots.sp-000000000007.blob"


def job(name: str = "clicks", phase: str = "Running", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec, "status": {"phase": phase}}


def spec(**fields: Any) -> FinishableSparkJobSpec:
    return FinishableSparkJobSpec.model_validate(
        {"image": "img:1", "application": {"file": "local:///app/clicks.py"}, **fields}
    )


def test_nothing_to_dispose_of_without_a_location() -> None:
    assert (
        decide(snapshot="s", namespace="analytics", location="", job="clicks", jobs=[job()]).action
        is Action.NOTHING
    )


def test_a_held_savepoint_waits_naming_the_jobs() -> None:
    jobs = [
        job("follower", restoreFrom={"snapshotRef": "s"}),
        job("other", restoreFrom={"savepoint": S3}),
        job("done", phase="Finished", restoreFrom={"savepoint": S3}),
        job(),
    ]
    decision = decide(snapshot="s", namespace="analytics", location=S3, job="clicks", jobs=jobs)
    assert decision.action is Action.WAIT
    assert decision.holders == ["follower", "other"]
    assert "follower, other" in decision.message and "disposeOnDelete" in decision.message


def test_configmaps_are_deleted_by_the_operator_even_when_the_job_is_gone() -> None:
    assert (
        decide(snapshot="s", namespace="analytics", location=CM, job="clicks", jobs=[]).action
        is Action.CONFIGMAPS
    )


def test_object_storage_runs_a_pod_while_the_job_exists_and_is_kept_when_it_is_gone() -> None:
    assert (
        decide(snapshot="s", namespace="analytics", location=S3, job="clicks", jobs=[job()]).action
        is Action.POD
    )
    kept = decide(
        snapshot="s", namespace="analytics", location=S3, job="clicks", jobs=[job("other")]
    )
    assert kept.action is Action.KEEP and S3 in kept.message and "gone" in kept.message


def test_a_location_that_names_no_savepoint_blob_is_kept() -> None:
    for location in (
        "s3://bucket/clicks/data.parquet",
        "configmap:clicks/savepoints/1",
        "configmap://elsewhere/clicks-snapshots.sp-000000000007.blob",
    ):
        decision = decide(
            snapshot="s", namespace="analytics", location=location, job="clicks", jobs=[job()]
        )
        assert decision.action is Action.KEEP, location
        assert location in decision.message


def test_the_pod_name_is_deterministic_and_a_dns_label() -> None:
    assert disposal_pod_name("clicks-savepoint-7-abcdef12") == "clicks-savepoint-7-abcdef12-dispose"
    long = "x" * 60 + "-savepoint-7"
    name = disposal_pod_name(long)
    assert len(name) <= 63 and name.endswith("-dispose") and name == disposal_pod_name(long)
    assert name != disposal_pod_name("x" * 60 + "-savepoint-8")
    dotted = disposal_pod_name("Before.Upgrade")
    assert len(dotted) <= 63 and all(c.isalnum() or c == "-" for c in dotted)


def test_the_pod_runs_the_command_with_the_job_image_and_storage_secret_like_the_driver() -> None:
    job_spec = spec(
        imagePullSecrets=["registry"],
        checkpointing={"storage": {"type": "ObjectStore", "url": "s3://b/p", "secretRef": "s3"}},
        workVolume={"size": "1Gi"},
    )
    pod = disposal_pod(JOB, job_spec, "clicks-savepoint-7-abcdef12", S3)
    driver = builders.driver_pod(JOB, job_spec, 1, "")
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["finishable", "dispose-savepoint", S3]
    assert container["image"] == "img:1"
    assert container["envFrom"] == driver["spec"]["containers"][0]["envFrom"]
    assert container["envFrom"] == [{"secretRef": {"name": "s3"}}]
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["automountServiceAccountToken"] is False
    work = {"name": "finishable-work", "persistentVolumeClaim": {"claimName": "clicks-work"}}
    assert work in pod["spec"]["volumes"] and work in driver["spec"]["volumes"]
    meta = pod["metadata"]
    assert meta["name"] == "clicks-savepoint-7-abcdef12-dispose"
    assert meta["namespace"] == "analytics"
    assert meta["ownerReferences"] == driver["metadata"]["ownerReferences"]
    assert meta["labels"]["finishable.dev/job"] == "clicks"
    assert meta["labels"]["finishable.dev/component"] == "disposer"
    assert meta["annotations"]["finishable.dev/snapshot"] == "clicks-savepoint-7-abcdef12"


def test_the_pod_without_a_secret_has_no_env_from_and_uses_a_named_service_account() -> None:
    pod = disposal_pod(JOB, spec(driver={"serviceAccountName": "s3-writer"}), "s", S3)
    assert "envFrom" not in pod["spec"]["containers"][0]
    assert pod["spec"]["serviceAccountName"] == "s3-writer"
    assert "automountServiceAccountToken" not in pod["spec"]


def test_pod_outcome() -> None:
    assert pod_outcome({"status": {"phase": "Pending"}}) == (PodOutcome.RUNNING, "")
    assert pod_outcome({}) == (PodOutcome.RUNNING, "")
    assert pod_outcome({"status": {"phase": "Succeeded"}}) == (PodOutcome.SUCCEEDED, "")
    terminated = {"exitCode": 1, "reason": "Error", "message": "cannot dispose: denied\n"}
    failed = {
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "disposer", "state": {"terminated": terminated}}],
        }
    }
    assert pod_outcome(failed) == (PodOutcome.FAILED, "cannot dispose: denied")
    del terminated["message"]
    assert pod_outcome(failed) == (PodOutcome.FAILED, "Error (exit code 1)")
    deadline = {"status": {"phase": "Failed", "message": "Pod was active too long"}}
    assert pod_outcome(deadline) == (PodOutcome.FAILED, "Pod was active too long")
