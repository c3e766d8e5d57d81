"""The API-server behaviour our emulator extension adds to kmock, checked over HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from finishable.state.kubeapi import KubeApi
from tests.conftest import TOKEN
from tests.support.k8s_emulator import EmulatorServer, labels_match, parse_label_selector


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
