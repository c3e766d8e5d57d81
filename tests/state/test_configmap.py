"""What is specific to the ConfigMap backend: the split format, the size limit, cluster access."""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from finishable.state import (
    BackendError,
    SnapshotStore,
    SnapshotTooLarge,
    open_backend,
)
from finishable.state.configmap import (
    ANNOTATION_NAME,
    LABEL_COMPONENT,
    LABEL_JOB,
    LABEL_ROLE,
    ConfigMapBackend,
    job_label_value,
)
from finishable.state.kubeapi import KubeApi
from tests.support.k8s_emulator import EmulatorServer

from .conftest import NAMESPACE, TOKEN

MiB = 1024 * 1024


@pytest.fixture
def api(k8s_server: EmulatorServer) -> Iterator[KubeApi]:
    api = KubeApi.for_url(k8s_server.url, token=TOKEN, namespace=NAMESPACE)
    yield api
    api.close()


def configmaps(api: KubeApi, job: str) -> dict[str, dict[str, object]]:
    response = api.request(
        "GET", api.path("configmaps"), query={"labelSelector": f"{LABEL_JOB}={job}"}
    )
    assert response.status == 200
    return {item["metadata"]["name"]: item for item in response.body["items"]}


def test_split_format_and_labels(api: KubeApi) -> None:
    backend = ConfigMapBackend(api, "split-job")
    payload = os.urandom(2 * MiB + 5)
    SnapshotStore(backend).put_checkpoint(7, payload)
    objects = configmaps(api, "split-job")
    head = "split-job-snapshots.chk-000000000007.blob"
    assert set(objects) == {
        head,
        f"{head}-part-0000",
        f"{head}-part-0001",
        f"{head}-part-0002",
        "split-job-snapshots.chk-000000000007.meta",
    }
    for obj in objects.values():
        metadata = obj["metadata"]
        assert isinstance(metadata, dict)
        assert metadata["labels"][LABEL_JOB] == "split-job"
        assert metadata["labels"][LABEL_COMPONENT] == "state"
        assert metadata["annotations"][ANNOTATION_NAME].startswith("snapshots/chk-000000000007.")
    head_obj = objects[head]
    assert head_obj["metadata"]["labels"][LABEL_ROLE] == "object"  # type: ignore[index]
    manifest = json.loads(head_obj["data"]["manifest"])  # type: ignore[index]
    assert [p["name"] for p in manifest["parts"]] == [f"{head}-part-{i:04d}" for i in range(3)]
    assert [p["size"] for p in manifest["parts"]] == [
        1_000_000,
        1_000_000,
        2 * MiB + 5 + 48 - 2_000_000,
    ]
    part = objects[f"{head}-part-0001"]
    assert part["metadata"]["labels"][LABEL_ROLE] == "part"  # type: ignore[index]
    assert len(base64.b64decode(part["binaryData"]["data"])) == 1_000_000  # type: ignore[index]


def test_too_large_is_refused_naming_the_limit_and_the_size(api: KubeApi) -> None:
    backend = ConfigMapBackend(api, "big-job", max_total_bytes=3 * MiB)
    store = SnapshotStore(backend)
    with pytest.raises(SnapshotTooLarge) as raised:
        store.put_checkpoint(1, b"x" * (4 * MiB))
    message = str(raised.value)
    assert "max_total_bytes=3145728" in message
    assert str(4 * MiB + 48) in message  # the framed blob's size
    assert "checkpoint 1" in message
    assert configmaps(api, "big-job") == {}  # nothing half-written


def test_a_single_configmap_above_1mib_is_rejected_by_the_api(api: KubeApi) -> None:
    """Why the split exists: the (emulated) API server enforces the real limit."""
    body = {
        "metadata": {"name": "too-big"},
        "binaryData": {"data": base64.b64encode(b"x" * (MiB + 1)).decode()},
    }
    response = api.request("POST", api.path("configmaps"), body=body)
    assert response.status == 422
    assert "1048576" in response.message
    with pytest.raises(ValueError, match="chunk_bytes"):
        ConfigMapBackend(api, "job", chunk_bytes=MiB + 1)


