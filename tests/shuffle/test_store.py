"""The partition store without HTTP: layout, atomic commits, rescans, verification, release."""

from __future__ import annotations

import hashlib
import json
import threading
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from finishable.shuffle.records import (
    DatasetMissing,
    InvalidName,
    NotArrowStream,
    PartitionMissing,
    UnknownUpload,
    check_partition,
)
from finishable.shuffle.store import PartitionStore

pytestmark = pytest.mark.quick

JOB = "etl"


def ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=7):
            writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def table(rows: int, offset: int = 0) -> pa.Table:
    return pa.table(
        {"id": list(range(offset, offset + rows)), "name": [f"n{i}" for i in range(rows)]}
    )


def chunks(data: bytes, size: int = 100) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.fixture
def store(tmp_path: Path) -> PartitionStore:
    return PartitionStore(tmp_path, JOB)


def files(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()} if directory.exists() else set()


def test_commit_writes_data_and_sidecar(store: PartitionStore, tmp_path: Path) -> None:
    data = ipc(table(50))
    before = datetime.now(UTC)
    meta = store.put("orders", 3, "a1", chunks(data))
    directory = tmp_path / JOB / "orders"
    assert files(directory) == {"3.arrow", "3.json"}
    assert (directory / "3.arrow").read_bytes() == data
    assert meta.rows == 50
    assert meta.bytes == len(data)
    assert meta.sha256 == hashlib.sha256(data).hexdigest()
    assert meta.attempt == "a1"
    assert before <= meta.committed_at <= datetime.now(UTC)
    sidecar = json.loads((directory / "3.json").read_text())
    assert sidecar == meta.to_json()
    assert sidecar["committedAt"].endswith("Z")
    assert set(sidecar) == {
        "dataset",
        "partition",
        "bytes",
        "rows",
        "attempt",
        "committedAt",
        "sha256",
    }


def test_upload_is_a_temporary_file_until_committed(store: PartitionStore, tmp_path: Path) -> None:
    upload = store.begin("orders", 0, "a1")
    upload.write(ipc(table(3)))
    directory = tmp_path / JOB / "orders"
    assert files(directory) == {f".0.{upload.id}.tmp"}
    assert store.partitions() == []
    with pytest.raises(PartitionMissing, match="'orders' has no committed partition 0"):
        store.get("orders", 0)
    store.commit(upload.id)
    assert files(directory) == {"0.arrow", "0.json"}
    with pytest.raises(UnknownUpload, match=upload.id):
        store.commit(upload.id)


def test_schema_only_stream_has_zero_rows(store: PartitionStore) -> None:
    assert store.put("empty", 0, "a1", [ipc(table(0))]).rows == 0


@pytest.mark.parametrize(
    ("body", "detail"),
    [(b"", "empty"), (b"not arrow at all, just text", ""), (ipc(table(20))[:-30], "")],
    ids=["empty", "text", "truncated"],
)
def test_a_body_that_is_not_an_arrow_stream_is_refused(
    store: PartitionStore, tmp_path: Path, body: bytes, detail: str
) -> None:
    with pytest.raises(NotArrowStream, match=f"dataset 'orders' partition 7 .*{detail}"):
        store.put("orders", 7, "a1", [body])
    assert store.partitions() == []
    assert not (tmp_path / JOB / "orders").exists()


def test_recommit_by_another_attempt_replaces_the_partition(
    store: PartitionStore, tmp_path: Path
) -> None:
    first = store.put("orders", 1, "a1", [ipc(table(5))])
    second = store.put("orders", 1, "a2", [ipc(table(9, offset=100))])
    assert store.get("orders", 1) == second != first
    assert second.attempt == "a2"
    assert second.rows == 9
    directory = tmp_path / JOB / "orders"
    assert files(directory) == {"1.arrow", "1.json"}
    on_disk = hashlib.sha256((directory / "1.arrow").read_bytes()).hexdigest()
    assert on_disk == second.sha256


def test_concurrent_commits_leave_one_consistent_winner(
    store: PartitionStore, tmp_path: Path
) -> None:
    bodies = {f"a{i}": ipc(table(10 + i)) for i in range(8)}

    def commit(attempt: str) -> None:
        store.put("orders", 0, attempt, chunks(bodies[attempt], 64))

    threads = [threading.Thread(target=commit, args=(attempt,)) for attempt in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winner = store.get("orders", 0)
    directory = tmp_path / JOB / "orders"
    assert (directory / "0.arrow").read_bytes() == bodies[winner.attempt]
    assert json.loads((directory / "0.json").read_text()) == winner.to_json()
    assert files(directory) == {"0.arrow", "0.json"}


def test_rescan_keeps_committed_and_removes_leftovers(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path, JOB)
    kept = store.put("orders", 0, "a1", [ipc(table(4))])
    store.put("orders", 1, "a1", [ipc(table(4))])
    store.put("orders", 2, "a1", [ipc(table(4))])
    store.put("orders", 3, "a1", [ipc(table(4))])
    store.put("lonely", 0, "a1", [ipc(table(4))])
    store.promote("orders")
    pending = store.begin("orders", 5, "a2")  # a crash mid-upload
    pending.write(b"partial")
    directory = tmp_path / JOB / "orders"
    (directory / "9.arrow").write_bytes(b"data without a sidecar")
    (directory / "1.json").write_text("{not json")  # damaged sidecar
    (directory / "2.arrow").unlink()  # sidecar without data
    with (directory / "3.arrow").open("ab") as handle:  # size differs from the sidecar
        handle.write(b"x")
    (tmp_path / JOB / "lonely" / "0.json").unlink()  # a dataset left with nothing committed

    reopened = PartitionStore(tmp_path, JOB)
    assert reopened.partitions() == [kept]
    assert reopened.promoted() == {"orders"}
    assert files(directory) == {"0.arrow", "0.json", ".promoted"}
    assert not (tmp_path / JOB / "lonely").exists()
    assert reopened.recovered == 1


def test_verify_deletes_and_reports_a_corrupt_partition(
    store: PartitionStore, tmp_path: Path
) -> None:
    good = store.put("orders", 0, "a1", [ipc(table(30))])
    store.put("orders", 1, "a1", [ipc(table(30))])
    path = tmp_path / JOB / "orders" / "1.arrow"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))

    reports = store.verify()
    assert [(r.dataset, r.partition) for r in reports] == [("orders", 1)]
    assert "sha256" in reports[0].error
    assert store.partitions() == [good]
    assert not path.exists()
    assert not path.with_suffix(".json").exists()
    assert store.verify() == []


