"""Where a driver attempt starts from, and the sinks' batch hook over the real endpoint.

No Spark: checkpoint blobs are cut from a checkpoint directory laid out as Spark writes it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from finishable.connectors.streaming.commit_hook import BatchHookClient, BatchHookError
from finishable.coordinator.endpoint import DriverEndpoint
from finishable.driver.checkpoint_log import CheckpointLog
from finishable.driver.streaming.checkpoints import (
    LINEAGE_KEY,
    PENDING_OFFSETS,
    Fingerprints,
    UnrestorableSavepoint,
    find_restore,
    lineage_of,
    read_snapshot_location,
    sink_ahead_problem,
)
from finishable.driver.streaming.savepoints import (
    IncompatibleSavepoint,
    Savepoint,
    SavepointError,
    SavepointManifest,
    encode_savepoint,
    pack_checkpoint,
)
from finishable.kube.api import KubeApi
from finishable.state import CheckpointKind, CheckpointStore, LocalDirBackend
from finishable.state.configmap import ConfigMapBackend
from testcluster.apiserver.emulator import EmulatorServer
from tests.conftest import TOKEN
from tests.driver.test_savepoints import fake_checkpoint

pytestmark = pytest.mark.quick

PRINTS = Fingerprints(sources={"clicks": "abc"}, sinks={"counts": "def"})


def blob(checkpoint: Path, batch: int, *, drained: bool = False, sources: str = "abc") -> bytes:
    manifest = SavepointManifest(
        job="j",
        batch_id=batch,
        drained=drained,
        sources={"clicks": sources},
        sinks={"counts": "def"},
    )
    return encode_savepoint(
        Savepoint(manifest, pack_checkpoint(checkpoint, batch), {"clicks": b"snap-%d" % batch})
    )


@pytest.fixture
def store(tmp_path: Path) -> CheckpointStore:
    return CheckpointStore(LocalDirBackend(tmp_path / "store"), retained=5)


def test_a_recovery_takes_the_newest_checkpoint_of_its_lineage_and_the_pending_offsets(
    tmp_path: Path, store: CheckpointStore
) -> None:
    source = fake_checkpoint(tmp_path / "ckpt")
    ours, theirs = lineage_of("j", ""), lineage_of("j", "file:///old/sp-1.blob")
    store.put_checkpoint(1, blob(source, 1), metadata={LINEAGE_KEY: ours})
    store.put_checkpoint(2, blob(source, 2), metadata={LINEAGE_KEY: theirs})
    pending = {LINEAGE_KEY: ours, "batch": 2, "offsets": 'v1\n{}\n{"clicks":1}'}
    store.backend.put(PENDING_OFFSETS, json.dumps(pending).encode())

    restored = find_restore(
        store, lineage=ours, restore_from="", allow_drained=False, fingerprints=PRINTS
    )
    assert restored.batch_id == 1 and "checkpoint 1" in restored.origin
    assert restored.restore_point("clicks") is not None
    assert restored.restore_point("clicks").data == b"snap-1"  # type: ignore[union-attr]
    target = tmp_path / "attempt-2"
    restored.apply(target)
    log = CheckpointLog(str(target))
    assert log.last_committed() == 1
    assert log.read_entry("offsets", 2) == pending["offsets"].encode()  # replays the same batch 2
    assert log.read_entry("offsets", 3) is None


def test_a_damaged_newest_checkpoint_falls_back_and_stale_offsets_are_ignored(
    tmp_path: Path, store: CheckpointStore
) -> None:
    source = fake_checkpoint(tmp_path / "ckpt")
    ours = lineage_of("j", "")
    store.put_checkpoint(1, blob(source, 1), metadata={LINEAGE_KEY: ours})
    store.put_checkpoint(2, blob(source, 2), metadata={LINEAGE_KEY: ours})
    (tmp_path / "store" / "snapshots" / "chk-000000000002.blob").write_bytes(b"garbage")
    store.backend.put(
        PENDING_OFFSETS, json.dumps({LINEAGE_KEY: ours, "batch": 3, "offsets": "x"}).encode()
    )
    restored = find_restore(
        store, lineage=ours, restore_from="", allow_drained=False, fingerprints=PRINTS
    )
    assert restored.batch_id == 1 and restored.pending_offsets is None


def test_a_new_run_starts_from_its_savepoint_and_refuses_a_bad_one(
    tmp_path: Path, store: CheckpointStore
) -> None:
    source = fake_checkpoint(tmp_path / "ckpt")
    info = store.put_savepoint(1, blob(source, 2))
    run = lineage_of("j", info.location)
    restored = find_restore(
        store, lineage=run, restore_from=info.location, allow_drained=False, fingerprints=PRINTS
    )
    assert restored.batch_id == 2 and "savepoint 1" in restored.origin

    nothing = find_restore(
        store,
        lineage=lineage_of("j", ""),
        restore_from="",
        allow_drained=False,
        fingerprints=PRINTS,
    )
    assert nothing.savepoint is None

    with pytest.raises(SavepointError, match="no savepoint at"):
        read_snapshot_location(str(tmp_path / "nowhere" / "sp-000000000009.blob"), store)
    other = CheckpointStore(LocalDirBackend(tmp_path / "other"))
    changed = other.put_savepoint(1, blob(source, 2, sources="zzz"))
    # Permanent: no later attempt could start from it (the cause says why).
    with pytest.raises(UnrestorableSavepoint, match="the source 'clicks' changed") as refused:
        find_restore(
            store,
            lineage="x",
            restore_from=changed.location,
            allow_drained=False,
            fingerprints=PRINTS,
        )
    assert isinstance(refused.value.__cause__, IncompatibleSavepoint)
    drained = other.put_savepoint(2, blob(source, 2, drained=True))
    with pytest.raises(UnrestorableSavepoint, match="allowDrained"):
        find_restore(
            store,
            lineage="y",
            restore_from=drained.location,
            allow_drained=False,
            fingerprints=PRINTS,
        )
    forced = find_restore(
        store, lineage="y", restore_from=drained.location, allow_drained=True, fingerprints=PRINTS
    )
    assert forced.savepoint is not None and forced.savepoint.manifest.drained


def test_a_start_behind_what_the_sink_published_is_refused_naming_both_positions(
    tmp_path: Path, store: CheckpointStore
) -> None:
    source = fake_checkpoint(tmp_path / "ckpt")
    info = store.put_savepoint(1, blob(source, 2))
    old = find_restore(
        store,
        lineage=lineage_of("uid-r1", info.location),
        restore_from=info.location,
        allow_drained=False,
        fingerprints=PRINTS,
    )
    problem = sink_ahead_problem(old, "counts", 5, allowed=False)
    assert problem is not None
    assert "published batches up to 5" in problem and "(batch 2)" in problem
    assert "3 to 5" in problem and "allowSinkAhead" in problem
    assert sink_ahead_problem(old, "counts", 5, allowed=True) is None, "the user's decision"
    assert sink_ahead_problem(old, "counts", 2, allowed=False) is None, "the sink is not ahead"
    assert sink_ahead_problem(old, "counts", None, allowed=False) is None, "a new sink"

    nothing = find_restore(
        store,
        lineage=lineage_of("uid2-r1", ""),
        restore_from="",
        allow_drained=False,
        fingerprints=PRINTS,
    )
    fresh = sink_ahead_problem(nothing, "counts", 0, allowed=False)
    assert fresh is not None and "starts from nothing" in fresh


def test_a_first_batch_published_before_any_checkpoint_is_replayed_from_its_offsets(
    tmp_path: Path, store: CheckpointStore
) -> None:
    """A driver killed after its sink published batch 0 and before checkpoint 0 was stored: the
    next attempt starts from nothing, replays batch 0 from its stored offsets, and is not refused
    for a sink ahead; another lineage's batch 0 is not taken."""
    ours = lineage_of("uid-r1", "")
    pending = {LINEAGE_KEY: ours, "batch": 0, "offsets": 'v1\n{}\n{"clicks":1}'}
    store.backend.put(PENDING_OFFSETS, json.dumps(pending).encode())
    restored = find_restore(
        store, lineage=ours, restore_from="", allow_drained=False, fingerprints=PRINTS
    )
    assert restored.savepoint is None and restored.pending_offsets is not None
    assert sink_ahead_problem(restored, "counts", 0, allowed=False) is None
    target = tmp_path / "attempt-2"
    restored.apply(target)
    log = CheckpointLog(str(target))
    assert log.read_entry("offsets", 0) == pending["offsets"].encode()
    assert log.last_committed() == -1  # nothing committed: Spark runs batch 0 again

    other = find_restore(
        store,
        lineage=lineage_of("uid-r2", ""),
        restore_from="",
        allow_drained=False,
        fingerprints=PRINTS,
    )
    assert other.pending_offsets is None
    assert sink_ahead_problem(other, "counts", 0, allowed=False) is not None


