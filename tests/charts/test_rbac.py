"""The chart's RBAC against what the real operator does.

The real `finishable operator` runs against the API emulator (as in tests/controller), once
namespaced and once cluster-wide, and a Batch job goes through create → running → suspend →
resume → drain → delete, while another job fails and goes at the end of its time to live. The
emulator records every call as RBAC would authorize it (verb, API group, resource[/subresource],
namespaced or not). Every call must be granted by the chart's rules, bound where the call lands,
and every rule the chart grants must be used, or be needed to create the driver's Role
(Kubernetes lets a Role be created only by someone who holds what it grants): that is the only
allowance for unused rules.

What admission checks beyond a call (owner references) this comparison cannot see:
``test_rbac_enforced`` runs the same scenario as the chart's ServiceAccount, with the chart's
roles as helm renders them and the admission plugin on.

How the chart's rules are read without helm: templates/rbac.yaml includes the rule files under
files/rbac/ verbatim (``.Files.Get``, no templating inside them), so ``testcluster.chart.rbac``
reads those files and knows from ``MODES`` which of them the template binds where. That mapping
is the one piece that is not read from the chart: a test checks that the template includes
exactly these files, and another renders the chart with helm and compares the rendered roles and
bindings with ``MODES``.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from finishable.api.control import DriverState
from finishable.api.models import API_GROUP, API_VERSION, PLURAL
from finishable.api.snapshot import SNAPSHOT_PLURAL
from finishable.api.status import SavepointStatus
from finishable.kube.objects import JobRef, owner_reference
from testcluster.apiserver.emulator import CALLS_PATH, EmulatorServer
from testcluster.chart.helm import template
from testcluster.chart.rbac import (
    CHART,
    MODES,
    OPERATOR_CLIENTS,
    RULES,
    Grant,
    denied,
    driver_role_grants,
    grants_of,
    rule_grants,
    used,
)
from tests.controller.cluster import MERGE, Cluster, OperatorProcess, install, wait_for

TOKEN = "rbac-tests"
NAMESPACE = "jobs"


def owner_finalizer_grants() -> set[Grant]:
    """What the OwnerReferencesPermissionEnforcement admission plugin checks, which no recorded
    call shows: ``update`` on the owner's finalizers, for an owner reference that blocks the
    owner's deletion (every child the operator creates refers to its job that way); and
    ``delete`` on an object whose owner references a call changes (a snapshot is created owned
    by its job, and orphaned when the job is deleted), where the operator deletes none itself."""
    job = JobRef(name="any", namespace=NAMESPACE, uid="0")
    reference = owner_reference(job)
    if not reference["blockOwnerDeletion"]:
        return set()
    assert reference["apiVersion"] == f"{API_GROUP}/{API_VERSION}"
    return {("update", API_GROUP, f"{PLURAL}/finalizers"), ("delete", API_GROUP, SNAPSHOT_PLURAL)}


# -- the scenario ---------------------------------------------------------------------------------

BATCH = {
    "mode": "Batch",
    "application": {"file": "local:///app/batch.py"},
    "shuffle": {"replicas": 1},
    "workVolume": {"size": "1Gi"},  # the operator creates the claim
}
SAVEPOINT = f"configmap://{NAMESPACE}/etl-snapshots.sp-000000000001.blob"
FAILING = {  # its first lost driver fails it, and it is deleted at once
    "application": {"file": "local:///app/job.py"},
    "recovery": {"enabled": False},
    "ttlAfterFailed": "0s",
}


def drive_a_job_through_its_lifecycle(k8s: Cluster) -> None:
    """create → running → suspend → resume → evicted → drain → delete, the test playing kubelet
    and driver; and a job that fails, deleted by the operator when its time to live ends."""
    k8s.start_running("etl", BATCH)
    k8s.edit("etl", state="Suspended")
    k8s.wait_phase("etl", "Savepointing")
    request = k8s.request_for("etl", 1)
    savepoint = SavepointStatus(location=SAVEPOINT, request_id=request.id)
    k8s.answer("etl", 1, request, DriverState.SUSPENDED, savepoint=savepoint)
    k8s.set_pod_phase("etl-driver-1", "Succeeded", missing_ok=True)
    k8s.wait_phase("etl", "Suspended")
    k8s.edit("etl", state="Running")
    k8s.wait_phase("etl", "Submitted")
    k8s.set_pod_phase("etl-driver-2", "Running")
    k8s.report("etl", 2, DriverState.RUNNING)
    k8s.wait_phase("etl", "Running")
    k8s.evict("etl-driver-2", node="node-1")  # the operator reads the node: a drain?
    wait_for(
        lambda: (k8s.status("etl").get("departure") or {}).get("reason") == "Evicted",
        "the operator sees the driver leave",
    )
    k8s.report("etl", 2, DriverState.DEPARTED)
    gone = k8s.api.path("pods", "etl-driver-2") + "?gracePeriodSeconds=0"  # its kubelet's delete
    assert k8s.api.request("DELETE", gone).status == 200
    k8s.set_pod_phase("etl-driver-3", "Running")
    k8s.report("etl", 3, DriverState.RUNNING)
    wait_for(lambda: k8s.status("etl").get("attempt") == 3, "attempt 3 after the eviction")
    k8s.wait_phase("etl", "Running")
    k8s.edit("etl", state="Finished")
    k8s.wait_phase("etl", "Draining")
    request = k8s.request_for("etl", 3)
    drained = SavepointStatus(location="configmap:etl/final", drained=True, request_id=request.id)
    k8s.answer("etl", 3, request, DriverState.FINISHED, savepoint=drained)
    k8s.wait_phase("etl", "Finished")
    # a new job starts from the first savepoint, by the FinishableSparkSnapshot that records it
    snapshot = wait_for(
        lambda: next(
            (
                item
                for item in k8s.list(
                    "finishablesparksnapshots",
                    "finishable.dev/job=etl",
                    f"{API_GROUP}/{API_VERSION}",
                )
                if (item.get("status") or {}).get("location") == SAVEPOINT
            ),
            None,
        ),
        "the savepoint recorded as a snapshot",
    )
    k8s.create_job(
        "etl-again", {**BATCH, "restoreFrom": {"snapshotRef": snapshot["metadata"]["name"]}}
    )
    k8s.wait_phase("etl-again", "Submitted")
    k8s.delete_job("etl-again")
    wait_for(lambda: k8s.job("etl-again") is None, "the second job is deleted")
    k8s.create_job("etl-failing", FAILING)
    k8s.wait_phase("etl-failing", "Submitted")
    k8s.set_pod_phase("etl-failing-driver-1", "Failed", exit_code=1)
    wait_for(lambda: k8s.job("etl-failing") is None, "the failed job deleted by its ttl")
    for object_name in ("snapshots/sp-000000000001.meta", "events/etl-r1/seg-000000000000"):
        k8s.create(  # state the driver wrote: the savepoint is orphaned, the log deleted
            "configmaps",
            {
                "metadata": {
                    "name": f"etl-{object_name.replace('/', '.')}",
                    "labels": {"finishable.dev/job": "etl", "finishable.dev/component": "state"},
                    "annotations": {"finishable.dev/object-name": object_name},
                },
                "data": {},
            },
        )
    k8s.delete_job("etl")
    wait_for(lambda: k8s.job("etl") is None, "the job is deleted")
    # the savepoint's snapshot outlived the job; set to be disposed of, deleting it deletes the
    # savepoint's ConfigMaps (once the operator's finalizer is on it)
    name = snapshot["metadata"]["name"]
    path = k8s.api.path("finishablesparksnapshots", name, api_version=f"{API_GROUP}/{API_VERSION}")
    patch = {"spec": {"disposeOnDelete": True}}
    assert k8s.api.request("PATCH", path, body=patch, content_type=MERGE).status == 200
    wait_for(
        lambda: k8s.api.request("GET", path).body["metadata"].get("finalizers"),
        "the operator's finalizer on the snapshot",
    )
    assert k8s.api.request("DELETE", path).status == 200
    wait_for(lambda: k8s.api.request("GET", path).status == 404, "the snapshot is deleted")
    meta = "etl-snapshots.sp-000000000001.meta"
    wait_for(lambda: k8s.get("configmaps", meta) is None, "the savepoint is disposed of")


@pytest.fixture(scope="module", params=sorted(MODES))
def calls(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The operator's calls in one mode, over one job's whole life."""
    mode = str(request.param)
    with EmulatorServer(required_token=TOKEN) as server:
        k8s = Cluster(server.url, TOKEN, NAMESPACE)
        install(k8s.api, [NAMESPACE])
        namespaces = [NAMESPACE] if mode == "namespaced" else []
        operator = OperatorProcess(tmp_path_factory.mktemp(mode), server.url, TOKEN, namespaces)
        operator.start()
        try:
            drive_a_job_through_its_lifecycle(k8s)
        finally:
            operator.stop()
        with urllib.request.urlopen(server.url + CALLS_PATH, timeout=10) as response:
            recorded = json.loads(response.read())
        yield mode, [call for call in recorded if call["client"] in OPERATOR_CLIENTS]


