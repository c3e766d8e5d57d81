"""What a real ``kubectl`` (1.33) asks of an API server, answered as a real server answers it.

* TLS: kubectl sends a bearer token only over HTTPS (clientcmd drops it for an ``http://``
  server), so the emulator can also serve HTTPS with a throwaway cluster CA
  (:func:`certificates`); the kubeconfig carries the CA as ``certificate-authority-data``.
* ``GET /version``: a v1.33 server.
* OpenAPI v3: the index ``/openapi/v3`` (one path per served group version, each with its
  ``serverRelativeURL``) and ``/openapi/v3/api/v1``, ``/openapi/v3/apis/G/V``: a PATCH operation
  per resource, tagged ``x-kubernetes-group-version-kind`` and taking the ``fieldValidation``
  query parameter (what cli-runtime's ``QueryParamVerifierV3`` looks for before it asks the
  server to validate, ``kubectl apply --validate=strict``), and the schemas: a custom resource's
  from its CRD (so ``kubectl explain fsj.spec`` works), an open object for built-ins.
* Server-side printing: ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` on get and
  list answers a ``meta.k8s.io/v1`` Table: a custom resource's columns are Name and its CRD's
  ``additionalPrinterColumns`` (Name and Age without them), ``date`` cells as ages ("5m");
  built-ins get Name and Age.
* ``fieldSelector`` on list and watch: ``metadata.name`` and ``metadata.namespace`` (``=``,
  ``==``, ``!=``), which ``kubectl wait`` and ``kubectl delete`` use; any other field of a custom
  resource is refused with 400, as a real server refuses it. (Built-ins' own extra fields, such
  as a Pod's ``spec.nodeName``, are accepted and matched by their dotted path.)
* Watches as a real server serves them: ``application/json``, an event per line, or over a
  WebSocket when the client asks for the upgrade, as fabric8 (Spark's client) does.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import hashlib
import json
import re
import ssl
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp.web
import kmock
from kmock import KubernetesError

if TYPE_CHECKING:
    from testcluster.apiserver.emulator import StateEmulator

SERVER_VERSION = {
    "major": "1",
    "minor": "33",
    "emulationMajor": "1",
    "emulationMinor": "33",
    "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "32",
    "gitVersion": "v1.33.9",
    "gitCommit": "69220b6a2ee2ae8e4b8b2a1f2d5b6a4fd3b33b1e",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.24.9",
    "compiler": "gc",
    "platform": "linux/amd64",
}
TABLE_ACCEPT = "as=Table"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
# Field selectors every resource supports (the generic registry's defaults).
GENERIC_FIELDS = ("metadata.name", "metadata.namespace")
# Extra fields the built-ins' registries add (a subset: those a client of ours might use).
BUILTIN_FIELDS = {
    ("", "pods"): (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.phase",
        "status.podIP",
    ),
    ("", "events"): (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "reason",
        "type",
        "source",
    ),
    ("", "secrets"): ("type",),
    ("", "namespaces"): ("status.phase",),
}
_SELECTOR_TERM = re.compile(r"\s*(?P<key>[A-Za-z0-9._/-]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^,]*)")


# -- TLS ------------------------------------------------------------------------------------


def certificates(addresses: Sequence[str] = ("127.0.0.1",)) -> tuple[str, str, str]:
    """A fresh cluster CA and a serving certificate for localhost and ``addresses`` signed by
    it: (CA PEM, certificate PEM, key PEM). ``cryptography`` is imported here, only when TLS is
    on."""
    from testcluster.controlplane.pki import ClusterCA

    ca = ClusterCA()
    served = ca.serving("kube-apiserver", ["localhost", "kubernetes.default.svc"], addresses)
    return ca.certificate, served.certificate, served.key


# -- dispatch -------------------------------------------------------------------------------


async def answer(
    emulator: StateEmulator, request: kmock.Request, headers: Mapping[str, str]
) -> aiohttp.web.StreamResponse | None:
    """The emulator's answer to a kubectl-only request, or None to serve it as usual."""
    path = request.url.path.rstrip("/") or "/"
    if request.method == kmock.method.GET:
        if path == "/version":
            return aiohttp.web.json_response(SERVER_VERSION)
        if path == "/openapi/v3":
            return aiohttp.web.json_response(openapi_index(emulator))
        if path.startswith("/openapi/v3/"):
            document = openapi_document(emulator, path.removeprefix("/openapi/v3/"))
            if document is None:
                raise KubernetesError(status=404, reason="NotFound", message="404 page not found")
            return aiohttp.web.json_response(document)
        if path == "/api":
            return aiohttp.web.json_response(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": request.url.host or ""}
                    ],
                }
            )
        if path == "/apis":
            return aiohttp.web.json_response(api_groups(emulator))
        match = _DISCOVERY.fullmatch(path)
        if match is not None:
            group, version = match["group"] or "", match["version"]
            listed = resource_list(emulator, group, version)
            if listed is None:
                raise KubernetesError(status=404, reason="NotFound", message="404 page not found")
            return aiohttp.web.json_response(listed)
    if request.resource is None or not request.resource.plural:
        return None
    if request.action in (kmock.action.LIST, kmock.action.WATCH):
        check_field_selector(emulator, request)
    if request.action == kmock.action.WATCH and request.subresource is None:
        as_table = TABLE_ACCEPT in headers.get("accept", "")
        return await watch(emulator, request, as_table=as_table)
    if request.subresource is None and TABLE_ACCEPT in headers.get("accept", ""):
        if request.action == kmock.action.LIST:
            listed = await emulator._serve_list(request)
            items = listed["items"]
            version = listed["metadata"]["resourceVersion"]
        elif request.action == kmock.action.FETCH and request.name:
            async with emulator._lock:
                key = emulator._key(request, request.name)
                obj = emulator._current(key, request)
            items, version = [obj], str(obj["metadata"].get("resourceVersion", ""))
        else:
            return None
        include = request.params.get("includeObject", "Metadata")
        return aiohttp.web.json_response(table(emulator, request.resource, items, version, include))
    return None


