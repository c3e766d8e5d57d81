"""`finishable partition-service` as a real process: FLIP-67's REST API over a storage."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from finishable.partitions.catalog import PartitionCatalog
from finishable.partitions.manifest import now_utc
from tests.partitions.support import promote

pytestmark = pytest.mark.quick

ROOT = Path(__file__).resolve().parents[2]
TOKENS = {"jobs": "jobs-token", "other": "other-token"}
T = TypeVar("T")
CLI = [sys.executable, "-m", "finishable.cli"]
COMMAND = (*CLI, "partition-service")


class Service:
    def __init__(self, storage: Path, tokens: Path, port_file: Path) -> None:
        self.catalog = PartitionCatalog(str(storage))
        self.process = subprocess.Popen(
            [
                *COMMAND,
                *("--storage", str(storage), "--tokens-dir", str(tokens), "--host", "127.0.0.1"),
                *("--port", "0", "--port-file", str(port_file), "--expire-interval", "0.2"),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.port = wait_for("the port file", lambda: _port(port_file), self.process)

    def call(
        self, method: str, path: str, *, token: str | None = TOKENS["jobs"]
    ) -> tuple[int, Any]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            connection.request(method, path, headers=headers)
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        is_json = response.getheader("Content-Type", "").startswith("application/json")
        return response.status, json.loads(body) if is_json else body.decode()


def _port(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def wait_for(
    what: str, probe: Callable[[], T | None], process: subprocess.Popen[str], timeout: float = 60
) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        assert process.poll() is None, f"the service ended before {what}: {process.communicate()}"
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    for namespace, token in TOKENS.items():
        (tokens / namespace).write_text(token + "\n")
    running = Service(tmp_path / "partitions", tokens, tmp_path / "port")
    yield running
    running.process.terminate()
    running.process.communicate(timeout=30)


BASE = "/v1/namespaces/jobs/partitions"


def test_requests_need_the_token_of_the_namespace(service: Service) -> None:
    assert service.call("GET", BASE, token=None)[0] == 401
    status, answer = service.call("GET", BASE, token="nonsense")
    assert (status, answer["error"]) == (401, "wrong bearer token")
    status, answer = service.call("GET", BASE, token=TOKENS["other"])
    assert status == 403 and "not valid for namespace 'jobs'" in answer["error"]
    assert service.call("GET", "/v1/namespaces/nobody/partitions")[0] == 403
    assert service.call("GET", "/healthz", token=None)[0] == 200
    status, spec = service.call("GET", "/openapi.json", token=None)
    assert status == 200 and spec["openapi"].startswith("3.")
    assert BASE.replace("jobs", "{namespace}") + "/{id}" in spec["paths"]


def test_list_and_get_describe_the_namespace_s_partitions(service: Service) -> None:
    mine = promote(service.catalog)
    theirs = promote(service.catalog, namespace="other", uid="uid-9")
    status, answer = service.call("GET", BASE)
    assert status == 200
    [listed] = answer["partitions"]
    assert (listed["id"], listed["job-name"], listed["job-id"]) == (mine.id, "paid-totals", "uid-1")
    assert (listed["rows"], listed["bytes"], listed["state"]) == (
        mine.rows,
        mine.bytes,
        "Available",
    )
    status, answer = service.call("GET", f"{BASE}/{mine.id}")
    assert status == 200
    [described] = answer["partitions"]
    assert [d["partition"] for d in described["descriptors"]] == [0, 1, 2]
    assert sum(d["rows"] for d in described["descriptors"]) == mine.rows
    assert all(Path(d["url"]).is_file() for d in described["descriptors"])
    assert described["readers"] == []
    status, answer = service.call("GET", f"{BASE}/{theirs.id}")  # in the other namespace
    assert status == 404 and theirs.id in answer["error"]
    assert service.call("GET", f"{BASE}/cp-unknown")[0] == 404


def test_delete_is_accepted_completed_and_frees_the_storage(service: Service) -> None:
    manifest = promote(service.catalog)
    status, answer = service.call("DELETE", f"{BASE}/{manifest.id}")
    assert status == 202
    request = answer["request-id"]

    def completed() -> dict[str, Any] | None:
        code, record = service.call("GET", f"{BASE}/delete-requests/{request}")
        assert code == 200, record
        return record if record["status"] != "IN_PROGRESS" else None

    record = wait_for("the delete request", completed, service.process)
    assert (record["status"], record["partition"]) == ("COMPLETED", manifest.id)
    assert service.catalog.backend.list(f"{manifest.id}/") == []
    assert service.call("GET", f"{BASE}/{manifest.id}")[0] == 404
    assert service.call("DELETE", f"{BASE}/{manifest.id}")[0] == 404
    other = "/v1/namespaces/other/partitions/delete-requests/" + request
    assert service.call("GET", other, token=TOKENS["other"])[0] == 404


def test_a_request_the_service_fails_on_is_answered_in_json(service: Service) -> None:
    damaged = "0123abcd" * 4  # a delete request's id, its record cut short
    service.catalog.backend.put(f"delete-requests/{damaged}.json", b'{"status": "IN_PRO')
    status, answer = service.call("GET", f"{BASE}/delete-requests/{damaged}")
    assert status == 500 and "log has the traceback" in answer["error"]
    assert service.call("GET", f"{BASE}")[0] == 200  # and it goes on serving


def test_a_partition_being_read_is_not_deleted(service: Service) -> None:
    manifest = promote(service.catalog)
    service.catalog.hold(manifest.id, "consumer-r1", now_utc())
    status, answer = service.call("DELETE", f"{BASE}/{manifest.id}")
    assert status == 409 and "consumer-r1" in answer["error"]
    assert service.call("GET", f"{BASE}/{manifest.id}")[1]["partitions"][0]["readers"] == [
        "consumer-r1"
    ]
    service.catalog.hold(manifest.id, "consumer-r1", now_utc() - timedelta(minutes=5))  # crashed
    assert service.call("DELETE", f"{BASE}/{manifest.id}")[0] == 202


def test_lost_storage_and_an_expired_time_to_live_release_as_the_seed_says(
    service: Service,
) -> None:
    lost = promote(service.catalog, dataset="lost")
    service.catalog.backend.delete(f"{lost.id}/{lost.parts[0].file}")
    expiring = promote(service.catalog, dataset="short", ttl=timedelta(seconds=1))
    states = {p["id"]: p["state"] for p in service.call("GET", BASE)[1]["partitions"]}
    assert states[lost.id] == "Lost"

    def expired() -> bool | None:
        return True if not service.catalog.backend.list(f"{expiring.id}/") else None

    wait_for("the expiry", expired, service.process)
    assert [p["id"] for p in service.call("GET", BASE)[1]["partitions"]] == [lost.id]
    status, metrics = service.call("GET", "/metrics", token=None)
    assert status == 200
    assert 'finishable_cluster_partitions{namespace="jobs",state="Lost"} 1.0' in metrics
    assert 'finishable_cluster_partition_releases_total{reason="expired"} 1.0' in metrics


def test_a_service_without_tokens_does_not_start(tmp_path: Path) -> None:
    done = subprocess.run(
        [*COMMAND, "--storage", str(tmp_path), "--tokens-dir", str(tmp_path / "missing")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "--tokens-dir" in done.stderr and "Traceback" not in done.stderr


def test_the_cli_lists_gets_and_deletes_through_the_service(
    service: Service, tmp_path: Path
) -> None:
    manifest = promote(service.catalog)
    token_file = tmp_path / "token"
    token_file.write_text(TOKENS["jobs"])
    server = f"http://127.0.0.1:{service.port}"
    os.environ.pop("FINISHABLE_PARTITION_TOKEN", None)

    def cli(
        *args: str, token: Path = token_file, at: str = server
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLI, "partitions", *args, "--server", at, "--token-file", str(token)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    listed = cli("list", "--namespace", "jobs")
    assert listed.returncode == 0, listed.stderr
    assert manifest.id in listed.stdout and "Available" in listed.stdout
    got = cli("get", "paid-totals/totals", "--json", "--namespace", "jobs")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["rows"] == manifest.rows
    wrong = tmp_path / "wrong"
    wrong.write_text(TOKENS["other"])
    refused = cli("list", "--namespace", "jobs", token=wrong)
    assert refused.returncode == 1 and "403" in refused.stderr and "Traceback" not in refused.stderr
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{closed.getsockname()[1]}"
    down = cli("list", "--namespace", "jobs", at=nowhere)
    assert down.returncode == 1 and "Traceback" not in down.stderr
    assert down.stderr.startswith(f"cannot reach {nowhere}/v1/namespaces/jobs/partitions: ")
    deleted = cli("delete", "totals", "--namespace", "jobs")
    assert deleted.returncode == 0 and f"deleted cluster partition {manifest.id}" in deleted.stdout
    assert service.catalog.list() == []
    missing = cli("get", manifest.id, "--namespace", "jobs")
    assert missing.returncode == 1 and "404" in missing.stderr