# -- the checks -----------------------------------------------------------------------------------

pytestmark = pytest.mark.quick


def test_every_call_the_operator_makes_is_granted_where_it_lands(
    calls: tuple[str, list[dict[str, Any]]],
) -> None:
    mode, recorded = calls
    assert used(recorded), "the operator made no calls at all"
    refused = denied(
        recorded, grants_of(MODES[mode]["namespace"]), grants_of(MODES[mode]["cluster"])
    )
    assert not refused, f"{mode}: the chart's RBAC would deny {refused}"


def test_the_chart_grants_nothing_the_operator_does_not_use(
    calls: tuple[str, list[dict[str, Any]]],
) -> None:
    mode, recorded = calls
    granted = grants_of(MODES[mode]["namespace"] + MODES[mode]["cluster"])
    unused = granted - used(recorded) - driver_role_grants() - owner_finalizer_grants()
    assert not unused, f"{mode}: granted but never used: {sorted(unused)}"


def test_the_operator_holds_what_it_grants_its_drivers() -> None:
    """Kubernetes refuses to create a Role granting more than its creator holds."""
    for mode, files in MODES.items():
        where_jobs_run = grants_of(files["namespace"] + files["cluster"])
        assert driver_role_grants() <= where_jobs_run, mode


def test_the_operator_may_set_block_owner_deletion_on_its_children() -> None:
    """Under OwnerReferencesPermissionEnforcement, where jobs run."""
    for mode, files in MODES.items():
        where_jobs_run = grants_of(files["namespace"] + files["cluster"])
        assert owner_finalizer_grants() <= where_jobs_run, mode
    assert owner_finalizer_grants(), "the operator's children block their job's deletion"


