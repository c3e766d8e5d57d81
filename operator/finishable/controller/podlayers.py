"""A job's pods in three layers: the user's template, then the typed fields, then what the
operator owns (docs/your-own-job.md has the table).

The user's two layers (:func:`user_pod`) and the operator's (:func:`over`) are merged here
alone, for every pod the operator builds (driver, standby, upgrade check, savepoint disposal,
shuffle) and for the template Spark builds each executor pod from. What the operator owns is
never also set by the user: the rules of :mod:`finishable.api.podtemplate` refuse that before
anything runs, so the operator's layer wins only where both say nothing. Pure functions of dicts.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from finishable.api.pods import PodSettings

SIDECAR_RESTART_POLICY = "Always"
"""What makes an init container a native sidecar: it starts before the main container, runs
beside it and is stopped after it, so a driver pod still ends when its driver does."""

_MAIN_MERGED = ("env", "envFrom", "volumeMounts", "ports", "resources", "securityContext")
"""Fields of the main container both layers add to; the operator's other fields replace."""


def _by_key(
    first: Iterable[Mapping[str, Any]], then: Iterable[Mapping[str, Any]], key: str
) -> list[dict[str, Any]]:
    """``first`` with each item of ``then`` in place of the one with its ``key``, or after."""
    merged = {str(item[key]): dict(item) for item in first}
    for item in then:
        merged[str(item[key])] = dict(item)
    return list(merged.values())


def _wire(items: Iterable[Any]) -> list[dict[str, Any]]:
    """Models of Kubernetes objects as the API takes them: what the user wrote, no defaults."""
    return [
        item.model_dump(by_alias=True, mode="json", exclude_defaults=True)
        if hasattr(item, "model_dump")
        else dict(item)
        for item in items
    ]


def user_pod(settings: PodSettings, main: str, image_pull_secrets: list[str]) -> dict[str, Any]:
    """The user's layers of a pod: ``settings.template``, then the typed fields over it. Its
    ``spec.containers`` starts with the main container (named ``main``, as the template names
    it), present even when the user says nothing of it."""
    template = _wire([settings.template])[0] if settings.template is not None else {}
    meta: dict[str, Any] = copy.deepcopy(template.get("metadata") or {})
    spec: dict[str, Any] = copy.deepcopy(template.get("spec") or {})
    if settings.labels:
        meta["labels"] = {**meta.get("labels", {}), **settings.labels}
    if settings.annotations:
        meta["annotations"] = {**meta.get("annotations", {}), **settings.annotations}
    for name in ("labels", "annotations"):
        if not meta.get(name):
            meta.pop(name, None)

    if settings.node_selector:
        spec["nodeSelector"] = {**spec.get("nodeSelector", {}), **settings.node_selector}
    for name, added in (
        ("tolerations", settings.tolerations),
        ("topologySpreadConstraints", settings.topology_spread_constraints),
        ("hostAliases", settings.host_aliases),
    ):
        if added:
            spec[name] = [*spec.get(name, []), *copy.deepcopy(added)]
    for name, value in (
        ("affinity", settings.affinity),
        ("priorityClassName", settings.priority_class_name),
        ("schedulerName", settings.scheduler_name),
        ("runtimeClassName", settings.runtime_class_name),
        ("securityContext", settings.security_context),
        ("dnsConfig", settings.dns_config),
    ):
        if value is not None:
            spec[name] = copy.deepcopy(value)
    account = getattr(settings, "service_account_name", None)
    if account is not None:
        spec["serviceAccountName"] = account
    if settings.volumes:
        spec["volumes"] = _by_key(spec.get("volumes", []), _wire(settings.volumes), "name")
    sidecars = [
        {**sidecar, "restartPolicy": SIDECAR_RESTART_POLICY} for sidecar in _wire(settings.sidecars)
    ]
    if settings.init_containers or sidecars:
        spec["initContainers"] = _by_key(
            spec.get("initContainers", []), [*_wire(settings.init_containers), *sidecars], "name"
        )
    names = [secret["name"] for secret in spec.get("imagePullSecrets", [])]
    pull = [*names, *(name for name in image_pull_secrets if name not in names)]
    if pull:
        spec["imagePullSecrets"] = [{"name": name} for name in pull]

    containers = spec.get("containers", [])
    container: dict[str, Any] = next(
        (c for c in containers if c.get("name") == main), {"name": main}
    )
    if settings.env:
        container["env"] = _by_key(container.get("env", []), _wire(settings.env), "name")
    if settings.env_from:
        container["envFrom"] = [*container.get("envFrom", []), *copy.deepcopy(settings.env_from)]
    if settings.volume_mounts:
        container["volumeMounts"] = _by_key(
            container.get("volumeMounts", []), _wire(settings.volume_mounts), "mountPath"
        )
    spec["containers"] = [container, *(c for c in containers if c.get("name") != main)]
    return {"metadata": meta, "spec": spec}


