"""The local cluster's pure parts: container paths and StatefulSet children."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from e2e.localcluster.kubelet import Container, ProcessKubelet
from e2e.localcluster.paths import PathMap
from e2e.localcluster.statefulsets import orphaned, stateful_claim, stateful_pod
from finishable.kube.api import KubeApi
from tests.support.k8s_emulator import EmulatorServer

PATHS = PathMap({"/data": "/h/data", "/tmp/finishable": "/h/work", "/opt/app/": "/repo/app"})


def test_paths_are_rewritten_at_path_boundaries_only() -> None:
    cases = {
        "--input=/data/orders": "--input=/h/data/orders",
        "/data": "/h/data",
        '{"work_dir": "/tmp/finishable/work"}': '{"work_dir": "/h/work/work"}',
        "local:///opt/app/main.py": "local:///repo/app/main.py",
        "file:///data/x": "file:///h/data/x",
        "a:/data/b": "a:/h/data/b",
        "/database": "/database",
        "/tmp/finishable2": "/tmp/finishable2",
        "http://host/data": "http://host/data",
        "s3://bucket/data/x": "s3://bucket/data/x",
    }
    assert {text: PATHS.translate(text) for text in cases} == cases
    assert str(PATHS.host_path("/data/in")) == "/h/data/in"
    assert str(PATHS.host_path("/elsewhere")) == "/elsewhere"


def stateful_set(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "job-shuffle", "namespace": "ns", "uid": "sts-1"},
        "spec": {
            "replicas": 2,
            "serviceName": "job-shuffle-headless",
            "template": {
                "metadata": {"labels": {"app": "shuffle"}},
                "spec": {"containers": [{"name": "shuffle", "image": "i"}]},
            },
            "volumeClaimTemplates": [
                {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
            ],
            **spec,
        },
    }


def test_stateful_pods_have_stable_names_dns_and_their_own_claims() -> None:
    sts = stateful_set(persistentVolumeClaimRetentionPolicy={"whenDeleted": "Delete"})
    pod = stateful_pod(sts, 1)
    assert pod["metadata"]["name"] == "job-shuffle-1"
    assert pod["metadata"]["labels"] == {
        "app": "shuffle",
        "statefulset.kubernetes.io/pod-name": "job-shuffle-1",
    }
    assert pod["spec"]["hostname"] == "job-shuffle-1"
    assert pod["spec"]["subdomain"] == "job-shuffle-headless"
    assert pod["spec"]["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-job-shuffle-1"}}
    ]
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "sts-1"
    claim = stateful_claim(sts, sts["spec"]["volumeClaimTemplates"][0], 1)
    assert claim["metadata"]["name"] == "data-job-shuffle-1"
    assert claim["metadata"]["ownerReferences"][0]["uid"] == "sts-1"
    retained = stateful_claim(stateful_set(), sts["spec"]["volumeClaimTemplates"][0], 0)
    assert "ownerReferences" not in retained["metadata"]  # whenDeleted: Retain (the default)
    assert "volumes" not in sts["spec"]["template"]["spec"], "the template is not changed"


def test_only_dependents_of_deleted_stateful_sets_are_orphans() -> None:
    pod = stateful_pod(stateful_set(), 0)
    assert orphaned(pod, set())
    assert not orphaned(pod, {"sts-1"})
    assert not orphaned({"metadata": {"name": "bare"}}, set())


def test_the_kubelet_writes_the_token_volume_and_the_pod_calls_as_its_account(
    tmp_path: Path,
) -> None:
    """The admission plugin's ``kube-api-access-*`` volume, written by the process kubelet: a
    token from the TokenRequest API (bound to the pod), ``ca.crt`` and the namespace, at the
    mount path; the pod's kubeconfig carries that token, not the admin's."""
    with EmulatorServer(required_token="admin-token") as server:
        api = KubeApi.for_url(server.url, token="admin-token", namespace="ns1")
        api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "ns1"}})
        body = {
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i", "command": ["true"]}]},
        }
        pod = api.request("POST", api.path("pods"), body=body).body
        kubelet = ProcessKubelet(
            api, tmp_path, server=server.url, token="admin-token", image_paths={}, bin_dir=tmp_path
        )
        meta = pod["metadata"]
        container = Container("ns1", "p", meta["uid"], "127.1.0.2", tmp_path / "p", pod)
        _, env, _ = kubelet._prepare(container)
        [volume] = pod["spec"]["volumes"]
        files = tmp_path / "p" / "volumes" / volume["name"]
        token = (files / "token").read_text()
        assert (files / "namespace").read_text() == "ns1"
        assert (files / "ca.crt").read_text().startswith("-----BEGIN CERTIFICATE-----")
        credentials = json.loads(Path(env["KUBECONFIG"]).read_text())
        assert credentials["users"][0]["user"]["token"] == token != "admin-token"
        assert server.emulator is not None
        user = server.emulator.users[token]
        assert user.name == "system:serviceaccount:ns1:default" and user.bound_pod == "p"
        api.close()
