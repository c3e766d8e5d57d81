"""Child objects are pure dicts: golden comparisons, owner references, labels and resources."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

from finishable.api.jobconfig import JobConfig
from finishable.api.spec import FinishableSparkJobSpec
from finishable.controller import naming
from finishable.controller.job import builders, driverconf
from finishable.controller.job.observe import DriverPod, current_driver
from finishable.kube.objects import JobRef
from finishable.lifecycle.decisions import PodPhase

pytestmark = pytest.mark.quick

JOB = JobRef(name="clicks", namespace="analytics", uid="uid-1")
OWNER = {
    "apiVersion": "finishable.dev/v1alpha1",
    "kind": "FinishableSparkJob",
    "name": "clicks",
    "uid": "uid-1",
    "controller": True,
    "blockOwnerDeletion": True,
}


def spec(**fields: Any) -> FinishableSparkJobSpec:
    return FinishableSparkJobSpec.model_validate(
        {"image": "img:1", "application": {"file": "local:///app/clicks.py"}, **fields}
    )


def meta(name: str, component: str | None = None, attempt: int | None = None) -> dict[str, Any]:
    labels = {
        "finishable.dev/job": "clicks",
        "app.kubernetes.io/managed-by": "finishable-spark-operator",
    }
    if component:
        labels["finishable.dev/component"] = component
    if attempt:
        labels["finishable.dev/attempt"] = str(attempt)
    return {"name": name, "namespace": "analytics", "labels": labels, "ownerReferences": [OWNER]}


def test_driver_pod_golden() -> None:
    pod = builders.driver_pod(
        JOB,
        spec(
            driver={"cores": 2, "memory": "2g"},
            checkpointing={
                "storage": {"type": "ObjectStore", "url": "s3://b/p", "secretRef": "s3-creds"}
            },
        ),
        attempt=3,
        restore_from="s3://b/p/savepoints/7",
        run=2,
    )
    submit = (
        "--driver-memory 2g --conf 'spark.driver.host=$(FINISHABLE_POD_IP)' "
        "--conf 'spark.driver.bindAddress=$(FINISHABLE_POD_IP)' "
        "--conf spark.kubernetes.driver.pod.name=clicks-driver-3 "
        "--conf spark.kubernetes.executor.label.finishable.dev/attempt=3 "
        "--conf spark.kubernetes.executor.podNamePrefix=clicks-3 pyspark-shell"
    )
    assert pod == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta("clicks-driver-3", "driver", 3),
        "spec": {
            "serviceAccountName": "clicks-driver",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 60,
            # the image's user can write its volumes; the Pod Security Standards' restricted level
            "securityContext": {
                "fsGroup": 1000,
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "driver",
                    "image": "img:1",
                    "args": ["finishable", "driver"],  # under the image's entrypoint
                    "env": [
                        {"name": "FINISHABLE_JOB_CONFIG", "value": "/etc/finishable/job.json"},
                        {"name": "FINISHABLE_RUN", "value": "2"},
                        {"name": "FINISHABLE_ATTEMPT", "value": "3"},
                        {"name": "FINISHABLE_RESTORE_FROM", "value": "s3://b/p/savepoints/7"},
                        {
                            "name": "FINISHABLE_TOKEN",
                            "valueFrom": {"secretKeyRef": {"name": "clicks-token", "key": "token"}},
                        },
                        {
                            "name": "POD_NAMESPACE",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                        },
                        {
                            "name": "FINISHABLE_POD_IP",
                            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                        },
                        {"name": "FINISHABLE_ENDPOINT_BIND", "value": "0.0.0.0"},
                        {"name": "FINISHABLE_ENDPOINT_HOST", "value": "$(FINISHABLE_POD_IP)"},
                        {"name": "SPARK_CONF_DIR", "value": "/etc/finishable/spark"},
                        {"name": "PYSPARK_SUBMIT_ARGS", "value": submit},
                        {"name": "PYTHONUNBUFFERED", "value": "1"},
                    ],
                    "ports": [
                        {"name": "driver-rpc", "containerPort": 7078},
                        {"name": "blockmanager", "containerPort": 7079},
                        {"name": "spark-ui", "containerPort": 4040},
                    ],
                    # 2 GiB + max(384 MiB, 10 %) of overhead = 2048 + 384
                    "resources": {
                        "requests": {"cpu": "2", "memory": "2432Mi"},
                        "limits": {"memory": "2432Mi"},
                    },
                    "volumeMounts": [
                        {"name": "config", "mountPath": "/etc/finishable", "readOnly": True},
                        {"name": "work", "mountPath": "/tmp/finishable"},
                    ],
                    "envFrom": [{"secretRef": {"name": "s3-creds"}}],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
            "volumes": [
                {
                    "name": "config",
                    "configMap": {
                        "name": "clicks-config",
                        "items": [
                            {"key": "job.json", "path": "job.json"},
                            {
                                "key": "executor-pod-template.yaml",
                                "path": "executor-pod-template.yaml",
                            },
                            # Spark's own directory: it copies it to the executors' ConfigMap
                            {"key": "spark-defaults.conf", "path": "spark/spark-defaults.conf"},
                        ],
                    },
                },
                {"name": "work", "emptyDir": {}},
            ],
        },
    }
    assert shlex.split(submit)[-1] == "pyspark-shell"


def test_small_driver_gets_the_minimum_overhead() -> None:
    pod = builders.driver_pod(JOB, spec(driver={"memory": "512m"}), attempt=1, restore_from="")
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["limits"]["memory"] == "896Mi"  # 512 + 384
    assert resources["requests"]["cpu"] == "1"


def test_driver_service_and_rbac_golden() -> None:
    assert builders.driver_service(JOB) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta("clicks-driver", "driver"),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"finishable.dev/job": "clicks", "finishable.dev/component": "driver"},
            "ports": [
                {"name": "driver-rpc", "port": 7078, "targetPort": 7078},
                {"name": "blockmanager", "port": 7079, "targetPort": 7079},
                {"name": "spark-ui", "port": 4040, "targetPort": 4040},
            ],
        },
    }
    assert builders.service_account(JOB) == {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta("clicks-driver", "driver"),
    }
    assert builders.role_binding(JOB) == {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta("clicks-driver", "driver"),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "clicks-driver",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "clicks-driver", "namespace": "analytics"}],
    }
    rules = builders.role(JOB)["rules"]
    assert rules == [
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["get", "list", "watch", "create", "delete", "deletecollection"],
        },
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "verbs": ["get", "list", "create", "update", "delete"],
        },
    ], "the driver gets its namespace's executor pods and ConfigMaps, nothing cluster-wide"


def test_token_and_channel_golden() -> None:
    assert builders.token_secret(JOB, "s3cret") == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta("clicks-token"),
        "type": "Opaque",
        "stringData": {"token": "s3cret"},
    }
    assert builders.channel_config_map(JOB, naming.control_name("clicks")) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta("clicks-control", "control"),
        "data": {},
    }


def test_job_config_carries_the_derived_spark_conf() -> None:
    body = builders.config_map(
        JOB,
        spec(
            executor={"instances": 4, "cores": 2, "memory": "3g"},
            application={
                "file": "local:///app/clicks.py",
                "sparkConf": {
                    "spark.executor.instances": "99",
                    "spark.sql.shuffle.partitions": "8",
                },
            },
        ),
    )
    assert body["metadata"] == meta("clicks-config")
    config = JobConfig.model_validate_json(body["data"]["job.json"])
    assert (config.name, config.namespace, config.uid) == ("clicks", "analytics", "uid-1")
    assert config.state_url == "configmap:"
    assert config.control.value == "ConfigMap"
    conf = config.spec.application.spark_conf
    assert conf["spark.executor.instances"] == "4", "the spec wins over sparkConf"
    assert conf["spark.sql.shuffle.partitions"] == "8", "other user settings stay"
    assert conf["spark.master"] == "k8s://https://kubernetes.default.svc:443"
    assert conf["spark.kubernetes.namespace"] == "analytics"
    assert conf["spark.kubernetes.container.image"] == "img:1"
    assert conf["spark.executor.memory"] == "3g"
    assert conf["spark.executor.cores"] == "2"
    assert "spark.driver.host" not in conf, "the pod sets its own IP (PYSPARK_SUBMIT_ARGS)"
    assert conf["spark.kubernetes.executor.label.finishable.dev/job"] == "clicks"
    assert conf["spark.kubernetes.executor.label.finishable.dev/component"] == "executor"
    defaults = dict(line.split(" ", 1) for line in body["data"]["spark-defaults.conf"].splitlines())
    assert defaults == conf, "spark-defaults.conf says the same (driver memory needs it)"


def test_object_store_state_url() -> None:
    config = driverconf.job_config(
        JOB, spec(checkpointing={"storage": {"type": "ObjectStore", "url": "gs://bucket/jobs"}})
    )
    assert config.state_url == "gs://bucket/jobs"


def test_batch_drivers_find_the_shuffle_pods_by_their_stable_names() -> None:
    batch = spec(mode="Batch", shuffle={"replicas": 2})
    assert driverconf.job_config(JOB, batch).shuffle_urls == [
        "http://clicks-shuffle-0.clicks-shuffle-headless.analytics.svc:7337",
        "http://clicks-shuffle-1.clicks-shuffle-headless.analytics.svc:7337",
    ]
    assert driverconf.job_config(JOB, spec()).shuffle_urls == []


def test_batch_jobs_get_shuffle_owned_by_the_job() -> None:
    batch = spec(
        mode="Batch",
        shuffle={
            "replicas": 3,
            "storage": {"size": "20Gi", "storageClassName": "fast"},
            "retainTimeout": "2m",
        },
    )
    children = builders.static_children(JOB, batch, "t")
    kinds = [(child["kind"], child["metadata"]["name"]) for child in children]
    assert kinds == [
        ("ConfigMap", "clicks-config"),
        ("ConfigMap", "clicks-control"),
        ("ConfigMap", "clicks-state"),
        ("Secret", "clicks-token"),
        ("ServiceAccount", "clicks-driver"),
        ("Role", "clicks-driver"),
        ("RoleBinding", "clicks-driver"),
        ("Service", "clicks-driver"),
        ("Service", "clicks-shuffle-headless"),
        ("PodDisruptionBudget", "clicks-shuffle"),
        ("StatefulSet", "clicks-shuffle"),
    ]
    for child in children:
        assert child["metadata"]["ownerReferences"] == [OWNER], child["metadata"]["name"]
        assert child["metadata"]["labels"]["finishable.dev/job"] == "clicks"
    shuffle = children[-1]["spec"]
    budget = children[-2]["spec"]
    assert budget == {"maxUnavailable": 0, "selector": shuffle["selector"]}
    assert shuffle["replicas"] == 3
    assert shuffle["serviceName"] == "clicks-shuffle-headless"
    assert shuffle["selector"] == {
        "matchLabels": {"finishable.dev/job": "clicks", "finishable.dev/component": "shuffle"}
    }
    assert shuffle["template"]["metadata"]["labels"]["finishable.dev/component"] == "shuffle"
    container = shuffle["template"]["spec"]["containers"][0]
    assert container["command"] == ["finishable", "shuffle-server"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": 7337}
    assert container["args"][-2:] == ["--retain-timeout", "2m"]
    claim = shuffle["volumeClaimTemplates"][0]["spec"]
    assert claim["resources"] == {"requests": {"storage": "20Gi"}}
    assert claim["storageClassName"] == "fast"


def test_a_driver_asked_to_be_spared_by_drains_gets_a_budget() -> None:
    assert "PodDisruptionBudget" not in [
        c["kind"] for c in builders.static_children(JOB, spec(), "t")
    ]
    protected = spec(driver={"disruptionBudget": True})
    (budget,) = [
        c
        for c in builders.static_children(JOB, protected, "t")
        if c["kind"] == "PodDisruptionBudget"
    ]
    assert budget["metadata"]["name"] == "clicks-driver"
    assert budget["metadata"]["ownerReferences"] == [OWNER]
    pod = builders.driver_pod(JOB, protected, attempt=1, restore_from="")
    assert budget["spec"]["maxUnavailable"] == 0
    selected = budget["spec"]["selector"]["matchLabels"]
    assert selected.items() <= pod["metadata"]["labels"].items()


def test_streaming_jobs_get_no_shuffle_and_names_fit() -> None:
    kinds = {child["kind"] for child in builders.static_children(JOB, spec(), "t")}
    assert "StatefulSet" not in kinds
    longest = "j" * 40
    names = [
        naming.shuffle_service_name(longest),
        naming.driver_pod_name(longest, 100),
        naming.rbac_name(longest),
    ]
    assert all(len(name) <= 63 for name in names), "DNS labels for a 40-character job name"
    assert json.dumps(builders.driver_pod(JOB, spec(), 1, ""))  # plain JSON, nothing else


def test_a_standby_driver_pod_is_the_driver_pod_under_its_own_name_waiting_for_its_order() -> None:
    job_spec = spec(recovery={"standby": True})
    driver = builders.driver_pod(JOB, job_spec, attempt=3, restore_from="", run=2)
    standby = builders.driver_pod(JOB, job_spec, attempt=3, restore_from="", run=2, standby=True)
    assert standby["metadata"]["name"] == "clicks-standby-3"
    assert standby["metadata"]["labels"] == {
        **driver["metadata"]["labels"],
        "finishable.dev/standby": "true",
    }
    assert standby["metadata"]["annotations"] == {"finishable.dev/spec-revision": job_spec.revision}
    (container,) = standby["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    driver_env = {e["name"]: e.get("value") for e in driver["spec"]["containers"][0]["env"]}
    submit = env.pop("PYSPARK_SUBMIT_ARGS")
    assert submit == driver_env.pop("PYSPARK_SUBMIT_ARGS").replace(
        "pod.name=clicks-driver-3", "pod.name=clicks-standby-3"
    ), "Spark owns its executors by the pod's own name"
    assert env == {**driver_env, "FINISHABLE_STANDBY": "1"}
    assert standby["spec"] == {**driver["spec"], "containers": standby["spec"]["containers"]}


def test_the_current_driver_is_its_own_pod_else_the_standby_that_took_over() -> None:
    driver = DriverPod("j-driver-2", 2, PodPhase.RUNNING)
    promoted = DriverPod("j-standby-2", 2, PodPhase.RUNNING, standby=True)
    replaced = DriverPod("j-standby-2", 2, PodPhase.RUNNING, deleting=True, standby=True)
    waiting = DriverPod("j-standby-3", 3, PodPhase.RUNNING, standby=True)
    assert current_driver([waiting, promoted], 2) == promoted
    assert current_driver([promoted, driver, waiting], 2) == driver
    assert current_driver([replaced, waiting], 2) is None, "a standby going away is no driver"
    assert current_driver([waiting], 2) is None


def test_a_local_master_runs_spark_inside_the_driver_pod() -> None:
    """``--spark-master local[2]``: no executor pods, so no Kubernetes or driver-address conf."""
    local = driverconf.spark_conf(JOB, spec(), "local[2]")
    assert local["spark.master"] == "local[2]"
    assert not [key for key in local if key.startswith("spark.kubernetes.")]
    assert "spark.driver.host" not in local and "spark.executor.instances" not in local
    pod = builders.driver_pod(JOB, spec(), 1, "", "local[2]")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["PYSPARK_SUBMIT_ARGS"] == "--driver-memory 1g pyspark-shell"
    config = builders.config_map(JOB, spec(), "local[2]")
    assert "spark.master local[2]\n" in config["data"]["spark-defaults.conf"]


def test_driver_volumes_come_from_sparks_own_volume_keys() -> None:
    prefix = "spark.kubernetes.driver.volumes."
    conf = {
        f"{prefix}hostPath.data.mount.path": "/data",
        f"{prefix}hostPath.data.options.path": "/mnt/shared",
        f"{prefix}persistentVolumeClaim.lake.mount.path": "/lake",
        f"{prefix}persistentVolumeClaim.lake.mount.readOnly": "true",
        f"{prefix}persistentVolumeClaim.lake.options.claimName": "lake",
        "spark.kubernetes.executor.volumes.hostPath.data.mount.path": "/data",
    }
    pod = builders.driver_pod(JOB, spec(application={"file": "a.py", "sparkConf": conf}), 1, "")
    volumes = pod["spec"]["volumes"]
    assert volumes[2:] == [
        {"name": "data", "hostPath": {"path": "/mnt/shared"}},
        {"name": "lake", "persistentVolumeClaim": {"claimName": "lake"}},
    ]
    assert pod["spec"]["containers"][0]["volumeMounts"][2:] == [
        {"name": "data", "mountPath": "/data"},
        {"name": "lake", "mountPath": "/lake", "readOnly": True},
    ]


def test_the_partition_storage_of_the_spec_else_beside_the_checkpoints_else_the_operators() -> None:
    s3 = "s3://bucket/state?endpoint_override=minio:9000"
    named = spec(mode="Batch", clusterPartitions={"storage": "gs://bucket/partitions", "ttl": "1d"})
    assert driverconf.job_config(JOB, named).partition_url == "gs://bucket/partitions"
    beside = spec(mode="Batch", checkpointing={"storage": {"type": "ObjectStore", "url": s3}})
    assert driverconf.job_config(JOB, beside).partition_url == (
        "s3://bucket/state/cluster-partitions?endpoint_override=minio:9000"
    )
    in_configmaps = spec(mode="Batch")
    assert driverconf.job_config(JOB, in_configmaps).partition_url is None
    operator = driverconf.with_operator_defaults(in_configmaps, "s3://cluster/partitions")
    assert driverconf.job_config(JOB, operator).partition_url == "s3://cluster/partitions"
    assert driverconf.with_operator_defaults(named, "s3://cluster/partitions") == named
    assert driverconf.with_operator_defaults(in_configmaps, None) == in_configmaps
    assert (
        driverconf.job_config(JOB, spec(clusterPartitions={"storage": "gs://b/p"})).partition_url
        is None
    )


def test_a_partition_storage_of_an_unknown_scheme_is_refused_naming_the_accepted_ones() -> None:
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="partition storage accepts s3"):
        spec(mode="Batch", clusterPartitions={"storage": "ftp://host/partitions"})
    with pytest.raises(ValidationError, match="longer than zero"):
        spec(mode="Batch", clusterPartitions={"ttl": "0s"})
