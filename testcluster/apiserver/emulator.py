"""kmock's ``KubernetesEmulator``, extended to behave like an API server where our code needs it,
and served over real HTTP on a loopback port from a background thread.

What kmock 0.8 lacks, and this adds (generic for every resource, not ConfigMap-only):

* ``PUT`` (replace): kmock guesses no action for it and answers 500;
* ``metadata.resourceVersion`` (a global counter, bumped on every write), ``uid``,
  ``creationTimestamp``, ``generation`` (bumped when anything but metadata and status changes)
  and ``generateName``; optimistic concurrency: a write carrying a stale resourceVersion (a
  PUT, a merge patch with ``metadata.resourceVersion``, a JSON patch replacing
  ``/metadata/resourceVersion``) gets 409 Conflict with the server's message, as does a create
  of an existing name;
* the ``status`` subresource: for resources that have one, writes to the object ignore
  ``status`` and writes to ``/status`` change nothing else; a new Pod starts ``Pending``;
* label selectors on list and watch (``=``, ``==``, ``!=``, ``key``, ``!key``, ``in``,
  ``notin``), a real list resourceVersion, and metadata-only lists;
* watches that resume from a ``resourceVersion`` (a bounded event history; older ones get
  410 Gone, as from a real server) and end after ``timeoutSeconds``, as an HTTP stream or, when
  the client asks for the upgrade (fabric8, Spark's client, does), over a WebSocket;
* JSON merge patch with ``null`` deletes, JSON patch (RFC 6902, with ``test``; a failed
  operation is 422 Invalid with the server's generic message, which kopf relies on), and a
  resourceVersion precondition;
* query parameters typed and validated as the server does, for every verb (``params``):
  int64s through Go's ``strconv.ParseInt`` (``timeoutSeconds=300.0`` is 400 BadRequest
  ``strconv.ParseInt: parsing "300.0": invalid syntax``), bools as the server reads them, and
  the enumerations ``fieldValidation``, ``propagationPolicy``, ``dryRun``,
  ``resourceVersionMatch`` (422 Invalid naming the options kind); unknown ones ignored;
  ``dryRun=All`` validates and answers without storing anything;
* a CRD's structural schema on every write of its custom resources, whatever
  ``validate_schemas`` says (``schema``): unknown fields pruned, ``default``s applied, and
  unknown fields answered by ``fieldValidation``: a ``Warning: 299 - "unknown field
  \\"spec.foo\\""`` header each (Warn, the default), 400/422 (Strict), nothing (Ignore);
* finalizers (delete marks ``deletionTimestamp``; removing the last finalizer deletes);
  graceful deletion of a pod bound to a node (``POST pods/NAME/binding``, as a scheduler
  binds): it stays, marked with its grace period, until its kubelet, having stopped it, deletes
  it with ``gracePeriodSeconds: 0`` (an unbound or ended pod goes at once); ``DeleteOptions``
  preconditions (uid, resourceVersion: 409); ``deletecollection`` (a DELETE of a collection,
  by label and field selectors), and the garbage collector: deleting an object deletes its
  dependents (``ownerReferences``), unless ``propagationPolicy: Orphan``;
* discovery of the built-in resources, and of custom resources once their
  CustomResourceDefinition is created (as ``kubectl apply -f crds/`` would do); before that,
  their paths are 404 NotFound, as on a real server (an operator needing a CRD nobody installed
  must find out here too);
* validation the real server does and our code must respect: object names (DNS subdomains),
  label values, and the 1 MiB cap on a ConfigMap's ``data`` + ``binaryData`` (422 Invalid);
  with ``validate_schemas=True`` also a custom resource against its CRD's OpenAPI schema (types,
  enums, bounds, patterns, required fields), after the pruning and defaulting;
* a Secret's ``stringData`` merged into ``data``, base64-encoded, as the server does;
* request bodies up to 3 MiB (aiohttp's default cap is 1 MiB; the API server accepts 3 MiB);
* optional bearer-token check (401), to prove that clients send their credentials;
* with ``authorize=True``, RBAC over the stored Roles, ClusterRoles and bindings (403 with the
  real server's message; system:masters never refused) and its escalation prevention; with
  ``owner_reference_enforcement=True``, the OwnerReferencesPermissionEnforcement admission
  plugin (see ``rbac``);
* request counts per User-Agent at ``GET /_emulator/stats``, for benchmarks, and the API calls
  each client made as RBAC sees them (verb, API group, resource[/subresource], namespaced or
  cluster-wide) at ``GET /_emulator/calls``, for checking RBAC rules against what a client does;
* the requests answered 400, 403, 405 or 422, with a server error, or left unanswered (kmock's
  404 "Endpoint Not Found": a request the emulator does not serve, which a real server would):
  client, method, path with query, status and message of the newest ``KEEP_REFUSALS`` at
  ``GET /_emulator/refusals`` (``REFUSALS_PATH``), so that a test can prove a real client made
  no request a real server would refuse, and that the emulator answered every request it got;
* bounded memory for long runs: hard deletes, and only the newest requests are kept.

Run standalone (for benchmarks): ``python -m testcluster.apiserver.emulator [TOKEN]`` prints the
port, then serves until killed or until its stdin closes.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import copy
import datetime
import gzip
import importlib.resources
import itertools
import json
import re
import secrets
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any, NamedTuple, Self

import aiohttp.web
import attrs
import jsonschema
import kmock
from kmock import KubernetesEmulator, KubernetesError

from testcluster.apiserver import admission, kubectl, params, rbac, schema
from testcluster.apiserver.identity import User, admin, service_account_user

CONFIGMAP_DATA_LIMIT = 1024 * 1024
MAX_REQUEST_BODY = 3 * 1024 * 1024
EVENT_HISTORY = 20_000
STATS_PATH = "/_emulator/stats"
CALLS_PATH = "/_emulator/calls"
REFUSALS_PATH = "/_emulator/refusals"
KEEP_REFUSALS = 1000
REFUSED_STATUSES = frozenset({400, 403, 405, 422})
UNANSWERED_REASON = "Endpoint Not Found"  # kmock's 404 for a request it has no reaction to
_NAMESPACES_PATH = re.compile(r"/api/v1/namespaces(?:/(?P<name>[^/]+))?/?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_DATA_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_SELECTOR_TERM = re.compile(
    r"\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9./_-]+)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[A-Za-z0-9._-]*)|\s+(?P<setop>in|notin)\s*\((?P<set>[^)]*)\))?\s*"
)
PODS = kmock.resource("", "v1", "pods")
_SERVER_OWNED = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds")
_STANDARD_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete"}

Key = tuple[Any, str | None, str]


class ApiCall(NamedTuple):
    """One request as RBAC authorizes it: a verb on a resource, or a non-resource URL."""

    client: str  # the User-Agent up to its first "/"
    verb: str  # get, list, watch, create, update, patch, delete, deletecollection
    group: str  # "" for the core group
    resource: str  # plural[/subresource]; "" for a non-resource URL (discovery)
    namespaced: bool  # False for cluster-scoped objects and for lists across every namespace
    path: str  # the non-resource URL; "" for a resource request


def api_call(client: str, request: kmock.Request) -> ApiCall:
    """What RBAC would check for ``request`` (the verbs of the API server's request info)."""
    method = str(kmock.method(request.method).value).lower()
    if request.resource is None or not request.resource.plural:  # discovery: /api, /apis/G/V
        return ApiCall(client, method, "", "", False, request.url.path)
    verbs: dict[kmock.action | None, str] = {
        kmock.action.FETCH: "get",
        kmock.action.LIST: "list",
        kmock.action.WATCH: "watch",
        kmock.action.CREATE: "create",
        kmock.action.UPDATE: "patch",
        kmock.action.DELETE: "delete" if request.name else "deletecollection",
    }
    # kmock reads no action into a PUT
    put = request.method == kmock.method.PUT
    verb = "update" if put else verbs.get(request.action) or method
    if request.method == kmock.method.DELETE and not request.name:
        verb = "deletecollection"  # kmock reads no action into a DELETE of a collection
    resource = request.resource.plural or ""
    if request.subresource:
        resource = f"{resource}/{request.subresource}"
    group = request.resource.group or ""
    return ApiCall(client, verb, group, resource, bool(request.namespace), "")


def _answer(response: aiohttp.web.StreamResponse) -> tuple[str, str]:
    """The reason and message of an answered error (empty for a stream or a non-JSON body)."""
    body = getattr(response, "body", None)
    if not isinstance(body, bytes):
        return "", ""
    try:
        status = json.loads(body)
        return str(status.get("reason", "")), str(status.get("message", ""))
    except (ValueError, AttributeError):
        return "", body.decode(errors="replace")[:500]


def _now(later: int = 0) -> str:
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=later)
    return moment.isoformat()


