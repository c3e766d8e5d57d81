"""Debian's Prometheus on loopback, scraping the operator as the chart's ServiceMonitor tells the
Prometheus operator to, and evaluating the chart's PrometheusRule.

:func:`scrape_config` is what the Prometheus operator generates for one ServiceMonitor endpoint
(job ``serviceMonitor/NS/NAME/0``, its path, interval, timeout and ``honor_labels``, and the
target labels it adds: ``job`` = the Service's name, ``namespace``, ``service``, ``pod``,
``endpoint``), with a static target where the operator would use Kubernetes service discovery.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Self

import yaml

from testcluster.network import free_port
from testcluster.processes import terminate
from testcluster.tools import find, missing

READY_TIMEOUT = 60.0


def scrape_config(
    monitor: dict[str, Any], service: dict[str, Any], target: str, pod: str
) -> dict[str, Any]:
    """The scrape job for the ServiceMonitor's first endpoint, which selects ``service``."""
    meta = monitor["metadata"]
    (endpoint,) = monitor["spec"]["endpoints"]
    ports = {port["name"] for port in service["spec"]["ports"]}
    if endpoint["port"] not in ports:
        raise ValueError(f"ServiceMonitor port {endpoint['port']!r} is not a port of the Service")
    selector = monitor["spec"]["selector"]["matchLabels"]
    labels = service["metadata"].get("labels") or {}
    if any(labels.get(key) != value for key, value in selector.items()):
        raise ValueError(f"ServiceMonitor {meta['name']} does not select Service {labels}")
    return {
        "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/0",
        "honor_labels": bool(endpoint.get("honorLabels", False)),
        "metrics_path": endpoint.get("path", "/metrics"),
        "scrape_interval": endpoint.get("interval", "30s"),
        "scrape_timeout": endpoint.get("scrapeTimeout", "10s"),
        "static_configs": [
            {
                "targets": [target],
                "labels": {
                    "job": service["metadata"]["name"],
                    "namespace": service["metadata"]["namespace"],
                    "service": service["metadata"]["name"],
                    "pod": pod,
                    "endpoint": endpoint["port"],
                },
            }
        ],
    }


class Prometheus:
    """``prometheus`` with one scrape job and the rules of one PrometheusRule."""

    def __init__(self, directory: Path, scrape: dict[str, Any], rules: dict[str, Any]) -> None:
        self.directory = directory
        self.scrape = scrape
        self.rules = rules
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        binary = find("prometheus")
        if binary is None:
            raise RuntimeError(missing("prometheus"))
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "rules.yaml").write_text(yaml.safe_dump(self.rules))
        interval = self.scrape["scrape_interval"]
        # The targets in a file Prometheus watches, as a ServiceMonitor's follow the Service's
        # endpoints: retarget() points the job at a pod that replaced the first one.
        self._write_targets(self.scrape["static_configs"])
        job = {k: v for k, v in self.scrape.items() if k != "static_configs"}
        job["file_sd_configs"] = [{"files": [str(self.targets)], "refresh_interval": "5s"}]
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": ["rules.yaml"],
            "scrape_configs": [job],
        }
        (self.directory / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        command = [
            binary,
            f"--config.file={self.directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        with (self.directory / "prometheus.log").open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_TIMEOUT
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start: {self.log()[-2000:]}")
            time.sleep(0.2)
        return self

    @property
    def targets(self) -> Path:
        return self.directory / "targets.json"

    def retarget(self, target: str, pod: str) -> None:
        """Scrape ``target`` (host:port of ``pod``) from now on, with the job's other labels."""
        (group,) = self.scrape["static_configs"]
        self._write_targets([{"targets": [target], "labels": {**group["labels"], "pod": pod}}])

    def _write_targets(self, groups: list[dict[str, Any]]) -> None:
        partial = self.targets.with_suffix(".tmp")
        partial.write_text(json.dumps(groups))
        partial.replace(self.targets)  # Prometheus never reads half a file

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def log(self) -> str:
        return (self.directory / "prometheus.log").read_text(errors="replace")

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/PATH: its ``data``, or RuntimeError with Prometheus' error."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as error:
            body = json.loads(error.read() or b"{}")
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector."""
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"] if data["resultType"] == "vector" else []
        return result

    def stop(self) -> None:
        if self.process is not None:
            terminate(self.process)
