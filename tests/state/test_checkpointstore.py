"""The CheckpointStore contract, run against every backend."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path

import pytest

from finishable.state import (
    CheckpointCorrupt,
    CheckpointKind,
    CheckpointNotFound,
    CheckpointStore,
    LocalDirBackend,
)
from finishable.state.checkpointstore import encode_blob

from .conftest import BackendCase

pytestmark = pytest.mark.quick

CHK = CheckpointKind.CHECKPOINT
SP = CheckpointKind.SAVEPOINT


def blob_name(kind: CheckpointKind, snapshot_id: int) -> str:
    return f"snapshots/{'chk' if kind is CHK else 'sp'}-{snapshot_id:012d}.blob"


def test_put_get_and_info(case: BackendCase) -> None:
    store = CheckpointStore(case.backend)
    info = store.put_checkpoint(7, b"state-7", metadata={"batch": 7, "query": "q1"})
    assert (info.kind, info.id, info.size) == (CHK, 7, 7)
    assert info.sha256 == hashlib.sha256(b"state-7").hexdigest()
    assert "chk-000000000007.blob" in info.location
    snapshot = store.get_checkpoint(7)
    assert snapshot.data == b"state-7"
    assert snapshot.info.metadata == {"batch": 7, "query": "q1"}
    assert snapshot.info.sha256 == info.sha256
    with pytest.raises(CheckpointNotFound):
        store.get_checkpoint(8)
    with pytest.raises(CheckpointNotFound):
        store.get_savepoint(7)  # kinds are separate namespaces


def test_latest_and_list(case: BackendCase) -> None:
    store = CheckpointStore(case.backend, retained=10)
    assert store.latest_checkpoint() is None
    assert store.latest_savepoint() is None
    for checkpoint_id in (3, 1, 12, 5):
        store.put_checkpoint(checkpoint_id, f"c{checkpoint_id}".encode())
    store.put_savepoint(4, b"s4")
    store.put_savepoint(2, b"s2")
    latest = store.latest_checkpoint()
    assert latest is not None
    assert (latest.id, latest.data) == (12, b"c12")
    latest_sp = store.latest_savepoint()
    assert latest_sp is not None
    assert (latest_sp.id, latest_sp.data) == (4, b"s4")
    assert store.ids(CHK) == [1, 3, 5, 12]
    assert [(i.kind, i.id) for i in store.list()] == [
        (CHK, 1),
        (CHK, 3),
        (CHK, 5),
        (CHK, 12),
        (SP, 2),
        (SP, 4),
    ]
    assert [i.id for i in store.list(SP)] == [2, 4]


def test_retention_keeps_the_last_checkpoints_and_every_savepoint(case: BackendCase) -> None:
    store = CheckpointStore(case.backend, retained=2)
    store.put_savepoint(1, b"savepoint-1")
    for checkpoint_id in range(1, 6):
        store.put_checkpoint(checkpoint_id, f"c{checkpoint_id}".encode())
        store.put_savepoint(100 + checkpoint_id, b"sp")
    assert store.ids(CHK) == [4, 5]
    assert store.ids(SP) == [1, 101, 102, 103, 104, 105]
    names = case.backend.list("snapshots/")
    assert not [n for n in names if n.startswith("snapshots/chk-") and n[-17:-5] < "000000000004"]
    assert store.get_savepoint(1).data == b"savepoint-1"
    assert store.apply_retention() == []


def test_dispose(case: BackendCase) -> None:
    store = CheckpointStore(case.backend)
    store.put_savepoint(9, b"sp9")
    store.put_checkpoint(9, b"c9")
    assert store.dispose(SP, 9) is True
    assert store.dispose(SP, 9) is False
    assert store.latest_savepoint() is None
    assert store.get_checkpoint(9).data == b"c9"  # the checkpoint with the same id stays
    assert case.backend.list("snapshots/sp-") == []


def test_corrupt_newest_falls_back_with_a_warning(
    case: BackendCase, caplog: pytest.LogCaptureFixture
) -> None:
    store = CheckpointStore(case.backend, retained=3)
    store.put_checkpoint(1, b"one")
    store.put_checkpoint(2, b"two")
    name = blob_name(CHK, 2)
    damaged = bytearray(case.backend.get(name))
    damaged[-1] ^= 0xFF  # flip a bit of the payload
    case.backend.put(name, bytes(damaged))
    with pytest.raises(CheckpointCorrupt, match="sha256"):
        store.get_checkpoint(2)
    with caplog.at_level(logging.WARNING, logger="finishable.state.checkpointstore"):
        latest = store.latest_checkpoint()
    assert latest is not None
    assert (latest.id, latest.data) == (1, b"one")
    assert "checkpoint 2 is unusable" in caplog.text
    assert "falling back" in caplog.text


def test_truncated_blob_falls_back(case: BackendCase) -> None:
    store = CheckpointStore(case.backend)
    store.put_checkpoint(1, b"one")
    store.put_checkpoint(2, os.urandom(4096))
    case.backend.put(blob_name(CHK, 2), case.backend.get(blob_name(CHK, 2))[:100])
    latest = store.latest_checkpoint()
    assert latest is not None
    assert latest.id == 1


def test_missing_newest_blob_falls_back(
    case: BackendCase, caplog: pytest.LogCaptureFixture
) -> None:
    store = CheckpointStore(case.backend)
    store.put_savepoint(1, b"sp-one")
    store.put_savepoint(2, b"sp-two")
    case.backend.delete(blob_name(SP, 2))
    with pytest.raises(CheckpointCorrupt, match="missing"):
        store.get_savepoint(2)
    with caplog.at_level(logging.WARNING):
        latest = store.latest_savepoint()
    assert latest is not None
    assert latest.data == b"sp-one"
    assert "savepoint 2 is unusable" in caplog.text


def test_swapped_blob_is_detected(case: BackendCase) -> None:
    """A blob that is intact in itself but belongs to another snapshot fails the meta check."""
    store = CheckpointStore(case.backend)
    store.put_checkpoint(1, b"one")
    store.put_checkpoint(2, b"two")
    case.backend.put(blob_name(CHK, 2), case.backend.get(blob_name(CHK, 1)))
    with pytest.raises(CheckpointCorrupt, match="does not match its meta"):
        store.get_checkpoint(2)


def test_every_snapshot_unreadable_is_an_error_not_a_fresh_start(case: BackendCase) -> None:
    store = CheckpointStore(case.backend)
    store.put_checkpoint(1, b"one")
    store.put_checkpoint(2, b"two")
    case.backend.put(blob_name(CHK, 1), b"garbage")
    case.backend.delete(blob_name(CHK, 2))
    with pytest.raises(CheckpointCorrupt, match="none of the 2 committed checkpoints"):
        store.latest_checkpoint()


def test_half_written_snapshot_is_invisible_and_collected(case: BackendCase) -> None:
    """A crash between blob and meta leaves a blob nobody sees; retention removes it later."""
    store = CheckpointStore(case.backend, retained=2)
    store.put_checkpoint(1, b"one")
    case.backend.put(blob_name(CHK, 2), encode_blob(b"two, never committed"))
    assert store.ids(CHK) == [1]
    latest = store.latest_checkpoint()
    assert latest is not None
    assert latest.id == 1
    with pytest.raises(CheckpointNotFound):
        store.get_checkpoint(2)
    store.put_checkpoint(3, b"three")
    store.put_checkpoint(4, b"four")  # oldest retained is now 3: the orphan 2 is garbage
    assert blob_name(CHK, 2) not in case.backend.list("snapshots/")
    assert store.ids(CHK) == [3, 4]


def test_reput_replaces_a_snapshot(case: BackendCase) -> None:
    store = CheckpointStore(case.backend)
    store.put_checkpoint(5, b"first attempt")
    store.put_checkpoint(5, b"second attempt")
    assert store.get_checkpoint(5).data == b"second attempt"
    assert store.ids(CHK) == [5]


def test_large_snapshot_round_trip(case: BackendCase) -> None:
    """Above the 1 MiB ConfigMap limit: split over several ConfigMaps there, plain elsewhere."""
    payload = os.urandom(2 * 1024 * 1024 + 123)
    store = CheckpointStore(case.backend)
    store.put_checkpoint(1, payload)
    latest = store.latest_checkpoint()
    assert latest is not None
    assert latest.data == payload


def test_concurrent_puts_from_driver_threads(case: BackendCase) -> None:
    store = CheckpointStore(case.backend, retained=3)
    errors: list[BaseException] = []

    def put(first: int) -> None:
        try:
            for checkpoint_id in range(first, 12, 3):
                store.put_checkpoint(checkpoint_id, f"c{checkpoint_id}".encode())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=put, args=(start,)) for start in (0, 1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert store.ids(CHK) == [9, 10, 11]
    assert [store.get_checkpoint(i).data for i in (9, 10, 11)] == [b"c9", b"c10", b"c11"]


def test_a_second_store_sees_committed_snapshots(case: BackendCase) -> None:
    """A new driver attempt opens the store afresh and restores from what the last one wrote."""
    CheckpointStore(case.backend).put_checkpoint(41, b"forty-one")
    backend = case.reopen()
    try:
        latest = CheckpointStore(backend).latest_checkpoint()
        assert latest is not None
        assert (latest.id, latest.data) == (41, b"forty-one")
    finally:
        backend.close()


def test_invalid_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="retained"):
        CheckpointStore(LocalDirBackend(tmp_path), retained=0)
    store = CheckpointStore(LocalDirBackend(tmp_path))
    with pytest.raises(ValueError, match="non-negative"):
        store.put_checkpoint(-1, b"x")
