"""The snapshot builder and the snapshotRef resolution: pure, no API."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from finishable.api.models import Phase, RequestAction
from finishable.api.snapshot import FinishableSparkSnapshotStatus, SnapshotTrigger
from finishable.api.status import ControlRequest, SavepointStatus
from finishable.controller.snapshots import (
    SnapshotUnusable,
    restore_location,
    snapshot_name,
    snapshot_object,
    trigger_of,
)
from finishable.kube.objects import JobRef

JOB = JobRef(name="clicks", namespace="jobs", uid="0b5e-uid")
SAVEPOINT = SavepointStatus(
    location="configmap:clicks/savepoints/7",
    request_id="req-1",
    id=7,
    size_bytes=2048,
    time=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def test_the_object_records_the_savepoint_owned_by_the_job() -> None:
    body = snapshot_object(JOB, SAVEPOINT, SnapshotTrigger.STOP, run=1)
    assert (body["apiVersion"], body["kind"]) == (
        "finishable.dev/v1alpha1",
        "FinishableSparkSnapshot",
    )
    meta = body["metadata"]
    assert meta["namespace"] == "jobs"
    assert meta["labels"] == {"finishable.dev/job": "clicks"}
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("FinishableSparkJob", "clicks", JOB.uid)
    assert body["spec"] == {"jobName": "clicks"}
    status = body["status"]
    assert status == {
        "state": "Completed",
        "message": "savepoint completed",
        "location": "configmap:clicks/savepoints/7",
        "kind": "savepoint",
        "trigger": "stop",
        "checkpointId": 7,
        "drained": False,
        "sizeBytes": 2048,
        "jobUid": JOB.uid,
        "run": 1,
        "requestId": "req-1",
        "time": "2026-01-02T03:04:05Z",
    }
    FinishableSparkSnapshotStatus.model_validate(status)  # the wire form parses back


def test_the_name_is_deterministic_and_tells_savepoints_apart() -> None:
    name = snapshot_name(JOB, SAVEPOINT)
    assert name == snapshot_name(JOB, SAVEPOINT)
    assert name.startswith("clicks-savepoint-7-") and DNS_LABEL.match(name)
    other = SAVEPOINT.model_copy(update={"location": "configmap:clicks/savepoints/7b"})
    assert snapshot_name(JOB, other) != name
    recreated = JobRef(name="clicks", namespace="jobs", uid="another-uid")
    assert snapshot_name(recreated, SAVEPOINT) != name
    drained = SAVEPOINT.model_copy(update={"drained": True})
    assert snapshot_name(JOB, drained).startswith("clicks-drain-7-")
    unknown_id = SAVEPOINT.model_copy(update={"id": None})
    assert DNS_LABEL.match(snapshot_name(JOB, unknown_id))


def test_a_long_job_name_is_shortened_to_a_dns_label() -> None:
    job = JobRef(name="a" * 39 + "-b", namespace="jobs", uid="u")
    savepoint = SAVEPOINT.model_copy(update={"id": 10**18})
    name = snapshot_name(job, savepoint)
    assert len(name) <= 63 and DNS_LABEL.match(name)
    assert name.endswith(f"-savepoint-{10**18}-" + name.rsplit("-", 1)[1])


def test_a_drained_savepoint_is_a_drain_snapshot() -> None:
    drained = SAVEPOINT.model_copy(update={"drained": True})
    status = snapshot_object(JOB, drained, SnapshotTrigger.DRAIN)["status"]
    assert (status["kind"], status["drained"], status["trigger"]) == ("drain", True, "drain")


@pytest.mark.parametrize(
    ("action", "drain", "expected"),
    [
        (RequestAction.STOP, False, SnapshotTrigger.STOP),
        (RequestAction.STOP, True, SnapshotTrigger.DRAIN),
        (RequestAction.SAVEPOINT, False, SnapshotTrigger.MANUAL),
    ],
)
def test_the_trigger_is_the_request_the_savepoint_answers(
    action: RequestAction, drain: bool, expected: SnapshotTrigger
) -> None:
    request = ControlRequest(id="req-1", action=action, drain=drain)
    assert trigger_of(SAVEPOINT, request, Phase.RUNNING) is expected


def test_without_its_request_the_trigger_follows_what_the_job_did() -> None:
    other = ControlRequest(id="req-2", action=RequestAction.SAVEPOINT)
    drained = SAVEPOINT.model_copy(update={"drained": True})
    assert trigger_of(drained, None, Phase.FINISHED) is SnapshotTrigger.DRAIN
    assert trigger_of(SAVEPOINT, other, Phase.SUSPENDED) is SnapshotTrigger.STOP
    assert trigger_of(SAVEPOINT, None, Phase.RUNNING) is SnapshotTrigger.MANUAL


def test_restore_location_of_a_completed_snapshot() -> None:
    body = snapshot_object(JOB, SAVEPOINT, SnapshotTrigger.STOP)
    assert restore_location("snap", body) == "configmap:clicks/savepoints/7"


@pytest.mark.parametrize(
    ("snapshot", "words"),
    [
        (None, ["spec.restoreFrom.snapshotRef", "'snap'", "does not exist"]),
        ({"metadata": {}}, ["spec.restoreFrom.snapshotRef", "'snap'", "Pending"]),
        (
            {"status": {"state": "Failed", "message": "disk full"}},
            ["spec.restoreFrom.snapshotRef", "'snap'", "Failed", "not Completed", "disk full"],
        ),
        ({"status": {"state": "InProgress"}}, ["'snap'", "InProgress"]),
        ({"status": {"state": "Bogus"}}, ["'snap'", "cannot be read"]),
        ({"status": {"state": "Completed"}}, ["'snap'", "no location"]),
    ],
)
def test_an_unusable_snapshot_is_refused_naming_field_name_and_state(
    snapshot: dict[str, object] | None, words: list[str]
) -> None:
    with pytest.raises(SnapshotUnusable) as caught:
        restore_location("snap", snapshot)
    for word in words:
        assert word in str(caught.value)
