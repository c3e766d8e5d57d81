"""Our three HTTP servers fuzzed from their own OpenAPI documents (schemathesis): the driver's
driver endpoint, a shuffle server and the cluster partition service, each real and on
loopback. Whatever a request holds, the answer is never a 500 (our bug), an error is JSON that
says what was wrong, and every route but the public ones refuses a request without the token."""

from __future__ import annotations

import http.client
import importlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from finishable.coordinator import CoordinatorHost
from finishable.coordinator.endpoint import DriverEndpoint
from finishable.coordinator.ranges import RangeSplitEnumerator
from tests.partitions.test_service import TOKENS, Service
from tests.shuffle.conftest import ServerProcess

pytestmark = pytest.mark.full

TOKEN = "contract-token"
FUZZ = settings(
    max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)


@schemathesis.serializer("application/vnd.apache.arrow.stream")
def _arrow_stream(context: Any, value: Any) -> bytes:
    """A generated upload body as bytes (most are not Arrow: the server must say so, not fail)."""
    return value if isinstance(value, bytes) else str(value).encode()


class Served:
    """A server under test: where it is and the token it takes."""

    def __init__(self, url: str, token: str, known: dict[str, str] | None = None) -> None:
        self.url = url
        self.token = token
        self.known = known or {}
        """Path values that name something the server has (a coordinator, a namespace): the
        documented requests use them, so that they reach past the lookup."""
        self.answers: dict[int, int] = {}
        """How many answers of each status the fuzzing got."""

    def schema(self) -> Any:
        return schemathesis.openapi.from_url(f"{self.url}/openapi.json")

    def call(self, case: Any) -> None:
        """The case sent with the token; what the module docstring promises of its answer."""
        response = case.call(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"})
        self.answers[response.status_code] = self.answers.get(response.status_code, 0) + 1
        try:
            case.validate_response(response, checks=[not_a_server_error])
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{case.as_curl_command()}") from None
        if response.status_code >= 400:
            answer = response.json()
            assert isinstance(answer.get("error"), str) and answer["error"], answer
            headers = {name.lower(): value for name, value in response.headers.items()}
            assert headers.get("x-request-id"), headers


@pytest.fixture(scope="module")
def coordinator_endpoint() -> Iterator[Served]:
    host = CoordinatorHost("clicks", RangeSplitEnumerator.provider(end=30, split_size=10))
    host.start().result(30)
    endpoint = DriverEndpoint(TOKEN)
    endpoint.start()
    endpoint.add(host)
    try:
        yield Served(endpoint.url, TOKEN, {"name": "clicks"})
    finally:
        endpoint.stop()
        host.close()


@pytest.fixture(scope="module")
def shuffle_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    server = ServerProcess(tmp_path_factory.mktemp("shuffle") / "data", token=TOKEN).start()
    try:
        yield Served(server.url, TOKEN)
    finally:
        server.kill()


@pytest.fixture(scope="module")
def partition_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    work = tmp_path_factory.mktemp("partitions")
    tokens = work / "tokens"
    tokens.mkdir()
    for namespace, token in TOKENS.items():
        (tokens / namespace).write_text(token + "\n")
    running = Service(work / "storage", tokens, work / "port")
    try:
        yield Served(f"http://127.0.0.1:{running.port}", TOKENS["jobs"], {"namespace": "jobs"})
    finally:
        running.process.terminate()
        running.process.communicate(timeout=30)


SERVERS = ["coordinator_endpoint", "shuffle_server", "partition_service"]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("server", SERVERS)
def test_a_server_answers_any_request_it_documents_and_any_malformed_one(
    server: str, mode: GenerationMode, request: pytest.FixtureRequest
) -> None:
    """Requests that fit the document (positive) and requests that break it (negative: wrong
    types, missing fields, bad path values), for every operation."""
    served: Served = request.getfixturevalue(server)
    operations = [result.ok() for result in served.schema().get_all_operations()]
    assert len(operations) >= 6
    for operation in operations:
        names = (
            {p.name for p in operation.path_parameters}
            if mode is GenerationMode.POSITIVE
            else set()
        )
        known = {name: value for name, value in served.known.items() if name in names}

        @FUZZ
        @given(case=operation.as_strategy(generation_mode=mode, path_parameters=known or None))
        def fuzz(case: Any) -> None:
            served.call(case)

        try:
            fuzz()
        except Unsatisfiable:
            # nothing of it to break (GET /v1/health has no parameter, no body)
            assert mode is GenerationMode.NEGATIVE, operation.label
    assert sum(served.answers.values()) >= 10 * len(operations), served.answers
    if mode is GenerationMode.NEGATIVE:
        assert sum(n for status, n in served.answers.items() if 400 <= status < 500)
    assert 200 in served.answers, f"nothing got through: {served.answers}"


@pytest.mark.parametrize("server", SERVERS)
def test_every_route_but_the_public_ones_refuses_a_request_without_the_token(
    server: str, request: pytest.FixtureRequest
) -> None:
    served: Served = request.getfixturevalue(server)
    document = json.loads(_request(served.url, "GET", "/openapi.json")[1])
    checked = 0
    for path, operations in document["paths"].items():
        for method, described in operations.items():
            if not described["security"]:
                continue
            concrete = path
            for parameter in described["parameters"]:
                if parameter["in"] == "path":
                    value = "0" if parameter["schema"].get("type") == "integer" else "jobs"
                    if parameter["schema"].get("enum"):
                        value = parameter["schema"]["enum"][0]
                    concrete = concrete.replace("{" + parameter["name"] + "}", value)
            status, body = _request(served.url, method.upper(), concrete)
            assert status == 401, (method, concrete, status, body)
            assert json.loads(body)["kind"] == "unauthorized"
            checked += 1
    assert checked >= 3


def _request(url: str, method: str, path: str) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(method, path, body=b"{}" if method != "GET" else None)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("server", "module"),
    [
        ("coordinator_endpoint", "finishable.coordinator.openapi"),
        ("shuffle_server", "finishable.shuffle.openapi"),
        ("partition_service", "finishable.partitions.service"),
    ],
)
def test_each_server_publishes_its_modules_document(
    server: str, module: str, request: pytest.FixtureRequest
) -> None:
    """What the fuzzing reads is the document in the code, so the code is what it checks."""
    served: Served = request.getfixturevalue(server)
    status, body = _request(served.url, "GET", "/openapi.json")
    assert status == 200
    assert json.loads(body) == importlib.import_module(module).OPENAPI
