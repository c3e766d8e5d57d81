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

from finishable.api.models import API_GROUP, API_VERSION, KIND, PLURAL
from finishable.controller import naming
from finishable.controller.job import builders
from finishable.kube.api import KubeApi, KubeApiError
from finishable.kube.objects import (
    LABEL_COMPONENT,
    LABEL_JOB,
    JobRef,
    job_label_value,
    owner_reference,
)
from finishable.state import (
    BackendError,
    CheckpointStore,
    CheckpointTooLarge,
    open_backend,
)
from finishable.state.configmap import (
    ANNOTATION_NAME,
    LABEL_ROLE,
    ConfigMapBackend,
    upsert_configmap,
)
from testcluster.apiserver.emulator import EmulatorServer

from .conftest import NAMESPACE, TOKEN

pytestmark = pytest.mark.quick

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
    CheckpointStore(backend).put_checkpoint(7, payload)
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
    store = CheckpointStore(backend)
    with pytest.raises(CheckpointTooLarge) as raised:
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
    store = CheckpointStore(ConfigMapBackend(api, "part-job"))
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


# -- under RBAC and OwnerReferencesPermissionEnforcement ------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def enforcing() -> Iterator[tuple[EmulatorServer, KubeApi, JobRef]]:
    """An API server with RBAC and the OwnerReferencesPermissionEnforcement admission plugin, a
    job, and its driver's ServiceAccount, Role and RoleBinding as the operator creates them."""
    with EmulatorServer(
        required_token=TOKEN, authorize=True, owner_reference_enforcement=True
    ) as server:
        admin = KubeApi.for_url(server.url, token=TOKEN, namespace="guarded")
        namespace = {"metadata": {"name": "guarded"}}
        assert admin.request("POST", "/api/v1/namespaces", body=namespace).status == 201
        crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        for crd in yaml.safe_load_all((ROOT / "crds" / f"{PLURAL}.{API_GROUP}.yaml").read_text()):
            assert admin.request("POST", crds, body=crd).status == 201
        manifest = {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND}
        created = admin.request(
            "POST",
            admin.path(PLURAL, api_version=f"{API_GROUP}/{API_VERSION}"),
            body={
                **manifest,
                "metadata": {"name": "etl"},
                "spec": {"application": {"file": "x.py"}},
            },
        )
        assert created.status == 201, created.body
        job = JobRef("etl", "guarded", created.body["metadata"]["uid"])
        for kind, child in (
            ("serviceaccounts", builders.service_account(job)),
            ("roles", builders.role(job)),
            ("rolebindings", builders.role_binding(job)),
        ):
            group = "rbac.authorization.k8s.io/v1" if kind != "serviceaccounts" else "v1"
            response = admin.request("POST", admin.path(kind, api_version=group), body=child)
            assert response.status == 201, response.body
        assert server.emulator is not None
        token = server.emulator.issue_token("guarded", naming.rbac_name("etl"))
        driver = KubeApi.for_url(server.url, token=token, namespace="guarded")
        yield server, driver, job
        driver.close()
        admin.close()


def test_an_upsert_refused_by_admission_replaces_what_exists_and_names_the_refusal(
    enforcing: tuple[EmulatorServer, KubeApi, JobRef],
) -> None:
    """Admission runs before the storage looks for the name: a create that admission refuses
    (403) says nothing about whether the object exists, unlike the 409 the upsert expects. A
    driver may not set blockOwnerDeletion on a reference to its job (no update on the job's
    finalizers), so its create of an existing ConfigMap is refused; the replace of that object,
    which blocks nothing new, goes through. For an object that does not exist, the refusal stands
    and the error carries the plugin's message."""
    server, driver, job = enforcing
    assert server.emulator is not None
    blocking = owner_reference(job)
    existing = {
        "metadata": {"name": "etl-state", "ownerReferences": [blocking]},
        "data": {"a": "1"},
    }
    admin = KubeApi.for_url(server.url, token=TOKEN, namespace="guarded")
    assert admin.request("POST", admin.path("configmaps"), body=existing).status == 201

    body = {"metadata": {"name": "etl-state", "ownerReferences": [blocking]}, "data": {"a": "2"}}
    assert upsert_configmap(driver, body) is True
    assert admin.request("GET", admin.path("configmaps", "etl-state")).body["data"] == {"a": "2"}

    absent = {"metadata": {"name": "etl-other", "ownerReferences": [blocking]}, "data": {}}
    with pytest.raises(KubeApiError) as refused:
        upsert_configmap(driver, absent)
    assert refused.value.status == 403
    assert "cannot set blockOwnerDeletion" in str(refused.value)

    # What the driver writes: a reference that does not block its job's deletion.
    mine = owner_reference(job, block_owner_deletion=False)
    fresh = {"metadata": {"name": "etl-other", "ownerReferences": [mine]}, "data": {}}
    assert upsert_configmap(driver, fresh) is False
    admin.close()
