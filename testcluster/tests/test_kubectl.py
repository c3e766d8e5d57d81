"""What kubectl asks of the API server (testcluster/apiserver/kubectl.py), checked over HTTP without
the binary: e2e/test_kubectl.py runs the real one."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from finishable.kube.api import KubeApi
from testcluster.apiserver.emulator import EmulatorServer
from testcluster.apiserver.kubectl import human_duration
from testcluster.tests.conftest import TOKEN

pytestmark = pytest.mark.quick

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "finishablesparkjobs.finishable.dev.yaml"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
JOBS = "/apis/finishable.dev/v1alpha1"


@pytest.fixture
def api(k8s_server: EmulatorServer) -> Iterator[KubeApi]:
    api = KubeApi.for_url(k8s_server.url, token=TOKEN, namespace=f"kc-{secrets.token_hex(4)}")
    crd = yaml.safe_load(CRD.read_text())
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    assert api.request("POST", path, body=crd).status in (201, 409)
    yield api
    api.close()


def job(name: str) -> dict[str, object]:
    return {
        "apiVersion": "finishable.dev/v1alpha1",
        "kind": "FinishableSparkJob",
        "metadata": {"name": name},
        "spec": {"mode": "Streaming", "application": {"file": "a.py"}, "state": "Running"},
    }


def test_version_and_discovery_as_a_v1_33_server(api: KubeApi) -> None:
    version = api.request("GET", "/version").body
    assert (version["major"], version["minor"]) == ("1", "33")
    core = api.request("GET", "/api/v1").body
    assert core["groupVersion"] == "v1"
    status = next(r for r in core["resources"] if r["name"] == "pods/status")
    assert status["verbs"] == ["get", "patch", "update"] and "shortNames" not in status
    jobs = api.request("GET", JOBS).body
    assert [r["name"] for r in jobs["resources"]] == [
        "finishablesparkjobs",
        "finishablesparkjobs/status",
    ]
    assert jobs["resources"][0]["shortNames"] == ["fsj"]


def test_openapi_v3_has_the_crd_schema_and_field_validation(api: KubeApi) -> None:
    index = api.request("GET", "/openapi/v3").body["paths"]
    url = index["apis/finishable.dev/v1alpha1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/finishable.dev/v1alpha1?hash=")
    document = api.request("GET", "/openapi/v3/apis/finishable.dev/v1alpha1").body
    patch = document["paths"][f"{JOBS}/namespaces/{{namespace}}/finishablesparkjobs/{{name}}"][
        "patch"
    ]
    gvk = {"group": "finishable.dev", "version": "v1alpha1", "kind": "FinishableSparkJob"}
    assert patch["x-kubernetes-group-version-kind"] == gvk
    assert {(p["name"], p["in"]) for p in patch["parameters"]} >= {("fieldValidation", "query")}
    schema = document["components"]["schemas"]["dev.finishable.v1alpha1.FinishableSparkJob"]
    assert schema["x-kubernetes-group-version-kind"] == [gvk]
    assert "recovery" in schema["properties"]["spec"]["properties"]


def test_tables_use_the_printer_columns(api: KubeApi) -> None:
    assert (
        api.request(
            "POST",
            api.path("finishablesparkjobs", api_version="finishable.dev/v1alpha1"),
            body=job("t1"),
        ).status
        == 201
    )
    listed = api.request(
        "GET", api.path("finishablesparkjobs", api_version="finishable.dev/v1alpha1"), accept=TABLE
    ).body
    assert listed["kind"] == "Table" and listed["apiVersion"] == "meta.k8s.io/v1"
    names = [c["name"] for c in listed["columnDefinitions"]]
    assert names == ["Name", "Phase", "State", "Checkpoint", "Attempt", "Executors", "Mode", "Age"]
    [row] = listed["rows"]
    assert row["cells"][:7] == ["t1", None, "Running", None, None, None, "Streaming"]
    assert row["cells"][7].endswith("s")
    assert row["object"]["kind"] == "PartialObjectMetadata"
    pods = api.request("GET", api.path("pods"), accept=TABLE).body
    assert [c["name"] for c in pods["columnDefinitions"]] == ["Name", "Age"]


def test_field_selectors_by_name_and_refused_for_other_fields(api: KubeApi) -> None:
    path = api.path("finishablesparkjobs", api_version="finishable.dev/v1alpha1")
    for name in ("f1", "f2"):
        assert api.request("POST", path, body=job(name)).status == 201
    picked = api.request("GET", path, query={"fieldSelector": "metadata.name=f2"}).body
    assert [i["metadata"]["name"] for i in picked["items"]] == ["f2"]
    others = api.request("GET", path, query={"fieldSelector": "metadata.name!=f2"}).body
    assert [i["metadata"]["name"] for i in others["items"]] == ["f1"]
    refused = api.request("GET", path, query={"fieldSelector": "spec.state=Running"})
    assert refused.status == 400
    assert refused.body["message"] == "field label not supported: spec.state"


def test_ages_print_as_kubectl_prints_them() -> None:
    cases = {5: "5s", 119: "119s", 150: "2m30s", 600: "10m", 3 * 3600 + 60: "3h1m", 9 * 3600: "9h"}
    assert {s: human_duration(s) for s in cases} == cases
    assert human_duration(3 * 86400 + 3600) == "3d1h"
