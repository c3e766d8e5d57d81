"""The file enumerator over real local files addressed by file:// URLs."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from finishable.coordinator import AddSplits, CoordinatorHost, FileSplit, NoMoreSplits
from finishable.coordinator import files as files_module
from finishable.coordinator.enumerator import SplitEnumerator
from finishable.coordinator.files import (
    FileSplitEnumerator,
    ListedFile,
    list_files,
    normalize_source_url,
    plan_file_splits,
)
from finishable.coordinator.ranges import RangeSplitEnumerator

from ._helpers import TIMEOUT, fail, finish, ready, request
from .conftest import HostFactory

pytestmark = pytest.mark.quick


def write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(index % 251 for index in range(size)))
    return path


def url_of(path: Path) -> str:
    return normalize_source_url(str(path))


def splits_of(host: CoordinatorHost, subtask: int, attempt: int, n: int = 1) -> list[FileSplit]:
    reply = request(host, subtask, attempt, n)
    assert len(reply) == 1 and isinstance(reply[0], AddSplits), reply
    found = [split for split in reply[0].splits if isinstance(split, FileSplit)]
    assert len(found) == len(reply[0].splits)
    return found


def wait_for(condition: Any, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def discovered(host: CoordinatorHost) -> int:
    progress = host.progress().result(TIMEOUT)
    return progress.splits_discovered if progress is not None else 0


def test_listing_skips_hidden_files_and_applies_the_pattern(tmp_path: Path) -> None:
    write(tmp_path / "b.json", 3)
    write(tmp_path / "a.json", 2)
    write(tmp_path / "sub dir" / "c.json", 4)
    write(tmp_path / "notes.txt", 1)
    write(tmp_path / "_SUCCESS", 0)
    write(tmp_path / ".a.json.crc", 8)
    write(tmp_path / "_temporary" / "x.json", 5)
    base = url_of(tmp_path)
    listed = list_files(base, bounded=True, pattern="*.json")
    assert listed == [
        ListedFile(f"{base}/a.json", 2),
        ListedFile(f"{base}/b.json", 3),
        ListedFile(f"{base}/sub%20dir/c.json", 4),
    ]
    assert len(list_files(base, bounded=True)) == 4
    # A file URL opens with pyarrow alone, as an executor would open it.
    filesystem, path = pafs.FileSystem.from_uri(listed[2].url)
    with filesystem.open_input_file(path) as handle:
        assert handle.read() == (tmp_path / "sub dir" / "c.json").read_bytes()


def test_a_missing_location_is_an_error_only_when_bounded(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list_files(url_of(tmp_path / "nope"), bounded=True)
    assert list_files(url_of(tmp_path / "nope"), bounded=False) == []


def test_large_files_become_byte_ranges_that_cover_them_exactly() -> None:
    files = [
        ListedFile("file:///d/big", 25),
        ListedFile("file:///d/empty", 0),
        ListedFile("file:///d/small", 10),
    ]
    planned = plan_file_splits(files, split_size=10)
    assert [(s.url, s.start, s.length) for s in planned] == [
        ("file:///d/big", 0, 10),
        ("file:///d/big", 10, 10),
        ("file:///d/big", 20, 5),
        ("file:///d/small", 0, 10),
    ]
    assert planned[3].whole_file and not planned[0].whole_file
    assert [s.split_id for s in plan_file_splits(files, 10)] == [s.split_id for s in planned]
    assert len(plan_file_splits(files, None)) == 2


def four_ranges_of_two_files(make_host: HostFactory, tmp_path: Path) -> CoordinatorHost:
    """A bounded listing of a.bin (2500 bytes: three ranges) and b.bin (700: one), listed."""
    write(tmp_path / "a.bin", 2500)
    write(tmp_path / "b.bin", 700)
    host = make_host(FileSplitEnumerator.provider(str(tmp_path), split_size=1000))
    wait_for(lambda: discovered(host) == 4)
    return host


def test_bounded_source_assigns_every_range_once_then_no_more(
    make_host: HostFactory, tmp_path: Path
) -> None:
    host = four_ranges_of_two_files(make_host, tmp_path)
    ready(host, 0, 0)
    ready(host, 1, 0)
    got = splits_of(host, 0, 0, 2) + splits_of(host, 1, 0, 5)
    assert [(Path(s.url).name, s.start, s.length) for s in got] == [
        ("a.bin", 0, 1000),
        ("a.bin", 1000, 1000),
        ("a.bin", 2000, 500),
        ("b.bin", 0, 700),
    ]
    assert request(host, 0, 0) == [NoMoreSplits()]
    finish(host, 0, 0, *(s.split_id for s in got[:2]))
    fail(host, 1, 0)  # its two splits return to the pool
    host.subtask_reset(1, 0).result(TIMEOUT)
    assert [s.split_id for s in splits_of(host, 0, 0, 5)] == [s.split_id for s in got[2:]]
    finish(host, 0, 0, *(s.split_id for s in got[2:]))
    progress = host.progress().result(TIMEOUT)
    assert progress is not None and progress.fully_finished and progress.splits_total == 4


def test_ids_are_the_same_when_the_same_files_are_planned_again(
    make_host: HostFactory, tmp_path: Path
) -> None:
    write(tmp_path / "x" / "1.csv", 300)
    write(tmp_path / "x" / "2.csv", 100)
    plans = []
    for name in ("first", "second"):
        host = make_host(FileSplitEnumerator.provider(url_of(tmp_path), split_size=128), name)
        wait_for(lambda host=host: discovered(host) == 4)
        ready(host, 0, 0)
        plans.append([s.split_id for s in splits_of(host, 0, 0, 10)])
    assert plans[0] == plans[1] and len(set(plans[0])) == 4


def test_unbounded_source_discovers_new_files_off_the_coordinator_thread(
    make_host: HostFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: set[str] = set()
    listings = [0]
    real = files_module.list_files

    def spy(*args: Any, **kwargs: Any) -> list[ListedFile]:
        threads.add(threading.current_thread().name)
        try:
            return real(*args, **kwargs)
        finally:
            listings[0] += 1

    monkeypatch.setattr(files_module, "list_files", spy)
    inbox = tmp_path / "inbox"  # does not exist yet: fine for an unbounded source
    host = make_host(
        FileSplitEnumerator.provider(url_of(inbox), bounded=False, discovery_interval=0.05),
        "stream",
    )
    ready(host, 0, 0)
    assert request(host, 0, 0) == [AddSplits(())]
    write(inbox / "001.json", 10)
    wait_for(lambda: discovered(host) == 1)
    first = splits_of(host, 0, 0)
    assert first[0].url.endswith("/inbox/001.json")
    # Write the next file elsewhere and rename it in, as sources must.
    write(tmp_path / "staging" / "002.json", 10).rename(inbox / "002.json")
    wait_for(lambda: discovered(host) == 2)
    assert splits_of(host, 0, 0)[0].url.endswith("/inbox/002.json")
    assert request(host, 0, 0) == [AddSplits(())]  # never NoMoreSplits while unbounded
    assert threads and not any(name == "coordinator-stream" for name in threads)
    assert all(name.startswith("coordinator-stream-io") for name in threads)
    # A restored unbounded source does not rediscover files it has seen.
    snapshot = host.checkpoint_coordinator(1).result(TIMEOUT)
    host.global_failover(1, snapshot).result(TIMEOUT)
    # Three more listings: at most one of the replaced instance was in flight, and the restored
    # one's first listing handed its result to the coordinator before its next listing began.
    before = listings[0]
    wait_for(lambda: listings[0] >= before + 3)
    assert discovered(host) == 2
    ready(host, 0, 0)
    restored = [s.url.rsplit("/", 1)[1] for s in splits_of(host, 0, 0)]
    assert restored == ["001.json", "002.json"]  # its unfinished share of the checkpoint
    progress = host.progress().result(TIMEOUT)
    assert progress is not None and progress.splits_discovered == 2


def test_a_bounded_source_whose_listing_keeps_failing_fails_the_job(
    make_host: HostFactory, tmp_path: Path
) -> None:
    host = make_host(
        FileSplitEnumerator.provider(
            url_of(tmp_path / "missing"), retry_delay=0.01, max_listing_failures=2
        )
    )
    wait_for(lambda: host.failure is not None)
    assert "failed 2 times" in str(host.failure) and "does not exist" in str(host.failure)


def test_requests_before_the_first_listing_get_an_empty_answer(
    make_host: HostFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    real = files_module.list_files

    def slow(*args: Any, **kwargs: Any) -> list[ListedFile]:
        gate.wait(TIMEOUT)
        return real(*args, **kwargs)

    monkeypatch.setattr(files_module, "list_files", slow)
    write(tmp_path / "a", 5)
    host = make_host(FileSplitEnumerator.provider(url_of(tmp_path)))
    ready(host, 0, 0)
    assert request(host, 0, 0) == [AddSplits(())]  # bounded, but not listed yet: not the end
    gate.set()
    wait_for(lambda: discovered(host) == 1)
    assert len(splits_of(host, 0, 0)) == 1
    assert request(host, 0, 0) == [NoMoreSplits()]


def test_bad_configuration_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match="needs a URL"):
        FileSplitEnumerator.provider("")
    assert normalize_source_url("/tmp/a b").startswith("file:///tmp/a%20b")


def splits_of_any(host: CoordinatorHost) -> list[object]:
    reply = request(host, 0, 0, 100)
    assert len(reply) == 1 and isinstance(reply[0], AddSplits), reply
    return list(reply[0].splits)


def input_bytes(host: CoordinatorHost) -> int | None:
    def measure(coordinator: object) -> int | None:
        assert isinstance(coordinator, SplitEnumerator)
        return coordinator.input_bytes()

    return host.call("input_bytes", measure).result(TIMEOUT)


def test_the_input_size_is_the_bytes_of_every_listed_range(
    make_host: HostFactory, tmp_path: Path
) -> None:
    """What a Batch read sizes its tasks by (``plan.read_shape``): every range, wherever it is."""
    host = four_ranges_of_two_files(make_host, tmp_path)
    assert input_bytes(host) == 3200
    ready(host, 0, 0)
    got = splits_of(host, 0, 0, 2)
    assert input_bytes(host) == 3200, "assigned splits count"
    finish(host, 0, 0, *(s.split_id for s in got))
    assert input_bytes(host) == 3200, "finished splits count"


def test_a_range_of_rows_has_no_size_in_bytes(make_host: HostFactory) -> None:
    host = make_host(RangeSplitEnumerator.provider(end=100, split_size=10))
    ready(host, 0, 0)
    assert len(splits_of_any(host)) == 10
    assert input_bytes(host) is None


def test_the_input_size_is_unknown_until_the_listing_is_complete(
    make_host: HostFactory, tmp_path: Path
) -> None:
    write(tmp_path / "a.bin", 100)
    host = make_host(FileSplitEnumerator.provider(str(tmp_path), bounded=False))
    wait_for(lambda: discovered(host) == 1)
    assert input_bytes(host) is None, "an unbounded listing is never complete"
