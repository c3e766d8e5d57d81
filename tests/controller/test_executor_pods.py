"""What the operator hands Spark for executor pods, and the pod settings users expect: pure
builders, checked without a cluster (the e2e suite runs them)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from finishable.api.spec import FinishableSparkJobSpec
from finishable.controller import naming, podparts
from finishable.controller.job import builders, driverconf
from finishable.kube.objects import JobRef

pytestmark = pytest.mark.quick

JOB = JobRef(name="clicks", namespace="analytics", uid="uid-1")
LOCAL = "local[2]"
SETTINGS = {
    "labels": {"team": "growth"},
    "annotations": {"prometheus.io/scrape": "false"},
    "nodeSelector": {"pool": "spark"},
    "tolerations": [{"key": "spark", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
    "priorityClassName": "batch-low",
}


def spec(**fields: Any) -> FinishableSparkJobSpec:
    return FinishableSparkJobSpec.model_validate(
        {"image": "img:1", "application": {"file": "local:///opt/app/clicks.py"}, **fields}
    )


def conf(
    job_spec: FinishableSparkJobSpec, master: str = naming.KUBERNETES_MASTER
) -> dict[str, str]:
    return driverconf.spark_conf(JOB, job_spec, master)


# -- Spark's settings -----------------------------------------------------------------------------


def test_executor_defaults_are_sized_from_the_executors_the_spec_asks_for() -> None:
    settings = conf(spec(executor={"instances": 50, "cores": 4, "registrationTimeout": "90s"}))
    assert settings["spark.executor.instances"] == "50"
    assert settings["spark.default.parallelism"] == "200"
    assert settings["spark.sql.shuffle.partitions"] == "400"
    assert settings["spark.scheduler.minRegisteredResourcesRatio"] == "1.0"
    assert settings["spark.scheduler.maxRegisteredResourcesWaitingTime"] == "90s"
    assert (settings["spark.ui.enabled"], settings["spark.ui.port"]) == ("true", "4040")
    # The executors' Python workers import the program's own modules, as the driver does.
    assert settings["spark.executorEnv.PYTHONPATH"] == "/opt/app"
    # Nothing Spark would do beyond what the driver's Role grants (pods and ConfigMaps).
    assert settings["spark.kubernetes.executor.disableConfigMap"] == "true"
    assert settings["spark.kubernetes.driver.service.deleteOnTermination"] == "false"
    assert settings["spark.kubernetes.driver.ownPersistentVolumeClaim"] == "false"
    assert settings["spark.kubernetes.driver.reusePersistentVolumeClaim"] == "false"
    granted = {r for rule in builders.role(JOB)["rules"] for r in rule["resources"]}
    assert granted == {"pods", "configmaps"}


def test_a_batch_job_with_the_autoscaler_runs_sparks_dynamic_allocation_within_its_bounds() -> None:
    autoscaler = {"enabled": True, "minExecutors": 1, "maxExecutors": 6, "idleTimeout": "20s"}
    batch = spec(mode="Batch", executor={"instances": 2, "cores": 2}, autoscaler=autoscaler)
    settings = conf(batch)
    assert settings["spark.dynamicAllocation.enabled"] == "true"
    assert settings["spark.dynamicAllocation.shuffleTracking.enabled"] == "true"
    assert settings["spark.dynamicAllocation.shuffleTracking.timeout"] == "40s"
    assert settings["spark.dynamicAllocation.executorIdleTimeout"] == "20s"
    bounds = ("minExecutors", "initialExecutors", "maxExecutors")
    assert [settings[f"spark.dynamicAllocation.{key}"] for key in bounds] == ["1", "2", "6"]
    # Reads are cut for every executor the job may get, so that tasks wait for more.
    assert settings["spark.default.parallelism"] == "12"
    # A Streaming job's count is the operator's: no dynamic allocation.
    streaming = conf(spec(executor={"instances": 2}, autoscaler=autoscaler))
    assert "spark.dynamicAllocation.enabled" not in streaming
    assert streaming["spark.executor.instances"] == "2"


def test_the_user_overrides_defaults_but_not_what_the_resource_says() -> None:
    user = {
        "spark.sql.shuffle.partitions": "7",
        "spark.executor.instances": "99",
        "spark.driver.host": "elsewhere",
        "spark.driver.bindAddress": "0.0.0.0",
    }
    settings = conf(spec(application={"file": "local:///opt/app/x.py", "sparkConf": user}))
    assert settings["spark.sql.shuffle.partitions"] == "7"
    assert settings["spark.executor.instances"] == "2"
    # The driver's address is its pod's IP, which only the pod knows (PYSPARK_SUBMIT_ARGS).
    assert "spark.driver.host" not in settings and "spark.driver.bindAddress" not in settings


def test_executor_pods_get_the_template_labels_resources_and_account() -> None:
    executor = {
        "instances": 3,
        "memory": "4g",
        "memoryOverhead": "1g",
        "coreRequest": "500m",
        "coreLimit": "2",
        "serviceAccountName": "spark-executor",
    }
    settings = conf(spec(executor=executor))
    assert settings["spark.kubernetes.executor.podTemplateFile"] == (
        "/etc/finishable/executor-pod-template.yaml"
    )
    assert settings["spark.kubernetes.executor.podTemplateContainerName"] == "executor"
    assert settings["spark.executor.memoryOverhead"] == "1g"
    assert settings["spark.kubernetes.executor.request.cores"] == "500m"
    assert settings["spark.kubernetes.executor.limit.cores"] == "2"
    assert settings["spark.kubernetes.authenticate.executor.serviceAccountName"] == (
        "spark-executor"
    )
    assert settings["spark.kubernetes.executor.label.finishable.dev/component"] == "executor"


def test_local_master_leaves_the_kubernetes_settings_out() -> None:
    settings = conf(spec(), LOCAL)
    assert settings["spark.master"] == LOCAL
    assert not [key for key in settings if key.startswith("spark.kubernetes.")]
    assert "spark.scheduler.minRegisteredResourcesRatio" not in settings


def test_the_default_master_is_the_api_server_as_pods_reach_it() -> None:
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert driverconf.default_master(environ) == "k8s://https://10.96.0.1:443"
    ipv6 = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}
    assert driverconf.default_master(ipv6) == "k8s://https://[fd00::1]:6443"
    assert driverconf.default_master({}) == naming.KUBERNETES_MASTER


def test_executor_names_carry_the_attempt_within_sparks_limit() -> None:
    assert naming.executor_name_prefix("clicks", 3) == "clicks-3"
    long = naming.executor_name_prefix("a" * 40 + "-" + "b" * 20, 12)
    assert len(long) <= naming.EXECUTOR_NAME_PREFIX_MAX and long.endswith("-12")
    assert "--" not in naming.executor_name_prefix("a" * 44 + "-xyz", 1)


# -- the shared work volume -----------------------------------------------------------------------


def test_a_work_volume_is_mounted_by_the_driver_and_every_executor() -> None:
    job_spec = spec(workVolume={"size": "20Gi", "storageClassName": "nfs"})
    claim = builders.work_claim(JOB, job_spec)
    assert claim is not None
    assert claim["metadata"]["name"] == "clicks-work"
    assert claim["metadata"]["ownerReferences"][0]["uid"] == "uid-1", "deleted with the job"
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "20Gi"}},
        "storageClassName": "nfs",
    }
    assert claim in builders.static_children(JOB, job_spec, "t")
    settings = conf(job_spec)
    prefix = "spark.kubernetes.executor.volumes.persistentVolumeClaim.finishable-work"
    assert settings[f"{prefix}.mount.path"] == "/var/lib/finishable"
    assert settings[f"{prefix}.options.claimName"] == "clicks-work"
    pod = builders.driver_pod(JOB, job_spec, attempt=1, restore_from="")
    assert {"name": "finishable-work", "persistentVolumeClaim": {"claimName": "clicks-work"}} in (
        pod["spec"]["volumes"]
    )
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "finishable-work", "mountPath": "/var/lib/finishable"} in mounts
    # Spark's live checkpoint is on it, in a directory of the job's own (a claim may be shared).
    config = driverconf.job_config(JOB, job_spec)
    assert config.work_dir == "/var/lib/finishable/analytics/clicks-uid-1/work"


def test_a_users_claim_is_used_as_it_is() -> None:
    job_spec = spec(workVolume={"claimName": "shared-rwx"})
    assert builders.work_claim(JOB, job_spec) is None
    prefix = "spark.kubernetes.executor.volumes.persistentVolumeClaim.finishable-work"
    assert conf(job_spec)[f"{prefix}.options.claimName"] == "shared-rwx"
    assert driverconf.job_config(JOB, spec()).work_dir == "/tmp/finishable/work"


@pytest.mark.parametrize(
    ("volume", "message"),
    [
        ({}, "not both and not neither"),
        ({"claimName": "a", "size": "1Gi"}, "not both and not neither"),
        ({"claimName": "a", "storageClassName": "nfs"}, "only to a claim the operator creates"),
    ],
)
def test_a_work_volume_names_one_claim(volume: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        spec(workVolume=volume)


# -- pod settings ---------------------------------------------------------------------------------


def test_the_driver_pod_takes_the_users_pod_settings() -> None:
    driver = {
        **SETTINGS,
        "serviceAccountName": "team-spark",
        "coreLimit": "1500m",
        "memory": "2g",
        "memoryOverhead": "1g",
    }
    pod = builders.driver_pod(
        JOB, spec(driver=driver, imagePullSecrets=["registry"]), attempt=2, restore_from=""
    )
    meta, pod_spec = pod["metadata"], pod["spec"]
    assert meta["labels"]["team"] == "growth"
    assert meta["labels"]["finishable.dev/job"] == "clicks"
    assert meta["annotations"] == {"prometheus.io/scrape": "false"}
    assert pod_spec["serviceAccountName"] == "team-spark"
    assert pod_spec["nodeSelector"] == {"pool": "spark"}
    assert pod_spec["tolerations"] == SETTINGS["tolerations"]
    assert pod_spec["affinity"] == SETTINGS["affinity"]
    assert pod_spec["priorityClassName"] == "batch-low"
    assert pod_spec["imagePullSecrets"] == [{"name": "registry"}]
    resources = pod_spec["containers"][0]["resources"]
    assert resources["limits"] == {"memory": "3072Mi", "cpu": "1500m"}


# The defaults: the image's group owns the volumes, and the pods meet the restricted level of the
# Pod Security Standards (checked by a real kube-apiserver in tests/controller/test_real_apiserver).
RESTRICTED_POD = {
    "fsGroup": 1000,
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def test_the_executor_pod_template_carries_the_executor_settings() -> None:
    job_spec = spec(executor=SETTINGS, imagePullSecrets=["registry"])
    template = podparts.executor_pod_template(job_spec)
    assert template["metadata"]["labels"]["team"] == "growth"
    assert template["spec"]["tolerations"] == SETTINGS["tolerations"]
    assert template["spec"]["securityContext"] == RESTRICTED_POD
    assert template["spec"]["automountServiceAccountToken"] is False, "executors call no API"
    assert template["spec"]["containers"] == [
        {"name": "executor", "securityContext": RESTRICTED_CONTAINER}
    ]
    body = builders.config_map(JOB, job_spec)
    assert json.loads(body["data"]["executor-pod-template.yaml"]) == template
    with_account = podparts.executor_pod_template(spec(executor={"serviceAccountName": "x"}))
    assert "automountServiceAccountToken" not in with_account["spec"]


def test_shuffle_pods_take_their_settings_resources_and_the_runs_replicas() -> None:
    shuffle = {**SETTINGS, "replicas": 4, "cores": "250m", "memory": "1Gi"}
    job_spec = spec(mode="Batch", shuffle=shuffle, imagePullSecrets=["registry"])
    stateful = builders.shuffle_stateful_set(JOB, job_spec, replicas=2)
    assert stateful["spec"]["replicas"] == 2, "the run's pinned number, not the edited spec's"
    template = stateful["spec"]["template"]
    assert template["metadata"]["labels"]["finishable.dev/component"] == "shuffle"
    assert template["metadata"]["labels"]["team"] == "growth"
    assert template["spec"]["securityContext"] == RESTRICTED_POD, "the image's user writes"
    assert template["spec"]["containers"][0]["securityContext"] == RESTRICTED_CONTAINER
    assert template["spec"]["nodeSelector"] == {"pool": "spark"}
    assert template["spec"]["imagePullSecrets"] == [{"name": "registry"}]
    resources = template["spec"]["containers"][0]["resources"]
    assert resources == {
        "requests": {"cpu": "250m", "memory": "1024Mi"},
        "limits": {"memory": "1024Mi"},
    }
    assert builders.shuffle_stateful_set(JOB, job_spec)["spec"]["replicas"] == 4
    urls = driverconf.job_config(JOB, job_spec, shuffle_replicas=2).shuffle_urls
    assert len(urls) == 2


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"driver": {"tolerations": [{"key": "a", "efect": "NoSchedule"}]}}, "unknown field"),
        ({"executor": {"affinity": {"nodeAfinity": {}}}}, "nodeAffinity, podAffinity"),
        ({"executor": {"coreRequest": "half"}}, "not a CPU quantity"),
        ({"driver": {"serviceAccountName": "Team_Spark"}}, "not a ServiceAccount name"),
        ({"executor": {"registrationTimeout": "0s"}}, "longer than zero"),
    ],
)
def test_pod_settings_that_can_never_apply_are_refused_by_name(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        spec(**fields)
