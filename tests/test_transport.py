"""The HTTP transport against a real local server: retries, final answers, keep-alive, pickling."""

from __future__ import annotations

import json
import pickle
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from finishable.transport import (
    MISSING_BEARER,
    RETRY_NONE,
    UNTIL_DEADLINE,
    WRONG_BEARER,
    Exchange,
    HttpAnswerError,
    Policy,
    Transport,
    Unreachable,
    bearer_problem,
)
from testcluster.network import free_port

pytestmark = pytest.mark.quick

TOKEN = "transport-token"
FAST = Policy(backoff=0.001, max_backoff=0.01, deadline=30.0)
"""Small backoff so the tests are quick; a generous deadline so a busy machine does not matter."""


@dataclass
class Answer:
    status: int
    body: bytes
    close: bool = False
    """Close the connection after the answer without saying so (a server timing out idlers)."""


@dataclass
class Script:
    """The answers the server gives, in order (the last one repeats), and what it saw."""

    answers: list[Answer] = field(default_factory=list)
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    connections: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, status: int, body: object, *, close: bool = False) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.answers.append(Answer(status, raw, close))


class Server:
    def __init__(self, script: Script) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive

            def setup(self) -> None:
                super().setup()
                with script.lock:
                    script.connections += 1

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Transfer-Encoding") == "chunked":
                    body = self._chunked()
                with script.lock:
                    script.requests.append((self.command, self.path, dict(self.headers), body))
                    answer = script.answers.pop(0) if len(script.answers) > 1 else script.answers[0]
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)
                self.close_connection = answer.close

            def _chunked(self) -> bytes:
                body = b""
                while size := int(self.rfile.readline().strip(), 16):
                    body += self.rfile.read(size)
                    self.rfile.readline()
                self.rfile.readline()
                return body

            do_GET = do_POST = do_PUT = _serve  # noqa: N815 - http.server's names

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
def server(script: Script) -> Iterator[Server]:
    running = Server(script)
    yield running
    running.stop()


def test_a_503_is_retried_then_the_answer_is_decoded(script: Script, server: Server) -> None:
    script.answer(503, {"error": "busy"})
    script.answer(200, {"ok": True})
    transport = Transport(server.url, TOKEN, FAST)
    assert transport.request_json("POST", "/v1/thing", {"n": 1}) == {"ok": True}
    assert [(method, path, body) for method, path, _, body in script.requests] == [
        ("POST", "/v1/thing", b'{"n":1}'),
        ("POST", "/v1/thing", b'{"n":1}'),
    ]


def test_a_4xx_is_final(script: Script, server: Server) -> None:
    script.answer(409, {"error": "taken", "kind": "conflict"})
    script.answer(200, {})
    transport = Transport(server.url, TOKEN, FAST)
    with pytest.raises(HttpAnswerError) as caught:
        transport.request_json("GET", "/v1/thing")
    assert caught.value.status == 409
    assert caught.value.payload == {"error": "taken", "kind": "conflict"}
    assert caught.value.message == "taken"
    assert len(script.requests) == 1


def test_a_retryable_status_that_says_it_is_not_retryable_is_final(
    script: Script, server: Server
) -> None:
    script.answer(503, {"error": "closed for good", "retryable": False})
    with pytest.raises(HttpAnswerError, match="503: closed for good"):
        Transport(server.url, TOKEN, FAST).request_json("GET", "/x")
    assert len(script.requests) == 1


def test_a_client_that_retries_no_status_takes_a_503_as_final(
    script: Script, server: Server
) -> None:
    script.answer(503, {"error": "busy"})
    script.answer(200, {})
    transport = Transport(server.url, TOKEN, replace(FAST, retry_statuses=RETRY_NONE))
    with pytest.raises(HttpAnswerError) as caught:
        transport.request_json("POST", "/x", {})
    assert caught.value.status == 503
    assert len(script.requests) == 1


def test_an_error_that_is_not_json_is_quoted(script: Script, server: Server) -> None:
    script.answer(500, b"<html>" + b"x" * 500)
    with pytest.raises(HttpAnswerError) as caught:
        Transport(server.url, TOKEN, Policy(retry_statuses=RETRY_NONE)).request_json("GET", "/")
    assert caught.value.payload == {"error": "<html>" + "x" * 194, "kind": "not-json"}


def test_retries_of_a_5xx_run_out_as_unreachable(script: Script, server: Server) -> None:
    script.answer(502, {"error": "bad gateway"})
    with pytest.raises(Unreachable, match="failed 3 time") as caught:
        Transport(server.url, TOKEN, replace(FAST, retries=2)).request_json("GET", "/x")
    assert isinstance(caught.value.problem, HttpAnswerError)
    assert caught.value.problem.status == 502
    assert len(script.requests) == 3


