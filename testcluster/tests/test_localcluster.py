"""The local cluster's parts: what a kubelet derives from a pod spec, the pod's sandbox, the
StatefulSet children, and the kubelet running real pods (process runtime) through the API."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from finishable.kube.api import KubeApi
from testcluster.apiserver.emulator import EmulatorServer
from testcluster.localcluster.attached import AttachedCluster, NotRunning
from testcluster.localcluster.chart import OPERATOR_NAMESPACE, collection
from testcluster.localcluster.cluster import (
    ACCESS_FILE,
    API_CALLS_FILE,
    API_REFUSALS_FILE,
    LocalCluster,
)
from testcluster.localcluster.container_runtime import security_args
from testcluster.localcluster.deployments import (
    HASH_LABEL,
    DeploymentController,
    replica_pod,
    replica_set_for,
)
from testcluster.localcluster.kubelet import Container, Kubelet, readiness
from testcluster.localcluster.podspec import Image, container_command, expand, hosts_file
from testcluster.localcluster.process_runtime import ProcessRuntime
from testcluster.localcluster.prometheus import scrape_config
from testcluster.localcluster.runtime import CreateError
from testcluster.localcluster.sandbox import Bind, plan_layout
from testcluster.localcluster.statefulsets import orphaned, stateful_claim, stateful_pod

pytestmark = pytest.mark.quick

SHELL = Image(entrypoint=("/bin/sh", "-c"), cmd=("exit 0",), env={"PATH": "/usr/bin:/bin"})


# -- what a kubelet derives from a pod spec -------------------------------------------------------


def test_command_and_args_combine_with_the_image_as_kubernetes_combines_them() -> None:
    image = Image(entrypoint=("/entry.sh",), cmd=("--help",))
    assert container_command(image, None, None) == ["/entry.sh", "--help"]
    # Spark's executor pods carry only args: the image's entrypoint runs them.
    assert container_command(image, None, ["executor"]) == ["/entry.sh", "executor"]
    # A command replaces the entrypoint and drops the image's CMD.
    assert container_command(image, ["finishable", "driver"], None) == ["finishable", "driver"]
    assert container_command(image, ["python"], ["-V"]) == ["python", "-V"]


def test_variable_references_expand_with_the_kubelets_rules() -> None:
    env = {"POD_IP": "10.0.0.7", "EMPTY": ""}
    assert expand("--conf spark.driver.host=$(POD_IP)", env) == "--conf spark.driver.host=10.0.0.7"
    assert expand("$(EMPTY)x", env) == "x"
    assert expand("$(UNSET) stays", env) == "$(UNSET) stays"
    assert expand("$$(POD_IP) is escaped, $$ is $", env) == "$(POD_IP) is escaped, $ is $"
    assert expand("$(POD_IP", env) == "$(POD_IP"
    assert expand("cost: $5", env) == "cost: $5"


def test_the_security_context_becomes_the_container_engines_options() -> None:
    """The chart's operator pod: the image's user kept, fsGroup a supplementary group, a
    read-only root, no privilege escalation, no capabilities."""
    chart_pod = {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 1000,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert security_args(chart_pod, "1000:1000") == [
        "--user", "1000:1000", "--group-add", "1000", "--read-only",
        "--security-opt", "no-new-privileges", "--cap-drop", "ALL",
    ]  # fmt: skip
    assert security_args({"fsGroup": 1000}, "1000:1000") == ["--group-add", "1000"]
    assert security_args({"runAsGroup": 5}, "") == ["--user", "0:5"]
    assert security_args({"runAsNonRoot": True}, "1000") == []
    for context, image_user, why in (
        ({"runAsNonRoot": True}, "", "image will run as root"),
        ({"runAsNonRoot": True, "runAsUser": 0}, "1000", "image will run as root"),
        ({"runAsNonRoot": True}, "finishable", "non-numeric user (finishable)"),
    ):
        with pytest.raises(CreateError, match=re.escape(why)):
            security_args(context, image_user)


def test_readiness_turns_after_the_probes_thresholds_in_a_row() -> None:
    """A slow answer now and then on a loaded node does not take a pod out of its Service."""
    chart = {"failureThreshold": 3}
    ready, streak = True, 0
    for passed in (False, False, True, False, False):  # never three failures in a row
        ready, streak = readiness(chart, ready, streak, passed)
        assert ready
    ready, streak = readiness(chart, ready, streak, False)
    assert (ready, streak) == (False, 0)
    assert readiness(chart, ready, streak, True) == (True, 0)  # successThreshold: 1
    assert readiness({"successThreshold": 2}, False, 0, True) == (False, 1)
    assert readiness({}, True, 1, False) == (True, 2)  # the default failureThreshold is 3


def test_the_hosts_file_stands_in_for_cluster_dns() -> None:
    names = {
        "job-driver.ns.svc": ["127.9.0.4"],
        "job-shuffle-0.job-shuffle-headless.ns.svc": ["127.9.0.5"],
        "other.elsewhere.svc": ["127.9.0.6", "127.9.0.7"],
    }
    text = hosts_file("127.9.0.5", "job-shuffle-0", "ns", names, "job-shuffle-headless")
    lines = text.splitlines()
    assert (
        "127.9.0.5\tjob-shuffle-0.job-shuffle-headless.ns.svc.cluster.local job-shuffle-0" in lines
    )
    assert (
        "127.9.0.4\tjob-driver.ns.svc job-driver.ns.svc.cluster.local job-driver.ns job-driver"
        in lines
    )
    # Another namespace's names resolve only in full, as with the pod's DNS search path.
    assert "127.9.0.6\tother.elsewhere.svc other.elsewhere.svc.cluster.local" in lines
    assert "127.9.0.7\tother.elsewhere.svc other.elsewhere.svc.cluster.local" in lines


class FakeHost:
    """A host file system of a few entries, for the sandbox planner."""

    def __init__(self, entries: dict[str, str]) -> None:
        self.entries = entries  # path -> dir, file or link:<target>

    def kind(self, path: str) -> str | None:
        entry = self.entries.get(path)
        return None if entry is None else entry.split(":")[0]

    def listdir(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        names = [p[len(prefix) :] for p in self.entries if p.startswith(prefix) and p != "/"]
        return sorted(name for name in names if "/" not in name)

    def readlink(self, path: str) -> str:
        return self.entries[path].split(":", 1)[1]

    def realpath(self, path: str) -> str:
        return path


def test_the_sandbox_mirrors_the_host_and_mounts_volumes_at_their_container_paths() -> None:
    host = FakeHost(
        {
            "/": "dir",
            "/usr": "dir",
            "/usr/bin": "dir",
            "/etc": "dir",
            "/etc/passwd": "file",
            "/lib64": "link:usr/lib64",
            "/tmp": "dir",
            "/proc": "dir",
            "/opt": "dir",
        }
    )
    layout = plan_layout(
        [Bind("/h/config", "/etc/finishable", read_only=True), Bind("/h/data", "/data")],
        links={"/etc/hosts": "/etc/podnet/hosts"},
        dirs=("/home/finishable",),
        host=host,
    )
    binds = {bind.target: bind for bind in layout.binds}
    # Whole host directories, read-only (the kernel's writable); nothing created in them.
    assert binds["/usr"] == Bind("/usr", "/usr", read_only=True)
    assert binds["/proc"].read_only is False
    assert binds["/opt"].read_only is True
    # /etc is opened to hold a mount point of its own: its entries are bound one by one.
    assert "/etc" in layout.dirs and "/etc" not in binds
    assert binds["/etc/passwd"] == Bind("/etc/passwd", "/etc/passwd", True, directory=False)
    assert binds["/etc/finishable"].source == "/h/config"
    assert binds["/data"] == Bind("/h/data", "/data")
    # The pod's own /tmp and home; the host's links kept as links.
    assert "/tmp" not in binds and "/tmp" in layout.dirs and "/home/finishable" in layout.dirs
    assert ("/lib64", "usr/lib64") in layout.links
    assert ("/etc/hosts", "/etc/podnet/hosts") in layout.links
    # Volumes come after the host's directories they lie in.
    targets = [bind.target for bind in layout.binds]
    assert targets.index("/data") > targets.index("/usr")


# -- StatefulSets ---------------------------------------------------------------------------------


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


def deployment(**template_spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "op", "namespace": "ns1", "uid": "deploy-1"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "op"}},
            "template": {
                "metadata": {"labels": {"app": "op"}},
                "spec": {"containers": [{"name": "c", "image": "sh"}], **template_spec},
            },
        },
    }


def test_a_deployments_replica_set_is_named_and_labelled_by_its_templates_hash() -> None:
    first = replica_set_for(deployment())
    pod_hash = first["metadata"]["labels"][HASH_LABEL]
    assert first["metadata"]["name"] == f"op-{pod_hash}"
    assert first == replica_set_for(deployment()), "the same template, the same ReplicaSet"
    assert (
        replica_set_for(deployment(hostname="x"))["metadata"]["name"] != first["metadata"]["name"]
    )
    assert first["spec"]["selector"]["matchLabels"] == {"app": "op", HASH_LABEL: pod_hash}
    assert first["spec"]["replicas"] == 2
    assert first["metadata"]["ownerReferences"][0]["uid"] == "deploy-1"
    assert HASH_LABEL not in deployment()["spec"]["template"]["metadata"]["labels"], "not changed"
    first["metadata"]["uid"] = "rs-1"
    pod = replica_pod(first, "b2x4z")
    assert pod["metadata"]["name"] == f"op-{pod_hash}-b2x4z"
    assert pod["metadata"]["labels"] == {"app": "op", HASH_LABEL: pod_hash}
    assert pod["metadata"]["ownerReferences"][0] == {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"op-{pod_hash}", "uid": "rs-1",
        "controller": True, "blockOwnerDeletion": True,
    }  # fmt: skip


def test_the_deployment_controller_keeps_pods_and_rolls_a_new_template_out() -> None:
    with EmulatorServer(required_token="admin-token") as server:
        api = KubeApi.for_url(server.url, token="admin-token", namespace="ns1")
        api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "ns1"}})
        body = deployment()
        del body["metadata"]["uid"]
        path = api.path("deployments", namespace="ns1", api_version="apps/v1")
        assert api.request("POST", path, body=body).status == 201
        controller = DeploymentController(api)

        def pods() -> list[dict[str, Any]]:
            return list(api.request("GET", api.path("pods")).body.get("items") or [])

        controller.sync()
        controller.sync()
        first = pods()
        assert len(first) == 2
        (owner,) = {p["metadata"]["ownerReferences"][0]["name"] for p in first}
        api.request("DELETE", api.path("pods", first[0]["metadata"]["name"]))
        controller.sync()
        again = pods()
        assert len(again) == 2 and first[0]["metadata"]["name"] not in names(again), "replaced"
        patch = {"spec": {"template": {"spec": {"hostname": "new"}}}}
        api.request("PATCH", f"{path}/op", body=patch, content_type="application/merge-patch+json")
        controller.sync()
        controller.sync()
        sets = api.request("GET", api.path("replicasets", api_version="apps/v1")).body["items"]
        replicas = {rs["metadata"]["name"]: rs["spec"]["replicas"] for rs in sets}
        assert replicas[owner] == 0 and sorted(replicas.values()) == [0, 2]
        controller.sync()
        live = [p for p in pods() if p["metadata"]["ownerReferences"][0]["name"] != owner]
        assert len(live) == 2 and all(p["spec"]["hostname"] == "new" for p in live)
        api.close()


def names(objects: list[dict[str, Any]]) -> set[str]:
    return {obj["metadata"]["name"] for obj in objects}


def test_the_chart_objects_go_where_helm_install_would_create_them() -> None:
    role = {"kind": "RoleBinding", "metadata": {"name": "r", "namespace": "jobs"}}
    assert collection(role) == "/apis/rbac.authorization.k8s.io/v1/namespaces/jobs/rolebindings"
    account = {"kind": "ServiceAccount", "metadata": {"name": "a"}}
    assert collection(account) == f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/serviceaccounts"
    crd = {"kind": "CustomResourceDefinition", "metadata": {"name": "x"}}
    assert collection(crd) == "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    with pytest.raises(ValueError, match="cannot store a Secret"):
        collection({"kind": "Secret", "metadata": {"name": "s"}})


def test_the_scrape_job_is_what_the_prometheus_operator_makes_of_a_service_monitor() -> None:
    service = {
        "metadata": {"name": "op-metrics", "namespace": "ops", "labels": {"app": "op", "c": "m"}},
        "spec": {"ports": [{"name": "metrics", "port": 9090}]},
    }
    monitor = {
        "metadata": {"name": "op", "namespace": "ops"},
        "spec": {
            "selector": {"matchLabels": {"app": "op", "c": "m"}},
            "endpoints": [
                {"port": "metrics", "path": "/metrics", "honorLabels": True, "interval": "2s"}
            ],
        },
    }
    job = scrape_config(monitor, service, "127.9.0.3:9090", pod="op-abc")
    assert job["job_name"] == "serviceMonitor/ops/op/0"
    assert job["honor_labels"] is True and job["scrape_interval"] == "2s"
    assert job["static_configs"] == [
        {
            "targets": ["127.9.0.3:9090"],
            "labels": {
                "job": "op-metrics", "namespace": "ops", "service": "op-metrics",
                "pod": "op-abc", "endpoint": "metrics",
            },
        }
    ]  # fmt: skip
    monitor["spec"]["endpoints"][0]["port"] = "http"
    with pytest.raises(ValueError, match="not a port of the Service"):
        scrape_config(monitor, service, "127.9.0.3:9090", pod="op-abc")
    monitor["spec"]["endpoints"][0]["port"] = "metrics"
    monitor["spec"]["selector"]["matchLabels"]["c"] = "other"
    with pytest.raises(ValueError, match="does not select"):
        scrape_config(monitor, service, "127.9.0.3:9090", pod="op-abc")


# -- the kubelet and its process runtime, running pods ----------------------------------------


def wait(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def kubelet_api(tmp_path: Path) -> Iterator[tuple[KubeApi, Kubelet, EmulatorServer]]:
    with EmulatorServer(required_token="admin-token", tls=True) as server:
        api = KubeApi.for_url(server.url, token="admin-token", namespace="ns1")
        api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "ns1"}})
        runtime = ProcessRuntime({"sh": SHELL})
        kubelet = Kubelet(api, tmp_path, runtime=runtime, api_port=server.tls_port)
        yield api, kubelet, server
        kubelet.stop()
        api.close()


def pod_status(api: KubeApi, name: str) -> dict[str, Any]:
    return dict(api.request("GET", api.path("pods", name)).body.get("status") or {})


def test_the_kubelet_writes_the_token_volume_and_the_pod_calls_as_its_account(
    tmp_path: Path, kubelet_api: tuple[KubeApi, Kubelet, EmulatorServer]
) -> None:
    """The admission plugin's ``kube-api-access-*`` volume, written by the kubelet: a
    token from the TokenRequest API (bound to the pod), ``ca.crt`` and the namespace, mounted
    where in-cluster clients look; the pod reaches the API server by its Service variables."""
    api, kubelet, server = kubelet_api
    body = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "sh"}]}}
    pod = api.request("POST", api.path("pods"), body=body).body
    meta = pod["metadata"]
    container = Container("ns1", "p", meta["uid"], "127.1.0.2", tmp_path / "p", pod)
    launch = kubelet.launch_spec(container)
    plan = kubelet.runtime.prepare(container, launch, tmp_path / "net")
    [volume] = pod["spec"]["volumes"]
    files = tmp_path / "p" / "volumes" / volume["name"]
    token = (files / "token").read_text()
    assert (files / "namespace").read_text() == "ns1"
    assert (files / "ca.crt").read_text() == server.ca_pem
    mounted = {bind.target: bind.source for bind in plan.layout.binds}
    # (where /var/run is a link to /run, the mount point is where the link leads)
    assert mounted[os.path.realpath("/var/run/secrets/kubernetes.io/serviceaccount")] == str(files)
    assert plan.env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert plan.env["KUBERNETES_SERVICE_PORT"] == str(server.tls_port)
    assert server.emulator is not None
    user = server.emulator.users[token]
    assert user.name == "system:serviceaccount:ns1:default" and user.bound_pod == "p"


def test_a_pod_runs_in_its_own_root_with_its_volumes_address_and_name(
    tmp_path: Path, kubelet_api: tuple[KubeApi, Kubelet, EmulatorServer]
) -> None:
    """A real process in its sandbox: the ConfigMap at its mount path, an emptyDir it writes, a
    private /tmp, its host name, its own address, $(VAR) references, and its exit code."""
    api, kubelet, _ = kubelet_api
    config = {"metadata": {"name": "settings"}, "data": {"greeting": "hello"}}
    assert api.request("POST", api.path("configmaps"), body=config).status == 201
    (Path("/tmp") / "host-only-file").write_text("the host's")
    script = (
        'cat /etc/settings/greeting > /scratch/out; echo " $(POD_IP)" >> /scratch/out; '
        "hostname >> /scratch/out; ls /tmp | wc -l >> /scratch/out; "
        "grep -c runner /etc/hosts >> /scratch/out; exit 3"
    )
    body = {
        "metadata": {"name": "runner"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "c",
                    "image": "sh",
                    "args": [script],
                    "env": [
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
                    ],
                    "volumeMounts": [
                        {"name": "settings", "mountPath": "/etc/settings"},
                        {"name": "scratch", "mountPath": "/scratch"},
                    ],
                }
            ],
            "volumes": [
                {"name": "settings", "configMap": {"name": "settings"}},
                {"name": "scratch", "emptyDir": {}},
            ],
        },
    }
    assert api.request("POST", api.path("pods"), body=body).status == 201
    kubelet.start()
    status = wait(
        lambda: (s := pod_status(api, "runner")).get("phase") in ("Succeeded", "Failed") and s,
        "the pod to end",
    )
    assert status["phase"] == "Failed"
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    [directory] = (tmp_path / "pods" / "ns1").glob("runner-*")
    out = (directory / "volumes" / "scratch" / "out").read_text().splitlines()
    assert out == [f"hello {status['podIP']}", "runner", "0", "1"]
    assert status["podIP"].startswith("127.") and status["podIP"] != "127.0.0.1"


def test_a_pod_whose_image_cannot_be_had_waits_in_image_pull_back_off(
    kubelet_api: tuple[KubeApi, Kubelet, EmulatorServer],
) -> None:
    api, kubelet, _ = kubelet_api
    body = {"metadata": {"name": "nope"}, "spec": {"containers": [{"name": "c", "image": "x:1"}]}}
    assert api.request("POST", api.path("pods"), body=body).status == 201
    kubelet.start()

    def waiting() -> dict[str, Any] | None:
        statuses = pod_status(api, "nope").get("containerStatuses") or [{}]
        return (statuses[0].get("state") or {}).get("waiting")

    state = wait(waiting, "the pod to wait")
    assert state["reason"] == "ImagePullBackOff" and '"x:1"' in state["message"]
    assert pod_status(api, "nope")["phase"] == "Pending"


def test_a_deleted_pod_stays_terminating_until_its_process_has_stopped(
    kubelet_api: tuple[KubeApi, Kubelet, EmulatorServer],
) -> None:
    """The kubelet binds the pod to its node, so the API server deletes it gracefully: the pod
    is still there, marked, while its process handles SIGTERM (as a driver's shutdown still
    calls the API), and goes once the process has ended."""
    api, kubelet, _ = kubelet_api
    script = (
        "trap 'sleep 1; echo stopped > /scratch/out; exit 0' TERM; touch /scratch/trapped; "
        "while :; do sleep 0.1; done"
    )
    body = {
        "metadata": {"name": "slow-stop"},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "c",
                    "image": "sh",
                    "args": [script],
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                }
            ],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        },
    }
    assert api.request("POST", api.path("pods"), body=body).status == 201
    kubelet.start()
    wait(lambda: pod_status(api, "slow-stop").get("phase") == "Running", "the pod to run")
    pid = kubelet.containers[next(iter(kubelet.containers))].process.pid  # type: ignore[union-attr]
    [directory] = (kubelet.root / "pods" / "ns1").glob("slow-stop-*")
    scratch = directory / "volumes" / "scratch"
    # Running is the process started, not its handler set: a loaded machine runs the shell late
    wait((scratch / "trapped").exists, "the process to set its SIGTERM handler")
    marked = api.request("DELETE", api.path("pods", "slow-stop")).body
    assert marked["spec"]["nodeName"] == "local"
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 5
    # The process runs its handler (a second, at least) while the pod is still there.
    out = scratch / "out"
    wait(lambda: api.request("GET", api.path("pods", "slow-stop")).status == 404, "the pod to go")
    assert out.read_text() == "stopped\n", "the pod went only after its process had stopped"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_stopped_cluster_keeps_its_api_audit_beside_the_pod_logs(tmp_path: Path) -> None:
    """Only the API server runs here: the audit is what it recorded, whatever else ran."""
    cluster = LocalCluster(tmp_path, namespaces=("audit",))
    cluster.server.start()
    try:
        api = cluster.api("audit-test", "audit")
        assert api.request("GET", api.path("configmaps", namespace="audit")).status == 200
        refused = api.request("POST", api.path("configmaps", namespace="audit"), body={"data": 1})
        assert refused.status in (400, 422), refused.body
    finally:
        cluster.stop()
    calls = json.loads((tmp_path / API_CALLS_FILE).read_text())
    listed = [c for c in calls if c["client"] == "audit-test" and c["verb"] == "list"]
    assert [(c["resource"], c["namespaced"], c["count"]) for c in listed] == [
        ("configmaps", True, 1)
    ]
    refusals = json.loads((tmp_path / API_REFUSALS_FILE).read_text())
    assert [(r["client"], r["method"], r["status"]) for r in refusals] == [
        ("audit-test", "POST", refused.status)
    ]


def test_attaching_where_no_cluster_runs_says_how_to_start_one(tmp_path: Path) -> None:
    with pytest.raises(NotRunning, match=r"no such file: start the cluster first .*-m testcluster"):
        AttachedCluster(tmp_path / "nothing")
    access = {"url": "", "api_host": "", "token": "", "namespaces": ["a"]}
    (tmp_path / ACCESS_FILE).write_text(json.dumps(access))
    with pytest.raises(NotRunning, match=r"serves a, not e2e: start it with --namespace e2e"):
        AttachedCluster(tmp_path, ("e2e",))
