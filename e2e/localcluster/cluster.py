"""The local cluster: the API emulator, a process kubelet, a StatefulSet controller and the
operator, on one machine without containers (the e2e tier that needs no container runtime).

``LocalCluster(directory).start()`` serves the Kubernetes API on a loopback port (the extended
kmock emulator of ``tests/support``, checking custom resources against their CRD schema),
creates the namespaces, installs the chart as helm renders it (``chart.py``: CRDs, service
account, RBAC, Services, dashboard; the namespaced mode, peering on), starts the controllers a
cluster needs for our children (StatefulSets; the garbage collector is the emulator's) and the
kubelet, runs ``finishable operator`` as the chart's Deployment would run it: under RBAC, with
the OwnerReferencesPermissionEnforcement admission plugin on (as in OpenShift), as the chart's
ServiceAccount, with its default Spark master: the API server's ``k8s://`` URL, so Spark's
Kubernetes backend in each driver creates its executor pods through the API and the kubelet runs
them (``spark_master="local[2]"`` runs Spark inside the driver pod instead). The kubelet and the
StatefulSet controller keep the admin's token. Prometheus (``prometheus.py``) scrapes the
operator as the chart's ServiceMonitor says and evaluates its alerting rules. The admin
kubeconfig is ``<directory>/kubeconfig``; logs are ``<directory>/operator/operator.log`` and
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

from e2e.localcluster import chart
from e2e.localcluster.chart import OPERATOR_NAMESPACE, RELEASE
from e2e.localcluster.kubelet import ProcessKubelet, kubeconfig
from e2e.localcluster.podspec import Image, service_environment
from e2e.localcluster.prometheus import Prometheus, scrape_config
from e2e.localcluster.statefulsets import StatefulSetController
from finishable.kube.api import KubeApi
from tests.controller.cluster import OperatorProcess
from tests.support.k8s_emulator import EmulatorServer

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "finishable-spark-operator:0.1.0"  # the image the examples and the e2e suite name


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
        self.prometheus: Prometheus | None = None
        self.chart: list[dict[str, Any]] = []

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
        self._start_prometheus()
        return self

    def stop(self) -> None:
        if self.prometheus is not None:
            self.prometheus.stop()
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
        """``kubectl create namespace`` and ``helm install`` of the chart (its Deployment aside:
        the operator runs as a process, with the Deployment's service account)."""
        for namespace in dict.fromkeys((*self.namespaces, OPERATOR_NAMESPACE)):
            body = {"metadata": {"name": namespace}}
            response = api.request("POST", "/api/v1/namespaces", body=body)
            if response.status not in (201, 409):
                raise RuntimeError(f"cannot create namespace {namespace}: {response.message}")
        self.chart = chart.render(self.namespaces, self.spark_master)
        chart.install(api, self.chart, skip=frozenset({"Deployment"}))

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

    def _start_prometheus(self) -> None:
        """Prometheus scraping the operator as the chart's ServiceMonitor asks, with its rules."""
        assert self.operator is not None
        scrape = scrape_config(
            chart.only(self.chart, "ServiceMonitor"),
            chart.only(self.chart, "Service"),
            f"127.0.0.1:{self.operator.metrics_port}",
            pod=self.operator.identity,
        )
        rules = chart.only(self.chart, "PrometheusRule")["spec"]
        self.prometheus = Prometheus(self.directory / "prometheus", scrape, rules).start()

    def metrics(self) -> str:
        """The operator's Prometheus metrics, as scraped."""
        assert self.operator is not None
        return str(self.operator.metrics())


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