def test_missing_part_falls_back_to_the_previous_snapshot(api: KubeApi) -> None:
    store = SnapshotStore(ConfigMapBackend(api, "part-job"))
    store.put_checkpoint(1, b"small and fine")
    store.put_checkpoint(2, os.urandom(int(1.5 * MiB)))
    head = "part-job-snapshots.chk-000000000002.blob"
    assert api.request("DELETE", api.path("configmaps", f"{head}-part-0001")).status == 200
    latest = store.latest_checkpoint()
    assert latest is not None
    assert latest.id == 1


def test_parts_without_head_are_invisible_and_cleaned(api: KubeApi) -> None:
    """A writer killed between parts and head leaves parts only; delete() removes them."""
    backend = ConfigMapBackend(api, "orphan-job")
    backend.put("x/blob", os.urandom(int(2.5 * MiB)))
    head = "orphan-job-x.blob"
    assert api.request("DELETE", api.path("configmaps", head)).status == 200
    assert len(configmaps(api, "orphan-job")) == 3
    with pytest.raises(Exception, match="not found"):
        backend.get("x/blob")
    backend.delete("x/blob")
    assert configmaps(api, "orphan-job") == {}


def test_concurrent_writers_of_one_name(api: KubeApi) -> None:
    """Create-or-replace under contention: last writer wins, nobody fails."""
    backend = ConfigMapBackend(api, "race-job")
    errors: list[BaseException] = []

    def write(tag: int) -> None:
        try:
            for round_ in range(10):
                backend.put("shared", f"{tag}:{round_}".encode())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(tag,)) for tag in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert backend.get("shared").decode().endswith(":9")


def test_owner_references_and_long_job_names(api: KubeApi) -> None:
    owner = {
        "apiVersion": "finishable.dev/v1alpha1",
        "kind": "FinishableSparkJob",
        "name": "owner",
        "uid": "1234",
        "controller": True,
    }
    job = "a" * 70
    backend = ConfigMapBackend(api, job, owner_references=[owner])
    backend.put("o", b"owned")
    assert backend.get("o") == b"owned"
    assert backend.list() == ["o"]
    obj = api.request("GET", api.path("configmaps", f"{job}-o")).body
    assert obj["metadata"]["ownerReferences"] == [owner]
    assert obj["metadata"]["labels"][LABEL_JOB] == job_label_value(job)
    assert len(job_label_value(job)) <= 63
    with pytest.raises(ValueError, match="not a valid ConfigMap name"):
        backend.put("n" * 200, b"")


def test_wrong_token_is_a_clear_backend_error(k8s_server: EmulatorServer) -> None:
    api = KubeApi.for_url(k8s_server.url, token="wrong", namespace=NAMESPACE)
    with pytest.raises(BackendError, match="HTTP 401"):
        ConfigMapBackend(api, "denied").put("a", b"b")


def test_unreachable_api_server_is_a_backend_error() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    api = KubeApi.for_url(f"http://127.0.0.1:{port}", retries=1, timeout=1)
    with pytest.raises(BackendError, match=r"Connection refused|Max retries|NewConnectionError"):
        ConfigMapBackend(api, "nowhere").get("a")


def test_kubeconfig_and_open_backend(
    k8s_server: EmulatorServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a cluster the backend finds the API server, token and namespace in a kubeconfig."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "emu", "cluster": {"server": k8s_server.url}}],
                "users": [{"name": "me", "user": {"token": TOKEN}}],
                "contexts": [
                    {
                        "name": "ctx",
                        "context": {"cluster": "emu", "user": "me", "namespace": "from-kubeconfig"},
                    }
                ],
                "current-context": "ctx",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    backend = open_backend("configmap:", job="kc-job")
    try:
        assert isinstance(backend, ConfigMapBackend)
        assert backend.namespace == "from-kubeconfig"
        backend.put("k", b"via kubeconfig")
        assert backend.get("k") == b"via kubeconfig"
        assert backend.location("k") == "configmap://from-kubeconfig/kc-job-k"
    finally:
        backend.close()
    explicit = open_backend("configmap://other-ns", job="kc-job")
    try:
        assert isinstance(explicit, ConfigMapBackend)
        assert explicit.namespace == "other-ns"
        assert explicit.list() == []
    finally:
        explicit.close()