def test_a_run_continuing_its_own_checkpoint_is_never_refused(
    tmp_path: Path, store: CheckpointStore
) -> None:
    """Within a lineage the pending offsets line the sink up: no refusal after a crash."""
    source = fake_checkpoint(tmp_path / "ckpt")
    ours = lineage_of("uid-r1", "")
    store.put_checkpoint(2, blob(source, 2), metadata={LINEAGE_KEY: ours})
    restored = find_restore(
        store, lineage=ours, restore_from="", allow_drained=False, fingerprints=PRINTS
    )
    assert restored.stored is not None
    assert sink_ahead_problem(restored, "counts", 3, allowed=False) is None


def test_the_batch_hook_route_needs_the_token_and_reaches_the_hook() -> None:
    calls: list[tuple[str, int, str]] = []

    def hook(stage: str, batch: int, body: dict[str, Any]) -> dict[str, object]:
        if batch == 13:
            raise RuntimeError("cannot store checkpoint 12")
        calls.append((stage, batch, body["sink"]))
        return {"ok": True}

    with DriverEndpoint("right-token") as endpoint:
        client = BatchHookClient(endpoint.url, "right-token", "counts", connect_retries=1)
        with pytest.raises(BatchHookError, match="404"):
            client.notify("prepare", 1)  # no job runtime behind the endpoint yet
        endpoint.set_batch_hook(hook)
        assert client.notify("prepare", 7) == {"ok": True}
        client.notify("published", 7)
        with pytest.raises(BatchHookError, match="401"):
            BatchHookClient(endpoint.url, "wrong", "counts").notify("published", 8)
        with pytest.raises(BatchHookError, match="cannot store checkpoint 12"):
            client.notify("prepare", 13)
        with pytest.raises(BatchHookError, match="unknown batch stage"):
            client.notify("committed", 9)
    assert calls == [("prepare", 7, "counts"), ("published", 7, "counts")]


def test_a_savepoint_in_the_jobs_configmaps_restores_from_its_reported_location(
    tmp_path: Path, k8s_server: EmulatorServer
) -> None:
    """``configmap://ns/<job>-snapshots.sp-N.blob``, as status reports it, is the job's own."""
    api = KubeApi.for_url(k8s_server.url, token=TOKEN, namespace="restore")
    store = CheckpointStore(ConfigMapBackend(api, "clicks", namespace="restore"))
    info = store.put_savepoint(1, blob(fake_checkpoint(tmp_path / "ckpt"), 2))
    assert info.location == "configmap://restore/clicks-snapshots.sp-000000000001.blob"
    data, what = read_snapshot_location(info.location, store)
    assert what == "savepoint 1" and data == store.get(CheckpointKind.SAVEPOINT, 1).data
    other = CheckpointStore(ConfigMapBackend(api, "other", namespace="restore"))
    with pytest.raises(SavepointError, match="in the ConfigMaps of another job"):
        read_snapshot_location(info.location, other)
