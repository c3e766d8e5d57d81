"""Backend specs as plain JSON, so a test and a child process it starts open the same backend."""

from __future__ import annotations

from typing import Any

from finishable.kube.api import KubeApi
from finishable.state.backends import ObjectBackend
from finishable.state.configmap import ConfigMapBackend
from finishable.state.local import LocalDirBackend
from finishable.state.objectstore import ObjectStoreBackend

BackendSpec = dict[str, Any]


def open_spec(spec: BackendSpec) -> ObjectBackend:
    kind = spec["kind"]
    if kind == "local":
        return LocalDirBackend(spec["path"])
    if kind == "s3":
        return ObjectStoreBackend(spec["url"])
    if kind == "configmap":
        api = KubeApi.for_url(spec["url"], token=spec["token"], namespace=spec["namespace"])
        return ConfigMapBackend(
            api,
            spec["job"],
            chunk_bytes=spec.get("chunk_bytes", 1_000_000),
            max_total_bytes=spec.get("max_total_bytes", 8 * 1024 * 1024),
            close_api=True,
        )
    raise ValueError(f"unknown backend kind {kind!r}")