def test_release_keeps_promoted_datasets_unless_asked(store: PartitionStore) -> None:
    for partition in range(3):
        store.put("cluster", partition, "a1", [ipc(table(2))])
        store.put("scratch", partition, "a1", [ipc(table(2))])
    summary = store.promote("cluster")
    assert (summary.dataset, summary.partitions, summary.rows, summary.promoted) == (
        "cluster",
        3,
        6,
        True,
    )
    assert store.release() == 3
    assert {meta.dataset for meta in store.partitions()} == {"cluster"}
    assert store.release() == 0
    assert store.release(include_promoted=True) == 3
    assert store.partitions() == []
    assert store.promoted() == set()
    assert list(store.directory.iterdir()) == []


def test_release_of_a_dataset_removes_it_even_promoted(store: PartitionStore) -> None:
    store.put("cluster", 0, "a1", [ipc(table(2))])
    store.put("other", 0, "a1", [ipc(table(2))])
    store.promote("cluster")
    assert store.release_dataset("cluster") == 1
    assert store.release_dataset("cluster") == 0
    assert [d.dataset for d in store.datasets()] == ["other"]
    assert store.promoted() == set()


def test_promote_needs_partitions(store: PartitionStore) -> None:
    with pytest.raises(DatasetMissing, match="'nothing' has no committed partitions"):
        store.promote("nothing")


def test_datasets_sum_their_partitions(store: PartitionStore) -> None:
    a = store.put("a", 0, "x", [ipc(table(2))])
    b = store.put("a", 1, "x", [ipc(table(3))])
    store.put("b", 0, "x", [ipc(table(4))])
    rows = {d.dataset: (d.partitions, d.bytes, d.rows, d.promoted) for d in store.datasets()}
    assert rows["a"] == (2, a.bytes + b.bytes, 5, False)
    assert rows["b"][0] == 1
    assert store.totals()[0] == 3


@pytest.mark.parametrize(
    ("dataset", "partition", "attempt", "field"),
    [
        ("-starts-with-dash", 0, "a1", "dataset"),
        ("has/slash", 0, "a1", "dataset"),
        ("x" * 129, 0, "a1", "dataset"),
        ("..", 0, "a1", "dataset"),
        ("ok", -1, "a1", "partition"),
        ("ok", 1_000_000, "a1", "partition"),
        ("ok", 0, "has space", "attempt"),
        ("ok", 0, "", "attempt"),
        ("ok", 0, "x" * 65, "attempt"),
    ],
)
def test_names_are_checked(
    store: PartitionStore, dataset: str, partition: int, attempt: str, field: str
) -> None:
    with pytest.raises(InvalidName, match=f"^{field} .* is not valid: expected") as caught:
        store.begin(dataset, partition, attempt)
    assert caught.value.field == field
    assert list(store.directory.iterdir()) == []


def test_partition_text_is_decimal_only() -> None:
    assert check_partition("0") == 0
    assert check_partition("999999") == 999_999
    for bad in ("1e3", "+1", " 1", "٣", "1000000", True):
        with pytest.raises(InvalidName):
            check_partition(bad)


def test_invalid_job_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidName, match=r"job '\.\./up'"):
        PartitionStore(tmp_path, "../up")


def test_stale_uploads_are_aborted(store: PartitionStore, tmp_path: Path) -> None:
    upload = store.begin("orders", 0, "a1")
    upload.write(ipc(table(1)))
    assert store.abort_stale(0.0) == 0  # still being written
    upload.finish()
    assert store.abort_stale(3600.0) == 0
    assert store.abort_stale(0.0) == 1
    assert files(tmp_path / JOB / "orders") == set()
    assert store.pending(upload.id) is None


def test_commit_of_another_partitions_upload_is_refused(store: PartitionStore) -> None:
    upload = store.begin("orders", 0, "a1")
    upload.write(ipc(table(1)))
    with pytest.raises(UnknownUpload, match="'orders' partition 1"):
        store.commit(upload.id, "orders", 1)
    assert store.commit(upload.id, "orders", 0).partition == 0
