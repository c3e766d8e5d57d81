"""A job's pods in three layers: the template, then the typed fields, then what the operator owns,
for every pod the operator builds and for the executors' pod template file."""

from __future__ import annotations

from typing import Any

import pytest

from finishable.api.spec import FinishableSparkJobSpec
from finishable.controller import podparts
from finishable.controller.job import builders, upgradecheck
from finishable.controller.snapshot import disposalplan
from finishable.kube.objects import JobRef

pytestmark = pytest.mark.quick

JOB = JobRef(name="clicks", namespace="analytics", uid="uid-1")

TEMPLATE = {
    "metadata": {"labels": {"team": "template", "tier": "gold"}, "annotations": {"a": "1"}},
    "spec": {
        "nodeSelector": {"pool": "template", "zone": "a"},
        "tolerations": [{"key": "template", "operator": "Exists"}],
        "affinity": {"nodeAffinity": {"template": True}},
        "hostNetwork": False,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "template-account",
        "volumes": [{"name": "cache", "emptyDir": {}}, {"name": "certs", "emptyDir": {}}],
        "initContainers": [{"name": "fetch", "image": "busybox", "args": ["template"]}],
        "containers": [
            {
                "name": "driver",
                "env": [{"name": "A", "value": "template"}, {"name": "B", "value": "template"}],
                "envFrom": [{"configMapRef": {"name": "template-env"}}],
                "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                "ports": [{"containerPort": 9404, "name": "jmx"}],
                "resources": {"limits": {"nvidia.com/gpu": 1}},
                "workingDir": "/work",
            }
        ],
    },
}
TYPED = {
    "labels": {"team": "typed"},
    "nodeSelector": {"pool": "typed"},
    "tolerations": [{"key": "typed", "operator": "Exists"}],
    "affinity": {"nodeAffinity": {"typed": True}},
    "schedulerName": "volcano",
    "runtimeClassName": "gvisor",
    "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["db"]}],
    "dnsConfig": {"options": [{"name": "ndots", "value": "2"}]},
    "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}
    ],
    "env": [
        {"name": "B", "value": "typed"},
        {"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {"name": "pg", "key": "password"}}},
    ],
    "envFrom": [{"secretRef": {"name": "s3"}}],
    "volumes": [{"name": "certs", "secret": {"secretName": "certs"}}],
    "volumeMounts": [
        {"name": "certs", "mountPath": "/cache"},
        {"name": "certs", "mountPath": "/certs", "readOnly": True},
    ],
    "initContainers": [{"name": "fetch", "image": "busybox", "args": ["typed"]}],
    "sidecars": [{"name": "shipper", "image": "fluent-bit", "volumeMounts": []}],
}


def spec(**fields: Any) -> FinishableSparkJobSpec:
    return FinishableSparkJobSpec.model_validate(
        {"image": "img:1", "application": {"file": "local:///app/clicks.py"}, **fields}
    )


def by_name(items: list[dict[str, Any]], key: str = "name") -> dict[str, dict[str, Any]]:
    return {str(item[key]): item for item in items}


