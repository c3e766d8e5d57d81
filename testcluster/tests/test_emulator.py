"""The API-server behaviour our emulator extension adds to kmock, checked over HTTP."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from finishable.kube.api import KubeApi
from testcluster.apiserver.emulator import (
    REFUSALS_PATH,
    EmulatorServer,
    labels_match,
    parse_label_selector,
)
from testcluster.tests.conftest import TOKEN

pytestmark = pytest.mark.quick


@pytest.fixture
def api(k8s_server: EmulatorServer) -> Iterator[KubeApi]:
    api = KubeApi.for_url(k8s_server.url, token=TOKEN, namespace="emulator-tests")
    yield api
    api.close()


def test_resource_versions_replace_and_conflicts(api: KubeApi) -> None:
    body = {"metadata": {"name": "cm1", "labels": {"a": "1"}}, "data": {"k": "v1"}}
    created = api.request("POST", api.path("configmaps"), body=body)
    assert created.status == 201
    version = created.body["metadata"]["resourceVersion"]
    assert created.body["metadata"]["uid"]
    assert api.request("POST", api.path("configmaps"), body=body).status == 409
    replaced = api.request(
        "PUT",
        api.path("configmaps", "cm1"),
        body={"metadata": {"name": "cm1", "resourceVersion": version}, "data": {"k": "v2"}},
    )
    assert replaced.status == 200
    assert int(replaced.body["metadata"]["resourceVersion"]) > int(version)
    assert replaced.body["metadata"]["uid"] == created.body["metadata"]["uid"]
    stale = api.request(
        "PUT",
        api.path("configmaps", "cm1"),
        body={"metadata": {"name": "cm1", "resourceVersion": version}, "data": {"k": "v3"}},
    )
    assert stale.status == 409
    patched = api.request(
        "PATCH", api.path("configmaps", "cm1"), body={"data": {"k": None, "n": "new"}}
    )
    assert patched.status == 200
    assert patched.body["data"] == {"n": "new"}
    fetched = api.request("GET", api.path("configmaps", "cm1"))
    assert fetched.body["data"] == {"n": "new"}
    assert (
        api.request(
            "PUT", api.path("configmaps", "absent"), body={"metadata": {"name": "absent"}}
        ).status
        == 404
    )
    assert api.request("DELETE", api.path("configmaps", "cm1")).status == 200
    assert api.request("GET", api.path("configmaps", "cm1")).status == 404


def test_list_with_label_selectors_and_metadata_only(api: KubeApi) -> None:
    for name, labels in (("l1", {"app": "x", "tier": "a"}), ("l2", {"app": "y"}), ("l3", {})):
        body = {"metadata": {"name": name, "labels": labels}, "data": {"big": "z" * 100}}
        assert api.request("POST", api.path("configmaps"), body=body).status == 201

    def names(selector: str, accept: str | None = None) -> list[str]:
        response = api.request(
            "GET", api.path("configmaps"), query={"labelSelector": selector}, accept=accept
        )
        assert response.status == 200
        return sorted(item["metadata"]["name"] for item in response.body["items"])

    assert names("app=x") == ["l1"]
    assert names("app") == ["l1", "l2"]
    assert names("!app") == ["l3"]
    assert names("app!=x") == ["l2", "l3"]
    assert names("app in (x, y),tier notin (b)") == ["l1", "l2"]
    assert names("") == ["l1", "l2", "l3"]
    partial = api.request(
        "GET",
        api.path("configmaps"),
        query={"labelSelector": "app=x"},
        accept="application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
    )
    assert partial.body["kind"] == "PartialObjectMetadataList"
    assert "data" not in partial.body["items"][0]


def test_invalid_names_and_labels_are_rejected(api: KubeApi) -> None:
    bad_name = {"metadata": {"name": "Not_Valid"}}
    assert api.request("POST", api.path("configmaps"), body=bad_name).status == 422
    bad_label = {"metadata": {"name": "ok", "labels": {"k": "x" * 64}}}
    assert api.request("POST", api.path("configmaps"), body=bad_label).status == 422


def test_selector_parser() -> None:
    terms = parse_label_selector("a=1, b!=2,c,!d,e in (x,y)")
    assert labels_match({"a": "1", "c": "", "e": "y"}, terms)
    assert not labels_match({"a": "1", "c": "", "e": "z"}, terms)
    assert not labels_match({"a": "1", "b": "2", "c": "", "e": "x"}, terms)


def test_namespaces_and_generate_name(api: KubeApi) -> None:
    assert api.request(
        "POST", "/api/v1/namespaces", body={"metadata": {"name": "ns-x"}}
    ).status in (
        201,
        409,
    )
    listed = api.request("GET", "/api/v1/namespaces")
    assert "ns-x" in [item["metadata"]["name"] for item in listed.body["items"]]
    assert api.request("GET", "/api/v1/namespaces/ns-x").body["metadata"]["name"] == "ns-x"
    event = {"metadata": {"generateName": "ev-"}, "reason": "Test", "message": "hello"}
    created = api.request("POST", api.path("events"), body=event)
    assert created.status == 201
    assert created.body["metadata"]["name"].startswith("ev-")


def test_status_subresource_and_generation(api: KubeApi) -> None:
    pod = {"metadata": {"name": "p1"}, "spec": {"containers": []}, "status": {"phase": "Running"}}
    created = api.request("POST", api.path("pods"), body=pod)
    assert created.body["status"] == {"phase": "Pending"}, "a new pod starts Pending"
    assert created.body["metadata"]["generation"] == 1
    merge = "application/merge-patch+json"
    patched = api.request(
        "PATCH",
        api.path("pods", "p1"),
        body={"spec": {"restartPolicy": "Never"}, "status": {"phase": "Failed"}},
        content_type=merge,
    )
    assert patched.body["status"] == {"phase": "Pending"}, "the object ignores status writes"
    assert patched.body["metadata"]["generation"] == 2
    status = api.request(
        "PATCH",
        api.path("pods", "p1", subresource="status"),
        body={"status": {"phase": "Running"}, "spec": {"restartPolicy": "Always"}},
        content_type=merge,
    )
    assert status.body["status"] == {"phase": "Running"}
    assert status.body["spec"]["restartPolicy"] == "Never", "/status changes nothing else"
    assert status.body["metadata"]["generation"] == 2, "a status write keeps the generation"


def test_json_patch_with_test_and_finalizers(api: KubeApi) -> None:
    body = {"metadata": {"name": "fin", "finalizers": ["x/y"]}, "data": {"a": "1"}}
    created = api.request("POST", api.path("configmaps"), body=body)
    version = created.body["metadata"]["resourceVersion"]
    json_patch = "application/json-patch+json"
    stale = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "0"},
        {"op": "add", "path": "/data/b", "value": "2"},
    ]
    assert (
        api.request(
            "PATCH", api.path("configmaps", "fin"), body=stale, content_type=json_patch
        ).status
        == 422
    )
    assert api.request("DELETE", api.path("configmaps", "fin")).status == 200
    marked = api.request("GET", api.path("configmaps", "fin")).body
    assert marked["metadata"]["deletionTimestamp"], "a finalizer holds the object"
    release = [
        {
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": marked["metadata"]["resourceVersion"],
        },
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]
    assert version != marked["metadata"]["resourceVersion"]
    assert (
        api.request(
            "PATCH", api.path("configmaps", "fin"), body=release, content_type=json_patch
        ).status
        == 200
    )
    assert api.request("GET", api.path("configmaps", "fin")).status == 404, (
        "gone with its finalizer"
    )


def owner_configmap(api: KubeApi, name: str) -> dict[str, str]:
    """Create a ConfigMap to own other objects; the owner reference to it."""
    owner = api.request("POST", api.path("configmaps"), body={"metadata": {"name": name}}).body
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": owner["metadata"]["uid"]}


def test_deleting_an_owner_deletes_its_dependents(api: KubeApi) -> None:
    reference = owner_configmap(api, "owner")
    for name in ("child-a", "child-b"):
        child = {"metadata": {"name": name, "ownerReferences": [reference]}}
        assert api.request("POST", api.path("configmaps"), body=child).status == 201
    orphan = {"metadata": {"name": "unrelated"}}
    assert api.request("POST", api.path("configmaps"), body=orphan).status == 201
    assert api.request("DELETE", api.path("configmaps", "owner")).status == 200
    assert api.request("GET", api.path("configmaps", "child-a")).status == 404
    assert api.request("GET", api.path("configmaps", "child-b")).status == 404
    assert api.request("GET", api.path("configmaps", "unrelated")).status == 200


def test_custom_resources_are_served_once_their_crd_exists(api: KubeApi) -> None:
    from finishable.api.crd import build_crd

    path = api.path("finishablesparkjobs", api_version="finishable.dev/v1alpha1")
    created = api.request(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=build_crd()
    )
    assert created.status in (201, 409)
    discovery = api.request("GET", "/apis/finishable.dev/v1alpha1")
    names = {resource["name"] for resource in discovery.body["resources"]}
    assert {"finishablesparkjobs", "finishablesparkjobs/status"} <= names
    job = {
        "metadata": {"name": "j"},
        "spec": {"application": {"file": "a.py"}},
        "status": {"phase": "X"},
    }
    assert "status" not in api.request("POST", path, body=job).body, "status is the operator's"
    assert api.request("GET", path).status == 200


async def _watch(url: str, params: dict[str, str]) -> list[tuple[str, str]]:
    import aiohttp

    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, params=params, headers=headers) as response,
    ):
        lines = [line async for line in response.content if line.strip()]
    events = [json.loads(line) for line in lines]
    return [(event["type"], event["object"]["metadata"]["name"]) for event in events]


async def test_watch_resumes_from_a_version_filters_labels_and_times_out(
    k8s_server: EmulatorServer,
) -> None:
    api = KubeApi.for_url(k8s_server.url, token=TOKEN, namespace="emulator-watch")
    path = api.path("configmaps")
    first = api.request("POST", path, body={"metadata": {"name": "w1", "labels": {"w": "yes"}}})
    since = first.body["metadata"]["resourceVersion"]
    api.request("POST", path, body={"metadata": {"name": "w2", "labels": {"w": "no"}}})
    api.request("POST", path, body={"metadata": {"name": "w3", "labels": {"w": "yes"}}})
    query = {"watch": "true", "labelSelector": "w=yes", "timeoutSeconds": "1"}
    resumed = await _watch(k8s_server.url + path, {**query, "resourceVersion": since})
    assert resumed == [("ADDED", "w3")], "only what came after the version, and only w=yes"
    everything = await _watch(k8s_server.url + path, query)
    assert sorted(everything) == [("ADDED", "w1"), ("ADDED", "w3")]


async def test_a_watch_over_a_websocket_streams_the_same_events(
    k8s_server: EmulatorServer,
) -> None:
    """fabric8 (Spark's Kubernetes client) asks for the WebSocket upgrade on every watch: one
    JSON text frame per event, live events after the initial ones, and an end on timeout."""
    import asyncio

    import aiohttp

    api = KubeApi.for_url(k8s_server.url, token=TOKEN, namespace="emulator-websocket")
    path = api.path("pods")
    pod = {"metadata": {"name": "exec-1", "labels": {"spark-role": "executor"}}}
    pod["spec"] = {"containers": [{"name": "executor", "image": "i"}]}
    assert api.request("POST", path, body=pod).status == 201
    query = {"watch": "true", "labelSelector": "spark-role=executor", "timeoutSeconds": "2"}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(k8s_server.url + path, params=query, headers=headers) as socket,
    ):
        first = await asyncio.wait_for(socket.receive(), 10)
        assert first.type is aiohttp.WSMsgType.TEXT
        assert (
            json.loads(first.data)["type"],
            json.loads(first.data)["object"]["metadata"]["name"],
        ) == (
            "ADDED",
            "exec-1",
        )
        deleted = await asyncio.to_thread(api.request, "DELETE", api.path("pods", "exec-1"))
        assert deleted.status == 200
        event = json.loads((await asyncio.wait_for(socket.receive(), 10)).data)
        assert event["type"] in ("MODIFIED", "DELETED")
        types = [event["type"]]
        async for message in socket:  # the server closes the socket when the watch times out
            types.append(json.loads(message.data)["type"])
        assert types[-1] == "DELETED"
    assert socket.closed
    api.close()


@pytest.mark.parametrize("upgrade", [False, True], ids=["http", "websocket"])
def test_a_watch_whose_client_went_away_is_no_refusal(
    k8s_server: EmulatorServer, monkeypatch: pytest.MonkeyPatch, upgrade: bool
) -> None:
    """kopf closes its watch connections when it stops or restarts a watch; a request whose
    client is gone by the time the headers go out is dropped, as a real server drops it, not
    answered 500 and recorded as a refusal (it failed the operator's strictness test in CI).
    The client's going is made certain: the server's side of the connection is closed when the
    watch is parsed, and the client waits to see it closed before it reads the refusals."""
    import socket

    from testcluster.apiserver import kubectl

    parsed = kubectl.check_field_selector

    def parse_then_lose_the_client(emulator: Any, request: Any) -> None:
        parsed(emulator, request)
        if request.params.get("labelSelector") == "gone=yes":
            request._raw_request.transport.close()

    monkeypatch.setattr(kubectl, "check_field_selector", parse_then_lose_the_client)
    namespace = f"emulator-gone-{'websocket' if upgrade else 'http'}"
    path = f"/api/v1/namespaces/{namespace}/configmaps?watch=true&labelSelector=gone%3Dyes"
    upgrade_headers = (
        "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    )
    head = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: kopf/1\r\n"
        f"Authorization: Bearer {TOKEN}\r\n{upgrade_headers if upgrade else ''}\r\n"
    )
    with socket.create_connection(("127.0.0.1", k8s_server.port), timeout=60) as client:
        client.sendall(head.encode())
        assert client.recv(4096) == b"", "the server drops the connection of a gone client"
    with urllib.request.urlopen(k8s_server.url + REFUSALS_PATH, timeout=60) as answer:
        refusals = json.load(answer)  # served after the dropped watch ended
    assert [r for r in refusals if r["path"] == path] == []


def test_deletecollection_deletes_what_the_selectors_match(k8s_server: EmulatorServer) -> None:
    """Spark deletes its executor pods by label when it stops: a DELETE of the collection."""
    api = KubeApi.for_url(k8s_server.url, token=TOKEN, namespace="emulator-deletecollection")
    path = api.path("pods")
    for name, role in (("exec-1", "executor"), ("exec-2", "executor"), ("driver", "driver")):
        body = {"metadata": {"name": name, "labels": {"spark-role": role}}}
        body["spec"] = {"containers": [{"name": "c", "image": "i"}]}
        assert api.request("POST", path, body=body).status == 201
    deleted = api.request("DELETE", path, query={"labelSelector": "spark-role=executor"})
    assert deleted.status == 200
    assert sorted(item["metadata"]["name"] for item in deleted.body["items"]) == [
        "exec-1",
        "exec-2",
    ]
    left = [pod["metadata"]["name"] for pod in api.request("GET", path).body["items"]]
    assert left == ["driver"]
    # A request the emulator has no answer for (an eviction, here) is recorded, as a refusal.
    eviction = api.path("pods", "driver", subresource="eviction")
    assert api.request("POST", eviction, body={}).status == 404
    assert server_refusals(k8s_server)[-1]["path"] == eviction
    api.close()


def test_a_pod_on_a_node_is_deleted_gracefully(k8s_server: EmulatorServer) -> None:
    """A bound pod stays, marked, until its kubelet deletes it with no grace left (a Role deleted
    as soon as its pod is asked to go would fail the pod's last calls); an unbound one goes at
    once; the owner's deletion and deletecollection mark a bound pod the same way."""
    api = KubeApi.for_url(k8s_server.url, token=TOKEN, namespace="emulator-graceful")
    reference = owner_configmap(api, "o")
    for name in ("bound", "unbound", "owned", "listed"):
        body = {
            "metadata": {"name": name, "labels": {"set": name}},
            "spec": {
                "containers": [{"name": "c", "image": "i"}],
                "terminationGracePeriodSeconds": 7,
            },
        }
        if name == "owned":
            body["metadata"]["ownerReferences"] = [reference]
        assert api.request("POST", api.path("pods"), body=body).status == 201
        if name != "unbound":
            binding = {"target": {"kind": "Node", "name": "node-a"}, "metadata": {"name": name}}
            bind = api.path("pods", name, subresource="binding")
            assert api.request("POST", bind, body=binding).status == 201
            assert api.request("POST", bind, body=binding).status == 409, "bound once"
    assert api.request("DELETE", api.path("pods", "unbound")).status == 200
    assert api.request("GET", api.path("pods", "unbound")).status == 404
    marked = api.request("DELETE", api.path("pods", "bound")).body
    assert marked["spec"]["nodeName"] == "node-a"
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 7
    status = {"status": {"phase": "Running"}, "metadata": {"uid": marked["metadata"]["uid"]}}
    patched = api.request(
        "PATCH",
        api.path("pods", "bound", subresource="status"),
        body=status,
        content_type="application/merge-patch+json",
    )
    assert patched.status == 200, "the kubelet reports while it stops the pod"
    assert api.request("DELETE", api.path("configmaps", "o")).status == 200
    listed = api.request("DELETE", api.path("pods"), query={"labelSelector": "set=listed"})
    assert [i["metadata"]["deletionGracePeriodSeconds"] for i in listed.body["items"]] == [7]
    for name in ("bound", "owned", "listed"):
        assert api.request("GET", api.path("pods", name)).body["metadata"]["deletionTimestamp"]
    other = {"preconditions": {"uid": "not-its-uid"}, "gracePeriodSeconds": 0}
    assert api.request("DELETE", api.path("pods", "bound"), body=other).status == 409
    final = {"preconditions": {"uid": marked["metadata"]["uid"]}, "gracePeriodSeconds": 0}
    assert api.request("DELETE", api.path("pods", "bound"), body=final).status == 200
    assert api.request("GET", api.path("pods", "bound")).status == 404
    api.close()


def server_refusals(server: EmulatorServer) -> list[dict[str, object]]:
    assert server.emulator is not None
    return list(server.emulator.refusals)
