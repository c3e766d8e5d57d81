"""A job as a platform team runs one (examples/streaming/platform.yaml), through the operator.

The page-view counts read their input from S3 (the cluster's object store) with keys that reach
the driver and the executors only as environment from a Secret (``envFrom``), keep their
checkpoints there the same way, and write PostgreSQL (a real server, password logins only from
the pods) with a password from a Secret mounted as a file, through psycopg, which the image does
not have: a virtualenv with it (pip's wheels of the version the tests use) is packed into an
archive in the object store, fetched by the driver with its sha256 and layered over the image's
environment. Every executor has a native sidecar
beside Spark's container. The job is stopped with a savepoint, resumed, and drained once every
input file is read: the table then holds exactly the counts of the input. No secret value is
anywhere it could leak: not in a pod spec, a ConfigMap, the job's status, an Event, the
operator's log or any pod's log.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pyarrow.fs as pafs
import pytest
import yaml

from testcluster import artifacts
from testcluster.client import ROOT, E2ECluster, wait_for
from testcluster.postgres import PostgresServer

sys.path.insert(0, str(ROOT / "examples" / "streaming"))
from clicks import window_counts, write_file

pytestmark = [pytest.mark.e2e, pytest.mark.full]

NAME = "pageviews"
FILES = 6
ROWS = 500
START = 300.0
STOP = 300.0
SIDECAR = "log-shipper"
ROLE, DATABASE = "pipeline", "pageviews"


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer(listen="0.0.0.0") as server:
        yield server


def create_secret(cluster: E2ECluster, name: str, data: dict[str, str]) -> None:
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data}
    response = cluster.api.request("POST", cluster.api.path("secrets"), body=body)
    assert response.status == 201, response.body


def without_credentials(url: str) -> str:
    """The object store's URL as a manifest gives it: the keys come from the environment."""
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def psycopg_env(directory: Path) -> Path:
    """psycopg in a packed virtualenv of this Python (the image's version), as
    docs/dependencies.md builds one: pip's wheels of the version the tests run."""
    wheels = directory / "wheels"
    version = metadata.version("psycopg")
    download = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(wheels)]
    subprocess.run(
        [*download, f"psycopg=={version}", f"psycopg-binary=={version}"], check=True, timeout=600
    )
    env = artifacts.python_env(directory / "env", *sorted(wheels.glob("*.whl")))
    return artifacts.packed(env, directory / "pageviews-env.tar.gz")


def manifest(  # noqa: PLR0917 - the places the example's placeholders take
    cluster: E2ECluster, storage: str, postgres: PostgresServer, host: str, env: str, digest: str
) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((ROOT / "examples/streaming/platform.yaml").read_text())
    spec = body["spec"]
    spec["image"] = cluster.image
    query = urlsplit(storage).query
    base = without_credentials(storage).split("?")[0]
    spec["application"]["args"] = [
        f"--input={base}/input?{query}",
        f"--dsn=host={host} port={postgres.port} user={ROLE} dbname={DATABASE}",
        "--password-file=/secrets/db/password",
        "--unbounded",
        "--files-per-batch=1",
    ]
    spec["application"]["archives"] = [f"{env}#pgenv"]
    spec["application"]["sha256"] = {env: digest}
    spec["checkpointing"]["storage"]["url"] = f"{base}/state?{query}"
    spec["checkpointing"]["interval"] = "2s"
    for component in ("driver", "executor"):
        del spec[component]["nodeSelector"]  # this cluster's nodes have no pools
    spec["executor"].update(instances=1, memory="1g")
    [sidecar] = spec["executor"]["sidecars"]
    sidecar.update(
        image=cluster.image,
        command=["sh", "-c", "echo shipping; while :; do sleep 5; done"],
    )
    del sidecar["args"]
    return body


def table(postgres: PostgresServer) -> Counter[tuple[datetime, str]]:
    counts: Counter[tuple[datetime, str]] = Counter()
    with psycopg.connect(f"{postgres.dsn.rsplit(' ', 1)[0]} dbname={DATABASE}") as conn:
        for start, page, views in conn.execute("SELECT window_start, page, views FROM page_views"):
            assert (start, page) not in counts, f"window {start} {page} written twice"
            counts[start, page] = views
    return counts


def checkpoint(cluster: E2ECluster) -> int:
    return int((cluster.status(NAME).get("lastCheckpoint") or {}).get("id", -1))