async def watch(
    emulator: StateEmulator, request: kmock.Request, *, as_table: bool = False
) -> aiohttp.web.StreamResponse:
    """A watch as a real server serves it: ``application/json``, one event per line (kmock's
    own stream is ``application/octet-stream``, which client-go refuses), or, when the client
    asks for the upgrade (fabric8, Spark's Kubernetes client, does), over a WebSocket with one
    JSON text frame per event; with ``as=Table``, each event's object is a one-row Table
    (column definitions in the first)."""
    assert request._raw_request is not None
    events = _watch_events(emulator, request, as_table=as_table)
    if asks_websocket(request._raw_request.headers):
        return await _watch_over_websocket(request._raw_request, events)
    response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
    try:  # a client gone before the headers is no refusal: a real server just drops the watch
        await response.prepare(request._raw_request)
        async for event in events:
            await response.write(event.encode() + b"\n")
        await response.write_eof()
    except (ConnectionError, RuntimeError):
        pass  # the client went away
    return response


def asks_websocket(headers: Mapping[str, str]) -> bool:
    """A request for the WebSocket upgrade (``Connection: Upgrade``, ``Upgrade: websocket``)."""
    connection = {token.strip().lower() for token in headers.get("Connection", "").split(",")}
    return "upgrade" in connection and headers.get("Upgrade", "").lower() == "websocket"


async def _watch_over_websocket(
    raw_request: aiohttp.web.BaseRequest, events: AsyncIterator[str]
) -> aiohttp.web.StreamResponse:
    """The watch's events as text frames; it ends when the watch does (timeout, an ERROR event)
    or when the client closes the socket."""
    socket = aiohttp.web.WebSocketResponse()
    try:
        await socket.prepare(raw_request)
    except ConnectionError:  # the client went away before the upgrade was answered
        return aiohttp.web.Response()  # a half-prepared socket cannot be finished; this can

    async def send() -> None:
        async for event in events:
            await socket.send_str(event)

    async def receive() -> None:
        async for _ in socket:  # the client sends nothing but its close frame
            pass

    tasks = [asyncio.ensure_future(send()), asyncio.ensure_future(receive())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await socket.close()
    return socket


async def _watch_events(
    emulator: StateEmulator, request: kmock.Request, *, as_table: bool
) -> AsyncIterator[str]:
    """The watch's events, each encoded as JSON."""
    assert request.resource is not None
    first = True
    include = request.params.get("includeObject", "Metadata")
    async for event in emulator._serve_watch(request):
        if not isinstance(event, Mapping):
            continue
        if as_table and event.get("type") != "ERROR":
            obj = event["object"]
            version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
            converted = table(emulator, request.resource, [obj], version, include)
            if not first:
                converted["columnDefinitions"] = None
            first = False
            yield json.dumps({"type": event["type"], "object": converted})
            continue
        yield json.dumps(event)


# -- discovery ------------------------------------------------------------------------------

_DISCOVERY = re.compile(r"/api/(?P<core>v1)|/apis/(?P<group>[^/]+)/(?P<version>[^/]+)")
_SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "scale": ["get", "patch", "update"],
    "log": ["get"],
    "exec": ["create", "get"],
    "attach": ["create", "get"],
    "portforward": ["create", "get"],
    "proxy": ["create", "delete", "get", "patch", "update"],
    "token": ["create"],
    "eviction": ["create"],
    "binding": ["create"],
    "finalize": ["update"],
    "ephemeralcontainers": ["get", "patch", "update"],
    "resize": ["get", "patch", "update"],
}


