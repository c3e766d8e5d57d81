"""The operator as deployed: authenticated as the chart's ServiceAccount, authorized by the chart's
roles and bindings as helm renders them, under the OwnerReferencesPermissionEnforcement admission
plugin, with the same job's life as ``test_rbac`` drives.

``test_rbac`` compares the calls the operator makes (as admin) with the chart's rules; it cannot
see what admission checks beyond the call itself (orphaning a snapshot needs ``delete`` on it,
an owner reference that blocks deletion needs ``update`` on the owner's finalizers). Here the
API emulator refuses what a real API server would, so such a gap fails the scenario: a refused
finalizer leaves the deleted job behind, a refused create leaves the job short of its phase.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from testcluster.apiserver.emulator import CALLS_PATH, REFUSALS_PATH, EmulatorServer
from testcluster.chart.helm import NAMESPACE as RELEASE_NAMESPACE
from testcluster.chart.helm import template
from testcluster.chart.rbac import MODES, OPERATOR_CLIENTS
from tests.charts.test_rbac import NAMESPACE, TOKEN, drive_a_job_through_its_lifecycle
from tests.controller.cluster import Cluster, OperatorProcess, install

pytestmark = pytest.mark.quick

PLURALS = {
    "ServiceAccount": "serviceaccounts",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
}


def apply_chart_rbac(k8s: Cluster, mode: str) -> tuple[str, str]:
    """Create the chart's ServiceAccount, roles and bindings as helm renders them in ``mode``;
    returns the account's (namespace, name)."""
    docs = template(*([f"watchNamespaces={{{NAMESPACE}}}"] if mode == "namespaced" else []))
    created = k8s.api.request(
        "POST", "/api/v1/namespaces", body={"metadata": {"name": RELEASE_NAMESPACE}}
    )
    assert created.status in (201, 409), created.body
    [account] = [doc for doc in docs if doc["kind"] == "ServiceAccount"]
    for doc in docs:
        kind, meta = doc["kind"], doc["metadata"]
        if kind not in PLURALS:
            continue
        if kind.startswith("Cluster"):
            path = f"/apis/{doc['apiVersion']}/{PLURALS[kind]}"
        else:
            path = k8s.api.path(
                PLURALS[kind], namespace=meta["namespace"], api_version=doc["apiVersion"]
            )
        response = k8s.api.request("POST", path, body=doc)
        assert response.status == 201, (kind, meta["name"], response.body)
    return str(account["metadata"]["namespace"]), str(account["metadata"]["name"])


@pytest.fixture(params=sorted(MODES))
def deployed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Cluster, str]]:
    mode = str(request.param)
    with EmulatorServer(
        required_token=TOKEN, authorize=True, owner_reference_enforcement=True
    ) as server:
        assert server.emulator is not None
        k8s = Cluster(server.url, TOKEN, NAMESPACE)
        install(k8s.api, [NAMESPACE])
        namespace, name = apply_chart_rbac(k8s, mode)
        token = server.emulator.issue_token(namespace, name)
        namespaces = [NAMESPACE] if mode == "namespaced" else []
        operator = OperatorProcess(tmp_path, server.url, token, namespaces).start()
        try:
            yield k8s, server.url
        finally:
            operator.stop()
        with urllib.request.urlopen(server.url + REFUSALS_PATH, timeout=10) as response:
            refusals = json.loads(response.read())
        forbidden = [r for r in refusals if r["status"] == 403 and r["client"] in OPERATOR_CLIENTS]
        assert not forbidden, f"{mode}: the API refused the operator: {forbidden[:5]}"


def test_the_charts_account_runs_a_job_through_its_life_under_admission(
    deployed: tuple[Cluster, str],
) -> None:
    k8s, url = deployed
    drive_a_job_through_its_lifecycle(k8s)  # ends when the deleted job is gone
    with urllib.request.urlopen(url + CALLS_PATH, timeout=10) as response:
        calls = json.loads(response.read())
    assert any(c["client"] in OPERATOR_CLIENTS for c in calls), "the operator made calls"
