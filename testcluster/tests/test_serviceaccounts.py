"""ServiceAccounts as a real API server has them (testcluster/apiserver/admission.py), over HTTP:
the namespace's ``default`` account and root CA, the admission plugin's pod mutation and
refusal, and TokenRequest."""

from __future__ import annotations

import datetime
import re
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from finishable.kube.api import KubeApi
from testcluster.apiserver.emulator import EmulatorServer
from testcluster.tests.conftest import TOKEN

pytestmark = pytest.mark.quick

MOUNT = {"readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
# plugin/pkg/admission/serviceaccount/admission.go's volume, field for field.
PROJECTED = {
    "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {
            "downwardAPI": {
                "items": [
                    {
                        "path": "namespace",
                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                    }
                ]
            }
        },
    ],
    "defaultMode": 420,
}


@pytest.fixture
def api(k8s_server: EmulatorServer) -> Iterator[KubeApi]:
    """A fresh namespace, created through the API as ``kubectl create namespace`` does."""
    namespace = f"sa-{secrets.token_hex(4)}"
    api = KubeApi.for_url(k8s_server.url, token=TOKEN, namespace=namespace)
    created = api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    assert created.status == 201, created.body
    yield api
    api.close()


def pod(name: str, **spec: Any) -> dict[str, Any]:
    containers = [{"name": "main", "image": "i"}, {"name": "side", "image": "i"}]
    return {"metadata": {"name": name}, "spec": {"containers": containers, **spec}}


def test_a_new_namespace_has_the_default_account_and_the_root_ca(api: KubeApi) -> None:
    account = api.request("GET", api.path("serviceaccounts", "default"))
    assert account.status == 200, account.body
    root_ca = api.request("GET", api.path("configmaps", "kube-root-ca.crt"))
    assert root_ca.status == 200, root_ca.body
    assert root_ca.body["data"]["ca.crt"].startswith("-----BEGIN CERTIFICATE-----\n")


def test_admission_defaults_the_account_and_mounts_its_token_everywhere(api: KubeApi) -> None:
    body = pod("p1", initContainers=[{"name": "init", "image": "i"}])
    created = api.request("POST", api.path("pods"), body=body)
    assert created.status == 201, created.body
    spec = created.body["spec"]
    assert spec["serviceAccountName"] == "default"
    [volume] = spec["volumes"]
    assert re.fullmatch(r"kube-api-access-[bcdfghjklmnpqrstvwxz2456789]{5}", volume["name"])
    assert volume["projected"] == PROJECTED
    for container in spec["initContainers"] + spec["containers"]:
        assert container["volumeMounts"] == [{"name": volume["name"], **MOUNT}]


def test_a_pod_whose_account_does_not_exist_is_refused(api: KubeApi) -> None:
    refused = api.request("POST", api.path("pods"), body=pod("p2", serviceAccountName="ghost"))
    assert refused.status == 403
    assert refused.body["reason"] == "Forbidden"
    assert refused.body["message"] == (
        f'pods "p2" is forbidden: error looking up service account {api.namespace}/ghost: '
        'serviceaccount "ghost" not found'
    )


def test_automount_false_on_the_pod_or_its_account_mounts_nothing(api: KubeApi) -> None:
    quiet = {"metadata": {"name": "quiet"}, "automountServiceAccountToken": False}
    assert api.request("POST", api.path("serviceaccounts"), body=quiet).status == 201
    on_pod = api.request(
        "POST", api.path("pods"), body=pod("p3", automountServiceAccountToken=False)
    )
    on_account = api.request("POST", api.path("pods"), body=pod("p4", serviceAccountName="quiet"))
    overridden = api.request(
        "POST",
        api.path("pods"),
        body=pod("p5", serviceAccountName="quiet", automountServiceAccountToken=True),
    )
    for created in (on_pod, on_account):
        assert created.status == 201, created.body
        assert "volumes" not in created.body["spec"]
        assert all("volumeMounts" not in c for c in created.body["spec"]["containers"])
    assert overridden.body["spec"]["volumes"][0]["name"].startswith("kube-api-access-")


def test_token_request_answers_as_the_server_and_authenticates_as_the_account(
    api: KubeApi, k8s_server: EmulatorServer
) -> None:
    created = api.request("POST", api.path("pods"), body=pod("p6"))
    uid = created.body["metadata"]["uid"]
    path = api.path("serviceaccounts", "default") + "/token"
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": 3607,
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p6", "uid": uid},
        },
    }
    answer = api.request("POST", path, body=request)
    assert answer.status == 201, answer.body
    assert answer.body["kind"] == "TokenRequest"
    assert answer.body["apiVersion"] == "authentication.k8s.io/v1"
    assert answer.body["spec"]["audiences"] == ["https://kubernetes.default.svc.cluster.local"]
    assert answer.body["spec"]["expirationSeconds"] == 3607
    expires = datetime.datetime.fromisoformat(answer.body["status"]["expirationTimestamp"])
    left = (expires - datetime.datetime.now(datetime.UTC)).total_seconds()
    assert 3600 < left <= 3607
    token = answer.body["status"]["token"]

    assert k8s_server.emulator is not None
    user = k8s_server.emulator.users[token]
    assert user.name == f"system:serviceaccount:{api.namespace}:default"
    assert f"system:serviceaccounts:{api.namespace}" in user.groups
    assert user.bound_pod == "p6"
    as_account = KubeApi.for_url(k8s_server.url, token=token, namespace=api.namespace)
    stranger = KubeApi.for_url(k8s_server.url, token="nobody", namespace=api.namespace)
    try:
        seen = as_account.request("GET", api.path("pods", "p6"))
        assert seen.status != 401, seen.body  # authenticated (RBAC may still refuse: 403)
        if seen.status == 403:
            assert f'User "{user.name}"' in seen.message
        assert stranger.request("GET", api.path("pods", "p6")).status == 401
    finally:
        as_account.close()
        stranger.close()


def test_token_request_refusals(api: KubeApi) -> None:
    missing = api.request("POST", api.path("serviceaccounts", "ghost") + "/token", body={})
    assert missing.status == 404
    assert missing.body["message"] == 'serviceaccounts "ghost" not found'
    short = api.request(
        "POST",
        api.path("serviceaccounts", "default") + "/token",
        body={"spec": {"expirationSeconds": 60}},
    )
    assert short.status == 400
    assert "may not specify a duration less than 10 minutes" in short.body["message"]