def test_a_refused_connection_is_retried_until_the_deadline() -> None:
    patience = Policy(retries=UNTIL_DEADLINE, backoff=0.01, max_backoff=0.05, deadline=2.0)
    transport = Transport(f"http://127.0.0.1:{free_port()}", TOKEN, patience)
    with pytest.raises(Unreachable) as caught:
        transport.request_json("GET", "/x")
    assert isinstance(caught.value.problem, ConnectionRefusedError)
    assert caught.value.attempts >= 2


def test_the_bearer_token_and_the_path_prefix_are_sent(script: Script, server: Server) -> None:
    script.answer(200, {})
    Transport(f"{server.url}/base/", TOKEN).request_json("GET", "/v1/x")
    ((_, path, headers, _),) = script.requests
    assert path == "/base/v1/x"
    assert headers["Authorization"] == f"Bearer {TOKEN}"


def test_one_kept_alive_connection_per_thread(script: Script, server: Server) -> None:
    script.answer(200, {})
    transport = Transport(server.url, TOKEN)
    transport.request_json("GET", "/a")
    transport.request_json("GET", "/b")
    assert script.connections == 1
    other = threading.Thread(target=transport.request_json, args=("GET", "/c"))
    other.start()
    other.join()
    transport.request_json("GET", "/d")
    assert script.connections == 2
    assert len(script.requests) == 4


def test_a_connection_the_server_closed_is_reopened_at_once(script: Script, server: Server) -> None:
    script.answer(200, {"n": 1}, close=True)  # closed behind the client's back
    script.answer(200, {"n": 2})
    transport = Transport(server.url, TOKEN, Policy(retries=0))  # no retry but the reconnection
    assert transport.request_json("GET", "/a") == {"n": 1}
    assert transport.request_json("GET", "/b") == {"n": 2}
    assert script.connections == 2
    assert [path for _, path, _, _ in script.requests] == ["/a", "/b"]


def test_an_exchange_streams_a_body_through_the_same_loop(script: Script, server: Server) -> None:
    script.answer(503, {"error": "busy"})
    script.answer(200, {"stored": 6})
    transport = Transport(server.url, TOKEN, FAST)

    def upload(exchange: Exchange) -> Any:
        chunks = iter([b"abc", b"def"])
        response = exchange.send(
            "PUT", "/blob", chunks, {"Transfer-Encoding": "chunked"}, chunked=True
        )
        return json.loads(response.read())

    assert transport.exchange("PUT", "/blob", upload) == {"stored": 6}
    assert [body for _, _, _, body in script.requests] == [b"abcdef", b"abcdef"]


def test_a_hook_that_fails_passes_its_error_through_and_drops_the_connection(
    script: Script, server: Server
) -> None:
    script.answer(200, {})
    transport = Transport(server.url, TOKEN, FAST)
    transport.request_json("GET", "/a")

    def broken(exchange: Exchange) -> None:
        exchange.send("GET", "/b").read()
        raise LookupError("the answer made no sense")

    with pytest.raises(LookupError, match="no sense"):
        transport.exchange("GET", "/b", broken)
    assert len(script.requests) == 2  # not retried
    transport.request_json("GET", "/c")
    assert script.connections == 2


def test_a_transport_pickles_without_its_connection(script: Script, server: Server) -> None:
    script.answer(200, {"ok": True})
    transport = Transport(server.url, TOKEN, Policy(retries=3, retry_statuses=RETRY_NONE))
    transport.request_json("GET", "/a")  # holds a connection now
    copy = pickle.loads(pickle.dumps(transport))
    assert (copy.url, copy.policy) == (server.url, transport.policy)
    assert copy.request_json("GET", "/b") == {"ok": True}
    assert script.requests[-1][2]["Authorization"] == f"Bearer {TOKEN}"
    assert script.connections == 2


def test_the_errors_pickle() -> None:
    answer = pickle.loads(pickle.dumps(HttpAnswerError(404, {"error": "gone"})))
    assert (answer.status, answer.payload, str(answer)) == (
        404,
        {"error": "gone"},
        "answered 404: gone",
    )
    gone = pickle.loads(pickle.dumps(Unreachable("GET / failed", ConnectionRefusedError(), 3)))
    assert (str(gone), gone.attempts, type(gone.problem)) == (
        "GET / failed",
        3,
        ConnectionRefusedError,
    )


def test_a_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(ValueError, match=r"not an http\(s\) URL of the thing"):
        Transport("ftp://host/x", TOKEN, what="the thing")


@pytest.mark.parametrize(
    ("header", "problem"),
    [
        (f"Bearer {TOKEN}", None),
        (f"bearer  {TOKEN} ", None),
        ("", MISSING_BEARER),
        ("Bearer ", MISSING_BEARER),
        (f"Basic {TOKEN}", MISSING_BEARER),
        ("Bearer another-token", WRONG_BEARER),
    ],
)
def test_the_servers_check_the_header_the_transport_sends(header: str, problem: str | None) -> None:
    assert bearer_problem(header, TOKEN.encode()) == problem