def _grace_seconds(key: Key, obj: Mapping[str, Any], requested: int | None) -> int:
    """The grace period of a deletion (``CheckGracefulDelete`` of the pod registry): a pod that
    runs on a node has the one asked for, else its ``terminationGracePeriodSeconds`` (30 by
    default), so that its kubelet can stop it; a pod no node took, or one that ended, goes at
    once; every other kind of object has none."""
    if key[0] != PODS:
        return 0
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
        return 0
    if requested is None:
        requested = int(spec.get("terminationGracePeriodSeconds", 30))
    return 1 if requested < 0 else requested


def _deletable(meta: Mapping[str, Any]) -> bool:
    """Marked for deletion, and neither a finalizer nor a grace period left to wait for."""
    return (
        meta.get("deletionTimestamp") is not None
        and not meta.get("finalizers")
        and not meta.get("deletionGracePeriodSeconds")
    )


def _check_preconditions(
    options: params.Options, current: Mapping[str, Any], request: kmock.Request
) -> None:
    """DeleteOptions.preconditions: 409 when the object is not the one the caller meant (a
    kubelet deleting the pod it stopped, not a new one of the same name)."""
    meta = current.get("metadata") or {}
    for field, key, wanted in (
        ("UID", "uid", options.precondition_uid),
        ("ResourceVersion", "resourceVersion", options.precondition_resource_version),
    ):
        actual = meta.get(key)
        if wanted is not None and wanted != actual:
            assert request.resource is not None
            raise KubernetesError(
                status=409,
                reason="Conflict",
                message=(
                    f'Operation cannot be fulfilled on {request.resource.plural} "{request.name}":'
                    f" Precondition failed: {field} in precondition: {wanted}, {field} in object"
                    f" meta: {actual}"
                ),
            )


