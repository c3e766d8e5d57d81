"""The helm chart's static parts: its CRDs, its values and their schema, and what the Deployment
template must carry, read from the chart's files; the rendered Deployment is checked too (helm's
own checks are in test_helm.py); the dashboard is checked in test_dashboard.py, the RBAC rules
against the real operator in test_rbac.py."""

from __future__ import annotations

import argparse
import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from testcluster.chart.helm import only, template

pytestmark = pytest.mark.quick

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "finishable-spark-operator"


def values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return loaded


def test_the_chart_carries_the_same_crds_as_crds_dir() -> None:
    """helm installs crds/ as it is: a regenerated CRD must be copied into the chart too."""
    for chart_copy, original in (
        ("crds/finishablesparkjobs.finishable.dev.yaml", "finishablesparkjobs.finishable.dev.yaml"),
        (
            "crds/finishablesparksnapshots.finishable.dev.yaml",
            "finishablesparksnapshots.finishable.dev.yaml",
        ),
        ("files/kopf-peering.yaml", "kopf-peering.yaml"),
    ):
        assert (CHART / chart_copy).read_text() == (ROOT / "crds" / original).read_text(), (
            f"charts/finishable-spark-operator/{chart_copy} differs from crds/{original}: "
            f"copy crds/{original} over it"
        )


def test_chart_metadata() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == CHART.name
    from finishable import __version__

    assert chart["appVersion"] == __version__, "the image tag defaults to appVersion"


def test_the_default_values_satisfy_the_schema() -> None:
    jsonschema.Draft7Validator.check_schema(schema())
    jsonschema.validate(values(), schema())
    namespaced = {**values(), "watchNamespaces": ["analytics", "etl"], "replicaCount": 2}
    jsonschema.validate(namespaced, schema())


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        (["watchNamespaces"], ["Not_A_Namespace"]),
        (["watchNamespaces"], "analytics"),
        (["operator", "livenessPort"], 70000),
        (["image", "pullPolicy"], "Sometimes"),
        (["metrics", "serviceMonitor", "interval"], "30 seconds"),
        (["resources", "limits", "memory"], "lots"),
        (["operator", "unknownOption"], True),
        (["replicaCount"], -1),
        (["operator", "sparkMaster"], "kubernetes"),
        (["operator", "sparkMaster"], "local[0]"),
        (["operator", "sparkMaster"], 2),
        (["operator", "ttlAfterFinished"], "1 hour"),
        (["operator", "ttlAfterFinished"], 3600),
        (["operator", "ttlAfterFailed"], "-7d"),
    ],
)
def test_the_schema_rejects_wrong_values(path: list[str], bad: object) -> None:
    wrong = copy.deepcopy(values())
    target = wrong
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = bad
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, schema())


def test_replicas_beyond_one_need_peering() -> None:
    wrong = copy.deepcopy(values())
    wrong["peering"]["enabled"] = False
    wrong["replicaCount"] = 2
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, schema())
    wrong["replicaCount"] = 1
    jsonschema.validate(wrong, schema())