def _main_container(user: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """The user's main container under the operator's: the operator's fields replace, its
    environment, mounts and ports come first (a user's variable may refer to an operator's),
    requests and limits merge by resource."""
    merged = {key: value for key, value in user.items() if key not in own or key in _MAIN_MERGED}
    merged |= {key: value for key, value in own.items() if key not in _MAIN_MERGED}
    for name, key in (("env", "name"), ("volumeMounts", "mountPath"), ("ports", "containerPort")):
        owned = list(own.get(name, []))
        taken = {item[key] for item in owned}
        items = [*owned, *(item for item in user.get(name, []) if item[key] not in taken)]
        if items:
            merged[name] = items
    env_from = [*own.get("envFrom", []), *user.get("envFrom", [])]
    if env_from:
        merged["envFrom"] = env_from
    if "resources" in own or "resources" in user:
        resources: dict[str, Any] = {}
        for kind in ("requests", "limits"):
            table = {
                **user.get("resources", {}).get(kind, {}),
                **own.get("resources", {}).get(kind, {}),
            }
            if table:
                resources[kind] = table
        merged["resources"] = resources
    security = user.get("securityContext", own.get("securityContext"))
    if security is not None:
        merged["securityContext"] = security
    return merged


def over(
    user: Mapping[str, Any],
    own: Mapping[str, Any],
    *,
    defaults: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The operator's layer ``own`` (a pod: ``metadata``, ``spec`` with the main container
    first in ``containers`` and its ``volumes``) over the user's layers ``user``
    (:func:`user_pod`). ``defaults`` are pod spec fields the operator sets only where the user
    said nothing (a securityContext, the service account)."""
    user_meta, user_spec = user.get("metadata", {}), user.get("spec", {})
    own_meta, own_spec = own.get("metadata", {}), own["spec"]
    meta = {**copy.deepcopy(dict(user_meta)), **copy.deepcopy(dict(own_meta))}
    for name in ("labels", "annotations"):
        table = {**user_meta.get(name, {}), **own_meta.get(name, {})}
        if table:
            meta[name] = table
    spec = {**copy.deepcopy(dict(defaults or {})), **copy.deepcopy(dict(user_spec))}
    spec |= {
        key: copy.deepcopy(value)
        for key, value in own_spec.items()
        if key not in ("containers", "volumes", "initContainers")
    }
    own_main, *own_others = own_spec["containers"]
    user_main, *user_others = user_spec.get("containers", [{}])
    spec["containers"] = [
        _main_container(user_main, own_main),
        *copy.deepcopy(own_others),
        *copy.deepcopy(user_others),
    ]
    owned = [dict(volume) for volume in own_spec.get("volumes", [])]
    taken = {volume["name"] for volume in owned}
    volumes = [*owned, *(dict(v) for v in user_spec.get("volumes", []) if v["name"] not in taken)]
    if volumes:
        spec["volumes"] = volumes
    init = [*own_spec.get("initContainers", []), *user_spec.get("initContainers", [])]
    if init:
        spec["initContainers"] = copy.deepcopy(init)
    rest = {key: value for key, value in own.items() if key not in ("metadata", "spec")}
    return {**rest, "metadata": meta, "spec": spec}
