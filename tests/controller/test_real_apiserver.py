"""The operator on a real kube-apiserver of the pinned release (testcluster/controlplane): the
examples pass its validation of the CRD's schema, and the operator, authenticated as the chart's
ServiceAccount with the chart's RBAC, runs a job without one request refused.

Full tier: the first run on a machine builds the control plane from its Go modules (minutes;
cached afterwards).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from finishable.api.spec import FinishableSparkJobSpec
from finishable.controller import podparts
from finishable.controller.job import builders, upgradecheck
from finishable.controller.snapshot import disposalplan
from finishable.kube.api import KubeApi, KubeResponse
from finishable.kube.objects import JobRef
from testcluster.controlplane.audit import AuditLog
from testcluster.controlplane.cluster import ControlPlane
from testcluster.localcluster.chart import OPERATOR_NAMESPACE, RELEASE, install, render
from testcluster.processes import ROOT
from testcluster.waiting import wait_for
from tests.controller.cluster import OperatorProcess

pytestmark = pytest.mark.full

NAMESPACE = "jobs"
NODE = "node-1"
JOBS = "finishable.dev/v1alpha1"
COLLECTION = f"/apis/{JOBS}/namespaces/{NAMESPACE}/finishablesparkjobs"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{RELEASE}"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("controlplane")) as plane:
        yield plane


@pytest.fixture(scope="module")
def admin(plane: ControlPlane) -> Iterator[KubeApi]:
    api = KubeApi.from_kubeconfig(plane.admin.kubeconfig)
    for namespace in (NAMESPACE, OPERATOR_NAMESPACE):
        # the Pod Security Standards' restricted level, enforced (the PodSecurity admission
        # plugin): the operator's pod and every pod it builds meet it
        labels = {"pod-security.kubernetes.io/enforce": "restricted"}
        body = {"metadata": {"name": namespace, "labels": labels}}
        assert api.request("POST", "/api/v1/namespaces", body=body).status == 201
    install(api, render([NAMESPACE]))  # CRDs, ServiceAccount, RBAC, Services, Deployment
    yield api
    api.close()


def served(call: Callable[[], KubeResponse]) -> KubeResponse:
    """A CRD's resource is served a moment after the CRD is created (404 until then)."""
    return wait_for(lambda: (r := call()).status != 404 and r, "the CRD's resource served", 60)


def test_every_example_passes_the_real_servers_validation(admin: KubeApi) -> None:
    checked = []
    for path in sorted(ROOT.glob("examples/*/*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "FinishableSparkJob":
                continue
            response = served(
                lambda doc=doc: admin.request("POST", COLLECTION, body=doc, query={"dryRun": "All"})
            )
            assert response.status == 201, f"{path}: {response.body}"
            checked.append(path.name)
    assert len(checked) == 10, checked  # four Batch, six Streaming (platform.yaml the latest)


def test_every_pod_the_operator_builds_meets_the_restricted_level(admin: KubeApi) -> None:
    """Driver, standby, upgrade check, savepoint disposal, shuffle and executor pods, each
    admitted by the server in a namespace that enforces the restricted level (a dry run)."""
    job = JobRef(name="secure", namespace=NAMESPACE, uid="00000000-0000-0000-0000-000000000001")
    spec = FinishableSparkJobSpec.model_validate(
        {"image": "img:1", "mode": "Batch", "application": {"file": "local:///app/job.py"}}
    )
    account = {"metadata": {"name": "secure-driver"}}
    path = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts"
    assert admin.request("POST", path, body=account).status in (201, 409)
    wait_for(  # the controller-manager gives each new namespace its "default" account
        lambda: admin.request("GET", f"{path}/default").status == 200,
        "the namespace's default ServiceAccount",
        60,
    )
    shuffle = builders.shuffle_stateful_set(job, spec)["spec"]["template"]
    executor = podparts.executor_pod_template(spec)
    executor["spec"]["containers"][0]["image"] = spec.image  # Spark fills it in
    pods = {
        "driver": builders.driver_pod(job, spec, 1, ""),
        "standby": builders.driver_pod(job, spec, 2, "", standby=True),
        "upgrade check": upgradecheck.check_pod(
            job, spec, generation=2, run=1, attempt=1, restore_from="", master="local[1]"
        ),
        "disposal": disposalplan.disposal_pod(job, spec, "secure-savepoint-1", "s3://b/sp-1"),
        # the StatefulSet's pod, its claim's volume as the controller adds it
        "shuffle": {
            "metadata": {"name": "secure-shuffle-0"},
            "spec": {**shuffle["spec"], "volumes": [{"name": "data", "emptyDir": {}}]},
        },
        "executor": {**executor, "metadata": {"name": "secure-exec-1"}},
    }
    for what, built in pods.items():
        meta = {k: v for k, v in built["metadata"].items() if k != "ownerReferences"}
        pod = {**built, "apiVersion": "v1", "kind": "Pod", "metadata": meta}
        response = admin.request(
            "POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body=pod, query={"dryRun": "All"}
        )
        assert response.status == 201, f"the {what} pod: {response.body.get('message')}"


def test_the_operator_runs_a_job_with_the_charts_rbac_and_nothing_is_refused(
    plane: ControlPlane, admin: KubeApi, tmp_path: Path
) -> None:
    node = plane.node(NODE)
    token = admin.request(
        "POST",
        f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/serviceaccounts/{RELEASE}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert token.status == 201, token.body
    identity = plane.token_identity(OPERATOR_USER, token.body["status"]["token"])
    operator = OperatorProcess(tmp_path, plane.url, "", [NAMESPACE])
    operator.kubeconfig.write_text(identity.kubeconfig.read_text())
    operator.start()
    try:
        job = {
            "apiVersion": JOBS,
            "kind": "FinishableSparkJob",
            "metadata": {"name": "first"},
            "spec": {"image": "finishable-spark:test", "application": {"file": "local:///job.py"}},
        }
        assert served(lambda: admin.request("POST", COLLECTION, body=job)).status == 201

        def bound_driver() -> dict[str, Any] | None:
            path = f"/api/v1/namespaces/{NAMESPACE}/pods/first-driver-1"
            response = admin.request("GET", path)
            found = response.status == 200 and response.body["spec"].get("nodeName")
            return response.body if found else None

        pod = wait_for(
            bound_driver,
            "the driver pod, created by the operator and bound by the scheduler",
            120,
            on_fail=operator.log,
        )
        assert pod["spec"]["nodeName"] == NODE
        status = admin.request("GET", f"{COLLECTION}/first").body["status"]
        assert status["phase"] == "Submitted", status
    finally:
        operator.stop()
        node.stop()

    audit = AuditLog(plane.audit_log)
    assert audit.requests(OPERATOR_USER), "the operator's requests are in the audit log"
    refused = audit.refused(OPERATOR_USER)
    assert refused == [], json.dumps(refused, indent=1)
    creates = audit.requests(OPERATOR_USER, verb="create", resource="pods")
    assert [event["objectRef"].get("name") for event in creates] == ["first-driver-1"]