def test_the_template_includes_exactly_the_rule_files() -> None:
    template = (CHART / "templates" / "rbac.yaml").read_text()
    included = set(re.findall(r'\.Files\.Get "files/rbac/([\w-]+)\.yaml"', template))
    on_disk = {path.stem for path in RULES.glob("*.yaml")}
    in_modes = {name for files in MODES.values() for names in files.values() for name in names}
    assert included == on_disk == in_modes
    for path in RULES.glob("*.yaml"):
        assert "{{" not in path.read_text(), f"{path.name} must need no templating"


@pytest.mark.parametrize("mode", sorted(MODES))
def test_helm_renders_the_roles_and_bindings_of_each_mode(mode: str) -> None:
    docs = template(*([f"watchNamespaces={{{NAMESPACE}}}"] if mode == "namespaced" else []))
    roles = {
        doc["metadata"]["name"]: {g for rule in doc["rules"] for g in rule_grants(rule)}
        for doc in docs
        if doc["kind"] == "ClusterRole"
    }
    in_namespace: set[Grant] = set()
    cluster_wide: set[Grant] = set()
    for doc in docs:
        if doc["kind"] == "RoleBinding":
            assert doc["metadata"]["namespace"] == NAMESPACE
            in_namespace |= roles[doc["roleRef"]["name"]]
        elif doc["kind"] == "ClusterRoleBinding":
            cluster_wide |= roles[doc["roleRef"]["name"]]
    assert in_namespace == grants_of(MODES[mode]["namespace"])
    assert cluster_wide == grants_of(MODES[mode]["cluster"])