def test_the_driver_pod_is_the_template_then_the_typed_fields_then_the_operators() -> None:
    pod = builders.driver_pod(
        JOB, spec(driver={**TYPED, "template": TEMPLATE}), attempt=2, restore_from=""
    )
    meta, pod_spec = pod["metadata"], pod["spec"]
    # metadata: the template's, the typed labels over them, the operator's over both
    assert meta["labels"]["team"] == "typed" and meta["labels"]["tier"] == "gold"
    assert meta["labels"]["finishable.dev/job"] == "clicks"
    assert meta["annotations"] == {"a": "1"}
    assert meta["name"] == "clicks-driver-2"
    # maps merge by key, lists add up, single values are replaced
    assert pod_spec["nodeSelector"] == {"pool": "typed", "zone": "a"}
    assert [t["key"] for t in pod_spec["tolerations"]] == ["template", "typed"]
    assert pod_spec["affinity"] == {"nodeAffinity": {"typed": True}}
    assert pod_spec["schedulerName"] == "volcano" and pod_spec["runtimeClassName"] == "gvisor"
    assert pod_spec["hostAliases"] == TYPED["hostAliases"]
    assert pod_spec["dnsConfig"] == TYPED["dnsConfig"]
    assert pod_spec["topologySpreadConstraints"] == TYPED["topologySpreadConstraints"]
    # any pod field of the template passes through; the operator's pod fields are its own
    assert pod_spec["dnsPolicy"] == "ClusterFirst" and pod_spec["hostNetwork"] is False
    assert pod_spec["restartPolicy"] == "Never"
    assert pod_spec["terminationGracePeriodSeconds"] == 60
    assert pod_spec["serviceAccountName"] == "template-account", "the template's over the default"
    assert pod_spec["securityContext"] == podparts.POD_SECURITY_CONTEXT, "the default"
    # volumes: the operator's first, then the user's by name (typed over template)
    volumes = by_name(pod_spec["volumes"])
    assert list(volumes)[:2] == ["config", "work"]
    assert volumes["certs"] == {"name": "certs", "secret": {"secretName": "certs"}}
    assert volumes["cache"] == {"name": "cache", "emptyDir": {}}
    # init containers by name (typed over template), then the sidecars as native sidecars
    init = pod_spec["initContainers"]
    assert [c["name"] for c in init] == ["fetch", "shipper"]
    assert init[0]["args"] == ["typed"]
    assert init[1]["restartPolicy"] == "Always" and init[1]["image"] == "fluent-bit"
    # the main container: the operator's name, image, args; the user's env after the
    # operator's (B from the typed fields), mounts by path, ports and resources added
    [main] = pod_spec["containers"]
    assert (main["name"], main["image"], main["args"]) == (
        "driver",
        "img:1",
        ["finishable", "driver"],
    )
    names = [item["name"] for item in main["env"]]
    assert names.index("FINISHABLE_JOB_CONFIG") < names.index("A")
    env = by_name(main["env"])
    assert env["A"]["value"] == "template" and env["B"]["value"] == "typed"
    assert env["PGPASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "pg", "key": "password"}
    assert main["envFrom"] == [
        {"configMapRef": {"name": "template-env"}},
        {"secretRef": {"name": "s3"}},
    ]
    mounts = by_name(main["volumeMounts"], "mountPath")
    assert mounts["/cache"]["name"] == "certs", "the typed mount over the template's"
    assert mounts["/certs"]["readOnly"] is True and "/etc/finishable" in mounts
    assert {p["containerPort"] for p in main["ports"]} == {7078, 7079, 4040, 9404}
    assert main["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert main["resources"]["limits"]["memory"] == main["resources"]["requests"]["memory"]
    assert main["workingDir"] == "/work"
    assert main["securityContext"] == podparts.CONTAINER_SECURITY_CONTEXT


def test_the_typed_service_account_wins_and_the_operators_is_the_default() -> None:
    typed = builders.driver_pod(
        JOB,
        spec(driver={"serviceAccountName": "team", "template": TEMPLATE}),
        attempt=1,
        restore_from="",
    )
    assert typed["spec"]["serviceAccountName"] == "team"
    plain = builders.driver_pod(JOB, spec(), attempt=1, restore_from="")
    assert plain["spec"]["serviceAccountName"] == "clicks-driver"
    assert "initContainers" not in plain["spec"] and len(plain["spec"]["containers"]) == 1


def test_a_users_security_context_replaces_the_default_on_pod_and_container() -> None:
    template = {
        "spec": {
            "securityContext": {"runAsUser": 2000},
            "containers": [{"name": "driver", "securityContext": {"readOnlyRootFilesystem": True}}],
        }
    }
    pod = builders.driver_pod(JOB, spec(driver={"template": template}), attempt=1, restore_from="")
    assert pod["spec"]["securityContext"] == {"runAsUser": 2000}
    assert pod["spec"]["containers"][0]["securityContext"] == {"readOnlyRootFilesystem": True}


def test_standby_and_upgrade_check_pods_are_built_like_the_driver() -> None:
    job_spec = spec(driver={**TYPED, "template": TEMPLATE})
    standby = builders.driver_pod(JOB, job_spec, 3, "", standby=True)
    assert standby["metadata"]["annotations"]["a"] == "1"
    assert "finishable.dev/spec-revision" in standby["metadata"]["annotations"]
    check = upgradecheck.check_pod(
        JOB, job_spec, generation=4, run=1, attempt=2, restore_from="", master="local[1]"
    )
    [main] = check["spec"]["containers"]
    assert main["name"] == "upgrade-check"
    assert by_name(main["env"])["PGPASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "pg"
    assert {"secretRef": {"name": "s3"}} in main["envFrom"]
    assert [c["name"] for c in check["spec"]["initContainers"]] == ["fetch", "shipper"]


def test_the_disposal_pod_reaches_the_storage_as_the_driver_does() -> None:
    job_spec = spec(driver={**TYPED, "template": TEMPLATE})
    pod = disposalplan.disposal_pod(JOB, job_spec, "clicks-sp-1", "s3://b/sp-1")
    [main] = pod["spec"]["containers"]
    assert main["name"] == "disposer" and main["command"][:2] == ["finishable", "dispose-savepoint"]
    assert {"secretRef": {"name": "s3"}} in main["envFrom"]
    assert "PGPASSWORD" in by_name(main["env"])
    assert by_name(main["volumeMounts"], "mountPath")["/certs"]["name"] == "certs"
    assert pod["spec"]["serviceAccountName"] == "template-account"
    plain = disposalplan.disposal_pod(JOB, spec(), "clicks-sp-1", "s3://b/sp-1")
    assert plain["spec"]["automountServiceAccountToken"] is False
    assert "volumes" not in plain["spec"]


def test_the_executor_template_file_carries_the_executors_layers_for_spark() -> None:
    template = {
        "metadata": {"labels": {"tier": "gold"}},
        "spec": {
            "containers": [
                {"name": "executor", "resources": {"limits": {"nvidia.com/gpu": 1}}},
                {"name": "proxy", "image": "envoy"},
            ]
        },
    }
    executor = {
        "template": template,
        "envFrom": [{"secretRef": {"name": "s3"}}],
        "sidecars": [{"name": "shipper", "image": "fluent-bit"}],
        "volumes": [{"name": "pg", "secret": {"secretName": "pg"}}],
        "volumeMounts": [{"name": "pg", "mountPath": "/secrets/pg"}],
    }
    pod = podparts.executor_pod_template(spec(executor=executor))
    assert pod["kind"] == "Pod" and pod["metadata"]["labels"] == {"tier": "gold"}
    main, proxy = pod["spec"]["containers"]
    assert main["name"] == "executor" and proxy["name"] == "proxy", "Spark's container first"
    assert main["envFrom"] == [{"secretRef": {"name": "s3"}}]
    assert main["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert main["volumeMounts"] == [{"name": "pg", "mountPath": "/secrets/pg"}]
    assert pod["spec"]["initContainers"][0]["restartPolicy"] == "Always"
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["volumes"] == [{"name": "pg", "secret": {"secretName": "pg"}}]


def test_shuffle_pods_take_their_template_and_typed_fields() -> None:
    shuffle = {
        "sidecars": [{"name": "exporter", "image": "node-exporter"}],
        "env": [{"name": "TZ", "value": "UTC"}],
        "template": {"spec": {"priorityClassName": "shuffle-high"}},
    }
    template = builders.shuffle_stateful_set(JOB, spec(mode="Batch", shuffle=shuffle))["spec"][
        "template"
    ]
    assert template["metadata"]["labels"]["finishable.dev/component"] == "shuffle"
    assert template["spec"]["priorityClassName"] == "shuffle-high"
    [main] = template["spec"]["containers"]
    assert main["command"] == ["finishable", "shuffle-server"]
    assert [item["name"] for item in main["env"]] == ["FINISHABLE_TOKEN", "TZ"]
    assert template["spec"]["initContainers"] == [
        {"name": "exporter", "image": "node-exporter", "restartPolicy": "Always"}
    ]


@pytest.mark.parametrize(
    "change",
    [
        {"driver": {"env": [{"name": "TZ", "value": "UTC"}]}},
        {"driver": {"template": {"spec": {"dnsPolicy": "None"}}}},
        {"executor": {"sidecars": [{"name": "shipper", "image": "fluent-bit"}]}},
        {"executor": {"envFrom": [{"secretRef": {"name": "s3"}}]}},
    ],
)
def test_a_change_of_the_pods_is_an_upgrade(change: dict[str, Any]) -> None:
    """The revision a Running job is upgraded on (with a savepoint, after the upgrade check)
    changes with the driver's and the executors' pods."""
    assert spec(**change).revision != spec().revision
