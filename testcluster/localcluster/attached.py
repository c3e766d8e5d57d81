"""A local cluster that another process runs (``python -m testcluster``), used by a test run.

The e2e suite starts a local cluster of its own unless ``E2E_LOCAL_CLUSTER`` names the directory
of one that runs already: then it attaches, and a flow can be run again and again against the same
cluster without waiting for its start (the emulator, the chart, the operator's pod, Prometheus).
The running cluster wrote what attaching needs into its directory when it had started
(``ACCESS_FILE``); stopping an attached cluster stops nothing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from finishable.api.models import API_GROUP, API_VERSION, PLURAL
from finishable.api.snapshot import SNAPSHOT_PLURAL
from testcluster.localcluster.chart import OPERATOR_NAMESPACE, operator_part
from testcluster.localcluster.cluster import ACCESS_FILE, ClusterAccess, ready_pod
from testcluster.localcluster.objectstore import ObjectStore
from testcluster.localcluster.prometheus import Prometheus

ATTACH_TIMEOUT = 10.0
CLEAR_TIMEOUT = 180.0  # the jobs' drivers stopped and their finalizers removed by the operator
# What a test run leaves in its namespaces, in the order it is deleted: jobs (their children go
# with them), then the savepoints recorded as snapshots, then the claims (their files go with them).
LEFT_BY_A_RUN = (
    (PLURAL, f"{API_GROUP}/{API_VERSION}"),
    (SNAPSHOT_PLURAL, f"{API_GROUP}/{API_VERSION}"),
    ("persistentvolumeclaims", "v1"),
)


class NotRunning(RuntimeError):
    """No local cluster runs in the directory named, or it does not serve what a run needs."""


class AttachedCluster(ClusterAccess):
    """The cluster whose directory is ``directory``, as its access file describes it."""

    def __init__(self, directory: Path, namespaces: tuple[str, ...] = ()) -> None:
        self.directory = directory.resolve()
        path = self.directory / ACCESS_FILE
        if not path.is_file():
            raise NotRunning(
                f"{path}: no such file: start the cluster first "
                f"(.venv/bin/python -m testcluster --dir {directory})"
            )
        access: dict[str, Any] = json.loads(path.read_text())
        self._url = str(access["url"])
        self._api_host = str(access["api_host"])
        self.token = str(access["token"])
        self.audit_log = Path(access["audit_log"]) if access.get("audit_log") else None
        self.containerd_sockets = tuple(Path(p) for p in access.get("containerd_sockets", ()))
        self.namespaces = tuple(access["namespaces"])
        missing = [namespace for namespace in namespaces if namespace not in self.namespaces]
        if missing:
            served = " ".join(f"--namespace {n}" for n in dict.fromkeys(namespaces))
            raise NotRunning(
                f"the cluster in {directory} serves {', '.join(self.namespaces)}, not "
                f"{', '.join(missing)}: start it with {served}"
            )
        self.chart = list(access["chart"])
        self.partition_tokens = dict(access["partition_tokens"])
        self.object_store = ObjectStore()
        self.object_store.port = int(access["object_store_port"])
        self.prometheus = None
        if access["prometheus_port"]:
            self.prometheus = Prometheus(self.directory / "prometheus", {}, {})
            self.prometheus.port = int(access["prometheus_port"])
        deployment = operator_part(self.chart, "Deployment")
        self.operator_pod = ready_pod(self.api("attached"), deployment, ATTACH_TIMEOUT)
        if self.operator_pod is None:
            raise NotRunning(
                f"no ready operator pod in {OPERATOR_NAMESPACE} of the cluster in {directory}: "
                "is it still running?"
            )

    @property
    def url(self) -> str:
        return self._url

    @property
    def api_host(self) -> str:
        return self._api_host

    def clear(self, namespaces: tuple[str, ...]) -> None:
        """Delete what earlier test runs left in ``namespaces`` (``LEFT_BY_A_RUN``) and wait until
        it is gone, so that this run starts as it would on a new cluster."""
        api = self.api("attached")
        for plural, api_version in LEFT_BY_A_RUN:
            paths = [api.path(plural, namespace=ns, api_version=api_version) for ns in namespaces]
            for path in paths:
                for item in api.request("GET", path).body.get("items") or []:
                    api.request("DELETE", f"{path}/{item['metadata']['name']}")
            deadline = time.monotonic() + CLEAR_TIMEOUT
            while any(api.request("GET", path).body.get("items") for path in paths):
                if time.monotonic() > deadline:
                    raise NotRunning(f"{plural} of an earlier run stay: is the operator up?")
                time.sleep(0.5)