def _served(emulator: StateEmulator) -> list[kmock.resource]:
    return [
        r
        for r in emulator.resources
        if isinstance(r.group, str) and isinstance(r.version, str) and isinstance(r.plural, str)
    ]


def api_groups(emulator: StateEmulator) -> dict[str, Any]:
    """``/apis``: every group but the core one, with its versions (the first preferred)."""
    groups: dict[str, list[str]] = {}
    for resource in _served(emulator):
        if resource.group:
            versions = groups.setdefault(str(resource.group), [])
            if resource.version not in versions:
                versions.append(str(resource.version))
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": group,
                "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                "preferredVersion": {
                    "groupVersion": f"{group}/{versions[0]}",
                    "version": versions[0],
                },
            }
            for group, versions in sorted(groups.items())
        ],
    }


def resource_list(
    emulator: StateEmulator, group: str, version: str | None
) -> dict[str, Any] | None:
    """``/api/v1``, ``/apis/G/V``: an APIResourceList; a subresource has only its name, kind and
    verbs, as a real server lists it."""
    version = version or "v1"
    resources = [r for r in _served(emulator) if r.group == group and r.version == version]
    if not resources:
        return None
    listed = []
    for resource in sorted(resources, key=lambda r: str(r.plural)):
        info = emulator.resources[resource]
        kind = info.kind or str(resource.plural).capitalize()
        entry: dict[str, Any] = {
            "name": resource.plural,
            "singularName": info.singular or kind.lower(),
            "namespaced": bool(info.namespaced),
            "kind": kind,
            "verbs": sorted(info.verbs),
        }
        if info.shortnames:
            entry["shortNames"] = sorted(info.shortnames)
        if info.categories:
            entry["categories"] = sorted(info.categories)
        listed.append(entry)
        for sub in sorted(info.subresources):
            listed.append(
                {
                    "name": f"{resource.plural}/{sub}",
                    "singularName": "",
                    "namespaced": bool(info.namespaced),
                    "kind": kind,
                    "verbs": _SUBRESOURCE_VERBS.get(sub, ["get"]),
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": listed,
    }


# -- field selectors ------------------------------------------------------------------------


def parse_field_selector(selector: str) -> list[tuple[str, str, str]]:
    """``metadata.name=x,metadata.namespace!=y`` as (field, op, value) terms."""
    terms = []
    for piece in filter(str.strip, selector.split(",")):
        match = _SELECTOR_TERM.fullmatch(piece)
        if match is None:
            raise KubernetesError(
                status=400,
                reason="BadRequest",
                message=f"invalid selector: '{selector}'; can't understand '{piece}'",
            )
        terms.append((match["key"], "!=" if match["op"] == "!=" else "=", match["value"].strip()))
    return terms


def _supported_fields(emulator: StateEmulator, resource: kmock.resource) -> tuple[str, ...]:
    if _crd(emulator, resource) is not None:
        return GENERIC_FIELDS
    return GENERIC_FIELDS + BUILTIN_FIELDS.get((resource.group or "", resource.plural or ""), ())


def check_field_selector(emulator: StateEmulator, request: kmock.Request) -> None:
    """400 for a field the resource cannot be selected by, as the real server answers."""
    assert request.resource is not None
    supported = _supported_fields(emulator, request.resource)
    for field, _, _ in parse_field_selector(request.params.get("fieldSelector", "")):
        if field not in supported:
            raise KubernetesError(
                status=400, reason="BadRequest", message=f"field label not supported: {field}"
            )


def fields_match(params: Mapping[str, str], obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` passes the request's ``fieldSelector`` (checked beforehand)."""
    selector = params.get("fieldSelector", "")
    if not selector:
        return True
    for field, op, value in parse_field_selector(selector):
        actual = _dig(obj, field.split("."))
        text = "" if actual is None else str(actual)
        if (text == value) != (op == "="):
            return False
    return True


def _dig(obj: Any, parts: list[str]) -> Any:
    for part in parts:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)
    return obj


# -- server-side printing -------------------------------------------------------------------


def _crd(emulator: StateEmulator, resource: kmock.resource) -> dict[str, Any] | None:
    """The CustomResourceDefinition that defines ``resource``, if it is a custom one."""
    if not resource.group:
        return None
    name = f"{resource.plural}.{resource.group}"
    for (res, _, obj_name), obj in emulator._objects.items():
        if res.plural == "customresourcedefinitions" and obj_name == name and not obj.deleted:
            return dict(obj.raw)
    return None


def _crd_version(crd: Mapping[str, Any], version: str | None) -> dict[str, Any]:
    for entry in (crd.get("spec") or {}).get("versions") or []:
        if entry.get("name") == version:
            return dict(entry)
    return {}


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery's ``duration.HumanDuration``: how kubectl shows an age."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    s = int(seconds)
    if s < 60 * 2:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24 - 365 * (hours // 24 // 365)
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _age(timestamp: Any) -> str:
    if not isinstance(timestamp, str) or not timestamp:
        return "<unknown>"
    try:
        when = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    return human_duration((datetime.datetime.now(datetime.UTC) - when).total_seconds())


def _json_path(obj: Any, path: str) -> Any:
    """A CRD column's simple JSONPath (``.status.lastCheckpoint.id``, ``.spec.items[0].x``)."""
    node = obj
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if part.startswith("["):
            index = int(part[1:-1])
            node = node[index] if isinstance(node, list) and index < len(node) else None
        else:
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is None:
            return None
    return node


def table(
    emulator: StateEmulator,
    resource: kmock.resource,
    items: list[dict[str, Any]],
    version: str,
    include: str = "Metadata",
) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table of ``items``, as the server prints them."""
    name_column = {
        "name": "Name",
        "type": "string",
        "format": "name",
        "description": "Name must be unique within a namespace. Is required when creating "
        "resources, although some resources may allow a client to request the generation of an "
        "appropriate name automatically. Name is primarily intended for creation idempotence "
        "and configuration definition. Cannot be updated. More info: "
        "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
        "priority": 0,
    }
    age = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    crd = _crd(emulator, resource)
    columns = [age]
    if crd is not None:
        printer = _crd_version(crd, resource.version).get("additionalPrinterColumns")
        columns = list(printer) if printer else [age]
    definitions = [name_column] + [
        {
            "name": column["name"],
            "type": column.get("type", "string"),
            "format": column.get("format", ""),
            "description": column.get(
                "description",
                f"Custom resource definition column (in JSONPath format): {column.get('jsonPath')}",
            )
            if column is not age
            else "CreationTimestamp is a timestamp representing the server time when this "
            "object was created.",
            "priority": int(column.get("priority", 0)),
        }
        for column in columns
    ]
    rows = []
    for obj in items:
        meta = obj.get("metadata") or {}
        cells: list[Any] = [meta.get("name")]
        for column in columns:
            value = _json_path(obj, str(column.get("jsonPath", "")))
            if column.get("type") == "date" and value is not None:
                value = _age(value)
            elif isinstance(value, (dict, list)):
                value = json.dumps(value, separators=(",", ":"))
            cells.append(value)
        row: dict[str, Any] = {"cells": cells}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": meta,
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": version},
        "columnDefinitions": definitions,
        "rows": rows,
    }


# -- OpenAPI v3 -----------------------------------------------------------------------------


def _group_versions(emulator: StateEmulator) -> dict[str, list[kmock.resource]]:
    """Served resources by OpenAPI v3 path: ``api/v1``, ``apis/G/V``."""
    found: dict[str, list[kmock.resource]] = {}
    for resource in emulator.resources:
        if not isinstance(resource.version, str) or not isinstance(resource.plural, str):
            continue
        if not isinstance(resource.group, str):
            continue
        key = f"apis/{resource.group}/{resource.version}" if resource.group else "api/v1"
        if not resource.group and resource.version != "v1":
            continue
        found.setdefault(key, []).append(resource)
    return found


def openapi_index(emulator: StateEmulator) -> dict[str, Any]:
    paths = {}
    for key in sorted(_group_versions(emulator)):
        document = openapi_document(emulator, key)
        digest = hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest().upper()
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest[:128]}"}
    return {"paths": paths}


def _schema_name(group: str, version: str, kind: str) -> str:
    """The definition name a real server uses: the group's labels reversed (io.k8s.api.* for
    built-ins, whose names we only approximate)."""
    if not group:
        return f"io.k8s.api.core.{version}.{kind}"
    if "." not in group:
        return f"io.k8s.api.{group}.{version}.{kind}"
    return ".".join(reversed(group.split("."))) + f".{version}.{kind}"


def openapi_document(emulator: StateEmulator, key: str) -> dict[str, Any] | None:
    resources = _group_versions(emulator).get(key)
    if not resources:
        return None
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {
        OBJECT_META: {
            "description": "ObjectMeta is metadata that all persisted resources must have, "
            "which includes all objects users must create.",
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
        }
    }
    field_validation = {
        "name": "fieldValidation",
        "in": "query",
        "description": "fieldValidation instructs the server on how to handle objects in the "
        "request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: "
        "- Ignore - Strict - Warn",
        "schema": {"type": "string", "uniqueItems": True},
    }
    for resource in sorted(resources, key=lambda r: str(r.plural)):
        info = emulator.resources[resource]
        if "/" in str(resource.plural) or not info.kind:
            continue
        group, version, kind = resource.group or "", str(resource.version), str(info.kind)
        gvk = {"group": group, "version": version, "kind": kind}
        name = _schema_name(group, version, kind)
        ref = {"$ref": f"#/components/schemas/{name}"}
        prefix = f"/apis/{group}/{version}" if group else "/api/v1"
        scope = f"{prefix}/namespaces/{{namespace}}" if info.namespaced else prefix
        body = {"content": {"application/merge-patch+json": {"schema": {"type": "object"}}}}
        paths[f"{scope}/{resource.plural}/{{name}}"] = {
            "get": {
                "operationId": f"read{kind}",
                "responses": {"200": {"content": {"application/json": {"schema": ref}}}},
                "x-kubernetes-action": "get",
                "x-kubernetes-group-version-kind": gvk,
            },
            "patch": {
                "operationId": f"patch{kind}",
                "requestBody": body,
                "parameters": [
                    {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                    {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                    field_validation,
                    {"name": "force", "in": "query", "schema": {"type": "boolean"}},
                ],
                "responses": {"200": {"content": {"application/json": {"schema": ref}}}},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
            },
        }
        schemas[name] = _resource_schema(emulator, resource, gvk)
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _resource_schema(
    emulator: StateEmulator, resource: kmock.resource, gvk: dict[str, str]
) -> dict[str, Any]:
    """A custom resource's schema from its CRD, with the fields every object has; built-ins
    an open object."""
    crd = _crd(emulator, resource)
    schema: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if crd is not None:
        found = (_crd_version(crd, resource.version).get("schema") or {}).get("openAPIV3Schema")
        if found:
            schema = copy.deepcopy(found)
    properties = schema.setdefault("properties", {})
    properties["apiVersion"] = {
        "description": "APIVersion defines the versioned schema of this representation of an "
        "object. Servers should convert recognized schemas to the latest internal value, and "
        "may reject unrecognized values. More info: "
        "https://git.k8s.io/community/contributors/devel/sig-architecture/"
        "api-conventions.md#resources",
        "type": "string",
    }
    properties["kind"] = {
        "description": "Kind is a string value representing the REST resource this object "
        "represents. Servers may infer this from the endpoint the client submits requests to. "
        "Cannot be updated. In CamelCase. More info: "
        "https://git.k8s.io/community/contributors/devel/sig-architecture/"
        "api-conventions.md#types-kinds",
        "type": "string",
    }
    properties["metadata"] = {
        "description": "Standard object's metadata. More info: "
        "https://git.k8s.io/community/contributors/devel/sig-architecture/"
        "api-conventions.md#metadata",
        "allOf": [{"$ref": f"#/components/schemas/{OBJECT_META}"}],
        "default": {},
    }
    schema["x-kubernetes-group-version-kind"] = [gvk]
    return schema


async def serve_tls(
    runner: aiohttp.web.BaseRunner, addresses: Sequence[str] = ("127.0.0.1",)
) -> tuple[str, int]:
    """Serve ``runner`` over HTTPS too, on one free port of every address (the first chooses
    it), with a certificate for each: (the CA's PEM, the port)."""
    ca, cert, key = certificates(addresses)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as directory:
        chain, secret = Path(directory, "tls.crt"), Path(directory, "tls.key")
        chain.write_text(cert + ca)
        secret.write_text(key)
        context.load_cert_chain(chain, secret)
    port = 0
    for address in addresses:
        site = aiohttp.web.TCPSite(runner, address, port, ssl_context=context)
        await site.start()
        port = int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    return ca, port
