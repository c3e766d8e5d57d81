"""The real operator against the API emulator, with the test playing kubelet and driver."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from finishable.api.control import DriverState
from finishable.api.jobconfig import JobConfig
from finishable.api.status import CheckpointStatus, SavepointStatus
from testcluster.apiserver.emulator import CALLS_PATH, REFUSALS_PATH, EmulatorServer
from testcluster.chart.rbac import OPERATOR_CLIENTS
from tests.controller.cluster import JOBS, MERGE, Cluster, OperatorProcess, install, wait_for

TOKEN = "operator-tests"
NAMESPACE = "jobs"

pytestmark = pytest.mark.quick


@pytest.fixture(scope="module")
def server() -> Iterator[EmulatorServer]:
    with EmulatorServer(required_token=TOKEN) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def cluster(server: EmulatorServer) -> Cluster:
    cluster = Cluster(server.url, TOKEN, NAMESPACE)
    install(cluster.api, [NAMESPACE])
    return cluster


@pytest.fixture(scope="module")
def operator(
    server: EmulatorServer, cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    process = OperatorProcess(tmp_path_factory.mktemp("operator"), server.url, TOKEN, [NAMESPACE])
    process.start()
    yield process
    process.stop()


@pytest.fixture
def k8s(cluster: Cluster, operator: OperatorProcess) -> Cluster:
    """The cluster, with the operator running (restarted if a test killed it)."""
    if operator.process is None or operator.process.poll() is not None:
        operator.start()
    return cluster


STREAMING = {"application": {"file": "local:///app/job.py", "args": ["--fast"]}}


def batch(**fields: object) -> dict[str, object]:
    return {"mode": "Batch", "application": {"file": "local:///app/batch.py"}, **fields}


def test_create_submits_the_driver_with_its_children_then_runs(k8s: Cluster) -> None:
    k8s.create_job("clicks", STREAMING)
    status = k8s.wait_phase("clicks", "Submitted")
    assert status["attempt"] == 1 and status["observedGeneration"] == 1
    job = k8s.job("clicks")
    assert job is not None
    owner = job["metadata"]["uid"]
    children = [
        ("pods", "clicks-driver-1"),
        ("services", "clicks-driver"),
        ("configmaps", "clicks-config"),
        ("configmaps", "clicks-control"),
        ("configmaps", "clicks-state"),
        ("secrets", "clicks-token"),
        ("serviceaccounts", "clicks-driver"),
    ]
    for plural, name in children:  # the status is stored first, then the decision is acted on
        child = wait_for(lambda p=plural, n=name: k8s.get(p, n), f"{plural}/{name} is created")
        assert [ref["uid"] for ref in child["metadata"]["ownerReferences"]] == [owner]
        assert child["metadata"]["labels"]["finishable.dev/job"] == "clicks"
    for plural in ("roles", "rolebindings"):
        assert k8s.get(plural, "clicks-driver", "rbac.authorization.k8s.io/v1") is not None
    pod = k8s.get("pods", "clicks-driver-1")
    assert pod is not None
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["FINISHABLE_ATTEMPT"] == "1" and env["FINISHABLE_RESTORE_FROM"] == ""
    assert pod["metadata"]["labels"]["finishable.dev/component"] == "driver"
    assert k8s.condition("clicks", "Ready")["status"] == "False"
    # the kubelet starts it, the driver reports: Running
    k8s.set_pod_phase("clicks-driver-1", "Running")
    k8s.report("clicks", 1, DriverState.RUNNING, last_checkpoint=CheckpointStatus(id=4))
    status = k8s.wait_phase("clicks", "Running")
    assert status["lastCheckpoint"]["id"] == 4
    assert k8s.condition("clicks", "Ready")["status"] == "True"

    def phase_changes() -> list[str] | None:
        messages = [e["message"] for e in k8s.events("clicks") if e["reason"] == "PhaseChanged"]
        return messages if len(messages) >= 2 else None

    changes = wait_for(phase_changes, "an Event per phase change")
    assert any(message.startswith("Pending -> Submitted") for message in changes)
    assert any(message.startswith("Submitted -> Running") for message in changes)


def test_suspend_records_the_savepoint_removes_the_driver_and_resume_restores(
    k8s: Cluster,
) -> None:
    k8s.start_running("sessions", STREAMING)
    executor = {  # what Spark creates for the driver
        "metadata": {
            "name": "sessions-exec-1",
            "labels": {
                "finishable.dev/job": "sessions",
                "finishable.dev/component": "executor",
                "finishable.dev/attempt": "1",
            },
        },
        "spec": {"containers": []},
    }
    k8s.create("pods", executor)
    k8s.edit("sessions", state="Suspended")
    k8s.wait_phase("sessions", "Savepointing")
    request = k8s.request_for("sessions", 1)
    assert (request.action.value, request.drain) == ("stop", False)
    savepoint = SavepointStatus(location="configmap:sessions/savepoints/1", request_id=request.id)
    k8s.answer("sessions", 1, request, DriverState.SUSPENDED, savepoint=savepoint)
    k8s.set_pod_phase("sessions-driver-1", "Succeeded", missing_ok=True)
    status = k8s.wait_phase("sessions", "Suspended")
    assert status["savepoint"]["location"] == "configmap:sessions/savepoints/1"
    assert "pendingRequest" not in status
    wait_for(lambda: k8s.get("pods", "sessions-driver-1") is None, "the driver pod is deleted")
    wait_for(lambda: k8s.get("pods", "sessions-exec-1") is None, "and its executors")
    # resume: a new attempt from the savepoint
    k8s.edit("sessions", state="Running")
    status = k8s.wait_phase("sessions", "Submitted")
    assert status["attempt"] == 2
    pod = wait_for(lambda: k8s.get("pods", "sessions-driver-2"), "attempt 2's driver")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["FINISHABLE_RESTORE_FROM"] == "configmap:sessions/savepoints/1"
    assert env["FINISHABLE_ATTEMPT"] == "2"


def test_drain_finishes_the_job(k8s: Cluster) -> None:
    k8s.start_running("windows", STREAMING)
    k8s.edit("windows", state="Finished")
    k8s.wait_phase("windows", "Draining")
    request = k8s.request_for("windows", 1)
    assert (request.action.value, request.drain) == ("stop", True)
    drained = SavepointStatus(location="configmap:windows/final", drained=True)
    k8s.answer("windows", 1, request, DriverState.FINISHED, savepoint=drained)
    status = k8s.wait_phase("windows", "Finished")
    assert status["savepoint"]["drained"] is True
    # an illegal change afterwards is refused with a condition and an Event; nothing is done
    k8s.edit("windows", state="Running")
    degraded = wait_for(
        lambda: (c := k8s.condition("windows", "Degraded")).get("status") == "True" and c,
        "Degraded=True for the refused change",
    )
    assert degraded["reason"] == "IllegalStateChange"
    assert "Finished and cannot become Running" in degraded["message"]
    wait_for(lambda: "IllegalStateChange" in k8s.event_reasons("windows"), "an Event naming it")
    status = k8s.status("windows")
    assert (status["phase"], status["attempt"]) == ("Finished", 1)
    assert k8s.get("pods", "windows-driver-2") is None


def test_savepoint_nonce_takes_a_savepoint_without_stopping(k8s: Cluster) -> None:
    k8s.start_running("nonce", STREAMING)
    k8s.edit("nonce", savepointTriggerNonce=1)
    request = k8s.request_for("nonce", 1)
    assert request.action.value == "savepoint"
    k8s.answer(
        "nonce", 1, request, DriverState.RUNNING, savepoint=SavepointStatus(location="sp-nonce")
    )
    wait_for(
        lambda: k8s.status("nonce").get("savepoint", {}).get("location") == "sp-nonce",
        "the savepoint is recorded",
    )
    status = k8s.status("nonce")
    assert status["phase"] == "Running" and status["savepointTriggerNonce"] == 1
    wait_for(lambda: "SavepointCompleted" in k8s.event_reasons("nonce"), "SavepointCompleted")


def driver_env(k8s: Cluster, pod_name: str) -> dict[str, str | None]:
    pod = wait_for(lambda: k8s.get("pods", pod_name), f"the driver pod {pod_name}")
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def test_an_upgrade_stops_with_a_savepoint_and_starts_the_new_program_from_it(
    k8s: Cluster,
) -> None:
    k8s.start_running("upgraded", STREAMING)
    old_pod = k8s.get("pods", "upgraded-driver-1")
    assert old_pod is not None
    k8s.edit("upgraded", application={"args": ["--fast", "--window=2m"]})
    check = wait_for(lambda: k8s.get("pods", "upgraded-check-2"), "the upgrade check pod")
    assert check["metadata"]["labels"]["finishable.dev/component"] == "upgrade-check"
    container = check["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FINISHABLE_PREFLIGHT"] == "1" and env["FINISHABLE_ATTEMPT"] == "1"
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    config = next(v for v in check["spec"]["volumes"] if v["name"] == "config")
    assert config["configMap"]["name"] == "upgraded-check-2"
    assert "--window=2m" in json.dumps(k8s.get("configmaps", "upgraded-check-2"))
    assert "--window=2m" not in json.dumps(k8s.get("configmaps", "upgraded-config"))
    assert k8s.status("upgraded")["phase"] == "Running", "the job runs while it is checked"
    assert k8s.channel("upgraded").read_request(1) is None
    k8s.set_pod_phase("upgraded-check-2", "Succeeded", 0)
    k8s.wait_phase("upgraded", "Savepointing")
    wait_for(lambda: k8s.get("pods", "upgraded-check-2") is None, "the passed check's pod goes")
    request = k8s.request_for("upgraded", 1)
    assert (request.action.value, request.drain) == ("stop", False)
    savepoint = SavepointStatus(location="configmap:upgraded/savepoints/1", request_id=request.id)
    k8s.answer("upgraded", 1, request, DriverState.SUSPENDED, savepoint=savepoint)
    k8s.set_pod_phase("upgraded-driver-1", "Succeeded", missing_ok=True)
    status = k8s.wait_phase("upgraded", "Submitted")
    assert status["attempt"] == 2 and status["restarts"] == 0
    env = driver_env(k8s, "upgraded-driver-2")
    assert env["FINISHABLE_RESTORE_FROM"] == "configmap:upgraded/savepoints/1"
    new_pod = k8s.get("pods", "upgraded-driver-2")
    assert new_pod is not None
    assert new_pod["spec"]["containers"][0] != old_pod["spec"]["containers"][0]
    assert "--window=2m" in json.dumps(new_pod["spec"]) + json.dumps(
        k8s.get("configmaps", "upgraded-config")
    )
    wait_for(lambda: k8s.get("pods", "upgraded-driver-1") is None, "the old driver pod is deleted")
    wait_for(lambda: "UpgradeStarted" in k8s.event_reasons("upgraded"), "an UpgradeStarted Event")


def test_a_last_state_upgrade_replaces_the_driver_without_a_stop(k8s: Cluster) -> None:
    k8s.start_running("laststate", {**STREAMING, "upgradeMode": "last-state"})
    k8s.edit("laststate", executor={"instances": 3})
    k8s.set_pod_phase("laststate-check-2", "Succeeded", 0)
    status = k8s.wait_phase("laststate", "Submitted")
    assert (status["attempt"], status["run"], status["restarts"]) == (2, 1, 0)
    assert k8s.channel("laststate").read_request(1) is None, "no stop was asked"
    driver_env(k8s, "laststate-driver-2")
    wait_for(lambda: k8s.get("pods", "laststate-driver-1") is None, "the old driver is deleted")
    channel = k8s.channel("laststate")
    assert channel.released(1) and not channel.released(2), "told to leave without a savepoint"


def test_an_upgrade_its_check_refuses_is_not_applied_and_the_job_runs_on(
    k8s: Cluster, operator: OperatorProcess
) -> None:
    name = "finishable_upgrade_checks_total"
    refusals = sample(operator.metrics(), name, outcome="refused") or 0
    k8s.start_running("refused", STREAMING)
    k8s.edit("refused", application={"args": ["--renamed-source"]})
    verdict = "upgrade check refused: checkpoint 4 of the running job does not match the new "
    verdict += "program: its source 'clicks' is not in this job"
    k8s.set_pod_phase("refused-check-2", "Failed", 3, message=f"INFO starting\n{verdict}\n")

    def degraded() -> dict[str, Any] | None:
        conditions = k8s.status("refused").get("conditions") or []
        found = [c for c in conditions if c["type"] == "Degraded" and c["status"] == "True"]
        return found[0] if found else None

    condition = wait_for(degraded, "the upgrade refused")
    assert condition["reason"] == "UpgradeRefused"
    assert "its source 'clicks' is not in this job" in condition["message"]
    assert "upgrade check refused" not in condition["message"]
    status = k8s.status("refused")
    assert (status["phase"], status["attempt"]) == ("Running", 1)
    assert status["upgradeCheck"]["state"] == "Refused"
    assert k8s.channel("refused").read_request(1) is None, "the running job was not stopped"
    assert k8s.get("pods", "refused-driver-1") is not None
    assert k8s.get("pods", "refused-check-2") is not None, "kept for its log"
    wait_for(lambda: "UpgradeRefused" in k8s.event_reasons("refused"), "an UpgradeRefused Event")
    assert sample(operator.metrics(), name, outcome="refused") == refusals + 1

    k8s.edit("refused", application={"args": ["--fast"]})  # the old program again
    wait_for(lambda: degraded() is None, "the refusal cleared")
    wait_for(lambda: k8s.get("pods", "refused-check-2") is None, "the check pod deleted")
    wait_for(lambda: k8s.get("configmaps", "refused-check-2") is None, "its config deleted")
    assert k8s.status("refused")["phase"] == "Running"
    k8s.delete_job("refused")


def test_periodic_savepoints_are_requested_while_the_job_runs(k8s: Cluster) -> None:
    k8s.start_running("periodic", {**STREAMING, "savepoints": {"interval": "1s"}})
    first = k8s.request_for("periodic", 1)
    assert first.action.value == "savepoint" and first.id.startswith("savepoint-periodic-a1-")
    assert k8s.status("periodic")["pendingRequest"]["trigger"] == "periodic"
    k8s.answer("periodic", 1, first, DriverState.RUNNING, savepoint=SavepointStatus(location="p1"))
    second = wait_for(
        lambda: (r := k8s.channel("periodic").read_request(1)) and r.id != first.id and r,
        "the next periodic savepoint",
    )
    assert second.id.startswith("savepoint-periodic-a1-")
    assert k8s.status("periodic")["phase"] == "Running"
    k8s.delete_job("periodic")  # it would go on asking every second for the module's other tests


SNAPSHOTS = "finishablesparksnapshots"


def snapshots_of(k8s: Cluster, job: str) -> list[dict[str, Any]]:
    return k8s.list(SNAPSHOTS, f"finishable.dev/job={job}", JOBS)


def completed_snapshot(k8s: Cluster, job: str, location: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        for snapshot in snapshots_of(k8s, job):
            status = snapshot.get("status") or {}
            if status.get("location") == location and status.get("state") == "Completed":
                return snapshot
        return None

    return wait_for(probe, f"a Completed FinishableSparkSnapshot of {job} at {location}")


def test_each_completed_savepoint_is_recorded_as_a_snapshot_owned_by_the_job(
    k8s: Cluster,
) -> None:
    job = k8s.start_running("snapped", STREAMING)
    uid = k8s.job("snapped")["metadata"]["uid"]  # type: ignore[index]
    assert job["phase"] == "Running"
    # a savepoint without stopping (spec.savepointTriggerNonce): trigger manual
    k8s.edit("snapped", savepointTriggerNonce=1)
    request = k8s.request_for("snapped", 1)
    manual = SavepointStatus(location="configmap:snapped/sp-5", request_id=request.id, id=5)
    k8s.answer("snapped", 1, request, DriverState.RUNNING, savepoint=manual)
    first = completed_snapshot(k8s, "snapped", "configmap:snapped/sp-5")
    assert first["status"]["trigger"] == "manual" and first["status"]["checkpointId"] == 5
    # stop with savepoint (spec.state: Suspended): trigger stop, recorded to be disposed of
    k8s.edit("snapped", state="Suspended", savepoints={"disposeOnDelete": True})
    k8s.wait_phase("snapped", "Savepointing")
    request = k8s.request_for("snapped", 1)
    stop = SavepointStatus(
        location="configmap:snapped/sp-9", request_id=request.id, id=9, size_bytes=4096
    )
    k8s.answer("snapped", 1, request, DriverState.SUSPENDED, savepoint=stop)
    k8s.set_pod_phase("snapped-driver-1", "Succeeded", missing_ok=True)
    k8s.wait_phase("snapped", "Suspended")
    # listed by the time the job is seen Suspended: recorded before the status said so
    listed = [s["status"].get("location") for s in snapshots_of(k8s, "snapped")]
    assert "configmap:snapped/sp-9" in listed, listed
    snapshot = completed_snapshot(k8s, "snapped", "configmap:snapped/sp-9")
    meta, spec, status = snapshot["metadata"], snapshot["spec"], snapshot["status"]
    assert meta["name"].startswith("snapped-savepoint-9-")
    assert [(ref["kind"], ref["name"], ref["uid"]) for ref in meta["ownerReferences"]] == [
        ("FinishableSparkJob", "snapped", uid)
    ]
    assert spec == {"jobName": "snapped", "disposeOnDelete": True}
    assert (status["trigger"], status["kind"], status["drained"]) == ("stop", "savepoint", False)
    assert (status["checkpointId"], status["sizeBytes"], status["jobUid"]) == (9, 4096, uid)
    assert status["requestId"] == request.id
    # one snapshot per savepoint, however often the loop steps
    assert sorted(s["status"]["location"] for s in snapshots_of(k8s, "snapped")) == [
        "configmap:snapped/sp-5",
        "configmap:snapped/sp-9",
    ]


def test_snapshots_are_counted_per_job_and_state(k8s: Cluster, operator: OperatorProcess) -> None:
    k8s.start_running("counted", STREAMING)
    answered: set[str] = set()
    for nonce in (1, 2):
        k8s.edit("counted", savepointTriggerNonce=nonce)
        request = wait_for(
            lambda: (r := k8s.channel("counted").read_request(1)) and r.id not in answered and r,
            f"savepoint request {nonce}",
        )
        answered.add(request.id)
        savepoint = SavepointStatus(location=f"configmap:counted/sp-{nonce}", request_id=request.id)
        k8s.answer("counted", 1, request, DriverState.RUNNING, savepoint=savepoint)
        completed_snapshot(k8s, "counted", f"configmap:counted/sp-{nonce}")

    def count(state: str) -> float | None:
        return sample(operator.metrics(), "finishable_snapshots", job_name="counted", state=state)

    wait_for(lambda: count("Completed") == 2, "two Completed snapshots counted")
    assert count("Failed") == 0
    first = next(s for s in snapshots_of(k8s, "counted") if s["status"]["location"].endswith("1"))
    path = k8s.api.path("finishablesparksnapshots", first["metadata"]["name"], api_version=JOBS)
    assert k8s.api.request("DELETE", path).status == 200
    wait_for(lambda: count("Completed") == 1, "a deleted snapshot no longer counted")


def test_a_drain_is_recorded_as_a_drained_snapshot(k8s: Cluster) -> None:
    k8s.start_running("drained", STREAMING)
    k8s.edit("drained", state="Finished")
    k8s.wait_phase("drained", "Draining")
    request = k8s.request_for("drained", 1)
    final = SavepointStatus(location="configmap:drained/final", drained=True, request_id=request.id)
    k8s.answer("drained", 1, request, DriverState.FINISHED, savepoint=final)
    k8s.wait_phase("drained", "Finished")
    status = completed_snapshot(k8s, "drained", "configmap:drained/final")["status"]
    assert (status["trigger"], status["kind"], status["drained"]) == ("drain", "drain", True)


def test_a_job_starts_from_the_snapshot_its_restore_from_names(k8s: Cluster) -> None:
    k8s.start_running("origin", STREAMING)
    k8s.edit("origin", state="Suspended")
    request = k8s.request_for("origin", 1)
    saved = SavepointStatus(location="configmap:origin/sp-3", request_id=request.id, id=3)
    k8s.answer("origin", 1, request, DriverState.SUSPENDED, savepoint=saved)
    k8s.set_pod_phase("origin-driver-1", "Succeeded", missing_ok=True)
    name = completed_snapshot(k8s, "origin", "configmap:origin/sp-3")["metadata"]["name"]
    k8s.create_job("follower", {**STREAMING, "restoreFrom": {"snapshotRef": name}})
    pod = wait_for(lambda: k8s.get("pods", "follower-driver-1"), "the follower's driver")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["FINISHABLE_RESTORE_FROM"] == "configmap:origin/sp-3"
    assert k8s.status("follower")["restoreFrom"] == "configmap:origin/sp-3"
    config = k8s.get("configmaps", "follower-config")
    assert config is not None
    driver_config = JobConfig.model_validate_json(config["data"]["job.json"])  # as the driver
    assert driver_config.spec.restore_from.savepoint == "configmap:origin/sp-3"


@pytest.mark.full
def test_a_missing_snapshot_ref_holds_the_job_with_a_clear_error_until_it_exists(
    k8s: Cluster,
) -> None:
    k8s.create_job("waiting", {**STREAMING, "restoreFrom": {"snapshotRef": "later"}})

    def refusal() -> str | None:
        events = [e for e in k8s.events("waiting") if e["reason"] == "SnapshotRefUnusable"]
        return str(events[-1]["message"]) if events else None

    message = wait_for(refusal, "a Warning naming the missing snapshot")
    assert "spec.restoreFrom.snapshotRef" in message and "'later'" in message
    assert "does not exist" in message
    assert k8s.get("pods", "waiting-driver-1") is None
    assert k8s.status("waiting").get("phase", "Pending") == "Pending"
    # a snapshot that is not Completed is refused naming its state
    snapshot = {
        "apiVersion": JOBS,
        "kind": "FinishableSparkSnapshot",
        "metadata": {"name": "later"},
        "spec": {"jobName": "elsewhere"},
    }
    created = k8s.api.request("POST", k8s.api.path(SNAPSHOTS, api_version=JOBS), body=snapshot)
    assert created.status == 201, created.body
    status_path = k8s.api.path(SNAPSHOTS, "later", api_version=JOBS, subresource="status")
    failed = {"status": {"state": "Failed", "message": "the driver crashed"}}
    patched = k8s.api.request("PATCH", status_path, body=failed, content_type=MERGE)
    assert patched.status == 200, patched.body
    wait_for(
        lambda: (m := refusal()) and "Failed, not Completed" in m and m,
        "a Warning naming the snapshot's state",
    )
    assert k8s.get("pods", "waiting-driver-1") is None
    done = {"status": {"state": "Completed", "location": "s3://bucket/sp/later"}}
    patched = k8s.api.request("PATCH", status_path, body=done, content_type=MERGE)
    assert patched.status == 200, patched.body
    pod = wait_for(lambda: k8s.get("pods", "waiting-driver-1"), "the driver, once it is Completed")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["FINISHABLE_RESTORE_FROM"] == "s3://bucket/sp/later"


def hand_made_snapshot(k8s: Cluster, name: str, job: str) -> None:
    body = {
        "apiVersion": JOBS,
        "kind": "FinishableSparkSnapshot",
        "metadata": {"name": name},
        "spec": {"jobName": job},
    }
    created = k8s.api.request("POST", k8s.api.path(SNAPSHOTS, api_version=JOBS), body=body)
    assert created.status == 201, created.body


def snapshot_state(k8s: Cluster, name: str, state: str) -> dict[str, Any]:
    return wait_for(
        lambda: (
            (status := (k8s.get(SNAPSHOTS, name, JOBS) or {}).get("status") or {}).get("state")
            == state
            and status
        ),
        f"snapshot {name} is {state}",
    )


def test_a_snapshot_created_by_hand_takes_a_savepoint_of_its_running_job(k8s: Cluster) -> None:
    k8s.start_running("byhand", STREAMING)
    uid = k8s.job("byhand")["metadata"]["uid"]  # type: ignore[index]
    hand_made_snapshot(k8s, "before-upgrade", "byhand")
    request = k8s.request_for("byhand", 1)  # as if spec.savepointTriggerNonce had been bumped
    assert request.action.value == "savepoint"
    assert k8s.job("byhand")["spec"]["savepointTriggerNonce"] == 1  # type: ignore[index]
    in_progress = snapshot_state(k8s, "before-upgrade", "InProgress")
    assert in_progress["triggerNonce"] == 1
    saved = SavepointStatus(location="configmap:byhand/sp-12", request_id=request.id, id=12)
    k8s.answer("byhand", 1, request, DriverState.RUNNING, savepoint=saved)
    status = snapshot_state(k8s, "before-upgrade", "Completed")
    assert (status["location"], status["checkpointId"]) == ("configmap:byhand/sp-12", 12)
    assert (status["trigger"], status["jobUid"], status["triggerNonce"]) == ("manual", uid, 1)
    assert k8s.status("byhand")["phase"] == "Running"
    assert snapshots_of(k8s, "byhand") == [], "the snapshot made by hand is the only record"
    # one asked of a job that has ended fails at once, saying why
    k8s.create_job("ended", STREAMING)
    k8s.edit("ended", state="Finished")
    k8s.set_pod_phase("ended-driver-1", "Running")
    k8s.report("ended", 1, DriverState.RUNNING)
    request = k8s.request_for("ended", 1)
    k8s.answer("ended", 1, request, DriverState.FINISHED)
    k8s.wait_phase("ended", "Finished")
    hand_made_snapshot(k8s, "too-late", "ended")
    assert "Finished" in snapshot_state(k8s, "too-late", "Failed")["message"]


def test_a_snapshot_created_by_hand_is_abandoned_when_its_job_is_deleted(k8s: Cluster) -> None:
    k8s.start_running("deleted", STREAMING)
    hand_made_snapshot(k8s, "never-taken", "deleted")
    k8s.request_for("deleted", 1)  # asked, never answered
    snapshot_state(k8s, "never-taken", "InProgress")
    k8s.delete_job("deleted")
    k8s.set_pod_phase("deleted-driver-1", "Succeeded", missing_ok=True)
    status = snapshot_state(k8s, "never-taken", "Abandoned")
    assert "deleted" in status["message"] and status["jobUid"]


def test_a_deleted_jobs_loop_leaves_when_asked_and_is_not_cancelled(
    k8s: Cluster, operator: OperatorProcess
) -> None:
    """kopf stops a deleted job's daemon by its stop flag first; the loop watches the flag, so it
    is never cancelled mid-step (which kopf logged as a warning on every deletion)."""
    k8s.start_running("leaving", STREAMING)
    k8s.delete_job("leaving")
    k8s.set_pod_phase("leaving-driver-1", "Succeeded", missing_ok=True)
    wait_for(lambda: k8s.job("leaving") is None, "the job is gone")
    said = [line for line in operator.log().splitlines() if "leaving" in line]
    assert said, "the operator logged the job's deletion"
    assert not [line for line in said if "cancelled" in line], said


def test_a_stop_past_its_timeout_is_cancelled_and_the_job_keeps_running(k8s: Cluster) -> None:
    k8s.start_running("slowstop", {**STREAMING, "stopTimeout": "1s"})
    k8s.edit("slowstop", state="Suspended")
    k8s.wait_phase("slowstop", "Savepointing")
    request = k8s.request_for("slowstop", 1)
    degraded = wait_for(
        lambda: (c := k8s.condition("slowstop", "Degraded")).get("status") == "True" and c,
        "Degraded after stopTimeout",
    )
    assert degraded["reason"] == "StopTimedOut"
    assert k8s.status("slowstop")["phase"] == "Running"
    # the status is stored first, then the decision's cancel is written
    wait_for(
        lambda: (
            ((k8s.get("configmaps", "slowstop-control") or {}).get("data") or {}).get("cancelled")
            == request.id
        ),
        "the request cancelled in slowstop-control",
    )
    assert k8s.channel("slowstop").read_request(1) is None, "the driver sees no request now"


def test_invalid_manifests_fail_with_a_message_naming_the_field(k8s: Cluster) -> None:
    k8s.create_job("badexec", {**STREAMING, "executor": {"instances": 0}})
    status = k8s.wait_phase("badexec", "Failed")
    assert "spec.executor.instances" in status["message"]
    ready = k8s.condition("badexec", "Ready")
    assert ready["status"] == "False" and "spec.executor.instances" in ready["message"]
    wait_for(
        lambda: any("spec.executor.instances" in e["message"] for e in k8s.events("badexec")),
        "an Event naming the field",
    )
    long_name = "a" * 41
    k8s.create_job(long_name, STREAMING)
    assert "metadata.name" in k8s.wait_phase(long_name, "Failed")["message"]
    assert k8s.list("pods", f"finishable.dev/job={long_name}") == []


def make_shuffle_pods(k8s: Cluster, job: str) -> list[str]:
    """Play the StatefulSet controller: shuffle pods owned by the StatefulSet."""
    sts = wait_for(lambda: k8s.get("statefulsets", f"{job}-shuffle", "apps/v1"), f"{job}'s shuffle")
    owner = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": sts["metadata"]["name"],
        "uid": sts["metadata"]["uid"],
        "controller": True,
    }
    uids = []
    for index in range(sts["spec"]["replicas"]):
        labels = sts["spec"]["template"]["metadata"]["labels"]
        body = {
            "metadata": {
                "name": f"{job}-shuffle-{index}",
                "labels": labels,
                "ownerReferences": [owner],
            },
            "spec": {"containers": []},
        }
        uids.append(k8s.create("pods", body)["metadata"]["uid"])
    return uids


def shuffle_pod_uids(k8s: Cluster, job: str) -> list[str]:
    return sorted(pod["metadata"]["uid"] for pod in k8s.components("pods", job, "shuffle"))


def test_batch_driver_crash_recovers_keeping_shuffle_then_fails_when_attempts_run_out(
    k8s: Cluster,
) -> None:
    spec = batch(shuffle={"replicas": 2, "retainTimeout": "10m"}, recovery={"maxAttempts": 1})
    k8s.start_running("etl", spec)
    uids = sorted(make_shuffle_pods(k8s, "etl"))
    k8s.set_pod_phase("etl-driver-1", "Failed", exit_code=137)
    status = k8s.wait_phase("etl", "Recovering")
    recovery = status["recovery"]
    assert "driver attempt 1 failed: exit code 137" in recovery["reason"]
    assert recovery["driverLostAt"] and recovery["shuffleRetainedUntil"]
    assert shuffle_pod_uids(k8s, "etl") == uids, "the shuffle pods outlive the driver"
    assert "PhaseChanged" in k8s.event_reasons("etl")
    # after the backoff: attempt 2, which reconnects
    pod = wait_for(lambda: k8s.get("pods", "etl-driver-2"), "attempt 2 after the backoff")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["FINISHABLE_ATTEMPT"] == "2"
    assert env["FINISHABLE_PREDECESSOR_EXITED"] == "1", "its pod failed: no grace to wait out"
    k8s.set_pod_phase("etl-driver-2", "Running")
    k8s.report("etl", 2, DriverState.RUNNING, tasks_skipped=6, tasks_rerun=2)
    status = k8s.wait_phase("etl", "Running")
    assert "shuffleRetainedUntil" not in status["recovery"]
    assert (status["recovery"]["tasksSkipped"], status["recovery"]["tasksRerun"]) == (6, 2)
    assert shuffle_pod_uids(k8s, "etl") == uids, "still the same shuffle pods"
    # a second crash: the one restart allowed is used
    k8s.set_pod_phase("etl-driver-2", "Failed", exit_code=1)
    status = k8s.wait_phase("etl", "Failed")
    assert "spec.recovery.maxAttempts" in status["message"]
    wait_for(lambda: shuffle_pod_uids(k8s, "etl") == [], "a failed batch job releases its shuffle")


def test_a_standby_driver_takes_over_a_lost_driver_and_a_new_one_stands_by(
    k8s: Cluster,
) -> None:
    k8s.start_running("warm", {**STREAMING, "recovery": {"standby": True}})
    executor = {  # what the standby's Spark creates: warm executors of attempt 2
        "metadata": {
            "name": "warm-2-exec-1",
            "labels": {
                "finishable.dev/job": "warm",
                "finishable.dev/component": "executor",
                "finishable.dev/attempt": "2",
            },
        },
        "spec": {"containers": []},
    }
    standby = wait_for(lambda: k8s.get("pods", "warm-standby-2"), "a standby of attempt 2")
    assert standby["metadata"]["labels"]["finishable.dev/standby"] == "true"
    env = driver_env(k8s, "warm-standby-2")
    assert (env["FINISHABLE_STANDBY"], env["FINISHABLE_ATTEMPT"]) == ("1", "2")
    assert "spark.kubernetes.driver.pod.name=warm-standby-2" in (env["PYSPARK_SUBMIT_ARGS"] or "")
    k8s.set_pod_phase("warm-standby-2", "Failed", exit_code=1)  # a standby that dies is replaced
    wait_for(
        lambda: (
            (pod := k8s.get("pods", "warm-standby-2")) is not None
            and pod["metadata"]["uid"] != standby["metadata"]["uid"]
        ),
        "a new standby pod in place of the failed one",
    )
    k8s.set_pod_phase("warm-standby-2", "Running")
    k8s.create("pods", executor)
    assert k8s.channel("warm").takeover(2) is None, "no order while the driver lives"

    k8s.set_pod_phase("warm-driver-1", "Failed", exit_code=137)
    order = wait_for(lambda: k8s.channel("warm").takeover(2), "the order to take over")
    assert order.predecessor_exited, "a failed pod's process has exited: no grace to wait out"
    status = k8s.status("warm")
    assert (status["phase"], status["attempt"], status["restarts"]) == ("Recovering", 2, 1)
    assert k8s.get("pods", "warm-driver-1") is not None, "a crashed pod stays for its logs"
    assert k8s.get("pods", "warm-driver-2") is None, "no new driver pod: the standby is it"
    assert k8s.get("pods", "warm-2-exec-1") is not None, "the standby's executors are kept"
    k8s.report("warm", 2, DriverState.RUNNING)
    assert k8s.wait_phase("warm", "Running")["attempt"] == 2
    wait_for(lambda: k8s.get("pods", "warm-standby-3"), "a new standby, of attempt 3")

    # a stop ends the standby with the job's driver
    k8s.edit("warm", state="Suspended")
    request = k8s.request_for("warm", 2)
    k8s.answer("warm", 2, request, DriverState.SUSPENDED, savepoint=SavepointStatus(location="s"))
    k8s.set_pod_phase("warm-standby-2", "Succeeded", missing_ok=True)
    k8s.wait_phase("warm", "Suspended")
    wait_for(lambda: k8s.get("pods", "warm-standby-3") is None, "the standby deleted")


def test_shuffle_pods_go_when_no_driver_reconnects_in_time(k8s: Cluster) -> None:
    k8s.start_running("late", batch(shuffle={"replicas": 2, "retainTimeout": "1s"}))
    old = make_shuffle_pods(k8s, "late")
    k8s.set_pod_phase("late-driver-1", "Failed", exit_code=1)
    k8s.wait_phase("late", "Recovering")
    wait_for(
        lambda: not set(old) & set(shuffle_pod_uids(k8s, "late")), "the retained shuffle deleted"
    )
    wait_for(lambda: "ShuffleReleased" in k8s.event_reasons("late"), "a ShuffleReleased Event")
    assert k8s.status("late")["phase"] == "Recovering"
    assert "shuffleRetainedUntil" not in k8s.status("late")["recovery"]
    sts = k8s.get("statefulsets", "late-shuffle", "apps/v1")
    assert sts is not None, "fresh shuffle pods for the attempt to come"


def test_an_operator_killed_mid_stop_and_mid_recovery_carries_on(
    k8s: Cluster, operator: OperatorProcess
) -> None:
    k8s.start_running("stopping", STREAMING)
    k8s.start_running("crashing", STREAMING)
    k8s.edit("stopping", state="Suspended")
    k8s.wait_phase("stopping", "Savepointing")
    request = k8s.request_for("stopping", 1)
    assert k8s.api.request("DELETE", k8s.api.path("pods", "crashing-driver-1")).status == 200
    assert "disappeared" in k8s.wait_phase("crashing", "Recovering")["recovery"]["reason"]
    operator.kill()
    # while no operator runs, the driver completes the stop
    k8s.answer(
        "stopping", 1, request, DriverState.SUSPENDED, savepoint=SavepointStatus(location="sp-k")
    )
    k8s.set_pod_phase("stopping-driver-1", "Succeeded")
    assert k8s.status("stopping")["phase"] == "Savepointing"
    operator.start()
    status = k8s.wait_phase("stopping", "Suspended")
    assert status["savepoint"]["location"] == "sp-k"
    wait_for(lambda: k8s.get("pods", "stopping-driver-1") is None, "the stopped driver removed")
    pod = wait_for(lambda: k8s.get("pods", "crashing-driver-2"), "the recovery's next attempt")
    assert pod["metadata"]["labels"]["finishable.dev/attempt"] == "2"
    env = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
    assert "FINISHABLE_PREDECESSOR_EXITED" not in env, "a pod gone from view may still run"
    assert k8s.status("crashing")["restarts"] == 1, "the crash is counted once"


def test_an_operator_restarted_in_any_phase_resumes_and_never_resubmits(
    k8s: Cluster, operator: OperatorProcess
) -> None:
    """SIGKILL the operator with a job in every phase (and one whose driver is leaving); the new
    process creates no driver a job already has, starts no new run, charges no restart, and each
    job then goes on from where it was when its driver (played here) moves on."""
    k8s.create_job("submitted", STREAMING)
    k8s.wait_phase("submitted", "Submitted")
    for name in ("running", "savepointing", "draining", "finishing", "suspended", "finished"):
        k8s.start_running(name, STREAMING)
    k8s.start_running("failed", {**STREAMING, "recovery": {"maxAttempts": 0}})
    k8s.start_running("leaving", STREAMING)
    k8s.edit("savepointing", state="Suspended")
    k8s.edit("draining", state="Finished")
    k8s.edit("suspended", state="Suspended")
    k8s.report("finishing", 1, DriverState.FINISHING)
    k8s.report("finished", 1, DriverState.FINISHED)
    k8s.set_pod_phase("failed-driver-1", "Failed", exit_code=1)
    suspend = k8s.request_for("suspended", 1)
    saved = SavepointStatus(location="s")
    k8s.answer("suspended", 1, suspend, DriverState.SUSPENDED, savepoint=saved)
    k8s.evict("leaving-driver-1")
    for name, phase in {
        "savepointing": "Savepointing",
        "draining": "Draining",
        "finishing": "Finishing",
        "suspended": "Suspended",
        "finished": "Finished",
        "failed": "Failed",
    }.items():
        k8s.wait_phase(name, phase)
    wait_for(lambda: k8s.status("leaving").get("departure"), "the driver seen leaving")
    stop = k8s.request_for("savepointing", 1)
    drain = k8s.request_for("draining", 1)

    jobs = ("submitted", "running", "savepointing", "draining", "finishing", "suspended")
    before = {name: k8s.status(name) for name in (*jobs, "finished", "failed", "leaving")}

    def drivers() -> dict[str, str]:
        these = f"finishable.dev/component=driver,finishable.dev/job in ({','.join(before)})"
        return {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in k8s.list("pods", these)}

    pods = drivers()
    operator.kill()
    operator.start()

    # Each job goes on from its phase as its driver moves on.
    k8s.set_pod_phase("submitted-driver-1", "Running")
    k8s.report("submitted", 1, DriverState.RUNNING)
    saved = SavepointStatus(location="t")
    k8s.answer("savepointing", 1, stop, DriverState.SUSPENDED, savepoint=saved)
    drained = SavepointStatus(location="u", drained=True)
    k8s.answer("draining", 1, drain, DriverState.FINISHED, savepoint=drained)
    k8s.report("finishing", 1, DriverState.FINISHED)
    k8s.report("leaving", 1, DriverState.DEPARTED)
    k8s.report("running", 1, DriverState.RUNNING, message="still here")
    assert k8s.wait_phase("submitted", "Running")["attempt"] == 1
    assert k8s.wait_phase("savepointing", "Suspended")["savepoint"]["location"] == "t"
    k8s.wait_phase("draining", "Finished")
    k8s.wait_phase("finishing", "Finished")
    moved = wait_for(
        lambda: (s := k8s.status("leaving")).get("attempt") == 2 and s, "the departed driver's next"
    )
    assert (moved["restarts"], moved["departures"]) == (0, 1)
    assert moved["departure"]["reason"] == "Evicted"

    after = {name: k8s.status(name) for name in before}
    for name, status in after.items():
        assert status["run"] == before[name]["run"], f"{name}: a new run"
        assert status.get("restarts", 0) == before[name].get("restarts", 0), f"{name}: a restart"
        if name != "leaving":
            assert status["attempt"] == before[name]["attempt"], f"{name}: a new attempt"
    for name in ("suspended", "finished", "failed", "running"):
        assert after[name]["phase"] == before[name]["phase"], name
    now = drivers()
    assert set(now) - set(pods) == {"leaving-driver-2"}, "the one new driver is the departed one's"
    assert all(now[pod] == pods[pod] for pod in set(now) & set(pods)), "a driver was replaced"
    assert {"running-driver-1", "submitted-driver-1"} <= set(now)


def state_configmap(k8s: Cluster, job: str, object_name: str) -> dict[str, Any]:
    """A state object as the driver's ConfigMap backend writes it: owned by its job."""
    body = k8s.job(job)
    assert body is not None
    return k8s.create(
        "configmaps",
        {
            "metadata": {
                "name": f"{job}-{object_name.replace('/', '.')}",
                "labels": {"finishable.dev/job": job, "finishable.dev/component": "state"},
                "annotations": {"finishable.dev/object-name": object_name},
                "ownerReferences": [
                    {
                        "apiVersion": "finishable.dev/v1alpha1",
                        "kind": "FinishableSparkJob",
                        "name": job,
                        "uid": body["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": False,
                    }
                ],
            },
            "binaryData": {"data": "AA=="},
        },
    )


STATE_OBJECTS = {
    "savepoint": "snapshots/sp-000000000001.meta",
    "checkpoint": "snapshots/chk-000000000004.meta",
    "events": "events/0b9e-r1/seg-000000000000",
    "fence": "fence/0b9e/claims/r000001-a000001",
}


@pytest.mark.parametrize(
    ("policy", "kept"),
    [(None, {"savepoint"}), ("Nothing", set()), ("Everything", set(STATE_OBJECTS))],
)
def test_deletion_stops_the_driver_removes_children_and_state_by_policy(
    k8s: Cluster, policy: str | None, kept: set[str]
) -> None:
    name = f"deleted-{(policy or 'default').lower()}"
    checkpointing = {"checkpointing": {"retainOnDelete": policy}} if policy else {}
    k8s.create_job(name, {**STREAMING, **checkpointing})
    k8s.wait_phase(name, "Submitted")
    wait_for(lambda: k8s.get("pods", f"{name}-driver-1"), f"{name}'s driver pod")
    state = {
        kind: state_configmap(k8s, name, object_name)["metadata"]["name"]
        for kind, object_name in STATE_OBJECTS.items()
    }
    snapshot = {
        "apiVersion": JOBS,
        "kind": "FinishableSparkSnapshot",
        "metadata": {
            "name": f"{name}-savepoint-1",
            "labels": {"finishable.dev/job": name},
            "ownerReferences": [
                {
                    "apiVersion": JOBS,
                    "kind": "FinishableSparkJob",
                    "name": name,
                    "uid": k8s.job(name)["metadata"]["uid"],  # type: ignore[index]
                    "controller": True,
                }
            ],
        },
        "spec": {"jobName": name},
    }
    created = k8s.api.request("POST", k8s.api.path(SNAPSHOTS, api_version=JOBS), body=snapshot)
    assert created.status == 201, created.body
    k8s.delete_job(name)
    wait_for(lambda: k8s.job(name) is None, f"{name} is deleted")
    found = k8s.get(SNAPSHOTS, f"{name}-savepoint-1", JOBS)
    if policy == "Nothing":
        wait_for(lambda: k8s.get(SNAPSHOTS, f"{name}-savepoint-1", JOBS) is None, "snapshot goes")
    else:
        assert found is not None, "the job's snapshots are kept"
        assert not found["metadata"].get("ownerReferences"), "and no longer owned"
        # a new job of the same name lists its own snapshots, not a deleted one's
        assert snapshots_of(k8s, name) == []
        assert found["metadata"]["labels"] == {"finishable.dev/deleted-job": name}
    for plural, child in (
        ("pods", f"{name}-driver-1"),
        ("services", f"{name}-driver"),
        ("configmaps", f"{name}-config"),
        ("configmaps", f"{name}-state"),
        ("secrets", f"{name}-token"),
    ):
        assert k8s.get(plural, child) is None, f"{plural}/{child} remains"
    for kind, configmap in state.items():
        found = k8s.get("configmaps", configmap)
        if kind in kept:
            assert found is not None, f"the {kind} is kept"
            assert not found["metadata"].get("ownerReferences"), "and no longer owned"
        else:
            assert found is None, f"the {kind} is removed with the job"


def sample(text: str, name: str, **labels: str) -> float | None:
    """One sample of the operator's /metrics, read with Prometheus' own parser."""
    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == name and labels.items() <= found.labels.items():
                return float(found.value)
    return None


def test_metrics_and_liveness(k8s: Cluster, operator: OperatorProcess) -> None:
    k8s.start_running("measured", STREAMING)
    k8s.report("measured", 1, DriverState.RUNNING, last_checkpoint=CheckpointStatus(id=1))
    k8s.report("measured", 1, DriverState.RUNNING, last_checkpoint=CheckpointStatus(id=3))
    name = "finishable_checkpoints_completed_total"
    wait_for(
        lambda: (sample(operator.metrics(), name, job_name="measured") or 0) >= 2,
        "checkpoints counted",
    )
    text = operator.metrics()
    assert (sample(text, "finishable_jobs", phase="Running") or 0) >= 1
    moves = sample(
        text, "finishable_phase_transitions_total", from_phase="Submitted", to_phase="Running"
    )
    assert moves is not None and moves >= 1
    assert operator.alive()


def test_a_second_replica_stands_by_until_the_first_goes(
    k8s: Cluster, operator: OperatorProcess, server: EmulatorServer, tmp_path: Path
) -> None:
    standby = OperatorProcess(
        tmp_path, server.url, TOKEN, [NAMESPACE], identity="operator-2", priority=50,
        name="standby",
    )  # fmt: skip
    standby.start()
    peering = k8s.api.path("kopfpeerings", "finishable-spark-operator", api_version="kopf.dev/v1")
    try:
        peers = wait_for(
            lambda: (
                {"operator-1", "operator-2"}
                <= set(k8s.api.request("GET", peering).body.get("status") or {})
            ),
            "both replicas in the peering object",
        )
        assert peers
        k8s.create_job("single", STREAMING)
        k8s.wait_phase("single", "Submitted")
        assert "single" not in standby.log(), "the lower priority replica does not act"
        operator.stop()  # a clean exit leaves the peering object at once
        wait_for(lambda: "Resuming operations" in standby.log(), "the standby takes over")
        k8s.create_job("takeover", STREAMING)
        k8s.wait_phase("takeover", "Submitted")
        # the status is stored first, then the driver is created and logged
        wait_for(lambda: "takeover" in standby.log(), "the standby acting on a new job")
    finally:
        standby.stop()


def emulator_json(server: EmulatorServer, path: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(server.url + path, timeout=10) as response:
        return list(json.loads(response.read()))


def test_the_operator_makes_no_request_a_real_server_refuses(
    k8s: Cluster, server: EmulatorServer
) -> None:
    """Every watch, list and write the operator made in this module, kopf's and its own, is one
    a real API server accepts. The emulator parses query parameters with the server's types: a
    float watch timeout (``timeoutSeconds=300.0``) stopped every watch on a real server while a
    lenient emulator let it through."""

    def watched() -> set[str]:
        calls = emulator_json(server, CALLS_PATH)
        return {
            c["resource"] for c in calls if c["client"] in OPERATOR_CLIENTS and c["verb"] == "watch"
        }

    wanted = {"finishablesparkjobs", "pods", "configmaps"}
    wait_for(lambda: wanted <= watched(), f"the operator watches {sorted(wanted)}")
    refused = [
        r
        for r in emulator_json(server, REFUSALS_PATH)
        if r["client"] in OPERATOR_CLIENTS and not lost_race(r)
    ]
    assert not refused, f"a real API server refuses these requests of the operator: {refused}"


def lost_race(refusal: dict[str, Any]) -> bool:
    """kopf removes its finalizer with a JSON patch that tests the resourceVersion first; when the
    object changed in between, a real server answers 422 with this generic text and kopf retries.
    That is optimistic concurrency at work, not a request the server could never accept."""
    return (
        refusal["method"] == "PATCH"
        and refusal["status"] == 422
        and refusal["message"] == "the server rejected our request due to an error in our request"
    )


def test_the_savepoint_history_keeps_the_newest_periodic_snapshots(k8s: Cluster) -> None:
    history = {"interval": "1s", "history": {"maxCount": 2}}
    k8s.start_running("history", {**STREAMING, "savepoints": history})
    answered: list[str] = []
    for n in range(1, 4):
        request = wait_for(
            lambda: (r := k8s.channel("history").read_request(1)) and r.id not in answered and r,
            f"periodic savepoint request {n}",
        )
        location = f"configmap:history/sp-{n}"
        savepoint = SavepointStatus(location=location, request_id=request.id, id=n)
        k8s.answer("history", 1, request, DriverState.RUNNING, savepoint=savepoint)
        answered.append(request.id)
        assert completed_snapshot(k8s, "history", location)["status"]["trigger"] == "periodic"

    def kept() -> list[str]:
        return sorted(s["status"]["location"] for s in snapshots_of(k8s, "history"))

    wait_for(lambda: kept() == ["configmap:history/sp-2", "configmap:history/sp-3"], "the trim")
    wait_for(lambda: "SavepointHistoryTrimmed" in k8s.event_reasons("history"), "its Event")
    k8s.delete_job("history")  # it would go on asking every second for the module's other tests
