"""The snapshot builder and the snapshotRef resolution: pure, no API."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from finishable.api.control import departure_request
from finishable.api.models import Phase, RequestAction, SavepointTrigger
from finishable.api.savepointspec import SavepointHistorySpec
from finishable.api.snapshot import FinishableSparkSnapshotStatus
from finishable.api.status import ControlRequest, SavepointStatus
from finishable.controller.snapshot.objects import (
    SnapshotUnusable,
    completed_status,
    holders,
    is_requested,
    restore_location,
    snapshot_name,
    snapshot_object,
    to_trim,
    trigger_of,
)
from finishable.kube.api import KubeApi
from finishable.kube.objects import JobRef
from testcluster.apiserver.emulator import EmulatorServer

pytestmark = pytest.mark.quick

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
    body = snapshot_object(JOB, SAVEPOINT, SavepointTrigger.STOP, run=1)
    assert (body["apiVersion"], body["kind"]) == (
        "finishable.dev/v1alpha1",
        "FinishableSparkSnapshot",
    )
    meta = body["metadata"]
    assert meta["namespace"] == "jobs"
    assert meta["labels"] == {"finishable.dev/job": "clicks"}
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("FinishableSparkJob", "clicks", JOB.uid)
    assert body["spec"] == {"jobName": "clicks", "disposeOnDelete": False}
    assert "finalizers" not in meta
    disposing = snapshot_object(JOB, SAVEPOINT, SavepointTrigger.STOP, dispose_on_delete=True)
    assert disposing["spec"]["disposeOnDelete"] is True
    assert disposing["metadata"]["finalizers"] == ["finishable.dev/cleanup"]  # from the start
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
    status = snapshot_object(JOB, drained, SavepointTrigger.DRAIN)["status"]
    assert (status["kind"], status["drained"], status["trigger"]) == ("drain", True, "drain")


@pytest.mark.parametrize(
    ("action", "drain", "expected"),
    [
        (RequestAction.STOP, False, SavepointTrigger.STOP),
        (RequestAction.STOP, True, SavepointTrigger.DRAIN),
        (RequestAction.SAVEPOINT, False, SavepointTrigger.MANUAL),
    ],
)
def test_the_trigger_is_the_request_the_savepoint_answers(
    action: RequestAction, drain: bool, expected: SavepointTrigger
) -> None:
    request = ControlRequest(id="req-1", action=action, drain=drain)
    assert trigger_of(SAVEPOINT, request, Phase.RUNNING) is expected


@pytest.mark.parametrize("trigger", [SavepointTrigger.PERIODIC, SavepointTrigger.UPGRADE])
def test_a_request_that_says_why_it_was_sent_names_the_trigger(trigger: SavepointTrigger) -> None:
    action = RequestAction.STOP if trigger is SavepointTrigger.UPGRADE else RequestAction.SAVEPOINT
    request = ControlRequest(id="req-1", action=action, trigger=trigger)
    assert trigger_of(SAVEPOINT, request, Phase.RUNNING) is trigger


def test_without_its_request_the_trigger_follows_what_the_job_did() -> None:
    other = ControlRequest(id="req-2", action=RequestAction.SAVEPOINT)
    drained = SAVEPOINT.model_copy(update={"drained": True})
    assert trigger_of(drained, None, Phase.FINISHED) is SavepointTrigger.DRAIN
    assert trigger_of(SAVEPOINT, other, Phase.SUSPENDED) is SavepointTrigger.STOP
    assert trigger_of(SAVEPOINT, None, Phase.RUNNING) is SavepointTrigger.MANUAL


def test_a_departure_savepoint_is_named_so_whatever_the_job_does_next() -> None:
    """No one asked for it and the job moves on at once (Recovering, then Running)."""
    request = departure_request(3, datetime(2026, 1, 1, tzinfo=UTC))
    left = SAVEPOINT.model_copy(update={"request_id": request.id})
    for phase in (Phase.RECOVERING, Phase.RUNNING, Phase.SUSPENDED):
        assert trigger_of(left, None, phase) is SavepointTrigger.DEPARTURE


def test_restore_location_of_a_completed_snapshot() -> None:
    body = snapshot_object(JOB, SAVEPOINT, SavepointTrigger.STOP)
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


# -- against the API emulator, as strict as a real API server -------------------------------------

CHART_CRDS = Path(__file__).resolve().parents[2] / "charts" / "finishable-spark-operator" / "crds"


def test_the_chart_crds_serve_the_snapshot_as_built_and_refuse_a_bad_one() -> None:
    """The chart's crds/ (what helm installs) with schema validation on: the builder's object
    and its status are stored as built, field for field; an unknown state is refused."""
    with EmulatorServer(validate_schemas=True) as server:
        api = KubeApi.for_url(server.url, namespace="jobs", user_agent="tests")
        crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        for path in sorted(CHART_CRDS.glob("*.yaml")):
            assert api.request("POST", crds, body=yaml.safe_load(path.read_text())).status == 201
        assert api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "jobs"}})
        jobs = api.path("finishablesparkjobs", api_version="finishable.dev/v1alpha1")
        manifest = {
            "apiVersion": "finishable.dev/v1alpha1",
            "kind": "FinishableSparkJob",
            "metadata": {"name": "clicks"},
            "spec": {"application": {"file": "job.py"}, "restoreFrom": {"snapshotRef": "x"}},
        }
        created = api.request("POST", jobs, body=manifest, query={"fieldValidation": "Strict"})
        assert created.status == 201, created.body
        job = JobRef(name="clicks", namespace="jobs", uid=created.body["metadata"]["uid"])
        body = snapshot_object(job, SAVEPOINT, SavepointTrigger.STOP, run=1)
        name = body["metadata"]["name"]
        snaps = api.path("finishablesparksnapshots", api_version="finishable.dev/v1alpha1")
        answer = api.request("POST", snaps, body=body, query={"fieldValidation": "Strict"})
        assert answer.status == 201, answer.body
        assert "status" not in answer.body, "the status subresource: status is not created"
        status_path = api.path(
            "finishablesparksnapshots",
            name,
            api_version="finishable.dev/v1alpha1",
            subresource="status",
        )
        patched = api.request(
            "PATCH",
            status_path,
            body={"status": body["status"]},
            content_type="application/merge-patch+json",
            query={"fieldValidation": "Strict"},
        )
        assert patched.status == 200, patched.body
        assert patched.body["status"] == body["status"]
        assert patched.body["spec"] == body["spec"]
        bad = api.request(
            "PATCH",
            status_path,
            body={"status": {"state": "Done"}},
            content_type="application/merge-patch+json",
        )
        assert bad.status == 422 and "status.state" in str(bad.body), bad.body


def test_a_request_is_a_snapshot_made_by_hand_that_is_not_done() -> None:
    def body(status: dict[str, object] | None = None, **meta: object) -> dict[str, object]:
        return {"metadata": meta, "spec": {"jobName": "clicks"}, "status": status or {}}

    assert is_requested(body())
    assert is_requested(body({"state": "InProgress"}))
    assert not is_requested(body({"state": "Completed"}))
    assert not is_requested(body({"state": "Failed"}))
    assert not is_requested(body(ownerReferences=[{"uid": "u"}])), "the operator made it"
    assert not is_requested({"metadata": {}, "spec": {}}), "no job named"


def test_a_request_is_filled_in_as_a_manual_completed_snapshot() -> None:
    status = completed_status(JOB, SAVEPOINT, run=2, trigger_nonce=4)
    assert (status["state"], status["trigger"]) == ("Completed", "manual")
    assert status["triggerNonce"] == 4
    assert (status["location"], status["checkpointId"], status["run"]) == (SAVEPOINT.location, 7, 2)


def _job(name: str, phase: str = "Running", **parts: object) -> dict[str, object]:
    spec = {"restoreFrom": parts["restore"]} if "restore" in parts else {}
    status: dict[str, object] = {"phase": phase}
    if "restored" in parts:
        status["restoreFrom"] = parts["restored"]
    if "newest" in parts:
        status["savepoint"] = {"location": parts["newest"]}
    return {"metadata": {"name": name}, "spec": spec, "status": status}


def test_a_savepoint_is_held_by_every_job_that_may_still_start_from_it() -> None:
    here = "s3://b/jobs/snapshots/sp-000000000007.blob"
    jobs = [
        _job("by-location", "Pending", restore={"savepoint": here}),
        _job("by-name", "Failed", restore={"snapshotRef": "clicks-savepoint-7-abc"}),
        _job("its-run-started-from-it", restored=here),
        _job("suspended-on-it", "Suspended", newest=here),
        _job("finished", "Finished", restore={"savepoint": here}, newest=here),
        _job("another-savepoint", newest="s3://b/jobs/snapshots/sp-000000000008.blob"),
        _job("no-status-yet", restore={"savepoint": "s3://b/elsewhere/sp-000000000007.blob"}),
    ]
    assert holders(jobs, "clicks-savepoint-7-abc", here) == [
        "by-location",
        "by-name",
        "its-run-started-from-it",
        "suspended-on-it",
    ]
    assert holders(jobs, "", "s3://b/unrelated") == []


NOW = datetime(2026, 6, 1, tzinfo=UTC)


def _snapshot(
    name: str,
    hours_ago: float,
    trigger: str = "periodic",
    *,
    uid: str = JOB.uid,
    drained: bool = False,
    state: str = "Completed",
) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "status": {
            "state": state,
            "trigger": trigger,
            "jobUid": uid,
            "drained": drained,
            "location": f"s3://b/clicks/snapshots/sp-{name}.blob",
            "time": (NOW - timedelta(hours=hours_ago)).isoformat(),
        },
    }


def _history(**limits: object) -> SavepointHistorySpec:
    return SavepointHistorySpec.model_validate(limits)


def test_the_history_keeps_the_newest_automatic_snapshots_up_to_the_count() -> None:
    taken = [_snapshot(f"p{i}", hours_ago=10 - i) for i in range(6)]  # p5 newest
    assert to_trim(JOB, taken, [], _history(maxCount=2), NOW) == ["p0", "p1", "p2", "p3"]
    assert to_trim(JOB, taken, [], _history(), NOW) == []  # no limit set: nothing goes
    assert to_trim(JOB, taken, [], _history(maxCount=9), NOW) == []


def test_the_history_lets_automatic_snapshots_go_once_older_than_the_age() -> None:
    taken = [_snapshot("day-old", 25), _snapshot("hour-old", 1), _snapshot("stop", 30, "stop")]
    assert to_trim(JOB, taken, [], _history(maxAge="1d"), NOW) == ["stop", "day-old"]


def test_manual_snapshots_and_other_jobs_snapshots_are_never_trimmed() -> None:
    taken = [
        _snapshot("manual", 50, "manual"),
        _snapshot("earlier-job-of-that-name", 40, uid="old-uid"),
        _snapshot("failed", 30, state="Failed"),
        _snapshot("kept", 1),
        _snapshot("old", 20),
    ]
    assert to_trim(JOB, taken, [], _history(maxCount=1, maxAge="2h"), NOW) == ["old"]


def test_the_newest_resumable_snapshot_stays_whatever_its_age_and_a_held_one_too() -> None:
    taken = [
        _snapshot("drained", 1, "drain", drained=True),
        _snapshot("resumable", 48, "stop"),
        _snapshot("restored-by-another-job", 72),
        _snapshot("oldest", 96),
    ]
    other = _job("staging-copy", "Running", restore={"snapshotRef": "restored-by-another-job"})
    trimmed = to_trim(JOB, taken, [other], _history(maxCount=1, maxAge="30m"), NOW)
    assert trimmed == ["oldest", "drained"]
