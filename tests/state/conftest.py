"""Real servers for the state contract tests, started once per session.

* S3: moto's ``ThreadedMotoServer`` on a free loopback port, spoken to by ``pyarrow.fs`` over HTTP;
* Kubernetes: kmock's emulator, extended in ``testcluster.apiserver``, served over HTTP on
  loopback and checking a bearer token;
* local: a temporary directory.

Every test gets a fresh, isolated backend (its own directory, S3 prefix or job name), as a
``BackendCase`` that also carries a JSON spec to reopen the same backend in a child process.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from finishable.state.backends import ObjectBackend
from testcluster.apiserver.emulator import EmulatorServer
from testcluster.network import free_port
from tests.conftest import TOKEN

from .specs import BackendSpec, open_spec

BUCKET = "finishable-state"
NAMESPACE = "jobs"
BACKENDS = ("local", "s3", "configmap")


@dataclass
class S3Server:
    endpoint: str  # host:port

    def url(self, prefix: str) -> str:
        return (
            f"s3://{BUCKET}/{prefix}?endpoint_override={self.endpoint}&scheme=http&region=us-east-1"
        )


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    # Child processes (the SIGKILL test) inherit these, as a driver inherits a secretRef's keys.
    os.environ["AWS_ACCESS_KEY_ID"] = "testing"
    os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        import boto3

        boto3.client(
            "s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1"
        ).create_bucket(Bucket=BUCKET)
        yield S3Server(f"127.0.0.1:{port}")
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@dataclass
class BackendCase:
    kind: str
    spec: BackendSpec
    backend: ObjectBackend

    def reopen(self) -> ObjectBackend:
        return open_spec(self.spec)


def make_spec(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> BackendSpec:
    unique = uuid.uuid4().hex[:8]
    if kind == "local":
        return {"kind": "local", "path": str(tmp_path / "state")}
    if kind == "s3":
        server: S3Server = request.getfixturevalue("s3_server")
        return {"kind": "s3", "url": server.url(f"t-{unique}")}
    k8s: EmulatorServer = request.getfixturevalue("k8s_server")
    return {
        "kind": "configmap",
        "url": k8s.url,
        "token": TOKEN,
        "namespace": NAMESPACE,
        "job": f"job-{unique}",
    }


@pytest.fixture(params=BACKENDS)
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendCase]:
    spec = make_spec(request.param, tmp_path, request)
    backend = open_spec(spec)
    try:
        yield BackendCase(request.param, spec, backend)
    finally:
        backend.close()