def test_the_deployment_template_carries_what_the_operator_needs() -> None:
    """Checked on the template text (no renderer here): the essentials docs/operator.md asks."""
    deployment = (CHART / "templates" / "deployment.yaml").read_text()
    assert 'command: ["finishable"]' in deployment and "- operator" in deployment
    assert re.search(
        r"range \.Values\.watchNamespaces \}\}\s*- --namespace=\{\{ \. \}\}", deployment
    )
    assert "- --standalone" in deployment, "without the peering CRDs it runs standalone"
    assert re.search(
        r"name: POD_ID\s+valueFrom:\s+fieldRef:\s+fieldPath: metadata\.name", deployment
    )
    assert re.search(r"livenessProbe:\s+httpGet:\s+path: /healthz\s+port: liveness", deployment)
    assert re.search(r"readinessProbe:\s+httpGet:\s+path: /healthz\s+port: liveness", deployment)
    assert "containerPort: {{ .Values.operator.livenessPort }}" in deployment
    assert "--liveness-port={{ .Values.operator.livenessPort }}" in deployment
    assert "toYaml .Values.resources" in deployment
    assert re.search(r"mountPath: /tmp", deployment) and "emptyDir: {}" in deployment
    defaults = values()
    assert defaults["podSecurityContext"]["runAsNonRoot"] is True
    assert defaults["podSecurityContext"]["runAsUser"] >= 1000
    assert defaults["securityContext"]["readOnlyRootFilesystem"] is True
    assert defaults["securityContext"]["allowPrivilegeEscalation"] is False
    assert defaults["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert "toYaml .Values.podSecurityContext" in deployment
    assert "toYaml .Values.securityContext" in deployment
    assert defaults["resources"]["requests"] and defaults["resources"]["limits"]["memory"]


def operator_options() -> set[str]:
    """The option strings `finishable [-v] operator` accepts."""
    from finishable.cli import build_parser

    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(commands.choices["operator"]._option_string_actions) | {"--verbose"}


def test_the_deployment_passes_only_flags_the_operator_knows() -> None:
    deployment = (CHART / "templates" / "deployment.yaml").read_text()
    args = deployment[deployment.index("args:") : deployment.index("env:")]
    flags = set(re.findall(r"(--[a-z][a-z-]*)", args))
    assert {"--spark-master", "--namespace", "--liveness-port", "--standalone"} <= flags
    assert flags <= operator_options(), flags - operator_options()


def test_spark_master_is_passed_only_when_set() -> None:
    """operator.sparkMaster "" (the default) leaves the operator's own default in force."""
    assert values()["operator"]["sparkMaster"] == ""
    deployment = (CHART / "templates" / "deployment.yaml").read_text()
    assert re.search(
        r"\{\{- with \.Values\.operator\.sparkMaster \}\}\s*"
        r"- \{\{ printf \"--spark-master=%s\" \. \| quote \}\}\s*\{\{- end \}\}",
        deployment,
    )
    for master in ("local[2]", "local[*]", "k8s://https://kubernetes.default.svc:443"):
        jsonschema.validate(
            {**values(), "operator": {**values()["operator"], "sparkMaster": master}}, schema()
        )
    from finishable.cli import build_parser

    parsed = build_parser().parse_args(["operator", "--spark-master=local[2]"])
    assert parsed.spark_master == "local[2]"


def test_the_ttl_defaults_are_passed_only_when_set_and_parse_as_the_operator_s_options() -> None:
    """Empty (the default) keeps Finished and Failed jobs; 0s is a value: delete at once."""
    assert (values()["operator"]["ttlAfterFinished"], values()["operator"]["ttlAfterFailed"]) == (
        "",
        "",
    )
    (container,) = only(template(), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert not [arg for arg in container["args"] if arg.startswith("--ttl-")]
    for ttl in ("24h", "7d", "1h30m", "0s"):
        jsonschema.validate(
            {**values(), "operator": {**values()["operator"], "ttlAfterFailed": ttl}}, schema()
        )
    rendered = template("operator.ttlAfterFinished=24h", "operator.ttlAfterFailed=0s")
    (container,) = only(rendered, "Deployment")["spec"]["template"]["spec"]["containers"]
    ttl_args = [arg for arg in container["args"] if arg.startswith("--ttl-")]
    assert ttl_args == ["--ttl-after-finished=24h", "--ttl-after-failed=0s"]
    from finishable.cli import build_parser

    parsed = build_parser().parse_args(["operator", *ttl_args])
    assert parsed.ttl_after_finished.total_seconds() == 24 * 3600
    assert parsed.ttl_after_failed.total_seconds() == 0


def test_helm_renders_the_deployment() -> None:
    (container,) = only(template(), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "finishable-spark-operator:0.1.0"
    assert not any(arg.startswith("--spark-master") for arg in container["args"])
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    namespaced = template("operator.sparkMaster=local[2]", "watchNamespaces={a,b}")
    deployment = only(namespaced, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--spark-master=local[2]" in container["args"]
    assert {"--namespace=a", "--namespace=b"} <= set(container["args"])


def test_the_metrics_service_and_service_monitor_select_the_operator() -> None:
    service = (CHART / "templates" / "service.yaml").read_text()
    monitor = (CHART / "templates" / "servicemonitor.yaml").read_text()
    assert "targetPort: metrics" in service
    assert monitor.startswith("{{- if .Values.metrics.serviceMonitor.enabled }}")
    assert "honorLabels: true" in monitor, "per-job series carry their own namespace label"
    assert "app.kubernetes.io/component: metrics" in service
    assert "app.kubernetes.io/component: metrics" in monitor


def test_replicas_get_a_disruption_budget_that_lets_a_drain_take_one_at_a_time() -> None:
    assert not [d for d in template() if d["kind"] == "PodDisruptionBudget"]  # one replica
    (budget,) = [d for d in template("replicaCount=2") if d["kind"] == "PodDisruptionBudget"]
    deployment = only(template("replicaCount=2"), "Deployment")
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]


def test_peering_crds_come_only_with_peering() -> None:
    template = (CHART / "templates" / "kopf-peering-crds.yaml").read_text()
    assert "{{- if .Values.peering.enabled }}" in template
    assert '.Files.Get "files/kopf-peering.yaml"' in template


def test_the_partition_service_is_installed_only_when_enabled_and_named_to_the_operator() -> None:
    assert values()["partitionService"]["enabled"] is False
    assert not [d for d in template() if d["metadata"]["name"].endswith("-partitions")]
    rendered = template(
        "partitionService.enabled=true",
        "partitionService.storage=s3://bucket/cluster-partitions",
        "partitionService.credentialsSecret=partition-store",
    )
    deployments = {d["metadata"]["name"]: d for d in rendered if d["kind"] == "Deployment"}
    service_pod = deployments.pop("fso-finishable-spark-operator-partitions")["spec"]["template"]
    (operator,) = deployments.values()
    (container,) = service_pod["spec"]["containers"]
    assert container["args"][:2] == [
        "partition-service",
        "--storage=s3://bucket/cluster-partitions",
    ]
    assert container["envFrom"] == [{"secretRef": {"name": "partition-store"}}]
    volumes = {v["name"]: v for v in service_pod["spec"]["volumes"]}
    assert volumes["tokens"]["secret"]["secretName"] == "finishable-partition-tokens"
    operator_args = operator["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--cluster-partitions-storage=s3://bucket/cluster-partitions" in operator_args
    # The operator's selector must not pick the service's pods, nor the service's the operator's.
    operator_selector = operator["spec"]["selector"]["matchLabels"]
    service_labels = service_pod["metadata"]["labels"]
    assert not operator_selector.items() <= service_labels.items()
    (service,) = [
        s for s in rendered if s["kind"] == "Service" and "partitions" in s["metadata"]["name"]
    ]
    assert service["spec"]["selector"].items() <= service_labels.items()
    from finishable.cli import build_parser

    parsed = build_parser().parse_args(["partition-service", *container["args"][1:]])
    assert parsed.storage == "s3://bucket/cluster-partitions" and parsed.port == 8088


def test_an_enabled_partition_service_needs_a_storage() -> None:
    enabled = {**values(), "partitionService": {**values()["partitionService"], "enabled": True}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(enabled, schema())
    enabled["partitionService"]["storage"] = "s3://bucket/p"
    jsonschema.validate(enabled, schema())


def test_the_partition_service_s_metrics_are_scraped_with_the_operator_s() -> None:
    rendered = template(
        "partitionService.enabled=true",
        "partitionService.storage=s3://bucket/p",
        "metrics.serviceMonitor.enabled=true",
    )
    monitors = {m["metadata"]["name"]: m for m in rendered if m["kind"] == "ServiceMonitor"}
    services = [s for s in rendered if s["kind"] == "Service"]
    scraped = {  # each ServiceMonitor selects exactly this Service
        "fso-finishable-spark-operator": "fso-finishable-spark-operator-metrics",
        "fso-finishable-spark-operator-partitions": "fso-finishable-spark-operator-partitions",
    }
    assert set(monitors) == set(scraped)
    for name, monitor in monitors.items():
        selector = monitor["spec"]["selector"]["matchLabels"].items()
        (chosen,) = [s for s in services if selector <= s["metadata"]["labels"].items()]
        assert chosen["metadata"]["name"] == scraped[name]
        ports = {port["name"] for port in chosen["spec"]["ports"]}
        assert monitor["spec"]["endpoints"][0]["port"] in ports
