"""ConfigMaps as a state backend: small state with no storage to set up.

Layout. Object ``<name>`` of job ``<job>`` is the ConfigMap ``<job>-<name with "/" as ".">``,
labelled ``finishable.dev/job=<job>`` and ``finishable.dev/component=state``, with the bytes in
``binaryData["data"]`` and the object name in the annotation ``finishable.dev/object-name`` (so
``list`` needs no name parsing and two names that map to one ConfigMap cannot be confused).

Kubernetes rejects a ConfigMap whose data exceeds 1 MiB, so a larger object is split: its bytes go
to ``<configmap>-part-0000``, ``-part-0001``, ... (at most ``chunk_bytes`` each, written first),
and the head ConfigMap, written last, holds only ``data["manifest"]``: total size, sha256 and the
size and sha256 of every part. A reader that finds the head therefore finds every part, and a
process killed halfway leaves parts without a head, which are invisible and removed by the next
``delete`` or overwrite of that name. Above ``max_total_bytes`` a put is refused with
``ObjectTooLarge`` naming the limit and the size: etcd is not a blob store.

Overwriting a split object is not atomic for a concurrent reader (it may see the old manifest
with new parts and get ``ObjectCorrupt`` from the part checksums, never wrong bytes); the stores
above never do that, because their blobs are written once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from finishable.kube.api import KubeApi, KubeApiError
from finishable.kube.objects import LABEL_COMPONENT, LABEL_JOB, job_label_value
from finishable.state.backends import ObjectBackend, validate_name
from finishable.state.errors import BackendError, ObjectCorrupt, ObjectNotFound, ObjectTooLarge

log = logging.getLogger(__name__)

LABEL_ROLE = "finishable.dev/state-role"
ANNOTATION_NAME = "finishable.dev/object-name"
ANNOTATION_PART = "finishable.dev/part"
COMPONENT = "state"

CONFIGMAP_DATA_LIMIT = 1024 * 1024
"""What the API server accepts in ``data`` + ``binaryData`` of one ConfigMap."""
DEFAULT_CHUNK_BYTES = 1_000_000
"""Bytes per ConfigMap, below the 1 MiB limit with room for the base64 request and metadata."""
DEFAULT_MAX_TOTAL_BYTES = 8 * 1024 * 1024

_PART_SUFFIX = "-part-{:04d}"
_MAX_NAME = 253 - len(_PART_SUFFIX.format(0))
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_METADATA_ONLY = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"


def upsert_configmap(api: KubeApi, body: dict[str, Any], *, namespace: str | None = None) -> bool:
    """Create the ConfigMap, or replace it if it exists; return whether it existed.

    Create first: one request for a new object, and a 409 says that it exists. But admission runs
    before the storage looks for the name, so a create that admission or RBAC refuses (403: the
    OwnerReferencesPermissionEnforcement plugin, or a Role that grants ``update`` on named
    ConfigMaps but cannot scope ``create`` by name) says nothing about existence: a 403 also
    tries the replace, and stands, with the create's own message, only if nothing is there.

    The replace carries no resourceVersion, so it is unconditional (last writer wins): every
    ConfigMap this project writes has one writer, and an optimistic-concurrency loop would only
    add failures under contention without protecting anything.
    """
    cm_name = body["metadata"]["name"]
    for _ in range(8):
        created = api.request("POST", api.path("configmaps", namespace=namespace), body=body)
        if created.status in (200, 201):
            return False
        if created.status not in (403, 409):
            raise KubeApiError(f"cannot create ConfigMap {cm_name}", created)
        replaced = api.request(
            "PUT", api.path("configmaps", cm_name, namespace=namespace), body=body
        )
        if replaced.status == 200:
            return True
        if replaced.status == 404 and created.status == 403:
            raise KubeApiError(f"cannot create ConfigMap {cm_name}", created)
        if replaced.status != 404:
            raise KubeApiError(f"cannot replace ConfigMap {cm_name}", replaced)
        # Deleted between our create and replace: create again.
    raise BackendError(f"ConfigMap {cm_name} keeps being deleted under us; gave up writing it")


def configmap_name(job: str, name: str) -> str:
    """The deterministic ConfigMap name of object ``name`` of ``job`` (its head: a split
    object's parts are ``<head>-part-NNNN``)."""
    cm = f"{job}-{validate_name(name).replace('/', '.')}"
    if len(cm) > _MAX_NAME or not _DNS_SUBDOMAIN.fullmatch(cm):
        raise ValueError(
            f"object {name!r} of job {job!r} maps to {cm!r}, which is not a valid "
            f"ConfigMap name (DNS subdomain of at most {_MAX_NAME} characters)"
        )
    return cm


class ConfigMapBackend(ObjectBackend):
    """Objects of one job as ConfigMaps in one namespace."""

    def __init__(
        self,
        api: KubeApi,
        job: str,
        *,
        namespace: str | None = None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
        owner_references: Sequence[Mapping[str, Any]] = (),
        close_api: bool = False,
    ) -> None:
        if not _DNS_SUBDOMAIN.fullmatch(job) or len(job) > 200:
            raise ValueError(f"job name {job!r} is not a valid Kubernetes object name")
        if not 0 < chunk_bytes <= CONFIGMAP_DATA_LIMIT:
            raise ValueError(
                f"chunk_bytes={chunk_bytes} must be between 1 and {CONFIGMAP_DATA_LIMIT} "
                "(the API server rejects larger ConfigMaps)"
            )
        if max_total_bytes < chunk_bytes:
            raise ValueError(
                f"max_total_bytes={max_total_bytes} is below chunk_bytes={chunk_bytes}"
            )
        self.api = api
        self.job = job
        self.namespace = namespace or api.namespace
        self.chunk_bytes = chunk_bytes
        self.max_total_bytes = max_total_bytes
        self.owner_references = [dict(ref) for ref in owner_references]
        self._close_api = close_api
        self._labels = {LABEL_JOB: job_label_value(job), LABEL_COMPONENT: COMPONENT}
        self._selector = ",".join(f"{k}={v}" for k, v in self._labels.items())

    @classmethod
    def from_environment(
        cls, job: str, *, namespace: str | None = None, **kwargs: Any
    ) -> ConfigMapBackend:
        """Connect in-cluster (in a pod) or through the kubeconfig (elsewhere)."""
        api = KubeApi.from_environment(namespace=namespace)
        return cls(api, job, namespace=namespace, close_api=True, **kwargs)

    # -- naming -------------------------------------------------------------------------------

    def configmap_name(self, name: str) -> str:
        """The deterministic ConfigMap name of an object of this job."""
        return configmap_name(self.job, name)

    def _path(self, cm_name: str | None = None) -> str:
        return self.api.path("configmaps", cm_name, namespace=self.namespace)

    def _body(
        self, cm_name: str, name: str, role: str, *, annotations: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "name": cm_name,
            "namespace": self.namespace,
            "labels": {**self._labels, LABEL_ROLE: role},
            "annotations": {ANNOTATION_NAME: name, **(annotations or {})},
        }
        if self.owner_references:
            metadata["ownerReferences"] = self.owner_references
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}

    # -- ObjectBackend ------------------------------------------------------------------------

    def put(self, name: str, data: bytes) -> None:
        head = self.configmap_name(name)
        size = len(data)
        if size > self.max_total_bytes:
            raise ObjectTooLarge(name, size, self.max_total_bytes, "ConfigMap max_total_bytes")
        if size <= self.chunk_bytes:
            body = self._body(head, name, "object")
            body["binaryData"] = {"data": base64.b64encode(data).decode("ascii")}
            if self._upsert(body):
                self._delete_parts(head, start=0)  # the previous version may have been split
            return
        parts = [data[i : i + self.chunk_bytes] for i in range(0, size, self.chunk_bytes)]
        manifest: dict[str, Any] = {
            "format": 1,
            "size": size,
            "sha256": hashlib.sha256(data).hexdigest(),
            "parts": [],
        }
        replaced = False
        for index, part in enumerate(parts):
            part_name = head + _PART_SUFFIX.format(index)
            body = self._body(
                part_name, name, "part", annotations={ANNOTATION_PART: f"{index}/{len(parts)}"}
            )
            body["binaryData"] = {"data": base64.b64encode(part).decode("ascii")}
            replaced |= self._upsert(body)
            manifest["parts"].append(
                {"name": part_name, "size": len(part), "sha256": hashlib.sha256(part).hexdigest()}
            )
        body = self._body(head, name, "object")
        body["data"] = {"manifest": json.dumps(manifest, separators=(",", ":"))}
        replaced |= self._upsert(body)
        if replaced:
            self._delete_parts(head, start=len(parts))
        log.debug("stored %s as %d ConfigMaps (%d bytes)", head, len(parts) + 1, size)

    def get(self, name: str) -> bytes:
        head = self.configmap_name(name)
        obj = self._read(head)
        if obj is None or _annotation(obj, ANNOTATION_NAME) != name:
            raise ObjectNotFound(name, self.location(name))
        manifest_text = (obj.get("data") or {}).get("manifest")
        if manifest_text is not None:
            return self._assemble(name, manifest_text)
        encoded = (obj.get("binaryData") or {}).get("data")
        if encoded is None:
            raise ObjectCorrupt(name, f"ConfigMap {head} has no binaryData.data and no manifest")
        return _b64decode(name, encoded)

    def list(self, prefix: str = "") -> list[str]:
        names: set[str] = set()
        query = {"labelSelector": self._selector, "limit": "500"}
        while True:
            response = self.api.request("GET", self._path(), query=query, accept=_METADATA_ONLY)
            if response.status != 200:
                raise KubeApiError(f"cannot list ConfigMaps of job {self.job!r}", response)
            for item in response.body.get("items") or []:
                object_name = _annotation(item, ANNOTATION_NAME)
                if object_name and object_name.startswith(prefix):
                    names.add(object_name)
            token = (response.body.get("metadata") or {}).get("continue")
            if not token:
                return sorted(names)
            query = {**query, "continue": token}

    def delete(self, name: str) -> None:
        head = self.configmap_name(name)
        self._delete(head)
        self._delete_parts(head, start=0)

    def location(self, name: str = "") -> str:
        target = self.configmap_name(name) if name else f"{self.job}-*"
        return f"configmap://{self.namespace}/{target}"

    def close(self) -> None:
        if self._close_api:
            self.api.close()

    def __repr__(self) -> str:
        return f"ConfigMapBackend(job={self.job!r}, namespace={self.namespace!r})"

    # -- helpers ------------------------------------------------------------------------------

    def _read(self, cm_name: str) -> dict[str, Any] | None:
        response = self.api.request("GET", self._path(cm_name))
        if response.status == 404:
            return None
        if response.status != 200:
            raise KubeApiError(f"cannot read ConfigMap {cm_name}", response)
        return response.body

    def _upsert(self, body: dict[str, Any]) -> bool:
        return upsert_configmap(self.api, body, namespace=self.namespace)

    def _delete(self, cm_name: str) -> bool:
        response = self.api.request("DELETE", self._path(cm_name))
        if response.status in (200, 202):
            return True
        if response.status == 404:
            return False
        raise KubeApiError(f"cannot delete ConfigMap {cm_name}", response)

    def _delete_parts(self, head: str, *, start: int) -> None:
        """Parts are numbered from 0 without gaps, so stop at the first one that is missing."""
        index = start
        while self._delete(head + _PART_SUFFIX.format(index)):
            index += 1

    def _assemble(self, name: str, manifest_text: str) -> bytes:
        try:
            manifest = json.loads(manifest_text)
            parts = [(p["name"], int(p["size"]), str(p["sha256"])) for p in manifest["parts"]]
            size, digest = int(manifest["size"]), str(manifest["sha256"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ObjectCorrupt(name, f"unreadable manifest: {exc}") from exc
        chunks: list[bytes] = []
        for part_name, part_size, part_digest in parts:
            obj = self._read(part_name)
            if obj is None:
                raise ObjectCorrupt(name, f"part {part_name} is missing")
            encoded = (obj.get("binaryData") or {}).get("data")
            if encoded is None:
                raise ObjectCorrupt(name, f"part {part_name} has no binaryData.data")
            chunk = _b64decode(name, encoded)
            if len(chunk) != part_size or hashlib.sha256(chunk).hexdigest() != part_digest:
                raise ObjectCorrupt(name, f"part {part_name} does not match its manifest entry")
            chunks.append(chunk)
        data = b"".join(chunks)
        if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
            raise ObjectCorrupt(name, "assembled parts do not match the manifest")
        return data


def _annotation(obj: Mapping[str, Any], key: str) -> str | None:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(key)
    return str(value) if value is not None else None


def _b64decode(name: str, encoded: str) -> bytes:
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ObjectCorrupt(name, f"binaryData is not base64: {exc}") from exc
