"""The local cluster: the API emulator, a process kubelet, a StatefulSet controller and the
operator, on one machine without containers (the e2e tier that needs no container runtime).

``LocalCluster(directory).start()`` serves the Kubernetes API on a loopback port (the extended
kmock emulator of ``tests/support``, checking custom resources against their CRD schema),
applies ``crds/``, creates the namespaces, starts the controllers a cluster needs for our
children (StatefulSets; the garbage collector is the emulator's) and the kubelet, and runs
``finishable operator`` as the chart's Deployment would run it: under RBAC, with the
OwnerReferencesPermissionEnforcement admission plugin on (as in OpenShift), as the chart's
ServiceAccount bound to the chart's rules (``chart_rbac``: the namespaced mode, peering on),
with its default Spark master: the API server's ``k8s://`` URL, so Spark's Kubernetes backend in
each driver creates its executor pods through the API and the kubelet runs them
(``spark_master="local[2]"`` runs Spark inside the driver pod instead). The kubelet and the
StatefulSet controller keep the admin's token. The admin kubeconfig is
``<directory>/kubeconfig``; logs are ``<directory>/operator/operator.log`` and
``<directory>/pods/<namespace>/<pod>-<uid>/<container>.log``.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import sys
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import pyspark
import yaml

from e2e.localcluster.kubelet import ProcessKubelet, kubeconfig
from e2e.localcluster.podspec import Image, service_environment
from e2e.localcluster.statefulsets import StatefulSetController
from finishable.kube.api import KubeApi
from tests.controller.cluster import OperatorProcess
from tests.support.k8s_emulator import EmulatorServer

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "finishable-spark-operator:0.1.0"  # the image the examples and the e2e suite name
# The chart, installed as release RELEASE in OPERATOR_NAMESPACE with watchNamespaces set (the
# namespaced mode) and peering on: the operator runs as its ServiceAccount under the chart's RBAC.
CHART = ROOT / "charts" / "finishable-spark-operator"
RELEASE = "finishable-spark-operator"  # the chart's fullname and ServiceAccount for this release
OPERATOR_NAMESPACE = "finishable-system"
RBAC_API = "/apis/rbac.authorization.k8s.io/v1"


class LocalCluster:
    """See the module docstring; a context manager, or ``start()`` and ``stop()``."""

    def __init__(
        self,
        directory: Path,
        *,
        namespaces: tuple[str, ...] = ("default",),
        spark_master: str | None = None,
        port: int = 0,
    ) -> None:
        self.directory = directory.resolve()
        self.namespaces = namespaces
        self.spark_master = spark_master
        self.token = secrets.token_urlsafe(16)
        self.server = EmulatorServer(
            port=port,
            tls=True,
            required_token=self.token,
            validate_schemas=True,
            # RBAC and the OwnerReferencesPermissionEnforcement admission plugin (on in OpenShift)
            authorize=True,
            owner_reference_enforcement=True,
        )
        self.kubeconfig = self.directory / "kubeconfig"
        self.operator_log = self.directory / "operator" / "operator.log"
        self.operator: OperatorProcess | None = None
        self.kubelet: ProcessKubelet | None = None
        self.stateful_sets: StatefulSetController | None = None

    @property
    def url(self) -> str:
        return str(self.server.url)

    @property
    def api_address(self) -> tuple[str, int]:
        """Where pods reach the API server (its HTTPS port; the Service variables a kubelet
        gives every container: ``KUBERNETES_SERVICE_HOST`` and ``_PORT``)."""
        return "127.0.0.1", self.server.tls_port

    def api(self, user_agent: str, namespace: str | None = None) -> KubeApi:
        return KubeApi.for_url(
            self.url,
            token=self.token,
            namespace=namespace or self.namespaces[0],
            user_agent=user_agent,
        )

    # -- life -------------------------------------------------------------------------------

    def start(self) -> Self:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.server.start()
        self.kubeconfig.write_text(
            # HTTPS, as kubectl sends a token over HTTPS only; the CA is the emulator's.
            json.dumps(
                kubeconfig(
                    self.server.tls_url, self.token, self.namespaces[0], ca=self.server.ca_pem
                ),
                indent=2,
            )
        )
        admin = self.api("local-cluster")
        self._install(admin)
        self.stateful_sets = StatefulSetController(self.api("statefulset-controller")).start()
        self.kubelet = ProcessKubelet(
            self.api("process-kubelet"),
            self.directory,
            images={IMAGE: local_image()},
            api_address=self.api_address,
        ).start()
        self._start_operator()
        return self

    def stop(self) -> None:
        if self.operator is not None:
            self.operator.stop()
        if self.kubelet is not None:
            self.kubelet.stop()
        if self.stateful_sets is not None:
            self.stateful_sets.stop()
        self.server.stop()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- parts ------------------------------------------------------------------------------

    def _install(self, api: KubeApi) -> None:
        """``kubectl apply -f crds/`` and ``kubectl create namespace``."""
        for path in sorted((ROOT / "crds").glob("*.yaml")):
            for crd in filter(None, yaml.safe_load_all(path.read_text())):
                response = api.request(
                    "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=crd
                )
                if response.status not in (201, 409):
                    raise RuntimeError(f"cannot install {path.name}: {response.message}")
        for namespace in dict.fromkeys((*self.namespaces, OPERATOR_NAMESPACE)):
            body = {"metadata": {"name": namespace}}
            response = api.request("POST", "/api/v1/namespaces", body=body)
            if response.status not in (201, 409):
                raise RuntimeError(f"cannot create namespace {namespace}: {response.message}")
        for collection, obj in chart_rbac(self.namespaces):
            response = api.request("POST", collection, body=obj)
            if response.status not in (201, 409):
                name = f"{obj['kind']} {obj['metadata']['name']}"
                raise RuntimeError(f"cannot create {name}: {response.message}")

    def operator_token(self) -> str:
        """A token of the operator's ServiceAccount, from the TokenRequest API."""
        api = self.api("local-cluster", OPERATOR_NAMESPACE)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
        path = api.path("serviceaccounts", RELEASE, subresource="token")
        response = api.request("POST", path, body=body)
        if response.status != 201:
            raise RuntimeError(f"cannot get the operator's token: {response.message}")
        return str(response.body["status"]["token"])

    def _start_operator(self) -> None:
        """As the chart runs it with ``watchNamespaces`` set: peering, one flag per namespace."""
        self.operator_log.parent.mkdir(parents=True, exist_ok=True)
        self.operator = OperatorProcess(
            self.operator_log.parent,
            self.url,
            self.operator_token(),  # the chart's ServiceAccount, not the admin
            list(self.namespaces),
            identity="local-operator",
            extra_args=["--spark-master", self.spark_master] if self.spark_master else [],
            # What a kubelet gives every container: the operator derives Spark's default
            # k8s:// master from it, as it would in its pod.
            env=service_environment(*self.api_address),
        ).start()

    def metrics(self) -> str:
        """The operator's Prometheus metrics, as scraped."""
        assert self.operator is not None
        return str(self.operator.metrics())


