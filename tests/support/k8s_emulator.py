"""kmock's ``KubernetesEmulator``, extended to behave like an API server where our stores need it,
and served over real HTTP on a loopback port from a background thread.

What kmock 0.8 lacks, and this adds (generic for namespaced core resources, not ConfigMap-only):

* ``PUT`` (replace): kmock guesses no action for it and answers 500;
* ``metadata.resourceVersion`` (a global counter, bumped on every write), ``uid`` and
  ``creationTimestamp``; optimistic concurrency: a write carrying a stale resourceVersion gets
  409 Conflict, as does a create of an existing name (kmock has that one);
* label selectors on list (``=``, ``==``, ``!=``, ``key``, ``!key``, ``in``, ``notin``), a real list
  resourceVersion, and metadata-only lists (``Accept: ...;as=PartialObjectMetadataList``);
* validation the real server does and our code must respect: object names (DNS subdomains),
  label values, and the 1 MiB cap on a ConfigMap's ``data`` + ``binaryData`` (422 Invalid);
* JSON merge patch with ``null`` deletes, and a resourceVersion precondition in the patch;
* request bodies up to 3 MiB (aiohttp's default cap is 1 MiB; the API server accepts 3 MiB);
* optional bearer-token check (401), to prove that clients send their credentials;
* bounded memory for long runs: hard deletes, and only the newest requests are kept.

Run standalone (for benchmarks): ``python tests/support/k8s_emulator.py`` prints the port, then
serves until killed or until its stdin closes.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import datetime
import itertools
import re
import sys
import threading
import uuid
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

import aiohttp.web
import attrs
import kmock
from kmock import KubernetesEmulator, KubernetesError

CONFIGMAP_DATA_LIMIT = 1024 * 1024
MAX_REQUEST_BODY = 3 * 1024 * 1024
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_DATA_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_SELECTOR_TERM = re.compile(
    r"\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9./_-]+)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[A-Za-z0-9._-]*)|\s+(?P<setop>in|notin)\s*\((?P<set>[^)]*)\))?\s*"
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


@attrs.define(kw_only=True)
class StateEmulator(KubernetesEmulator):
    """The extended emulator (see the module docstring)."""

    required_token: str | None = None
    keep_requests: int = 200
    _versions: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1), init=False)

    def _next_version(self) -> str:
        return str(next(self._versions))

    # -- dispatch ---------------------------------------------------------------------------

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        if len(self._requests) > self.keep_requests:
            del self._requests[: -self.keep_requests]
        if self.required_token is not None:
            headers = {k.lower(): v for k, v in request.headers.items()}
            if headers.get("authorization") != f"Bearer {self.required_token}":
                raise KubernetesError(status=401, reason="Unauthorized", message="Unauthorized")
        if request.resource is None or request.subresource is not None:
            return await super()._handle(request)
        if request.method == kmock.method.PUT and request.name is not None:
            return await self._replace(request)
        if request.action == kmock.action.CREATE:
            return await self._create(request)
        if request.action == kmock.action.UPDATE:
            return await self._patch(request)
        if request.action == kmock.action.DELETE:
            return await self._delete(request)
        return await super()._handle(request)  # fetch, watch, list (see _serve_list)

    # -- validation -------------------------------------------------------------------------

    def _validate(self, resource: kmock.resource, obj: Mapping[str, Any]) -> None:
        kind = str(obj.get("kind") or resource.plural)
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
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

    # -- writes -----------------------------------------------------------------------------

    def _key(self, request: kmock.Request, name: str) -> tuple[Any, str | None, str]:
        return (request.resource, request.namespace, name)

    async def _create(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        assert request.resource is not None
        obj = copy.deepcopy(request.data) if isinstance(request.data, dict) else None
        if obj is None:
            raise KubernetesError(status=400, reason="BadRequest", message="body is not an object")
        meta = obj.setdefault("metadata", {})
        namespace = request.namespace or meta.get("namespace")
        self._validate(request.resource, obj)
        key = (request.resource, namespace, meta["name"])
        async with self._lock:
            if key in self._objects and not self._objects[key].deleted:
                raise KubernetesError(
                    status=409,
                    reason="AlreadyExists",
                    message=f'{request.resource.plural} "{meta["name"]}" already exists',
                )
            meta.pop("resourceVersion", None)
            meta.update(
                namespace=namespace,
                resourceVersion=self._next_version(),
                uid=str(uuid.uuid4()),
                creationTimestamp=datetime.datetime.now(datetime.UTC).isoformat(),
            )
            self._objects[key] = obj
            await self._buses[request.resource].put({"type": "ADDED", "object": obj})
        return aiohttp.web.json_response(obj, status=201)

    async def _replace(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        assert request.resource is not None and request.name is not None
        obj = copy.deepcopy(request.data) if isinstance(request.data, dict) else None
        if obj is None:
            raise KubernetesError(status=400, reason="BadRequest", message="body is not an object")
        meta = obj.setdefault("metadata", {})
        if meta.get("name", request.name) != request.name:
            raise KubernetesError(status=400, reason="BadRequest", message="name mismatch")
        meta["name"] = request.name
        self._validate(request.resource, obj)
        key = self._key(request, request.name)
        async with self._lock:
            current = self._current(key, request)
            self._check_version(meta.get("resourceVersion"), current, request)
            current_meta = current.get("metadata") or {}
            meta.update(
                namespace=request.namespace,
                resourceVersion=self._next_version(),
                uid=current_meta.get("uid"),
                creationTimestamp=current_meta.get("creationTimestamp"),
            )
            self._objects[key] = obj
            await self._buses[request.resource].put({"type": "MODIFIED", "object": obj})
        return aiohttp.web.json_response(obj, status=200)

    async def _patch(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        assert request.resource is not None and request.name is not None
        if not isinstance(request.data, dict):
            raise KubernetesError(
                status=415, reason="UnsupportedMediaType", message="only merge patches"
            )
        key = self._key(request, request.name)
        async with self._lock:
            current = self._current(key, request)
            patch = copy.deepcopy(request.data)
            self._check_version(
                (patch.get("metadata") or {}).pop("resourceVersion", None), current, request
            )
            obj = _merge_patch(current, patch)
            self._validate(request.resource, obj)
            obj["metadata"]["resourceVersion"] = self._next_version()
            self._objects[key] = obj
            await self._buses[request.resource].put({"type": "MODIFIED", "object": obj})
        return aiohttp.web.json_response(obj, status=200)

    async def _delete(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        assert request.resource is not None and request.name is not None
        key = self._key(request, request.name)
        async with self._lock:
            current = self._current(key, request)
            meta = current.get("metadata") or {}
            if meta.get("finalizers"):
                obj = copy.deepcopy(current)
                obj["metadata"]["deletionTimestamp"] = datetime.datetime.now(
                    datetime.UTC
                ).isoformat()
                obj["metadata"]["resourceVersion"] = self._next_version()
                self._objects[key] = obj
                await self._buses[request.resource].put({"type": "MODIFIED", "object": obj})
                return aiohttp.web.json_response(obj, status=200)
            del self._objects[key]
            await self._buses[request.resource].put({"type": "DELETED", "object": current})
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

    def _current(self, key: tuple[Any, str | None, str], request: kmock.Request) -> dict[str, Any]:
        if key not in self._objects or self._objects[key].deleted:
            assert request.resource is not None
            raise KubernetesError(
                status=404,
                reason="NotFound",
                message=f'{request.resource.plural} "{request.name}" not found',
            )
        return dict(self._objects[key].raw)

    @staticmethod
    def _check_version(
        version: str | None, current: Mapping[str, Any], request: kmock.Request
    ) -> None:
        actual = (current.get("metadata") or {}).get("resourceVersion")
        if version and version != actual:
            raise KubernetesError(
                status=409,
                reason="Conflict",
                message=f'Operation cannot be fulfilled on "{request.name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
            )

    # -- reads ------------------------------------------------------------------------------

    async def _serve_list(self, request: kmock.Request) -> Any:
        terms = parse_label_selector(request.params.get("labelSelector", ""))
        accept = {k.lower(): v for k, v in request.headers.items()}.get("accept", "")
        metadata_only = "as=PartialObjectMetadataList" in accept
        async with self._lock:
            items = []
            for (resource, namespace, _), obj in self._objects.items():
                if resource != request.resource or obj.deleted:
                    continue
                if request.namespace is not None and namespace != request.namespace:
                    continue
                raw = obj.raw
                if not labels_match((raw.get("metadata") or {}).get("labels") or {}, terms):
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


class EmulatorServer:
    """``StateEmulator`` on ``127.0.0.1:<port>`` (0: a free one), in a thread with its own loop."""

    def __init__(self, port: int = 0, **emulator_kwargs: Any) -> None:
        self._port = port
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
            runner = aiohttp.web.ServerRunner(server)
            await runner.setup()
            site = aiohttp.web.TCPSite(runner, "127.0.0.1", self._port)
            await site.start()
            self.port = int(runner.addresses[0][1])
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                await runner.cleanup()


def _serve_forever() -> None:
    """Standalone mode: print the port, serve until stdin closes (the parent went away)."""
    with EmulatorServer() as server:
        print(server.port, flush=True)  # noqa: T201 - the parent reads the port from stdout
        sys.stdin.read()


if __name__ == "__main__":
    _serve_forever()
