"""The chart's RBAC as grants: what its rule files (files/rbac/) allow in each mode, what the
operator grants each driver, and which recorded API calls those grants would refuse.

A grant is (verb, API group, resource[/subresource]), as the API emulator records each call
(``testcluster.apiserver.emulator.CALLS_PATH``). templates/rbac.yaml includes the rule files
verbatim (``.Files.Get``, no templating inside them), so they are read here without helm;
``MODES`` says which of them the template binds where (``tests/charts/test_rbac.py`` checks
that mapping against the template and against helm's rendering). ``tests/charts/test_rbac.py``
compares the grants with the calls of the operator in the tests' cluster,
``e2e/test_rbac.py`` with those of the operator and the drivers in an e2e run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from finishable.controller.job import builders
from finishable.kube.objects import JobRef

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "finishable-spark-operator"
RULES = CHART / "files" / "rbac"
OPERATOR_CLIENTS = {"finishable-operator", "kopf"}  # the operator's own client and kopf's

Grant = tuple[str, str, str]
"""(verb, API group, resource[/subresource])"""

MODES: dict[str, dict[str, list[str]]] = {
    # rule files bound in each watched namespace (a RoleBinding), and cluster-wide
    "namespaced": {"namespace": ["jobs", "peering"], "cluster": ["crds", "nodes", "namespaces"]},
    "clusterwide": {"namespace": [], "cluster": ["jobs", "crds", "nodes", "cluster-peering"]},
}

# Non-resource URLs every authenticated client may GET (the system:discovery ClusterRole).
DISCOVERY = re.compile(r"/(api|apis)(/[^/]+(/[^/]+)?)?/?|/version/?")


def grants_of(rule_files: list[str]) -> set[Grant]:
    grants: set[Grant] = set()
    for name in rule_files:
        for rule in yaml.safe_load((RULES / f"{name}.yaml").read_text()):
            grants |= rule_grants(rule)
    return grants


def rule_grants(rule: dict[str, Any]) -> set[Grant]:
    fields = (rule["verbs"], rule["apiGroups"], rule["resources"])
    assert not any("*" in values for values in fields), f"no wildcards: {rule}"
    return {(v, g, r) for v in rule["verbs"] for g in rule["apiGroups"] for r in rule["resources"]}


def driver_role_grants() -> set[Grant]:
    """What the operator grants each driver: RBAC lets it do so only if it holds it too."""
    job = JobRef(name="any", namespace="jobs", uid="0")
    return {grant for rule in builders.role(job)["rules"] for grant in rule_grants(rule)}


def denied(
    recorded: list[dict[str, Any]], in_namespace: set[Grant], cluster_wide: set[Grant]
) -> list[dict[str, Any]]:
    """The calls these grants would refuse (namespaced grants hold only for namespaced calls);
    every call without a resource must be discovery."""
    refused = []
    for call in recorded:
        if not call["resource"]:
            assert DISCOVERY.fullmatch(call["path"]), f"a non-discovery URL: {call}"
            continue
        grant = (call["verb"], call["group"], call["resource"])
        if grant not in cluster_wide | (in_namespace if call["namespaced"] else set()):
            refused.append(call)
    return refused


def used(recorded: list[dict[str, Any]]) -> set[Grant]:
    return {(c["verb"], c["group"], c["resource"]) for c in recorded if c["resource"]}