def chart_rbac(namespaces: tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    """What templates/serviceaccount.yaml and templates/rbac.yaml create in the namespaced mode
    with peering on, as (collection path, object): the ServiceAccount; a ClusterRole with the rules
    of files/rbac/jobs.yaml and peering.yaml, bound by a RoleBinding in each watched namespace;
    and a ClusterRole "-scanning" with crds.yaml and namespaces.yaml, bound cluster-wide."""

    def rules(*names: str) -> list[Any]:
        return [
            rule
            for name in names
            for rule in yaml.safe_load((CHART / "files" / "rbac" / f"{name}.yaml").read_text())
        ]

    def binding(kind: str, name: str, role: str, namespace: str | None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name}
        if namespace:
            meta["namespace"] = namespace
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": kind,
            "metadata": meta,
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": RELEASE, "namespace": OPERATOR_NAMESPACE}
            ],
        }

    def cluster_role(name: str, rule_files: tuple[str, ...]) -> dict[str, Any]:
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": rules(*rule_files),
        }

    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": RELEASE}}
    scanning = f"{RELEASE}-scanning"
    return [
        (f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/serviceaccounts", account),
        (f"{RBAC_API}/clusterroles", cluster_role(RELEASE, ("jobs", "peering"))),
        *(
            (
                f"{RBAC_API}/namespaces/{namespace}/rolebindings",
                binding("RoleBinding", RELEASE, RELEASE, namespace),
            )
            for namespace in namespaces
        ),
        (f"{RBAC_API}/clusterroles", cluster_role(scanning, ("crds", "namespaces"))),
        (
            f"{RBAC_API}/clusterrolebindings",
            binding("ClusterRoleBinding", scanning, scanning, None),
        ),
    ]


def local_image() -> Image:
    """The project's image (the Dockerfile) as this machine stands in for it: its entrypoint,
    CMD, ENV and WORKDIR, with this environment's interpreter, pyspark and Java in place of the
    image's, and the files it copies (the examples, the entrypoint) from the repository.
    ``tests/charts/test_dockerfile.py`` keeps the two in step."""
    python = Path(sys.executable)
    spark_home = Path(pyspark.__file__).resolve().parent
    java = shutil.which("java")
    java_home = os.environ.get("JAVA_HOME") or (
        str(Path(java).resolve().parents[1]) if java else "/usr/lib/jvm/default-java"
    )
    return Image(
        entrypoint=("/opt/finishable/entrypoint.sh",),
        cmd=("finishable", "--help"),
        env={
            "PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "PIP_NO_CACHE_DIR": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "JAVA_HOME": java_home,
            "SPARK_HOME": str(spark_home),
            "PYSPARK_PYTHON": str(python),
            "PYSPARK_DRIVER_PYTHON": str(python),
            "HOME": "/home/finishable",
        },
        working_dir="/home/finishable",
        files={
            "/opt/finishable/examples": ROOT / "examples",
            "/opt/finishable/entrypoint.sh": ROOT / "docker" / "entrypoint.sh",
        },
        dirs=("/home/finishable", "/tmp/finishable"),
        host_paths=tuple(sorted({ROOT, Path(sys.prefix).resolve(), spark_home})),
    )
