"""The small contracts batch tasks rely on: names, attempts, rounds, routing, the runtime route."""

from __future__ import annotations

from pathlib import Path

import pytest

from finishable.connectors.batch.datasources import (
    BatchTaskError,
    Round,
    RuntimeClient,
    coordinator_attempt,
    format_name,
    shuffle_server_for,
)
from finishable.connectors.staging import (
    StagedPart,
    TaskIdentity,
    staged_from_json,
    staged_to_json,
)
from finishable.coordinator.endpoint import DriverEndpoint
from finishable.local.shuffle import LocalShuffle

pytestmark = pytest.mark.quick


def test_format_names_are_safe_short_names_unique_per_name() -> None:
    assert format_name("read", "orders").startswith("finishable_read__orders_")
    odd = format_name("stage", "paid.v2-final")
    assert odd.replace("_", "").isalnum()
    assert format_name("stage", "a.b") != format_name("stage", "a-b")
    assert format_name("stage", "x") != format_name("read", "x")


def test_coordinator_attempts_differ_per_driver_attempt_round_and_task_attempt() -> None:
    numbers = {
        coordinator_attempt(driver, round_number, task)
        for driver in (1, 2)
        for round_number in (1, 2, 30)
        for task in (0, 1, 3)
    }
    assert len(numbers) == 18


def test_reader_slots_map_to_listed_tasks_and_writers_to_their_own() -> None:
    plan = Round(stage="paid", round=1, attempt=1, tasks=[3, 7], servers=["http://s"])
    assert [plan.task_of_slot(s, slotted=True) for s in range(4)] == [3, 7, None, None]
    assert [plan.task_of_slot(s, slotted=False) for s in (3, 4, 7)] == [3, None, 7]
    assert Round(**__import__("json").loads(plan.to_property())) == plan


def test_partitions_spread_over_servers_stably() -> None:
    servers = ["http://a", "http://b"]
    chosen = [shuffle_server_for(servers, "paid", p) for p in range(40)]
    assert set(chosen) == set(servers)
    assert chosen == [shuffle_server_for(servers, "paid", p) for p in range(40)]
    with pytest.raises(BatchTaskError, match="no shuffle server"):
        shuffle_server_for([], "paid", 0)


def test_staged_parts_round_trip_through_json() -> None:
    part = StagedPart(TaskIdentity(0, 3, 77, 1), "staging/x.parquet", 10, 999, 0, b"\x01\x02")
    assert staged_from_json(staged_to_json(part)) == part
    empty = StagedPart(TaskIdentity(0, 4, 78, 0), None, 0, 0, 0, None)
    assert staged_from_json(staged_to_json(empty)) == empty


def test_the_runtime_route_needs_a_hook_and_the_token_and_maps_mistakes_to_400() -> None:
    seen: list[tuple[str, dict[str, object]]] = []

    def hook(action: str, body: dict[str, object]) -> dict[str, object]:
        if action == "bad":
            raise ValueError("no stage named 'x' in this job")
        seen.append((action, body))
        return {"ok": True}

    with DriverEndpoint("token") as endpoint:
        client = RuntimeClient(endpoint.url, "token", connect_retries=1)
        with pytest.raises(BatchTaskError, match="404"):
            client.call("task-finished", {})
        endpoint.set_runtime_hook(hook)
        assert client.call("task-finished", {"stage": "paid", "task": 1}) == {"ok": True}
        with pytest.raises(BatchTaskError, match="401"):
            RuntimeClient(endpoint.url, "wrong").call("task-finished", {})
        with pytest.raises(BatchTaskError, match=r"400.*no stage named"):
            client.call("bad", {})
    assert seen == [("task-finished", {"stage": "paid", "task": 1})]


def test_local_shuffle_servers_are_reused_restarted_on_their_port_and_stopped(
    tmp_path: Path,
) -> None:
    import os
    import signal
    import time

    shuffle = LocalShuffle(tmp_path / "shuffle", "job", 2, "1m")
    try:
        urls = shuffle.ensure()
        pids = [server.pid() for server in shuffle.servers]
        assert shuffle.ensure() == urls, "a second run reuses live servers"
        assert [server.pid() for server in shuffle.servers] == pids
        assert shuffle.urls() == urls
        victim = shuffle.servers[0].pid()
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while not (restarted := shuffle.restart_dead()):  # once the process is really gone
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert restarted == [0]
        starting = shuffle.servers[0].pid()  # not answering yet: a Python process takes a while
        assert shuffle.ensure() == urls, "restarted on the same port"
        assert shuffle.servers[0].pid() == starting != victim, "waited for, not started twice"
        token = shuffle.token
        assert LocalShuffle(tmp_path / "shuffle", "job", 2, "1m").token == token
    finally:
        shuffle.stop()
    assert not any(server.alive() for server in shuffle.servers)
    assert not shuffle.servers[0].data_dir.exists()
