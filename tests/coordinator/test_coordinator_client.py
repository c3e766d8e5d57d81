"""The client: retries with backoff, request ids that make retries safe, restarts, pickling."""

from __future__ import annotations

import contextlib
import pickle
import socket
import threading
import time

import pytest

from finishable.coordinator import (
    AddSplits,
    CoordinatorClient,
    CoordinatorHost,
    CoordinatorUnavailable,
    RangeSplit,
    RequestSplit,
)
from finishable.coordinator.endpoint import DriverEndpoint
from finishable.coordinator.ranges import RangeSplitEnumerator

from ._helpers import TIMEOUT, TOKEN
from .conftest import HostFactory

pytestmark = pytest.mark.quick


class LossyProxy:
    """A TCP proxy that forwards requests but drops the first ``drops`` responses on the floor,
    closing the connection: the request took effect, the client never hears of it."""

    def __init__(self, target_port: int, drops: int) -> None:
        self.target_port = target_port
        self.drops = drops
        self.requests = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, responses: bool) -> None:
        try:
            while data := source.recv(65536):
                with self._lock:
                    if not responses and data.startswith((b"POST ", b"GET ")):
                        self.requests += 1
                    drop = responses and self.drops > 0
                    if drop:
                        self.drops -= 1
                if drop:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()

    def close(self) -> None:
        self._stopped = True
        self._server.close()


@pytest.fixture
def source(make_host: HostFactory, endpoint: DriverEndpoint) -> CoordinatorHost:
    host = make_host(RangeSplitEnumerator.provider(end=100, split_size=10), "src")
    endpoint.add(host)
    return host


def assigned(host: CoordinatorHost) -> int:
    progress = host.progress().result(TIMEOUT)
    assert progress is not None
    return progress.splits_assigned


def test_a_retried_request_id_is_answered_identically(
    source: CoordinatorHost, endpoint: DriverEndpoint
) -> None:
    client = CoordinatorClient(endpoint.url, TOKEN)
    client.attempt_ready("src", 0, 0)
    first = client.send_event("src", 0, 0, RequestSplit(0, 0, 2), request_id="abc")
    again = client.send_event("src", 0, 0, RequestSplit(0, 0, 2), request_id="abc")
    assert first == again == [AddSplits((RangeSplit(0, 10), RangeSplit(10, 20)))]
    assert assigned(source) == 2


def test_a_lost_response_is_retried_without_a_second_assignment(
    source: CoordinatorHost, endpoint: DriverEndpoint
) -> None:
    CoordinatorClient(endpoint.url, TOKEN).attempt_ready("src", 0, 0)
    proxy = LossyProxy(endpoint.port, drops=1)
    try:
        client = CoordinatorClient(f"http://127.0.0.1:{proxy.port}", TOKEN, backoff=0.01)
        reply = client.request_splits("src", 0, 0)
        assert proxy.requests == 2  # the server saw the request twice...
        assert reply == [AddSplits((RangeSplit(0, 10),))]
        assert assigned(source) == 1  # ...and assigned one split
        assert client.request_splits("src", 0, 0) == [AddSplits((RangeSplit(10, 20),))]
    finally:
        proxy.close()


def test_the_client_rides_out_an_endpoint_restart_on_the_same_port(
    source: CoordinatorHost, endpoint: DriverEndpoint
) -> None:
    client = CoordinatorClient(endpoint.url, TOKEN, backoff=0.05, max_backoff=0.2)
    client.attempt_ready("src", 0, 0)
    assert client.request_splits("src", 0, 0) == [AddSplits((RangeSplit(0, 10),))]
    port = endpoint.port
    endpoint.stop()  # the client still holds a keep-alive connection to it
    replacement = DriverEndpoint(TOKEN, port=port)
    replacement.add(source)

    restarted_at: list[float] = []

    def restart() -> None:
        time.sleep(0.4)
        restarted_at.append(time.monotonic())
        replacement.start()

    thread = threading.Thread(target=restart)
    thread.start()
    try:
        assert client.request_splits("src", 0, 0) == [AddSplits((RangeSplit(10, 20),))]
        assert restarted_at and time.monotonic() > restarted_at[0]  # it waited for the restart
        thread.join()
        assert replacement.port == port
    finally:
        thread.join()
        replacement.stop()


def test_the_client_gives_up_after_its_retries(make_host: HostFactory) -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    client = CoordinatorClient(f"http://127.0.0.1:{port}", TOKEN, retries=2, backoff=0.01)
    began = time.monotonic()
    with pytest.raises(CoordinatorUnavailable, match="failed 3 time"):
        client.request_splits("src", 0, 0)
    assert time.monotonic() - began < 30  # refused at once: three tries, no long waits
    assert not client.health()


def test_a_stalled_server_times_out_and_the_retry_is_still_safe(
    source: CoordinatorHost, endpoint: DriverEndpoint
) -> None:
    client = CoordinatorClient(endpoint.url, TOKEN, timeout=0.2, backoff=0.01)
    client.attempt_ready("src", 0, 0)
    gate = threading.Event()
    source.inspect(lambda coordinator: gate.wait(TIMEOUT))  # blocks the coordinator thread
    opened_at: list[float] = []

    def open_gate() -> None:
        opened_at.append(time.monotonic())
        gate.set()

    threading.Timer(0.5, open_gate).start()
    # The first tries time out while queued behind the stall; all carry the same request id.
    assert client.request_splits("src", 0, 0) == [AddSplits((RangeSplit(0, 10),))]
    assert opened_at and time.monotonic() > opened_at[0]
    assert assigned(source) == 1


def test_the_client_pickles_without_its_connection(
    source: CoordinatorHost, endpoint: DriverEndpoint
) -> None:
    client = CoordinatorClient(endpoint.url, TOKEN)
    client.attempt_ready("src", 0, 0)
    copy = pickle.loads(pickle.dumps(client))
    assert copy.request_splits("src", 0, 0) == [AddSplits((RangeSplit(0, 10),))]


def test_the_client_is_safe_to_share_between_threads(
    source: CoordinatorHost, endpoint: DriverEndpoint
) -> None:
    client = CoordinatorClient(endpoint.url, TOKEN)
    got: list[str] = []
    lock = threading.Lock()

    def reader(subtask: int) -> None:
        client.attempt_ready("src", subtask, 0)
        while True:
            reply = client.request_splits("src", subtask, 0)
            if not isinstance(reply[0], AddSplits):
                return
            with lock:
                got.extend(split.split_id for split in reply[0].splits)

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert sorted(got) == sorted(f"r-{k}-{k + 10}" for k in range(0, 100, 10))