def test_secrets_a_sidecar_and_a_stop_with_savepoint_keep_the_counts_exact(
    cluster: E2ECluster, postgres: PostgresServer, tmp_path: Path
) -> None:
    storage = cluster.object_storage(NAME)
    if storage is None:
        pytest.skip("needs object storage that pods reach (the local cluster's)")
    host = parse_qs(urlsplit(storage).query)["endpoint_override"][0].rsplit(":", 1)[0]
    values = {
        "AWS_ACCESS_KEY_ID": "AKIA" + secrets.token_hex(8).upper(),
        "AWS_SECRET_ACCESS_KEY": secrets.token_urlsafe(30),
        "password": secrets.token_urlsafe(18),
    }
    postgres.add_role(ROLE, values["password"], DATABASE)
    create_secret(cluster, "s3-credentials", {k: v for k, v in values.items() if k != "password"})
    create_secret(cluster, "pageviews-db", {"password": values["password"]})

    # the input and the environment, in the object store as the job reads them
    local = tmp_path / "input"
    filesystem, prefix = pafs.FileSystem.from_uri(storage)
    for index in range(FILES):
        written = write_file(local, index, ROWS)
        with filesystem.open_output_stream(f"{prefix}/input/{written.name}") as out:
            out.write(written.read_bytes())
    archive = psycopg_env(tmp_path / "deps")
    with filesystem.open_output_stream(f"{prefix}/deps/{archive.name}") as out:
        out.write(archive.read_bytes())
    env_url = without_credentials(storage).split("?")[0] + f"/deps/{archive.name}"
    env_url += "?" + urlsplit(storage).query

    seen: dict[str, dict[str, Any]] = {}  # every pod of the job, as the API served it

    def keep_pods() -> None:
        for pod in cluster.objects("pods", f"finishable.dev/job={NAME}"):
            seen[pod["metadata"]["name"]] = pod

    body = manifest(cluster, storage, postgres, host, env_url, artifacts.sha256(archive))
    response = cluster.apply(body)
    assert response.status == 201, response.body
    cluster.wait_phase(NAME, "Running", START)
    wait_for(
        lambda: checkpoint(cluster) >= 1,
        "a first checkpoint",
        START,
        on_fail=lambda: cluster.logs(NAME),
    )

    # the sidecar runs beside Spark's container, as a native sidecar
    def sidecar_running() -> list[dict[str, Any]] | None:
        pods = [
            p
            for p in cluster.executor_pods(NAME)
            if (p.get("status") or {}).get("phase") == "Running"
        ]
        statuses = [s for p in pods for s in (p["status"].get("initContainerStatuses") or [])]
        up = [s for s in statuses if s["name"] == SIDECAR and "running" in (s.get("state") or {})]
        return pods if pods and len(up) == len(pods) else None

    executors = wait_for(
        sidecar_running, "the executors' sidecar running", START, on_fail=lambda: cluster.logs(NAME)
    )
    for pod in executors:
        [init] = [c for c in pod["spec"]["initContainers"] if c["name"] == SIDECAR]
        assert init["restartPolicy"] == "Always"
        assert {"secretRef": {"name": "s3-credentials"}} in pod["spec"]["containers"][0]["envFrom"]
    keep_pods()

    # a stop with savepoint, and the resume from it
    cluster.set_state(NAME, "Suspended")
    stopped = cluster.wait_phase(NAME, "Suspended", STOP)
    assert stopped["savepoint"]["location"].startswith("s3://"), stopped["savepoint"]
    keep_pods()
    cluster.set_state(NAME, "Running")
    resumed = cluster.wait_phase(NAME, "Running", START)
    assert resumed["restoreFrom"] == stopped["savepoint"]["location"], resumed
    wait_for(
        lambda: cluster.status(NAME)["coordinator"]["splitsFinished"] >= FILES,
        "every input file read",
        START,
        on_fail=lambda: cluster.logs(NAME),
    )
    keep_pods()
    cluster.set_state(NAME, "Finished")
    finished = cluster.wait_phase(NAME, "Finished", STOP)
    keep_pods()

    # exactly the input's counts, every window (the drain fired the open ones)
    truth = window_counts(range(FILES), ROWS)
    assert table(postgres) == truth

    # no secret value anywhere it could leak
    listing = {
        plural: cluster.api.request("GET", cluster.api.path(plural)).body
        for plural in ("configmaps", "events", "pods")
    }
    places = {
        "pod specs": json.dumps(seen) + json.dumps(listing["pods"]),
        "ConfigMaps": json.dumps(listing["configmaps"]),
        "the job's status": json.dumps(finished),
        "Events": json.dumps(listing["events"]),
        "the operator's log": getattr(cluster, "operator_logs", lambda: "")(),
        "the pods' logs": "".join(cluster.pod_log(pod) for pod in seen),
    }
    assert "KubernetesExecutorBackend" in places["the pods' logs"], "the logs were read"
    for what, text in places.items():
        for key, value in values.items():
            assert value not in text, f"the secret {key} is in {what}"
    cluster.delete(NAME)
