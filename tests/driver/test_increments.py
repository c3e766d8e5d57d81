"""Incremental checkpoints: shared content files, uploads of what changed, collection, restore."""

from __future__ import annotations

from pathlib import Path

import pytest

from finishable.driver.streaming import increments as increments_module
from finishable.driver.streaming.checkpoints import LINEAGE_KEY, find_restore, lineage_of
from finishable.driver.streaming.increments import Increments
from finishable.driver.streaming.savepoints import (
    Savepoint,
    SavepointManifest,
    decode_savepoint,
    encode_savepoint,
    pack_files,
)
from finishable.state import CheckpointCorrupt, CheckpointStore, LocalDirBackend
from finishable.state.contents import ContentStore
from tests.driver.test_checkpoints import PRINTS
from tests.driver.test_cut import PARTITION, commit_batch, maintain

pytestmark = pytest.mark.quick

RUN = lineage_of("j", "")


def checkpoint(store: CheckpointStore, increments: Increments, root: Path, batch: int) -> None:
    """What the checkpoint keeper does for one batch."""
    small, files = increments.upload(root, batch)
    manifest = SavepointManifest(
        job="j", batch_id=batch, sources=PRINTS.sources, sinks=PRINTS.sinks
    )
    store.put_checkpoint(
        batch,
        encode_savepoint(Savepoint(manifest, pack_files(small), {"clicks": b"snap"}, files)),
        metadata={LINEAGE_KEY: RUN},
    )
    increments.committed(batch, files)


@pytest.fixture(autouse=True)
def share_every_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake checkpoints' files are tiny: share them all, as large files are shared."""
    monkeypatch.setattr(increments_module, "INLINE_BELOW", 1)


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def store(tmp_path: Path) -> CheckpointStore:
    return CheckpointStore(LocalDirBackend(tmp_path / "store"), retained=2)


def test_a_checkpoint_uploads_what_changed_and_restores_whole(
    tmp_path: Path, store: CheckpointStore
) -> None:
    root = tmp_path / "live"
    big = "x" * 100_000
    commit_batch(root, 0)
    (root / "metadata").write_text(big)  # a large file every checkpoint shares
    increments = Increments(store)
    checkpoint(store, increments, root, 0)
    assert increments.last.uploaded_bytes >= len(big)
    commit_batch(root, 1)
    checkpoint(store, increments, root, 1)
    assert increments.last.uploaded_bytes < 1_000 < increments.last.state_bytes
    snapshot = store.get_checkpoint(1)
    assert snapshot.info.size < 2_000  # an index, not the state
    assert decode_savepoint(snapshot.data).incremental

    restored = find_restore(
        store, lineage=RUN, restore_from="", allow_drained=False, fingerprints=PRINTS
    )
    assert restored.batch_id == 1
    restored.apply(tmp_path / "restored")
    assert tree(tmp_path / "restored") == tree(root)


def test_files_no_retained_checkpoint_names_are_collected(
    tmp_path: Path, store: CheckpointStore
) -> None:
    root = tmp_path / "live"
    contents = ContentStore(store.backend, store.prefix)
    increments = Increments(store)
    for batch in range(8):
        commit_batch(root, batch)
        maintain(root, retain=1)
        checkpoint(store, increments, root, batch)
    retained = store.ids()
    assert retained == [6, 7]
    referenced = set()
    for batch in retained:
        referenced |= set(decode_savepoint(store.get_checkpoint(batch).data).files.values())
    assert set(contents.known()) == referenced
    # Every retained checkpoint still restores, from a new keeper's point of view too.
    restored = find_restore(
        store, lineage=RUN, restore_from="", allow_drained=False, fingerprints=PRINTS
    )
    restored.apply(tmp_path / "restored")
    assert (tmp_path / "restored" / PARTITION / "8.snapshot").is_file()


def test_a_new_attempt_collects_with_the_indexes_of_checkpoints_it_did_not_write(
    tmp_path: Path, store: CheckpointStore
) -> None:
    root = tmp_path / "live"
    for batch in range(2):
        commit_batch(root, batch)
        checkpoint(store, Increments(store), root, batch)
    commit_batch(root, 2)
    checkpoint(store, Increments(store), root, 2)  # drops checkpoint 0, keeps what 1 needs
    restored = find_restore(
        store, lineage=RUN, restore_from="", allow_drained=False, fingerprints=PRINTS
    )
    assert restored.batch_id == 2
    checkpoint_one = decode_savepoint(store.get_checkpoint(1).data)
    contents = ContentStore(store.backend, store.prefix)
    for digest in checkpoint_one.files.values():
        contents.get(digest)  # every file checkpoint 1 needs is still there


def test_a_damaged_content_file_is_named(tmp_path: Path, store: CheckpointStore) -> None:
    root = tmp_path / "live"
    commit_batch(root, 0)
    increments = Increments(store)
    checkpoint(store, increments, root, 0)
    files = decode_savepoint(store.get_checkpoint(0).data).files
    digest = files["offsets/0"]
    blob = tmp_path / "store" / "snapshots" / "files" / f"{digest}.blob"
    blob.write_bytes(blob.read_bytes()[:-1] + b"!")
    with pytest.raises(CheckpointCorrupt, match=f"checkpoint file {digest}"):
        ContentStore(store.backend, store.prefix).get(digest)


def test_small_files_go_inside_the_checkpoint_and_large_ones_are_shared(
    tmp_path: Path, store: CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(increments_module, "INLINE_BELOW", 1000)
    root = tmp_path / "live"
    commit_batch(root, 0)
    (root / PARTITION / "1.snapshot").write_text("s" * 5000)
    checkpoint(store, Increments(store), root, 0)
    saved = decode_savepoint(store.get_checkpoint(0).data)
    assert set(saved.files) == {f"{PARTITION}/1.snapshot"}
    assert saved.manifest.version == 2  # older readers refuse it rather than restore half
    restored = find_restore(
        store, lineage=RUN, restore_from="", allow_drained=False, fingerprints=PRINTS
    )
    restored.apply(tmp_path / "restored")
    covered = {f"{PARTITION}/1.delta", f"{PARTITION}/.1.delta.crc"}  # the snapshot covers it
    assert tree(tmp_path / "restored") == {
        name: data for name, data in tree(root).items() if name not in covered
    }