def _invalid(kind: str, name: str, detail: str) -> KubernetesError:
    return KubernetesError(
        status=422, reason="Invalid", message=f'{kind} "{name}" is invalid: {detail}'
    )


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError(f"bad JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _json_patch(document: Any, operations: list[Any]) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, test, move, copy); 422 when one fails."""
    doc = copy.deepcopy(document)

    def parent(parts: list[str]) -> tuple[Any, str]:
        node = doc
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        return node, parts[-1]

    def get(parts: list[str]) -> Any:
        node = doc
        for part in parts:
            node = node[int(part)] if isinstance(node, list) else node[part]
        return node

    def remove(parts: list[str]) -> Any:
        node, last = parent(parts)
        return node.pop(int(last)) if isinstance(node, list) else node.pop(last)

    def add(parts: list[str], value: Any) -> None:
        node, last = parent(parts)
        if isinstance(node, list):
            node.insert(len(node) if last == "-" else int(last), copy.deepcopy(value))
        else:
            node[last] = copy.deepcopy(value)

    try:
        for operation in operations:
            op, parts = operation["op"], _pointer(operation["path"])
            if op == "test":
                if get(parts) != operation.get("value"):
                    raise ValueError(f"test failed at {operation['path']}")
            elif op == "remove":
                remove(parts)
            elif op == "add":
                if not parts:
                    doc = copy.deepcopy(operation["value"])
                else:
                    add(parts, operation["value"])
            elif op == "replace":
                get(parts)  # must exist
                remove(parts)
                add(parts, operation["value"])
            elif op in ("move", "copy"):
                source = _pointer(operation["from"])
                value = remove(source) if op == "move" else copy.deepcopy(get(source))
                add(parts, value)
            else:
                raise ValueError(f"unknown op {op!r}")
    except (KeyError, IndexError, ValueError, TypeError) as error:
        raise KubernetesError(
            # patch.go answers a failed operation (evanphx/json-patch's error, e.g. "testing value
            # /metadata/resourceVersion failed: test failed") with NewGenericServerResponse(422),
            # which keeps only its generic message
            status=422,
            reason="Invalid",
            message="the server rejected our request due to an error in our request",
            details={"causes": [{"message": str(error)}]},
        ) from None
    return doc


def parse_label_selector(selector: str) -> list[tuple[str, str, set[str]]]:
    """Split ``a=b,c in (x,y),!d`` into (key, op, values) terms; commas inside () stay."""
    terms: list[tuple[str, str, set[str]]] = []
    depth, start = 0, 0
    pieces: list[str] = []
    for index, char in enumerate(selector):
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            pieces.append(selector[start:index])
            start = index + 1
    pieces.append(selector[start:])
    for piece in filter(str.strip, pieces):
        match = _SELECTOR_TERM.fullmatch(piece)
        if not match:
            raise KubernetesError(
                status=400, reason="BadRequest", message=f"invalid label selector {piece!r}"
            )
        key = match["key"]
        if match["neg"]:
            terms.append((key, "!exists", set()))
        elif match["op"]:
            terms.append((key, "!=" if match["op"] == "!=" else "=", {match["value"]}))
        elif match["setop"]:
            values = {v.strip() for v in match["set"].split(",") if v.strip()}
            terms.append((key, match["setop"], values))
        else:
            terms.append((key, "exists", set()))
    return terms


def labels_match(labels: Mapping[str, str], terms: list[tuple[str, str, set[str]]]) -> bool:
    for key, op, values in terms:
        present = key in labels
        value = labels.get(key)
        ok = {
            "exists": present,
            "!exists": not present,
            "=": present and value in values,
            "in": present and value in values,
            "!=": not present or value not in values,
            "notin": not present or value not in values,
        }[op]
        if not ok:
            return False
    return True


def _labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _content(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What bumps the generation: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


@attrs.define(kw_only=True)
class StateEmulator(KubernetesEmulator):
    """The extended emulator (see the module docstring)."""

    required_token: str | None = None
    keep_requests: int = 200
    validate_schemas: bool = False  # check custom resources against their CRD's schema
    authorize: bool = False  # RBAC over the stored roles and bindings (``rbac``)
    owner_reference_enforcement: bool = False  # the OwnerReferencesPermissionEnforcement plugin
    ca_pem: str = ""  # the cluster CA of the HTTPS port: kube-root-ca.crt publishes it
    _schemas: dict[Any, Any] = attrs.field(factory=dict, init=False)
    _versions: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1), init=False)
    _history: collections.deque[tuple[int, Any, dict[str, Any]]] = attrs.field(
        factory=lambda: collections.deque(maxlen=EVENT_HISTORY), init=False
    )
    _history_floor: int = attrs.field(default=0, init=False)
    request_counts: collections.Counter[str] = attrs.field(factory=collections.Counter, init=False)
    # Bearer token -> user (see ``identity``): the admin's token, and service-account tokens
    # issued by the TokenRequest API.
    users: dict[str, User] = attrs.field(factory=dict, init=False)
    # The RBAC objects in store, read once per change of one of them (rbac.policy_of).
    rbac_policy: rbac.Policy | None = attrs.field(default=None, init=False)
    api_calls: collections.Counter[ApiCall] = attrs.field(factory=collections.Counter, init=False)
    # The requests answered 400, 403, 405, 422 or 5xx: what a real server would refuse or never
    # answer so (see _record_refusal).
    refusals: collections.deque[dict[str, Any]] = attrs.field(
        factory=lambda: collections.deque(maxlen=KEEP_REFUSALS), init=False
    )

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        if self.required_token is not None:
            self.users[self.required_token] = admin()
        # kmock's load_bundled() reads it with a deprecated importlib call; same data, read here.
        bundled = importlib.resources.files("kmock._internal").joinpath("resources.json.gz")
        self.resources.load_data(gzip.decompress(bundled.read_bytes()))

    def _next_version(self) -> str:
        return str(next(self._versions))

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """Serve one request; add the ``Warning`` headers it collected; record a refusal."""
        params.begin_request()
        response = await self._call(raw_request)
        if not response.prepared:  # a started stream (a watch) has sent its headers already
            for warning in params.warning_headers():
                response.headers.add("Warning", warning)
        if response.status in REFUSED_STATUSES or response.status >= 500:
            self._record_refusal(raw_request, response)
        elif response.status == 404 and _answer(response)[0] == UNANSWERED_REASON:
            self._record_refusal(raw_request, response)  # kmock has no reaction: not a server's 404
        return response

    def _record_refusal(
        self, raw_request: aiohttp.web.BaseRequest, response: aiohttp.web.StreamResponse
    ) -> None:
        _, message = _answer(response)
        self.refusals.append(
            {
                "client": raw_request.headers.get("User-Agent", "").split("/")[0],
                "method": raw_request.method,
                "path": raw_request.path_qs,
                "status": response.status,
                "message": message,
            }
        )

    async def _call(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """kmock cannot parse ``/api/v1/namespaces[/NAME]`` (it reads "namespaces" as the start
        of a namespaced path); build that request here and serve it like any other."""
        match = _NAMESPACES_PATH.fullmatch(raw_request.path)
        if match is None:
            return await super().__call__(raw_request)
        body = await raw_request.read()
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        method = kmock.method(raw_request.method)
        query = dict(raw_request.query)
        name = match["name"]
        action: kmock.action | None
        if method == kmock.method.GET:
            watching = query.get("watch") == "true"
            action = (
                kmock.action.WATCH
                if watching
                else (kmock.action.FETCH if name else kmock.action.LIST)
            )
        else:
            action = {
                kmock.method.POST: kmock.action.CREATE,
                kmock.method.PATCH: kmock.action.UPDATE,
                kmock.method.DELETE: kmock.action.DELETE,
            }.get(method)
        request = kmock.Request(
            id=len(self._requests),
            raw_request=raw_request,
            url=raw_request.url,
            method=raw_request.method,
            params=query,
            headers=dict(raw_request.headers),
            data=data,
            body=body,
            action=action,
            resource=kmock.resource("", "v1", "namespaces"),
            name=name,
        )
        self._requests.append(request)  # kmock's reactions only see requests it has recorded
        try:
            return await self._handle(request)
        except KubernetesError as error:
            return await self._render_error(error)

    # -- dispatch ---------------------------------------------------------------------------

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        if len(self._requests) > self.keep_requests:
            del self._requests[: -self.keep_requests]
        headers = {k.lower(): v for k, v in request.headers.items()}
        if request.url.path == STATS_PATH:
            return aiohttp.web.json_response(dict(self.request_counts))
        if request.url.path == CALLS_PATH:
            calls = [{**call._asdict(), "count": n} for call, n in self.api_calls.items()]
            return aiohttp.web.json_response(calls)
        if request.url.path == REFUSALS_PATH:
            return aiohttp.web.json_response(list(self.refusals))
        client = headers.get("user-agent", "").split("/")[0]
        self.request_counts[client] += 1
        user = self.authenticate(headers.get("authorization", ""))
        rbac.authorize_request(self, user, request)  # 403 for what RBAC refuses
        call = api_call(client, request)
        self.api_calls[call] += 1
        if call.resource:  # the query, typed and validated as the server does (400, 422)
            params.set_options(params.parse(call.verb, request.url.query, request.data))
        answered = await kubectl.answer(self, request, headers)  # /version, OpenAPI, Table
        if answered is not None:
            return answered
        admitted = await admission.admit(self, request)  # ServiceAccounts, TokenRequest
        if admitted is not None:
            return admitted
        if request.resource is not None and request.resource not in self.resources:
            # A custom resource whose CRD is not installed (or was deleted): a real server has
            # no such path, and no object of it can be created.
            missing = "the server could not find the requested resource"
            raise KubernetesError(status=404, reason="NotFound", message=missing)
        if request.resource == PODS and request.subresource == "binding":
            return await self._bind(request)
        if request.resource is None or request.subresource not in (None, "status"):
            return await super()._handle(request)
        if request.method == kmock.method.PUT and request.name is not None:
            return await self._replace(request)
        if request.action == kmock.action.CREATE and request.subresource is None:
            return await self._create(request)
        if request.action == kmock.action.UPDATE:
            return await self._patch(request)
        if request.method == kmock.method.DELETE and request.name is None:
            return await self._delete_collection(request)  # kmock reads no action into it
        if request.action == kmock.action.DELETE and request.subresource is None:
            return await self._delete(request)
        if request.action == kmock.action.FETCH and request.subresource == "status":
            async with self._lock:
                obj = self._current(self._key(request, request.name or ""), request)
            return aiohttp.web.json_response(obj)
        return await super()._handle(request)  # fetch, watch, list (see _serve_list/_watch)

    def authenticate(self, authorization: str) -> User:
        """The caller, from its bearer token; 401 for a token nobody issued. Without a
        ``required_token`` every caller is the admin (the tests' open emulator)."""
        if self.required_token is None:
            return admin()
        # The scheme is case-insensitive (the server's bearertoken authenticator lowercases it:
        # the Python client's in-cluster config sends "bearer").
        scheme, _, token = authorization.strip().partition(" ")
        user = self.users.get(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise KubernetesError(status=401, reason="Unauthorized", message="Unauthorized")
        return user

    def issue_token(self, namespace: str, name: str, pod: str | None = None) -> str:
        """A new bearer token for the service account ``namespace/name`` (bound to ``pod``)."""
        token = secrets.token_urlsafe(24)
        self.users[token] = service_account_user(namespace, name, pod=pod)
        return token

    # -- resources --------------------------------------------------------------------------

    def _has_status(self, resource: kmock.resource) -> bool:
        return resource in self.resources and "status" in self.resources[resource].subresources

    def _register_crd(self, crd: Mapping[str, Any]) -> None:
        """Serve the custom resource a CustomResourceDefinition defines, as a real server does."""
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        for version in spec.get("versions") or []:
            if not version.get("served", True):
                continue
            resource = kmock.resource(spec["group"], version["name"], names["plural"])
            self.resources[resource] = kmock.ResourceInfo(
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                kind=names.get("kind"),
                singular=names.get("singular"),
                shortnames=set(names.get("shortNames") or []),
                categories=set(names.get("categories") or []),
                verbs=set(_STANDARD_VERBS),
                subresources=set(version.get("subresources") or {}),
            )
            openapi = (version.get("schema") or {}).get("openAPIV3Schema")
            if openapi:
                self._schemas[resource] = jsonschema.Draft7Validator(openapi)

    # -- validation -------------------------------------------------------------------------

    def _normalize(self, resource: kmock.resource, obj: dict[str, Any]) -> None:
        """A Secret's ``stringData`` is write-only: the server merges it into ``data``."""
        if resource.group == "" and resource.plural == "secrets" and "stringData" in obj:
            data = obj.setdefault("data", {})
            for key, value in (obj.pop("stringData") or {}).items():
                data[key] = base64.b64encode(str(value).encode()).decode()
        validator = self._schemas.get(resource)
        if validator is not None:  # a CRD's structural schema: pruning and defaulting
            unknown = schema.coerce(obj, validator.schema)
            kind = self.resources[resource].kind or ""
            verb = params.current().verb
            schema.unknown_fields(unknown, obj, kind, resource.version or "", verb=verb)

    def _check_schema(self, resource: kmock.resource, obj: Mapping[str, Any]) -> None:
        """422 for a custom resource its CRD's OpenAPI schema refuses, each field named."""
        validator = self._schemas.get(resource) if self.validate_schemas else None
        if validator is None:
            return
        problems = []
        for error in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.path))):
            path = ".".join(str(part) for part in error.absolute_path) or "<root>"
            value = json.dumps(error.instance)[:80]
            problems.append(f"{path}: Invalid value: {value}: {error.message}")
        if problems:
            kind = str(obj.get("kind") or resource.plural)
            raise _invalid(kind, str((obj.get("metadata") or {}).get("name")), ", ".join(problems))

    def _validate(self, resource: kmock.resource, obj: Mapping[str, Any]) -> None:
        kind = str(obj.get("kind") or resource.plural)
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        self._check_schema(resource, obj)
        if not name or len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
            raise _invalid(
                kind,
                name,
                f"metadata.name: Invalid value: {name!r}: a lowercase "
                "RFC 1123 subdomain of at most 253 characters is required",
            )
        for key, value in (meta.get("labels") or {}).items():
            if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
                raise _invalid(kind, name, f"metadata.labels: Invalid value: {value!r} ({key})")
        if resource.group == "" and resource.plural == "configmaps":
            total = 0
            for key, value in (obj.get("data") or {}).items():
                if not _DATA_KEY.fullmatch(key):
                    raise _invalid(kind, name, f"data[{key}]: Invalid value")
                total += len(str(value).encode())
            for key, value in (obj.get("binaryData") or {}).items():
                if not _DATA_KEY.fullmatch(key):
                    raise _invalid(kind, name, f"binaryData[{key}]: Invalid value")
                try:
                    total += len(base64.b64decode(value, validate=True))
                except (binascii.Error, ValueError, TypeError):
                    raise _invalid(kind, name, f"binaryData[{key}]: not base64") from None
            if total > CONFIGMAP_DATA_LIMIT:
                raise _invalid(
                    kind, name, f"[]: Too long: may not be more than {CONFIGMAP_DATA_LIMIT} bytes"
                )

    # -- events -----------------------------------------------------------------------------

    async def _emit(self, resource: kmock.resource, kind: str, obj: dict[str, Any]) -> None:
        """Record a watch event (with the lock held) and hand it to the live watchers."""
        event = {"type": kind, "object": copy.deepcopy(obj)}
        if resource.group == rbac.RBAC_GROUP:
            self.rbac_policy = None  # every stored change passes here: read the policy anew
        version = int((obj.get("metadata") or {}).get("resourceVersion") or 0)
        if len(self._history) == self._history.maxlen:
            self._history_floor = self._history[0][0]
        self._history.append((version, resource, event))
        await self._buses[resource].put(event)

    # -- writes -----------------------------------------------------------------------------

    def _key(self, request: kmock.Request, name: str) -> Key:
        return (request.resource, request.namespace, name)

    async def _create(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        assert request.resource is not None
        obj = copy.deepcopy(request.data) if isinstance(request.data, dict) else None
        if obj is None:
            raise KubernetesError(status=400, reason="BadRequest", message="body is not an object")
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{secrets.token_hex(3)}"
        namespace = request.namespace or meta.get("namespace")
        self._normalize(request.resource, obj)
        self._validate(request.resource, obj)
        rbac.admit(self, request, None, obj)
        key = (request.resource, namespace, meta["name"])
        if self._has_status(request.resource):
            obj.pop("status", None)
            if request.resource == kmock.resource("", "v1", "pods"):
                obj["status"] = {"phase": "Pending"}
        async with self._lock:
            if key in self._objects and not self._objects[key].deleted:
                raise KubernetesError(
                    status=409,
                    reason="AlreadyExists",
                    message=f'{request.resource.plural} "{meta["name"]}" already exists',
                )
            for field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(field, None)
            meta.update(
                namespace=namespace,
                resourceVersion=self._next_version(),
                uid=str(uuid.uuid4()),
                creationTimestamp=_now(),
                generation=1,
            )
            if namespace is None:  # cluster-scoped
                del meta["namespace"]
            if params.current().is_dry_run:  # dryRun=All: validated and answered only
                return aiohttp.web.json_response(obj, status=201)
            if request.resource.plural == "customresourcedefinitions":
                self._register_crd(obj)
            self._objects[key] = obj
            await self._emit(request.resource, "ADDED", obj)
        return aiohttp.web.json_response(obj, status=201)

    def _store(
        self, request: kmock.Request, current: dict[str, Any], new: dict[str, Any]
    ) -> dict[str, Any]:
        """Apply the status-subresource split and the server-owned metadata to a new version."""
        assert request.resource is not None
        if self._has_status(request.resource):
            if request.subresource == "status":
                new = {**current, "status": new.get("status")}
                if new["status"] is None:
                    del new["status"]
            else:
                new = {k: v for k, v in new.items() if k != "status"}
                if "status" in current:
                    new["status"] = current["status"]
        meta = new.setdefault("metadata", {})
        current_meta = current.get("metadata") or {}
        for field in (*_SERVER_OWNED, "namespace"):
            if field in current_meta:
                meta[field] = current_meta[field]
            else:
                meta.pop(field, None)
        meta["name"] = current_meta.get("name")
        generation = int(current_meta.get("generation") or 1)
        meta["generation"] = generation + (_content(new) != _content(current))
        meta["resourceVersion"] = self._next_version()
        self._normalize(request.resource, new)
        self._validate(request.resource, new)
        rbac.admit(self, request, current, new)
        return new

    async def _write(self, request: kmock.Request, new: dict[str, Any], key: Key) -> dict[str, Any]:
        """Store a changed object (lock held); deleting it when its last finalizer went."""
        assert request.resource is not None
        if params.current().is_dry_run:  # dryRun=All: validated and answered, not stored
            return new
        meta = new.get("metadata") or {}
        if _deletable(meta):
            await self._remove(key, new)
            return new
        self._objects[key] = new
        await self._emit(request.resource, "MODIFIED", new)
        return new

    async def _replace(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        assert request.resource is not None and request.name is not None
        obj = copy.deepcopy(request.data) if isinstance(request.data, dict) else None
        if obj is None:
            raise KubernetesError(status=400, reason="BadRequest", message="body is not an object")
        meta = obj.setdefault("metadata", {})
        if meta.get("name", request.name) != request.name:
            raise KubernetesError(status=400, reason="BadRequest", message="name mismatch")
        key = self._key(request, request.name)
        async with self._lock:
            current = self._current(key, request)
            self._check_version(meta.get("resourceVersion"), current, request)
            new = await self._write(request, self._store(request, current, obj), key)
        return aiohttp.web.json_response(new, status=200)

    async def _patch(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        assert request.resource is not None and request.name is not None
        key = self._key(request, request.name)
        async with self._lock:
            current = self._current(key, request)
            if isinstance(request.data, dict):
                patch = copy.deepcopy(request.data)
                self._check_version(
                    (patch.get("metadata") or {}).pop("resourceVersion", None), current, request
                )
                patched = _merge_patch(current, patch)
            elif isinstance(request.data, list):
                patched = _json_patch(current, request.data)
                if isinstance(patched, dict):  # a replaced resourceVersion is a precondition
                    version = (patched.get("metadata") or {}).get("resourceVersion")
                    self._check_version(version, current, request)
            else:
                raise KubernetesError(
                    status=415, reason="UnsupportedMediaType", message="a JSON or merge patch"
                )
            new = await self._write(request, self._store(request, current, patched), key)
        return aiohttp.web.json_response(new, status=200)

    async def _bind(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        """``POST pods/NAME/binding``: a scheduler assigns the pod to a node (``spec.nodeName``,
        otherwise immutable), once; the node's kubelet then runs it, and deleting it is graceful."""
        if request.method != kmock.method.POST or request.name is None:
            raise KubernetesError(status=405, reason="MethodNotAllowed", message="create only")
        body = request.data if isinstance(request.data, dict) else {}
        node = (body.get("target") or {}).get("name")
        if not node or (body.get("target") or {}).get("kind", "Node") != "Node":
            raise _invalid("Binding", request.name, "target.name: Required value")
        key = self._key(request, request.name)
        async with self._lock:
            pod = self._current(key, request)
            bound = pod["spec"].get("nodeName")
            if bound or pod["metadata"].get("deletionTimestamp"):
                reason = f"is already assigned to node {bound!r}" if bound else "is being deleted"
                raise KubernetesError(
                    status=409,
                    reason="Conflict",
                    message=f'Operation cannot be fulfilled on pods/binding "{request.name}": '
                    f"pod {request.name} {reason}",
                )
            pod["spec"]["nodeName"] = node
            pod["metadata"]["resourceVersion"] = self._next_version()
            self._objects[key] = pod
            await self._emit(PODS, "MODIFIED", pod)
        status = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success"}
        return aiohttp.web.json_response(status, status=201)

    async def _delete(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        assert request.resource is not None and request.name is not None
        key = self._key(request, request.name)
        options = params.current()  # DeleteOptions: from the body, else from the query
        async with self._lock:
            current = self._current(key, request)
            meta = current.get("metadata") or {}
            _check_preconditions(options, current, request)
            if options.is_dry_run:  # dryRun=All: validated and answered, nothing deleted
                return aiohttp.web.json_response(current, status=200)
            held = await self._delete_object(key, current, options)
        if held is not None:  # a finalizer or a pod's grace period holds it: the object
            return aiohttp.web.json_response(held, status=200)
        status = {
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": request.name,
                "kind": request.resource.plural,
                "uid": meta.get("uid"),
            },
        }
        return aiohttp.web.json_response(status, status=200)

    async def _delete_collection(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        """``deletecollection``: every object the label and field selectors match, each deleted
        as a single delete would be (finalizers, grace periods, dependents), answered with the
        list of them."""
        assert request.resource is not None
        terms = parse_label_selector(request.params.get("labelSelector", ""))
        options = params.current()
        deleted: list[dict[str, Any]] = []
        async with self._lock:
            matching = [
                (key, copy.deepcopy(obj.raw))
                for key, obj in list(self._objects.items())
                if key[0] == request.resource
                and not obj.deleted
                and self._matches(request, key[1], obj.raw, terms)
            ]
            for key, found in matching:
                if options.is_dry_run:
                    deleted.append(found)
                elif key in self._objects:  # not gone with an owner deleted before it
                    now = copy.deepcopy(dict(self._objects[key].raw))  # maybe marked since
                    deleted.append(await self._delete_object(key, now, options) or now)
            version = self._next_version() if deleted and not options.is_dry_run else "0"
        listed = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": version}}
        return aiohttp.web.json_response({**listed, "items": deleted}, status=200)

    async def _delete_object(
        self, key: Key, current: dict[str, Any], options: params.Options
    ) -> dict[str, Any] | None:
        """Delete one object as the registry does (lock held): a finalizer or a pod's grace
        period marks it (``deletionTimestamp``, ``deletionGracePeriodSeconds``) and returns it;
        a shorter grace period shortens a mark (a kubelet's final delete with 0 ends a pod);
        otherwise it is removed, with its dependents, and None is returned."""
        meta = current.setdefault("metadata", {})
        grace = _grace_seconds(key, current, options.grace_period_seconds)
        terminating = meta.get("deletionTimestamp") is not None
        if terminating and grace >= int(meta.get("deletionGracePeriodSeconds") or 0):
            return current  # marked already, by a grace period no longer than this one
        if not meta.get("finalizers") and grace == 0:
            orphan = options.orphan_dependents or options.propagation_policy == "Orphan"
            await self._remove(key, current, orphan=orphan)
            return None
        meta["deletionTimestamp"] = _now(grace)
        meta["deletionGracePeriodSeconds"] = grace
        meta["resourceVersion"] = self._next_version()
        self._objects[key] = current
        await self._emit(key[0], "MODIFIED", current)
        return current

    async def _remove(self, key: Key, obj: dict[str, Any], *, orphan: bool = False) -> None:
        """Delete an object for good (lock held), then its dependents, as the GC would."""
        del self._objects[key]
        gone = copy.deepcopy(obj)
        gone.setdefault("metadata", {})["resourceVersion"] = self._next_version()
        await self._emit(key[0], "DELETED", gone)
        uid = (obj.get("metadata") or {}).get("uid")
        if orphan or not uid:
            return
        dependents = [
            (dep_key, dict(dep.raw))
            for dep_key, dep in list(self._objects.items())
            if not dep.deleted
            and any(
                ref.get("uid") == uid
                for ref in (dep.raw.get("metadata") or {}).get("ownerReferences") or []
            )
        ]
        for dep_key, dependent in dependents:
            if dep_key in self._objects:  # the collector deletes with the default options
                await self._delete_object(dep_key, copy.deepcopy(dependent), params.Options())

    def _current(self, key: Key, request: kmock.Request) -> dict[str, Any]:
        if key not in self._objects or self._objects[key].deleted:
            assert request.resource is not None
            raise KubernetesError(
                status=404,
                reason="NotFound",
                message=f'{request.resource.plural} "{request.name}" not found',
            )
        return copy.deepcopy(dict(self._objects[key].raw))

    @staticmethod
    def _check_version(
        version: str | None, current: Mapping[str, Any], request: kmock.Request
    ) -> None:
        actual = (current.get("metadata") or {}).get("resourceVersion")
        if version and version != actual:
            assert request.resource is not None
            group, plural = request.resource.group or "", request.resource.plural or ""
            qualified = f"{plural}.{group}" if group else plural  # errors.NewConflict
            raise KubernetesError(
                status=409,
                reason="Conflict",
                message=f'Operation cannot be fulfilled on {qualified} "{request.name}": the '
                "object has been modified; please apply your changes to the latest version and "
                "try again",
                details={"name": request.name, "group": group, "kind": plural},
            )

    # -- reads ------------------------------------------------------------------------------

    def _matches(
        self,
        request: kmock.Request,
        namespace: str | None,
        obj: Mapping[str, Any],
        terms: list[tuple[str, str, set[str]]],
    ) -> bool:
        if request.namespace is not None and namespace != request.namespace:
            return False
        name = (obj.get("metadata") or {}).get("name")
        if request.name is not None and name != request.name:
            return False
        return labels_match(_labels_of(obj), terms) and kubectl.fields_match(request.params, obj)

    async def _serve_list(self, request: kmock.Request) -> Any:
        terms = parse_label_selector(request.params.get("labelSelector", ""))
        accept = {k.lower(): v for k, v in request.headers.items()}.get("accept", "")
        metadata_only = "as=PartialObjectMetadataList" in accept
        async with self._lock:
            items = []
            for (resource, namespace, _), obj in self._objects.items():
                if resource != request.resource or obj.deleted:
                    continue
                raw = obj.raw
                if not self._matches(request, namespace, raw, terms):
                    continue
                if metadata_only:
                    items.append(
                        {
                            "apiVersion": "meta.k8s.io/v1",
                            "kind": "PartialObjectMetadata",
                            "metadata": raw.get("metadata") or {},
                        }
                    )
                else:
                    items.append(raw)
            version = str(next(self._versions))
        assert request.resource is not None
        kind = "PartialObjectMetadataList" if metadata_only else "List"
        return {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": {"resourceVersion": version},
            "items": items,
        }

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[Any]:
        """Events after ``resourceVersion`` (or every object, then events), filtered, timed."""
        yield b""  # send the headers now: an idle watch is still a watch
        assert request.resource is not None
        terms = parse_label_selector(request.params.get("labelSelector", ""))
        since = request.params.get("resourceVersion") or ""
        # an int64, parsed in _handle; 0 (or none) leaves the server's own timeout (long)
        timeout = params.current().timeout_seconds or None
        bus = self._buses[request.resource]
        async with self._lock:
            marker = await bus.mark()
            backlog: list[dict[str, Any]] = []
            if since in ("", "0"):
                for (resource, namespace, _), obj in self._objects.items():
                    if (
                        resource == request.resource
                        and not obj.deleted
                        and self._matches(request, namespace, obj.raw, terms)
                    ):
                        backlog.append({"type": "ADDED", "object": copy.deepcopy(obj.raw)})
            elif int(since) < self._history_floor:
                backlog.append(
                    {
                        "type": "ERROR",
                        "object": {
                            "kind": "Status",
                            "apiVersion": "v1",
                            "status": "Failure",
                            "code": 410,
                            "reason": "Expired",
                            "message": f"too old resource version: {since}",
                        },
                    }
                )
            else:
                for version, resource, event in self._history:
                    if version > int(since) and resource == request.resource:
                        obj = event["object"]
                        namespace = (obj.get("metadata") or {}).get("namespace")
                        if self._matches(request, namespace, obj, terms):
                            backlog.append(event)
        try:
            for event in backlog:
                yield event
            if backlog and backlog[-1]["type"] == "ERROR":
                return
            async with asyncio.timeout(timeout):
                async for event in bus.stream(since=marker):
                    changed = event.get("object") or {}
                    namespace = (changed.get("metadata") or {}).get("namespace")
                    if self._matches(request, namespace, changed, terms):
                        yield event
        except TimeoutError:
            return
        finally:
            await bus.unmark(marker)


class EmulatorServer:
    """``StateEmulator`` on ``127.0.0.1:<port>`` (0: a free one), in a thread with its own loop."""

    def __init__(
        self,
        port: int = 0,
        *,
        tls: bool = False,
        tls_addresses: Sequence[str] = ("127.0.0.1",),
        **emulator_kwargs: Any,
    ) -> None:
        self._port = port
        self._tls = tls  # also serve HTTPS (kubectl sends its token over HTTPS only)
        self._tls_addresses = tuple(tls_addresses)  # where HTTPS listens (one port on each)
        self.tls_port = 0
        self.ca_pem = ""  # the cluster CA that signed the HTTPS certificate
        self._kwargs = emulator_kwargs
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="k8s-emulator", daemon=True)
        self.emulator: StateEmulator | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def tls_url(self) -> str:
        return f"https://127.0.0.1:{self.tls_port}"

    def start(self) -> Self:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise RuntimeError("the emulator failed to start") from self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # surfaced by start()
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        emulator = StateEmulator(**self._kwargs)
        self.emulator = emulator
        loop = self._loop

        def request_factory(
            message: Any, payload: Any, protocol: Any, writer: Any, task: Any
        ) -> aiohttp.web.BaseRequest:
            return aiohttp.web.BaseRequest(
                message, payload, protocol, writer, task, loop, client_max_size=MAX_REQUEST_BODY
            )

        async with emulator:
            server = aiohttp.web.Server(emulator, request_factory=request_factory, access_log=None)
            runner = aiohttp.web.ServerRunner(server, shutdown_timeout=1.0)
            await runner.setup()
            site = aiohttp.web.TCPSite(runner, "127.0.0.1", self._port)
            await site.start()
            self.port = int(runner.addresses[0][1])
            if self._tls:
                self.ca_pem, self.tls_port = await kubectl.serve_tls(runner, self._tls_addresses)
                emulator.ca_pem = self.ca_pem
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                await runner.cleanup()


def _serve_forever() -> None:
    """Standalone mode: print the port, serve until stdin closes (the parent went away)."""
    token = sys.argv[1] if len(sys.argv) > 1 else None
    with EmulatorServer(required_token=token) as server:
        print(server.port, flush=True)  # noqa: T201 - the parent reads the port from stdout
        sys.stdin.read()


if __name__ == "__main__":
    _serve_forever()
