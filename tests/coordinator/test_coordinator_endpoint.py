"""The endpoint over real HTTP: authentication, routing, errors, and the full reader flow."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from finishable.coordinator import (
    AddSplits,
    CoordinatorClient,
    CoordinatorHost,
    CoordinatorRequestError,
    NoMoreSplits,
    RangeSplit,
    RequestSplit,
)
from finishable.coordinator.endpoint import DriverEndpoint
from finishable.coordinator.ranges import RangeSplitEnumerator

from ._helpers import TIMEOUT, TOKEN
from .conftest import HostFactory

pytestmark = pytest.mark.quick


@pytest.fixture
def served(make_host: HostFactory, endpoint: DriverEndpoint) -> CoordinatorHost:
    host = make_host(RangeSplitEnumerator.provider(end=30, split_size=10), "clicks")
    endpoint.add(host)
    endpoint.add(make_host(RangeSplitEnumerator.provider(split_size=5), "views"))
    return host


def raw(
    endpoint: DriverEndpoint,
    method: str,
    path: str,
    body: bytes | dict[str, Any] | None = None,
    token: str | None = TOKEN,
) -> tuple[int, dict[str, Any], http.client.HTTPResponse]:
    connection = http.client.HTTPConnection("127.0.0.1", endpoint.port, timeout=TIMEOUT)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    connection.request(method, path, body=data, headers=headers)
    response = connection.getresponse()
    payload = json.loads(response.read() or b"{}")
    connection.close()
    return response.status, payload, response


EVENTS = "/v1/coordinators/clicks/subtasks/0/attempts/0/events"
READY = "/v1/coordinators/clicks/subtasks/0/attempts/0/ready"


def test_a_reader_flow_end_to_end(served: CoordinatorHost, endpoint: DriverEndpoint) -> None:
    client = CoordinatorClient(endpoint.url, TOKEN)
    client.attempt_ready("clicks", 0, 0)
    client.attempt_ready("clicks", 1, 0)
    assert client.request_splits("clicks", 0, 0) == [AddSplits((RangeSplit(0, 10),))]
    assert client.request_splits("clicks", 1, 0, 5) == [
        AddSplits((RangeSplit(10, 20), RangeSplit(20, 30)))
    ]
    assert client.request_splits("clicks", 0, 0) == [NoMoreSplits()]
    client.finish_splits("clicks", 0, 0, ["r-0-10"])
    client.attempt_failed("clicks", 1, 0, "executor lost")
    assert client.progress("clicks")["progress"] == {
        "bounded": True,
        "discovery_complete": True,
        "splits_total": 3,
        "splits_discovered": 3,
        "splits_pending": 2,
        "splits_assigned": 0,
        "splits_finished": 1,
        "fully_finished": False,
        "backlog": 2,
        "consumed": 1,
        "backlog_unit": "splits",
    }
    summary = client.progress()["coordinators"]
    assert sorted(summary) == ["clicks", "views"]
    assert summary["views"]["splits_total"] is None and summary["views"]["bounded"] is False
    assert client.health()


@pytest.mark.parametrize("token", [None, "wrong-token", f"{TOKEN}x", ""])
@pytest.mark.parametrize(
    "call",
    [
        ("POST", READY, {}),
        ("POST", EVENTS, {"event": RequestSplit(0, 0).to_json()}),
        ("POST", "/v1/coordinators/clicks/subtasks/0/attempts/0/failed", {}),
        ("GET", "/v1/coordinators", None),
        ("GET", "/v1/coordinators/nope", None),
    ],
)
def test_a_missing_or_wrong_token_gets_401_and_changes_nothing(
    served: CoordinatorHost,
    endpoint: DriverEndpoint,
    token: str | None,
    call: tuple[str, str, dict[str, Any] | None],
) -> None:
    method, path, body = call
    before = served.progress().result(TIMEOUT)
    status, payload, response = raw(endpoint, method, path, body, token)
    assert status == 401 and payload["kind"] == "unauthorized"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert served.progress().result(TIMEOUT) == before
    assert served.live_attempts().result(TIMEOUT) == {}


def test_a_token_with_another_scheme_is_refused(
    served: CoordinatorHost, endpoint: DriverEndpoint
) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", endpoint.port, timeout=TIMEOUT)
    connection.request("POST", READY, body=b"{}", headers={"Authorization": f"Basic {TOKEN}"})
    assert connection.getresponse().status == 401
    assert served.live_attempts().result(TIMEOUT) == {}


def test_health_needs_no_token(endpoint: DriverEndpoint) -> None:
    assert raw(endpoint, "GET", "/v1/health", token=None)[:2] == (200, {"status": "ok"})


def test_an_unknown_coordinator_is_404_with_the_served_names(
    served: CoordinatorHost, endpoint: DriverEndpoint
) -> None:
    status, payload, _ = raw(endpoint, "POST", READY.replace("clicks", "orders"), {})
    assert status == 404 and payload["kind"] == "unknown-coordinator"
    assert "'orders'" in payload["error"] and "clicks, views" in payload["error"]
    assert raw(endpoint, "GET", "/v1/coordinators/orders")[0] == 404
    status, payload, _ = raw(endpoint, "GET", "/v1/elsewhere")
    assert status == 404 and "no route GET /v1/elsewhere" in payload["error"]
    assert raw(endpoint, "GET", READY)[0] == 405


@pytest.mark.parametrize(
    ("path", "body", "fragment"),
    [
        (EVENTS, b"{not json", "the body is not JSON"),
        (EVENTS, b"[1, 2]", "body: expected a JSON object"),
        (EVENTS, {}, "body.event: missing"),
        (EVENTS, {"event": {"type": "Teleport"}}, "body.event.type: unknown event type"),
        (
            EVENTS,
            {"event": {"type": "RequestSplit", "subtask": "0", "attempt": 0}},
            "body.event.subtask: expected an integer",
        ),
        (
            EVENTS,
            {"event": RequestSplit(0, 0).to_json(), "request_id": 7},
            "body.request_id: expected a string",
        ),
        (
            EVENTS,
            {"event": RequestSplit(0, 0).to_json(), "request_id": "x" * 201},
            "body.request_id: must have 1 to 200",
        ),
        (EVENTS.replace("subtasks/0", "subtasks/zero"), {}, "subtask in the path"),
        (EVENTS.replace("attempts/0", "attempts/-1"), {}, "attempt in the path"),
        (
            "/v1/coordinators/clicks/subtasks/0/attempts/0/failed",
            {"reason": 5},
            "body.reason: expected a string",
        ),
    ],
)
def test_a_malformed_request_is_400_naming_the_problem(
    served: CoordinatorHost,
    endpoint: DriverEndpoint,
    path: str,
    body: bytes | dict[str, Any],
    fragment: str,
) -> None:
    raw(endpoint, "POST", READY, {})
    before = served.progress().result(TIMEOUT)
    status, payload, _ = raw(endpoint, "POST", path, body)
    assert status == 400 and payload["kind"] == "bad-request"
    assert fragment in payload["error"]
    assert served.progress().result(TIMEOUT) == before


def test_order_violations_are_409_with_rule_subtask_and_attempt(
    served: CoordinatorHost, endpoint: DriverEndpoint
) -> None:
    client = CoordinatorClient(endpoint.url, TOKEN, retries=0)
    with pytest.raises(CoordinatorRequestError) as caught:
        client.request_splits("clicks", 3, 2)
    error = caught.value
    assert error.status == 409 and error.kind == "order-violation"
    assert (error.rule, error.subtask, error.attempt) == ("event-from-attempt-never-ready", 3, 2)
    client.attempt_ready("clicks", 3, 2)
    with pytest.raises(CoordinatorRequestError) as caught:
        client.attempt_ready("clicks", 3, 2)
    assert caught.value.rule == "attempt-ready-twice"
    client.request_splits("clicks", 3, 2)
    with pytest.raises(CoordinatorRequestError) as caught:
        client.finish_splits("clicks", 3, 2, ["r-10-20"])
    assert caught.value.status == 409 and caught.value.kind == "rejected"
    assert "is pending" in str(caught.value)


def test_a_failed_coordinator_is_500_and_not_retried(
    served: CoordinatorHost, endpoint: DriverEndpoint
) -> None:
    def explode(coordinator: object) -> None:
        coordinator.context.fail_job(RuntimeError("source gone"))  # type: ignore[attr-defined]

    served.inspect(explode).result(TIMEOUT)
    client = CoordinatorClient(endpoint.url, TOKEN, retries=5, backoff=5.0)
    with pytest.raises(CoordinatorRequestError) as caught:
        client.attempt_ready("clicks", 0, 0)  # would take > 5 s if it were retried
    assert caught.value.status == 500 and caught.value.payload["retryable"] is False
    assert "source gone" in str(caught.value)
    assert client.progress("clicks")["failed"] == "source gone"


def test_the_endpoint_picks_a_free_port_and_serves_on_its_own_thread(
    make_host: HostFactory,
) -> None:
    first, second = DriverEndpoint(TOKEN), DriverEndpoint(TOKEN)
    try:
        assert first.start() != second.start()
        assert first.url.startswith("http://127.0.0.1:") and first.port > 0
        first.stop()
        first.start()  # an endpoint can be started again after a stop
        assert CoordinatorClient(first.url, TOKEN).progress() == {"coordinators": {}}
    finally:
        first.stop()
        second.stop()
    with pytest.raises(ValueError, match="non-empty token"):
        DriverEndpoint("")
    host = make_host(RangeSplitEnumerator.provider(end=1, split_size=1), "dup")
    with DriverEndpoint(TOKEN) as served:
        served.add(host)
        with pytest.raises(ValueError, match="already served"):
            served.add(host)
        assert served.remove("dup") is host and served.names() == []
