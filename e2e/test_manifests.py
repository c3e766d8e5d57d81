"""Invalid manifests are refused with messages naming the field; deleting a running job stops
its driver and removes every child."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.conftest import CONTROL_PLANE
from testcluster.client import E2ECluster, batch_example, example, wait_for
from testcluster.localcluster.cluster import ClusterAccess

pytestmark = [pytest.mark.e2e, pytest.mark.full]

START = 240.0


def manifest(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "finishable.dev/v1alpha1",
        "kind": "FinishableSparkJob",
        "metadata": {"name": name},
        "spec": {
            "application": {"file": "local:///opt/finishable/examples/streaming/x.py"},
            **spec,
        },
    }


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"state": "Paused"}, "spec.state"),
        ({"executor": {"instances": 0}}, "spec.executor.instances"),
        ({"checkpointing": {"interval": "10 seconds"}}, "spec.checkpointing.interval"),
    ],
)
def test_the_api_server_refuses_what_the_schema_rules_out(
    cluster: E2ECluster, spec: dict[str, Any], field: str
) -> None:
    response = cluster.apply(manifest("refused", **spec))
    assert response.status == 422, response.body
    assert field in response.message, response.message
    assert cluster.job("refused") is None


@pytest.mark.parametrize(
    ("name", "spec", "field"),
    [
        (
            "half-a-volume",
            {
                "application": {
                    "file": "local:///opt/finishable/examples/streaming/x.py",
                    "sparkConf": {"spark.kubernetes.driver.volumes.hostPath.data.mount.path": "/d"},
                }
            },
            "spark.kubernetes.driver.volumes.hostPath.data.options.path",
        ),
        ("a" * 41, {}, "metadata.name"),
    ],
)
def test_the_operator_fails_what_only_it_can_judge_naming_the_field(
    cluster: E2ECluster, name: str, spec: dict[str, Any], field: str
) -> None:
    """What no schema rule can say passes the API server: the job is Failed with the field
    named, and nothing is started for it."""
    response = cluster.apply(manifest(name, **spec))
    assert response.status == 201, response.body
    assert_failed_naming(cluster, name, field)


def test_a_cross_field_rule_is_the_api_servers_and_the_operators(cluster: E2ECluster) -> None:
    """Shuffle pods in a Streaming job: a CEL rule of the CRD, so the real API server refuses it
    at apply time; the emulator, which has no CEL, takes it, and the operator, which checks the
    same rule, fails the job naming the field."""
    response = cluster.apply(manifest("streaming-shuffle", shuffle={"replicas": 2}))
    if CONTROL_PLANE == "real":
        assert response.status == 422, response.body
        assert "spec.shuffle" in response.message, response.message
        assert cluster.job("streaming-shuffle") is None
    else:
        assert response.status == 201, response.body
        assert_failed_naming(cluster, "streaming-shuffle", "spec.shuffle")


def assert_failed_naming(cluster: E2ECluster, name: str, field: str) -> None:
    """The job goes Failed naming ``field``, starts nothing, and is deleted."""
    status = cluster.wait_phase(name, "Failed", 60)
    assert field in status["message"], status["message"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and field in ready["message"]
    assert cluster.children(name).get("pods") is None
    cluster.delete(name)
    wait_for(lambda: cluster.job(name) is None, f"{name} is deleted", 60)


def test_a_stateful_query_on_executor_pods_without_a_work_volume_is_refused(
    cluster: E2ECluster, local_cluster: ClusterAccess | None
) -> None:
    """The windowed counts' state would be written by the executors where no checkpoint can
    reach it: the driver refuses the query before its first batch, naming the field, and the
    job fails at once instead of being retried; Prometheus fires the chart's alert on it."""
    name = "no-work-volume"
    job = example("examples/streaming/cluster.yaml", cluster.data_dir, cluster.image)
    job["metadata"]["name"] = name
    del job["spec"]["workVolume"]
    job["spec"]["application"]["args"] = [f"--input=/data/{name}/in", f"--output=/data/{name}/out"]
    assert cluster.apply(job).status == 201
    status = cluster.wait_phase(name, "Failed", START)
    assert "spec.workVolume is required" in status["message"], status["message"]
    assert "Aggregate" in status["message"], status["message"]
    assert status["restarts"] == 0, "a spec that can never work is not retried"
    if local_cluster is not None and local_cluster.prometheus is not None:
        alert = 'alertname="FinishableSparkJobFailed",alertstate="firing"'
        firing = f'ALERTS{{{alert},job_name="{name}"}}'
        prometheus = local_cluster.prometheus
        wait_for(lambda: prometheus.query(firing), "the chart's alert on a Failed job fires", 60)
    wait_for(lambda: cluster.executor_pods(name) == [], "its executor pods are gone", 60)
    cluster.delete(name)
    wait_for(lambda: cluster.job(name) is None, f"{name} is deleted", 60)


def test_deleting_a_running_job_stops_its_driver_and_removes_its_children(
    cluster: E2ECluster,
) -> None:
    name = "short-lived"
    job = batch_example(cluster.data_dir, cluster.image, name, files=400)
    assert cluster.apply(job).status == 201
    cluster.wait_phase(name, "Running", START)
    children = cluster.children(name)
    assert {"pods", "services", "configmaps", "secrets", "statefulsets", "roles"} <= set(children)
    driver = cluster.container_id(f"{name}-driver-1")

    cluster.delete(name)
    wait_for(
        lambda: cluster.job(name) is None,
        "the job is deleted",
        120,
        on_fail=lambda: cluster.logs(name),
    )
    wait_for(
        lambda: not cluster.children(name),
        "every child is removed",
        60,
        on_fail=lambda: f": left {cluster.children(name)}",
    )
    assert driver is not None
    if cluster.container_running(driver) is not None:  # the local cluster shows it: gone
        wait_for(lambda: not cluster.container_running(driver), "the driver has ended", 60)
