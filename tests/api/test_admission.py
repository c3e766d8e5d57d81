"""Errors at apply time: every cross-field rule refuses its invalid specs twice, with one message.

Each case below breaks one rule. A real kube-apiserver of the pinned release (testcluster/
controlplane), given the committed CRD, refuses it at ``kubectl apply`` with the rule's CEL; the
models refuse it with the same rule evaluated in Python; both name the same field with the same
message. Every rule of the spec's models is broken by some case, so a rule added without a case
fails here.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from finishable.api.crd import CRD_FILE
from finishable.api.rules import Rule, RuleViolations
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.validation import InvalidManifest, parse_spec
from finishable.kube.api import KubeApi
from testcluster.controlplane.cluster import ControlPlane
from testcluster.processes import ROOT
from testcluster.tools import installed
from testcluster.waiting import wait_for

pytestmark = pytest.mark.quick

NAMESPACE = "admission"
BASE = {"image": "img:1", "application": {"file": "local:///app/job.py"}}
REASONS = {
    "FieldValueInvalid": "Invalid value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueRequired": "Required value",
}
VOLUME = {"name": "v", "emptyDir": {}}

# (id, spec fields over BASE, the field named, the start of the message)
CASES: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "restore-from-two-origins",
        {"restoreFrom": {"savepoint": "s3://b/sp-1", "snapshotRef": "clicks-sp-1"}},
        "spec.restoreFrom.snapshotRef",
        "savepoint (s3://b/sp-1) and snapshotRef (clicks-sp-1) are both set",
    ),
    (
        "config-map-storage-with-url",
        {"checkpointing": {"storage": {"type": "ConfigMap", "url": "s3://b/p"}}},
        "spec.checkpointing.storage.url",
        "type ConfigMap takes no url (s3://b/p)",
    ),
    (
        "object-storage-without-url",
        {"checkpointing": {"storage": {"type": "ObjectStore"}}},
        "spec.checkpointing.storage",
        "type ObjectStore needs url",
    ),
    (
        "object-storage-of-unknown-scheme",
        {"checkpointing": {"storage": {"type": "ObjectStore", "url": "ftp://h/p"}}},
        "spec.checkpointing.storage.url",
        "ftp://h/p is not an object store URL",
    ),
    (
        "config-map-storage-with-secret",
        {"checkpointing": {"storage": {"type": "ConfigMap", "secretRef": "s3"}}},
        "spec.checkpointing.storage.secretRef",
        "type ConfigMap takes no secretRef (s3)",
    ),
    (
        "shuffle-pods-in-streaming",
        {"shuffle": {"replicas": 2}},
        "spec.shuffle",
        "shuffle pods are only used in Batch mode",
    ),
    (
        "savepoints-in-batch",
        {"mode": "Batch", "savepoints": {"interval": "10m"}},
        "spec.savepoints",
        "a Batch job takes no savepoints",
    ),
    (
        "work-volume-of-no-source",
        {"workVolume": {"storageClassName": "nfs"}},
        "spec.workVolume",
        "name an existing ReadWriteMany claim (claimName) or give a size",
    ),
    (
        "work-volume-class-of-an-existing-claim",
        {"workVolume": {"claimName": "work", "storageClassName": "nfs"}},
        "spec.workVolume.storageClassName",
        "storageClassName applies only to a claim the operator creates",
    ),
    (
        "autoscaler-bounds-reversed",
        {"autoscaler": {"enabled": True, "minExecutors": 3, "maxExecutors": 2}},
        "spec.autoscaler.minExecutors",
        "minExecutors (3) is above maxExecutors (2)",
    ),
    (
        "checksum-of-an-unlisted-url",
        {
            "application": {
                "file": "local:///app/job.py",
                "archives": ["s3://b/env.tar.gz#env"],
                "sha256": {"s3://b/env.tar.gz#env": "0" * 64},
            }
        },
        "spec.application.sha256",
        "s3://b/env.tar.gz#env is not the URL of file nor of an entry of pyFiles, files,",
    ),
    (
        "operator-label",
        {"driver": {"labels": {"finishable.dev/job": "other"}}},
        "spec.driver.labels",
        "label finishable.dev/job: finishable.dev/* labels are set by the operator",
    ),
    (
        "operator-label-in-template",
        {"executor": {"template": {"metadata": {"labels": {"finishable.dev/attempt": "9"}}}}},
        "spec.executor.template",
        "template.metadata.labels: label finishable.dev/attempt:",
    ),
    (
        "operator-variable",
        {"driver": {"env": [{"name": "FINISHABLE_TOKEN", "value": "guess"}]}},
        "spec.driver.env",
        "variable FINISHABLE_TOKEN: FINISHABLE_* variables",
    ),
    (
        "operator-volume",
        {"driver": {"volumes": [{"name": "config", "emptyDir": {}}]}},
        "spec.driver.volumes",
        "volume config: config, work, finishable-work are the operator's volumes",
    ),
    (
        "operator-volume-in-template",
        {"mode": "Batch", "shuffle": {"template": {"spec": {"volumes": [{"name": "data"}]}}}},
        "spec.shuffle.template",
        "template.spec.volumes: volume data: data are the operator's volumes",
    ),
    (
        "operator-mount-path",
        {
            "driver": {
                "volumes": [VOLUME],
                "volumeMounts": [{"name": "v", "mountPath": "/etc/finishable"}],
            }
        },
        "spec.driver.volumeMounts",
        "mount path /etc/finishable: /etc/finishable, /tmp/finishable, /var/lib/finishable hold",
    ),
    (
        "mount-of-no-volume",
        {"executor": {"volumeMounts": [{"name": "pg", "mountPath": "/secrets/pg"}]}},
        "spec.executor.volumeMounts",
        "mount of volume pg: no such volume in spec.executor.volumes or its template's",
    ),
    (
        "sidecar-mount-of-no-volume",
        {
            "driver": {
                "sidecars": [
                    {
                        "name": "shipper",
                        "image": "i",
                        "volumeMounts": [{"name": "logs", "mountPath": "/l"}],
                    }
                ]
            }
        },
        "spec.driver.sidecars",
        "container shipper: mounts a volume that is in neither spec.driver.volumes",
    ),
    (
        "sidecar-named-as-the-main-container",
        {"driver": {"sidecars": [{"name": "driver", "image": "i"}]}},
        "spec.driver.sidecars",
        "container driver: driver is the main container",
    ),
    (
        "init-container-named-as-the-main-container",
        {"executor": {"initContainers": [{"name": "executor", "image": "i"}]}},
        "spec.executor.initContainers",
        "container executor: executor is the main container",
    ),
    (
        "template-init-container-named-as-the-main-container",
        {
            "mode": "Batch",
            "shuffle": {
                "template": {"spec": {"initContainers": [{"name": "shuffle", "image": "i"}]}}
            },
        },
        "spec.shuffle.template",
        "template.spec.initContainers: container shuffle: shuffle is the main container",
    ),
    (
        "main-container-command",
        {"driver": {"template": {"spec": {"containers": [{"name": "driver", "command": ["sh"]}]}}}},
        "spec.driver.template",
        "template.spec.containers[driver]: command, args and image are the operator's",
    ),
    (
        "main-container-memory",
        {
            "executor": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "executor", "resources": {"requests": {"memory": "1Gi"}}}
                        ]
                    }
                }
            }
        },
        "spec.executor.template",
        "template.spec.containers[executor].resources: cpu and memory come from spec.executor",
    ),
    (
        "main-container-operator-variable",
        {
            "driver": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "driver",
                                "env": [{"name": "PYSPARK_SUBMIT_ARGS", "value": "x"}],
                            }
                        ]
                    }
                }
            }
        },
        "spec.driver.template",
        "template.spec.containers[driver].env: FINISHABLE_* variables and SPARK_CONF_DIR",
    ),
    (
        "main-container-operator-port",
        {
            "driver": {
                "template": {
                    "spec": {"containers": [{"name": "driver", "ports": [{"containerPort": 4040}]}]}
                }
            }
        },
        "spec.driver.template",
        "template.spec.containers[driver].ports: 7078, 7079, 4040 are the operator's ports",
    ),
    (
        "main-container-operator-mount-path",
        {
            "mode": "Batch",
            "shuffle": {
                "template": {
                    "spec": {
                        "volumes": [VOLUME],
                        "containers": [
                            {
                                "name": "shuffle",
                                "volumeMounts": [{"name": "v", "mountPath": "/data"}],
                            }
                        ],
                    }
                }
            },
        },
        "spec.shuffle.template",
        "template.spec.containers[shuffle].volumeMounts: /data hold the operator's volumes",
    ),
    (
        "template-restart-policy",
        {"executor": {"template": {"spec": {"restartPolicy": "Always"}}}},
        "spec.executor.template",
        "template.spec.restartPolicy is set by the operator",
    ),
    (
        "template-grace-period",
        {"driver": {"template": {"spec": {"terminationGracePeriodSeconds": 5}}}},
        "spec.driver.template",
        "template.spec.terminationGracePeriodSeconds is set by the operator",
    ),
    (
        "second-container-of-a-driver",
        {
            "driver": {
                "template": {
                    "spec": {"containers": [{"name": "driver"}, {"name": "shipper", "image": "i"}]}
                }
            }
        },
        "spec.driver.template",
        "template.spec.containers: container shipper: a driver pod must end when its driver does",
    ),
]

VALID = {
    **BASE,
    "driver": {
        "labels": {"team": "growth"},
        "env": [{"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {"name": "pg", "key": "pw"}}}],
        "envFrom": [{"secretRef": {"name": "s3"}}],
        "volumes": [{"name": "pg", "secret": {"secretName": "pg"}}],
        "volumeMounts": [{"name": "pg", "mountPath": "/secrets/pg", "readOnly": True}],
        "sidecars": [
            {"name": "shipper", "image": "i", "volumeMounts": [{"name": "logs", "mountPath": "/l"}]}
        ],
        "schedulerName": "default-scheduler",
        "template": {
            "metadata": {"annotations": {"a": "b"}},
            "spec": {
                "volumes": [{"name": "logs", "emptyDir": {}}],
                "containers": [
                    {
                        "name": "driver",
                        "ports": [{"containerPort": 9404, "name": "jmx"}],
                        "resources": {"limits": {"nvidia.com/gpu": 1}},
                    }
                ],
            },
        },
    },
    "executor": {"envFrom": [{"secretRef": {"name": "s3"}}]},
}


def manifest(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "finishable.dev/v1alpha1",
        "kind": "FinishableSparkJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def spec_of(fields: dict[str, Any]) -> dict[str, Any]:
    return {**BASE, **fields}


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """``kubectl`` against a real API server that serves the committed CRD."""
    binary = installed("kubectl")
    with ControlPlane(tmp_path_factory.mktemp("controlplane")) as plane:
        command = [binary, "--kubeconfig", str(plane.admin.kubeconfig)]
        api = KubeApi.from_kubeconfig(plane.admin.kubeconfig)
        body = {"metadata": {"name": NAMESPACE}}
        assert api.request("POST", "/api/v1/namespaces", body=body).status == 201
        applied = subprocess.run(
            [*command, "apply", "-f", str(ROOT / CRD_FILE)],
            check=False,
            capture_output=True,
            text=True,
        )
        assert applied.returncode == 0, applied.stderr
        path = f"/apis/finishable.dev/v1alpha1/namespaces/{NAMESPACE}/finishablesparkjobs"
        wait_for(lambda: api.request("GET", path).status == 200, "the CRD's resource served", 60)
        api.close()
        yield command


def apply(
    kubectl: list[str], tmp_path: Path, body: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    file = tmp_path / f"{body['metadata']['name']}.json"
    file.write_text(json.dumps(body))
    return subprocess.run(
        [*kubectl, "apply", "-f", str(file)], check=False, capture_output=True, text=True
    )


def problems(spec: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidManifest) as refused:
        parse_spec(spec)
    return {problem.path: problem.message for problem in refused.value.problems}


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_the_server_and_the_models_refuse_each_case_with_one_message(
    kubectl: list[str], tmp_path: Path, case: tuple[str, dict[str, Any], str, str]
) -> None:
    name, fields, path, message = case
    found = problems(spec_of(fields))
    assert path in found, found
    assert found[path].startswith(message), found[path]
    [rule] = [rule for rule, text in _broken(spec_of(fields)) if text == found[path]]
    applied = apply(kubectl, tmp_path, manifest(name, spec_of(fields)))
    assert applied.returncode != 0, f"the server accepted {name}"
    assert f"{path}: {REASONS[rule.reason]}: {found[path]}" in applied.stderr, applied.stderr


def test_a_spec_that_uses_every_pod_field_is_accepted_by_both(
    kubectl: list[str], tmp_path: Path
) -> None:
    parse_spec(VALID)
    applied = apply(kubectl, tmp_path, manifest("every-pod-field", VALID))
    assert applied.returncode == 0, applied.stderr


# -- every rule has its case ----------------------------------------------------------------------


def _models(
    model: type[BaseModel], path: tuple[str, ...] = ()
) -> Iterator[tuple[type[BaseModel], tuple[str, ...]]]:
    """Every model under ``model`` (itself first) with the path of its field."""
    yield model, path
    for name, info in model.model_fields.items():
        for candidate in getattr(info.annotation, "__args__", (info.annotation,)):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                yield from _models(candidate, (*path, info.alias or name))


def _broken(spec: dict[str, Any]) -> list[tuple[Rule, str]]:
    """The rules ``spec`` breaks, found model by model on the raw spec."""
    found: list[tuple[Rule, str]] = []
    for model, path in _models(FinishableSparkJobSpec):
        node: Any = spec
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict) or not getattr(model, "RULES", ()):
            continue
        try:
            model.model_validate(node)
        except ValidationError as error:
            for item in error.errors(include_url=False):
                violations = (item.get("ctx") or {}).get("error")
                if isinstance(violations, RuleViolations) and not item["loc"]:
                    found += violations.broken
    return found


def _identity(rule: Rule) -> str:
    """A rule by what it checks, one per kind of pod rule whichever component it is on."""
    for parts_rules in _pod_rules():
        if rule in parts_rules:
            return f"pod rule {parts_rules.index(rule)}"
    return rule.check.cel()


def _pod_rules() -> list[tuple[Rule, ...]]:
    from finishable.api.batchspec import ShuffleSpec
    from finishable.api.pods import DriverSpec, ExecutorSpec

    return [DriverSpec.RULES, ExecutorSpec.RULES, ShuffleSpec.RULES]


def test_every_rule_is_broken_by_a_case() -> None:
    every = {
        _identity(rule) for model, _ in _models(FinishableSparkJobSpec) for rule in model.RULES
    }
    broken = {_identity(rule) for _, fields, _, _ in CASES for rule, _ in _broken(spec_of(fields))}
    assert every - broken == set(), "rules without a case"
