"""The operator's own Kubernetes calls, off the event loop.

kopf watches and posts Events with its own client; the writes the operator decides on (children,
control requests, the status) go through the project's :class:`~finishable.kube.api.KubeApi`
(the same credentials loader, retries and ConfigMap upsert the driver uses), each call run on a
thread pool so that a slow API server never blocks the event loop that serves every job.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar
from urllib.parse import quote

from finishable.kube.api import KubeApi, KubeApiError, KubeResponse
from finishable.state.configmap import upsert_configmap

log = logging.getLogger(__name__)

T = TypeVar("T")

PLURALS = {
    "ConfigMap": "configmaps",
    "Secret": "secrets",
    "ServiceAccount": "serviceaccounts",
    "Service": "services",
    "Pod": "pods",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "StatefulSet": "statefulsets",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "PersistentVolumeClaim": "persistentvolumeclaims",
}
MERGE_PATCH = "application/merge-patch+json"


class Conflict(Exception):
    """A conditional write lost the race: someone wrote the object after the version it read."""


class Kube:
    """Async create-if-absent, delete, list and status patch on top of :class:`KubeApi`."""

    def __init__(self, api: KubeApi, *, threads: int = 16) -> None:
        self.api = api
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kube")

    async def run(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking call (a request, a control-channel write) on the pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, partial(function, *args, **kwargs))

    async def request(self, method: str, path: str, **kwargs: Any) -> KubeResponse:
        return await self.run(self.api.request, method, path, **kwargs)

    def path_of(self, body: Mapping[str, Any], *, named: bool = False) -> str:
        meta = body["metadata"]
        return self.api.path(
            PLURALS[body["kind"]],
            meta["name"] if named else None,
            namespace=meta["namespace"],
            api_version=body["apiVersion"],
        )

    async def create(self, body: Mapping[str, Any]) -> bool:
        """Create unless it exists; True when this call created it."""
        response = await self.request("POST", self.path_of(body), body=body)
        if response.status in (200, 201):
            return True
        if response.status == 409:
            return False
        raise KubeApiError(f"cannot create {body['kind']} {body['metadata']['name']}", response)

    async def upsert_configmap(self, body: dict[str, Any]) -> None:
        """Create or replace a ConfigMap whose content follows the spec (the job config)."""
        await self.run(upsert_configmap, self.api, body, namespace=body["metadata"]["namespace"])

    async def delete(
        self,
        plural: str,
        name: str,
        *,
        namespace: str,
        api_version: str = "v1",
        propagation: str = "Background",
        preconditions: Mapping[str, str] | None = None,
    ) -> bool:
        """Delete if present; True when this call deleted it. Dependents go in the background.

        With ``preconditions`` (``uid``, ``resourceVersion``) the deletion is conditional:
        :class:`Conflict` when the object is not the one, or not at the version, meant."""
        options: dict[str, Any] = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "propagationPolicy": propagation,
        }
        if preconditions:
            options["preconditions"] = dict(preconditions)
        response = await self.request(
            "DELETE",
            self.api.path(plural, name, namespace=namespace, api_version=api_version),
            body=options,
        )
        if response.status in (200, 202):
            return True
        if response.status == 404:
            return False
        if response.status == 409 and preconditions:
            raise Conflict(f"{plural}/{name} is not as {dict(preconditions)} says")
        raise KubeApiError(f"cannot delete {plural}/{name}", response)

    async def orphan(
        self,
        plural: str,
        name: str,
        *,
        namespace: str,
        api_version: str = "v1",
        labels: Mapping[str, str | None] | None = None,
    ) -> bool:
        """Remove the object's owner references, so it outlives its owner, and merge ``labels``
        into its own (None removes one); False if gone."""
        metadata: dict[str, Any] = {"ownerReferences": None}
        if labels:
            metadata["labels"] = dict(labels)
        response = await self.request(
            "PATCH",
            self.api.path(plural, name, namespace=namespace, api_version=api_version),
            body={"metadata": metadata},
            content_type=MERGE_PATCH,
        )
        if response.status == 200:
            return True
        if response.status == 404:
            return False
        raise KubeApiError(f"cannot orphan {plural}/{name}", response)

    async def list(
        self, plural: str, *, namespace: str, selector: str, api_version: str = "v1"
    ) -> list[dict[str, Any]]:
        response = await self.request(
            "GET",
            self.api.path(plural, namespace=namespace, api_version=api_version),
            query={"labelSelector": selector},
        )
        if response.status != 200:
            raise KubeApiError(f"cannot list {plural} ({selector})", response)
        return list(response.body.get("items") or [])

    async def patch_status(
        self,
        api_version: str,
        plural: str,
        name: str,
        namespace: str,
        status: Mapping[str, Any],
        *,
        resource_version: str | None = None,
    ) -> dict[str, Any] | None:
        """Merge-patch the status subresource; None when the object is gone.

        With ``resource_version`` the patch is conditional (the API server's optimistic
        concurrency): :class:`Conflict` when the object changed since that version.
        """
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        response = await self.request(
            "PATCH",
            self.api.path(
                plural, name, namespace=namespace, api_version=api_version, subresource="status"
            ),
            body=body,
            content_type=MERGE_PATCH,
        )
        if response.status == 404:
            return None
        if response.status == 409:
            raise Conflict(f"{plural}/{name} changed since resourceVersion {resource_version}")
        if response.status != 200:
            raise KubeApiError(f"cannot write the status of {plural}/{name}", response)
        return response.body

    async def get(
        self, api_version: str, plural: str, name: str, namespace: str
    ) -> dict[str, Any] | None:
        """Read one object; None when it is gone."""
        path = self.api.path(plural, name, namespace=namespace, api_version=api_version)
        return await self._read(path, f"{plural}/{name}")

    async def get_node(self, name: str) -> dict[str, Any] | None:
        """Read a Node (cluster-scoped); None when it is gone."""
        return await self._read(f"/api/v1/nodes/{quote(name, safe='')}", f"nodes/{name}")

    async def _read(self, path: str, what: str) -> dict[str, Any] | None:
        response = await self.request("GET", path)
        if response.status == 404:
            return None
        if response.status != 200:
            raise KubeApiError(f"cannot read {what}", response)
        return response.body

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.api.close()
