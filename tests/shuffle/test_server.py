"""``finishable shuffle-server`` as a real process, talked to with the client and raw HTTP."""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import pickle
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from finishable.shuffle import (
    CorruptPartition,
    PartitionNotFound,
    ShuffleClient,
    ShuffleCluster,
    ShuffleError,
    ShuffleRequestError,
    ShuffleUnauthorized,
    ShuffleUnavailable,
)

from .conftest import JOB, ROOT, TOKEN, ServerFactory, ServerProcess

pytestmark = pytest.mark.quick


def ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=1000)
    return bytes(sink.getvalue().to_pybytes())


def small(rows: int = 10, offset: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(offset, offset + rows), pa.int64())})


def raw(
    server: ServerProcess,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    token: str | None = TOKEN,
) -> tuple[int, Any]:
    """One request without the client: the status and the decoded JSON answer."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    try:
        return response.status, json.loads(data)
    except ValueError:
        return response.status, data


def state(server: ServerProcess) -> list[tuple[str, int, str]]:
    listing = server.client().list()
    return [(p.dataset, p.partition, p.sha256) for p in listing.partitions]


def test_round_trip_of_arrow_tables(server: ServerProcess) -> None:
    client = server.client()
    tables = {
        "numbers": small(5000),
        "mixed": pa.table(
            {
                "name": ["a", None, "ccc"],
                "price": [1.5, 2.25, None],
                "tags": [["x"], [], ["y", "z"]],
                "when": pa.array([0, 1, 2], pa.timestamp("us", tz="UTC")),
            }
        ),
        "empty": pa.table({"id": pa.array([], pa.int64())}),
    }
    assert client.register(1).partitions == 0
    before = datetime.now(UTC)
    infos = {}
    for partition, (name, table) in enumerate(tables.items()):
        infos[name] = client.put_batches(
            name, partition, "a1", table.schema, table.to_batches(max_chunksize=700)
        )
    for partition, (name, table) in enumerate(tables.items()):
        assert client.read_table(name, partition).equals(table)
        batches = list(client.get(name, partition))
        assert pa.Table.from_batches(batches, table.schema).equals(table)
        assert infos[name].rows == table.num_rows

    listing = client.list()
    assert listing.job == JOB
    assert [(p.dataset, p.partition) for p in listing.partitions] == sorted(
        (name, partition) for partition, name in enumerate(tables)
    )
    for info in listing.partitions:
        assert info == infos[info.dataset]
        assert info.attempt == "a1"
        assert info.server == server.url
        assert before <= info.committed_at <= datetime.now(UTC)
        assert info.bytes > 0
    assert [p.dataset for p in client.list(dataset="mixed").partitions] == ["mixed"]
    assert {d.dataset: d.rows for d in client.datasets()} == {
        "numbers": 5000,
        "mixed": 3,
        "empty": 0,
    }
    assert client.register(2).partitions == 3


def test_put_checksums_match_the_bytes(server: ServerProcess) -> None:
    client = server.client()
    data = ipc(small(100))
    info = client.put("bytes", 0, "a1", iter([data[:10], b"", data[10:]]))
    assert info.sha256 == hashlib.sha256(data).hexdigest()
    assert info.bytes == len(data)
    sink = io.BytesIO()
    assert client.download("bytes", 0, sink).sha256 == info.sha256
    assert sink.getvalue() == data


def test_a_50_megabyte_partition_is_streamed(server: ServerProcess) -> None:
    """The server must have received bytes before the client produced the last chunk."""
    table = pa.table({"v": np.arange(6_600_000, dtype=np.int64)})
    data = ipc(table)
    assert len(data) > 50_000_000
    chunk = 1 << 20
    received_midway: list[float] = []

    def chunks() -> Iterator[bytes]:
        for index, start in enumerate(range(0, len(data), chunk)):
            if index == 40:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    seen = server.metrics()["finishable_shuffle_received_bytes_total"]
                    if seen >= 20 * chunk:
                        break
                    time.sleep(0.02)
                received_midway.append(seen)
            yield data[start : start + chunk]

    client = server.client()
    info = client.put("big", 0, "a1", chunks())
    assert received_midway and received_midway[0] >= 20 * chunk
    assert (info.bytes, info.rows) == (len(data), table.num_rows)
    assert info.sha256 == hashlib.sha256(data).hexdigest()
    assert client.read_table("big", 0).equals(table)
    response = urllib.request.urlopen(
        urllib.request.Request(
            f"{server.url}/v1/partitions/big/0", headers={"Authorization": f"Bearer {TOKEN}"}
        ),
        timeout=30,
    )
    assert response.headers["Content-Length"] == str(len(data))
    assert response.headers["X-Finishable-Sha256"] == info.sha256
    assert response.headers["X-Finishable-Rows"] == str(table.num_rows)
    digest = hashlib.sha256()
    while block := response.read(chunk):
        digest.update(block)
    assert digest.hexdigest() == info.sha256


def test_a_second_attempt_replaces_the_first(server: ServerProcess) -> None:
    client = server.client()
    first = client.put_batches("stage1", 4, "a1-r0-t0", small().schema, small(3).to_batches())
    second = client.put_batches("stage1", 4, "a2-r0-t0", small().schema, small(8).to_batches())
    assert second.sha256 != first.sha256
    (listed,) = client.list().partitions
    assert listed == second
    assert listed.attempt == "a2-r0-t0"
    assert client.read_table("stage1", 4).num_rows == 8
    data_dir = server.data_dir / JOB / "stage1"
    assert sorted(p.name for p in data_dir.iterdir()) == ["4.arrow", "4.json"]


def test_a_superseded_driver_can_neither_register_nor_commit(server: ServerProcess) -> None:
    client = server.client()
    client.register(1)
    client.put_batches("stage1", 0, "a1-r0-t0", small().schema, small(3).to_batches(), epoch=(1, 1))
    client.register(2)
    with pytest.raises(ShuffleError, match="attempt 2 of run 1 registered since"):
        client.put_batches(
            "stage1", 0, "a1-r0-t1", small().schema, small(9).to_batches(), epoch=(1, 1)
        )
    with pytest.raises(ShuffleError, match="registration of driver attempt 1 of run 1 refused"):
        client.register(1)
    (listed,) = client.list().partitions
    assert (listed.attempt, listed.rows) == ("a1-r0-t0", 3)

    server.restart(same_port=True)  # the floor survives the server
    client = server.client()
    with pytest.raises(ShuffleError, match="refused"):
        client.put_batches(
            "stage1", 1, "a1-r0-t1", small().schema, small(9).to_batches(), epoch=(1, 1)
        )
    client.put_batches("stage1", 1, "a2-r0-t0", small().schema, small(4).to_batches(), epoch=(1, 2))
    assert [p.partition for p in client.list().partitions] == [0, 1]


def test_a_new_run_starts_from_nothing_but_promoted_datasets(server: ServerProcess) -> None:
    client = server.client()
    client.register(3, run=1)
    client.put("kept", 0, "a3", [ipc(small())])
    client.put("stage1", 0, "a3", [ipc(small())])
    client.promote("kept")
    assert client.register(4, run=2).partitions == 1
    assert [p.dataset for p in client.list().partitions] == ["kept"]
    with pytest.raises(ShuffleError, match="refused"):
        client.register(5, run=1)


@pytest.mark.parametrize("token", [None, "wrong-token", ""])
def test_a_missing_or_wrong_token_changes_nothing(server: ServerProcess, token: str | None) -> None:
    client = server.client()
    client.put("kept", 0, "a1", [ipc(small())])
    client.promote("kept")
    before = state(server)
    body = ipc(small(99))
    requests: list[tuple[str, str, bytes | None]] = [
        ("PUT", "/v1/partitions/kept/0?attempt=evil&commit=true", body),
        ("PUT", "/v1/partitions/new/1?attempt=evil&commit=true", body),
        ("DELETE", "/v1/partitions?includePromoted=true", None),
        ("DELETE", "/v1/partitions/kept", None),
        ("GET", "/v1/partitions?verify=true", None),
        ("GET", "/v1/partitions/kept/0", None),
        ("POST", "/v1/datasets/kept/promote", None),
        ("GET", "/v1/datasets", None),
        ("POST", "/v1/drivers", b'{"attempt": 1}'),
        ("GET", "/v1/no-such-route", None),
    ]
    for method, path, payload in requests:
        status, answer = raw(server, method, path, payload, token=token)
        assert status == 401, (method, path, answer)
        assert "bearer token" in answer["error"]
    assert state(server) == before
    with pytest.raises(ShuffleUnauthorized, match="401: wrong bearer token"):
        ShuffleClient(server.url, "wrong-token").list()
    assert state(server) == before
    assert raw(server, "GET", "/healthz", token=None)[0] == 200
    assert raw(server, "GET", "/metrics", token=None)[0] == 200


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        ("/v1/partitions/-dash/0?attempt=a1", "dataset", "-dash"),
        ("/v1/partitions/a%2Fb/0?attempt=a1", "dataset", "a/b"),
        (f"/v1/partitions/{'x' * 129}/0?attempt=a1", "dataset", "x" * 129),
        ("/v1/partitions/ok/-1?attempt=a1", "partition", "-1"),
        ("/v1/partitions/ok/1000000?attempt=a1", "partition", "1000000"),
        ("/v1/partitions/ok/seven?attempt=a1", "partition", "seven"),
        ("/v1/partitions/ok/0?attempt=has%20space", "attempt", "has space"),
        ("/v1/partitions/ok/0?attempt=" + "x" * 65, "attempt", "x" * 65),
        ("/v1/partitions/ok/0", "attempt", "missing"),
        ("/v1/partitions/ok/0?attempt=a1&commit=maybe", "commit", "maybe"),
    ],
)
def test_bad_names_are_refused(server: ServerProcess, path: str, field: str, value: str) -> None:
    status, answer = raw(server, "PUT", path, ipc(small()))
    assert status == 400, answer
    assert field in answer["error"]
    assert value in answer["error"]
    assert "expected" in answer["error"]
    assert state(server) == []
    assert not (server.data_dir / JOB / "ok").exists()


def test_bad_queries_and_bodies_are_refused(server: ServerProcess) -> None:
    status, answer = raw(server, "GET", "/v1/partitions?dataset=no/slash")
    assert (status, "dataset 'no/slash'" in answer["error"]) == (400, True)
    status, answer = raw(server, "GET", "/v1/partitions?verify=perhaps")
    assert (status, "verify='perhaps'" in answer["error"]) == (400, True)
    for body in (b'{"attempt": 0}', b'{"attempt": "1"}', b"{}", b"[1]", b"not json"):
        status, answer = raw(server, "POST", "/v1/drivers", body)
        assert status == 400, body
        assert "attempt" in answer["error"] or "body" in answer["error"]
    status, answer = raw(server, "GET", "/v1/partitions/ok/0")
    assert status == 404
    assert "'ok'" in answer["error"]
    assert "partition 0" in answer["error"]
    with pytest.raises(PartitionNotFound, match="'ok' has no committed partition 0"):
        server.client().get("ok", 0)
    with pytest.raises(PartitionNotFound, match="'nothing' has no committed partitions"):
        server.client().promote("nothing")
    status, answer = raw(server, "PATCH", "/v1/partitions")
    assert (status, answer["error"]) == (405, "PATCH is not allowed on /v1/partitions")


def test_a_body_that_is_not_arrow_is_refused(server: ServerProcess) -> None:
    status, answer = raw(
        server, "PUT", "/v1/partitions/orders/2?attempt=a1&commit=true", b"id,name\n1,x\n"
    )
    assert status == 400
    assert "dataset 'orders' partition 2" in answer["error"]
    assert "Arrow IPC stream" in answer["error"]
    with pytest.raises(ShuffleRequestError, match="not an Arrow IPC stream") as caught:
        server.client().put("orders", 2, "a1", [b"\x00" * 100])
    assert caught.value.status == 400
    assert state(server) == []
    assert list((server.data_dir / JOB).rglob("*")) == []


def test_upload_then_commit_in_two_requests(server: ServerProcess) -> None:
    data = ipc(small(42))
    status, answer = raw(server, "PUT", "/v1/partitions/two/0?attempt=a1", data)
    assert status == 200
    upload = answer["upload"]
    assert state(server) == []
    status, answer = raw(server, "POST", "/v1/partitions/two/0/commit", b'{"upload": "nope"}')
    assert status == 404
    assert "'nope'" in answer["error"]
    status, answer = raw(
        server, "POST", "/v1/partitions/two/0/commit", json.dumps({"upload": upload}).encode()
    )
    assert status == 200
    assert (answer["rows"], answer["sha256"]) == (42, hashlib.sha256(data).hexdigest())
    assert state(server) == [("two", 0, answer["sha256"])]
    status, answer = raw(
        server, "POST", "/v1/partitions/two/0/commit", json.dumps({"upload": upload}).encode()
    )
    assert status == 404


def test_a_corrupted_file_is_detected(server: ServerProcess) -> None:
    client = server.client()
    client.put_batches("orders", 0, "a1", small().schema, small(2000).to_batches())
    client.put_batches("orders", 1, "a1", small().schema, small(2000).to_batches())
    path = server.data_dir / JOB / "orders" / "1.arrow"
    data = bytearray(path.read_bytes())
    for offset in range(len(data) // 2, len(data) // 2 + 8):
        data[offset] ^= 0xFF
    path.write_bytes(bytes(data))

    with pytest.raises(CorruptPartition) as caught:
        list(client.get("orders", 1))
    error = caught.value
    assert (error.server, error.dataset, error.partition) == (server.url, "orders", 1)
    assert server.url in str(error) and "'orders'" in str(error)
    assert client.read_table("orders", 0).num_rows == 2000

    listing = client.list(verify=True)
    assert [(c.dataset, c.partition, c.server) for c in listing.corrupt] == [
        ("orders", 1, server.url)
    ]
    assert "sha256" in listing.corrupt[0].error
    assert [p.partition for p in listing.partitions] == [0]
    assert not path.exists()
    assert client.list(verify=True).corrupt == ()
    assert server.metrics()["finishable_shuffle_corrupt_partitions_total"] == 1


def test_a_truncated_file_is_reported_as_corrupt(server: ServerProcess) -> None:
    client = server.client()
    client.put_batches("orders", 0, "a1", small().schema, small(2000).to_batches())
    path = server.data_dir / JOB / "orders" / "0.arrow"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CorruptPartition):
        client.read_table("orders", 0)


def test_release_of_the_job_and_of_a_dataset(server: ServerProcess) -> None:
    client = server.client()
    for dataset in ("a", "b", "c"):
        for partition in range(2):
            client.put(dataset, partition, "a1", [ipc(small())])
    client.promote("c")
    assert client.release("a") == 2
    assert {p.dataset for p in client.list().partitions} == {"b", "c"}
    assert client.release() == 2
    assert [(d.dataset, d.promoted) for d in client.datasets()] == [("c", True)]
    assert client.release("c") == 2  # an explicit delete of a cluster partition
    assert client.list().partitions == ()
    assert client.release() == 0
    assert sorted((server.data_dir / JOB).iterdir()) == []


def test_release_including_promoted(server: ServerProcess) -> None:
    client = server.client()
    client.put("keep", 0, "a1", [ipc(small())])
    client.put("drop", 0, "a1", [ipc(small())])
    client.promote("keep")
    assert client.release(include_promoted=True) == 2
    assert client.datasets() == []


def test_retain_timeout_releases_all_but_promoted(start_server: ServerFactory) -> None:
    server = start_server(retain_timeout="4s")
    client = server.client()
    client.register(1)
    client.put("cluster", 0, "a1", [ipc(small())])
    client.put("scratch", 0, "a1", [ipc(small())])
    client.promote("cluster")
    heartbeats_until = time.monotonic() + 5.0  # longer than the timeout: heartbeats keep it all
    while time.monotonic() < heartbeats_until:
        assert client.register(1).retain_timeout_seconds == 4.0
        time.sleep(0.2)
    assert {p.dataset for p in client.list().partitions} == {"cluster", "scratch"}

    released_at = time.monotonic() + 60.0
    while {p.dataset for p in client.list().partitions} != {"cluster"}:
        assert time.monotonic() < released_at, server.output()
        time.sleep(0.1)
    metrics = server.metrics()
    assert metrics['finishable_shuffle_releases_total{reason="retain_timeout"}'] == 1
    assert metrics['finishable_shuffle_released_partitions_total{reason="retain_timeout"}'] == 1
    silent = metrics["finishable_shuffle_seconds_since_driver_heartbeat"]
    assert silent >= 4.0
    assert "WARNING" in server.output() and "released 1 partition(s)" in server.output()

    # A new driver attempt restarts the clock; the promoted dataset is still there.
    assert client.register(2).partitions == 1
    assert server.metrics()["finishable_shuffle_seconds_since_driver_heartbeat"] < silent


def test_the_retain_clock_starts_with_the_server(start_server: ServerFactory) -> None:
    server = start_server(retain_timeout="1s")
    client = server.client()
    client.put("early", 0, "a1", [ipc(small())])  # no driver ever registers
    deadline = time.monotonic() + 60
    while client.list().partitions:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_exit_when_released_stops_the_server_after_the_retain_timeout(
    start_server: ServerFactory,
) -> None:
    """``finishable run`` starts its servers so: an abandoned job leaves no process behind."""
    server = start_server(retain_timeout="1s", extra=("--exit-when-released",))
    server.client().put("kept", 0, "a1", [ipc(small())])
    server.client().promote("kept")
    assert server.process is not None
    assert server.process.wait(60) == 0
    assert "released 0 partition(s)" in server.output()
    server.extra = ()
    server.start()  # the promoted dataset is still on disk
    assert [p.dataset for p in server.client().list().partitions] == ["kept"]


def test_restart_after_sigkill_keeps_committed_partitions(server: ServerProcess) -> None:
    client = server.client()
    infos = [
        client.put_batches("orders", p, "a1", small().schema, small(10 + p).to_batches())
        for p in range(3)
    ]
    client.promote("orders")
    status, _ = raw(server, "PUT", "/v1/partitions/orders/7?attempt=a1", ipc(small()))
    assert status == 200  # uploaded, never committed
    directory = server.data_dir / JOB / "orders"
    (directory / "8.arrow").write_bytes(b"a data file whose sidecar was never written")
    assert any(p.name.endswith(".tmp") for p in directory.iterdir())

    server.restart()
    client = server.client()
    assert list(client.list().partitions) == [
        info.__class__(**{**info.__dict__, "server": server.url}) for info in infos
    ]
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        [".promoted", *(f"{p}.{ext}" for p in range(3) for ext in ("arrow", "json"))]
    )
    assert client.read_table("orders", 2).num_rows == 12
    assert client.datasets()[0].promoted


def test_clients_reconnect_to_a_restarted_server(server: ServerProcess) -> None:
    """A kept-alive connection to the old process is stale; neither call may trip over it."""
    client = server.client()
    client.put("r", 0, "a1", [ipc(small())])
    server.restart(same_port=True)
    client.put("r", 1, "a1", iter([ipc(small())]))
    assert [p.partition for p in client.list().partitions] == [0, 1]


def test_sigterm_stops_gracefully(server: ServerProcess) -> None:
    server.client().put("a", 0, "a1", [ipc(small())])
    assert server.terminate() == 0
    assert "stopping" in server.output()
    assert "Traceback" not in server.output()


def test_metrics_count_the_traffic(server: ServerProcess) -> None:
    client = server.client()
    client.register(1)
    data = ipc(small(500))
    client.put("m", 0, "a1", [data])
    client.put("m", 1, "a1", [data])
    client.promote("m")
    client.read_table("m", 0)
    client.release("m")
    metrics = server.metrics()
    assert metrics["finishable_shuffle_puts_total"] == 2
    assert metrics["finishable_shuffle_gets_total"] == 1
    assert metrics["finishable_shuffle_received_bytes_total"] == 2 * len(data)
    assert metrics["finishable_shuffle_sent_bytes_total"] == len(data)
    assert metrics['finishable_shuffle_releases_total{reason="request"}'] == 1
    assert metrics['finishable_shuffle_released_partitions_total{reason="request"}'] == 2
    assert metrics["finishable_shuffle_partitions"] == 0
    assert metrics["finishable_shuffle_stored_bytes"] == 0
    assert metrics["finishable_shuffle_promoted_datasets"] == 0
    client.put("m", 0, "a1", [data])
    client.promote("m")
    metrics = server.metrics()
    assert metrics["finishable_shuffle_partitions"] == 1
    assert metrics["finishable_shuffle_stored_bytes"] == len(data)
    assert metrics["finishable_shuffle_promoted_datasets"] == 1


def test_health_needs_no_token(server: ServerProcess) -> None:
    assert raw(server, "GET", "/healthz", token=None) == (
        200,
        {"status": "ok", "job": JOB, "driverAttempt": None, "driverRun": None},
    )
    assert server.client().health()
    assert not ShuffleClient("http://127.0.0.1:1", TOKEN).health()


def test_the_client_pickles_without_its_connection(server: ServerProcess) -> None:
    client = server.client()
    client.put("p", 0, "a1", [ipc(small())])
    copy = pickle.loads(pickle.dumps(client))
    assert copy.read_table("p", 0).num_rows == 10
    cluster = pickle.loads(pickle.dumps(ShuffleCluster([server.url], TOKEN)))
    assert cluster.server_for("p", 0).list().partitions[0].dataset == "p"


def test_the_client_gives_up_on_a_dead_server() -> None:
    client = ShuffleClient("http://127.0.0.1:1", TOKEN, retries=2, backoff=0.01)
    with pytest.raises(ShuffleUnavailable, match="failed 3 time"):
        client.list()
    with pytest.raises(ShuffleUnavailable, match="nothing is known to be committed"):
        client.put("a", 0, "a1", [b"x"])


def test_an_upload_whose_source_fails_commits_nothing(server: ServerProcess) -> None:
    def failing() -> Iterator[bytes]:
        yield ipc(small())[:50]
        raise RuntimeError("the Spark task died")

    client = server.client()
    with pytest.raises(RuntimeError, match="the Spark task died"):
        client.put("f", 0, "a1", failing())
    assert state(server) == []
    client.put("f", 0, "a1", [ipc(small())])  # the same client goes on working
    assert len(state(server)) == 1


def test_cluster_places_and_merges(start_server: ServerFactory) -> None:
    servers = [start_server(), start_server()]
    cluster = ShuffleCluster([s.url for s in servers] + ["http://127.0.0.1:1"], TOKEN, retries=0)
    placed = {p: cluster.server_for("d", p).url for p in range(12)}
    assert placed == {p: ShuffleCluster(cluster.urls, TOKEN).server_for("d", p).url for p in placed}
    assert len(set(placed.values())) == 3
    live = ShuffleCluster([s.url for s in servers], TOKEN)
    for partition in range(6):
        live.server_for("d", partition).put("d", partition, "a1", [ipc(small())])
    assert set(cluster.register_all(1)) == {s.url for s in servers}
    merged = cluster.list_all()
    assert [p.partition for p in merged.partitions] == list(range(6))
    assert {p.server for p in merged.partitions} == {s.url for s in servers}
    assert merged.unreachable == ("http://127.0.0.1:1",)
    released = cluster.release_all()
    assert released["http://127.0.0.1:1"] is None
    assert sum(count or 0 for count in released.values()) == 6


def test_wait_for_ends_early_when_the_needed_partitions_are_listed(
    start_server: ServerFactory,
) -> None:
    server = start_server()
    server.client().put("d", 0, "a1", [ipc(small())])
    server.client().put("d", 1, "a1", [ipc(small())])
    dead = "http://127.0.0.1:1"
    cluster = ShuffleCluster([server.url, dead], TOKEN)

    # Long deadlines, far from how long an answer takes even on a loaded machine.
    started = time.monotonic()
    found = cluster.wait_for(deadline=60.0, needed={("d", 0), ("d", 1)})
    assert time.monotonic() - started < 30.0
    assert found.keys() >= {("d", 0), ("d", 1)}
    assert found.answered == (server.url,)

    started = time.monotonic()
    found = cluster.wait_for(deadline=1.0, needed={("d", 0), ("d", 9)})
    elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 30.0
    assert found.keys() == {("d", 0), ("d", 1)}
    assert found.unreachable == (dead,)

    started = time.monotonic()
    found = cluster.wait_for([server.url], deadline=60.0, needed={("d", 9)})
    assert time.monotonic() - started < 30.0  # every asked server answered: nothing more comes


def test_wait_for_sees_a_server_that_comes_up_late(start_server: ServerFactory) -> None:
    server = start_server()
    server.client().put("d", 3, "a1", [ipc(small())])
    port = server.port
    server.kill()
    cluster = ShuffleCluster([f"http://127.0.0.1:{port}"], TOKEN)
    found = cluster.wait_for(deadline=0.5, needed={("d", 3)})
    assert found.unreachable and not found.partitions
    server.restart()
    found = ShuffleCluster([server.url], TOKEN).wait_for(deadline=60.0, needed={("d", 3)})
    assert found.keys() == {("d", 3)}


def test_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "finishable.cli",
            "shuffle-server",
            "--port",
            "0",
            "--data-dir",
            str(tmp_path / "data"),
            "--job",
            JOB,
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "FINISHABLE_TOKEN": ""},
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "FINISHABLE_TOKEN" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_refuses_to_start_when_the_data_dir_cannot_be_created(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "finishable.cli",
            "shuffle-server",
            "--data-dir",
            str(blocker / "data"),
            "--job",
            JOB,
            "--retain-timeout",
            "1h30m",
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "FINISHABLE_TOKEN": TOKEN},
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "cannot create or open the data directory" in done.stderr
    assert str(blocker / "data") in done.stderr
    assert "Traceback" not in done.stderr


def test_a_taken_port_is_reported_without_a_traceback(
    server: ServerProcess, tmp_path: Path
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "finishable.cli",
            "shuffle-server",
            "--host",
            "127.0.0.1",
            "--port",
            str(server.port),
            "--data-dir",
            str(tmp_path / "other"),
            "--job",
            JOB,
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "FINISHABLE_TOKEN": TOKEN},
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{server.port}" in done.stderr
    assert "Traceback" not in done.stderr
