"""Savepoints of a job of several queries (format version 3) and where each query restarts.

No Spark: checkpoints are cut from a directory laid out as Spark writes it. A job of one query
keeps writing versions 1 and 2 byte for byte, and those still restore.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from finishable.driver.streaming.checkpoints import (
    LINEAGE_KEY,
    Fingerprints,
    UnrestorableSavepoint,
    find_restore,
    lineage_of,
)
from finishable.driver.streaming.plan import query_set_refusal
from finishable.driver.streaming.queries import find_query_restores, pending_key, query_store
from finishable.driver.streaming.savepoints import (
    COMPOSITE_VERSION,
    IncompatibleSavepoint,
    Savepoint,
    SavepointError,
    SavepointManifest,
    check_queries_restorable,
    composite_savepoint,
    decode_savepoint,
    encode_savepoint,
    pack_checkpoint,
)
from finishable.state import CheckpointKind, CheckpointStore, LocalDirBackend
from tests.driver.test_savepoints import fake_checkpoint

pytestmark = pytest.mark.quick

PAGES = Fingerprints(sources={"clicks": "c1"}, sinks={"pages": "p1"})
SEEDS = Fingerprints(sources={"seeds": "s1"}, sinks={"seeds": "s2"})
PROGRAM = {"pages": PAGES, "seeds": SEEDS}


def part(checkpoint: Path, batch: int, prints: Fingerprints, *, drained: bool = False) -> Savepoint:
    """One query's savepoint at ``batch``."""
    manifest = SavepointManifest(
        job="j",
        batch_id=batch,
        drained=drained,
        sources=dict(prints.sources),
        sinks=dict(prints.sinks),
    )
    snapshots = dict.fromkeys(prints.sources, b"snap-%d" % batch)
    return Savepoint(manifest, pack_checkpoint(checkpoint, batch), snapshots)


def composite(checkpoint: Path, *, seeds: int | None = 1, drained: bool = False) -> Savepoint:
    parts = {
        "pages": part(checkpoint, 2, PAGES, drained=drained),
        "seeds": part(checkpoint, seeds, SEEDS, drained=drained) if seeds is not None else None,
    }
    return composite_savepoint(SavepointManifest(job="j", batch_id=0, drained=drained), parts)


def program() -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    return {name: (dict(f.sources), dict(f.sinks)) for name, f in PROGRAM.items()}


def test_a_composite_savepoint_round_trips_with_every_query_and_one_that_committed_nothing(
    tmp_path: Path,
) -> None:
    root = fake_checkpoint(tmp_path / "ckpt")
    whole = composite(root)
    decoded = decode_savepoint(encode_savepoint(whole))
    assert decoded.composite and decoded.manifest.version == COMPOSITE_VERSION
    assert decoded.manifest.queries == {"pages": 2, "seeds": 1}
    assert decoded.manifest.batch_id == 2
    assert decoded.queries == whole.queries

    half = composite(root, seeds=None)
    empty = decode_savepoint(encode_savepoint(half))
    assert empty.manifest.queries == {"pages": 2, "seeds": -1}
    assert empty.queries["seeds"] is None and empty.queries["pages"] == half.queries["pages"]


def test_a_single_query_savepoint_is_written_as_before_and_an_old_blob_still_decodes(
    tmp_path: Path,
) -> None:
    root = fake_checkpoint(tmp_path / "ckpt")
    single = part(root, 2, PAGES)
    blob = encode_savepoint(single)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as archive:
        names = archive.getnames()
        member = archive.extractfile("manifest.json")
        assert member is not None
        document = json.loads(member.read())
    assert names == ["manifest.json", "checkpoint.tar", "coordinators/clicks"]
    assert "queries" not in document and document["version"] == 1

    # A blob as the version before this one wrote it: no "queries" in its manifest.
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in {
            "manifest.json": json.dumps(document).encode(),
            "checkpoint.tar": single.checkpoint,
            "coordinators/clicks": b"snap-2",
        }.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    old = decode_savepoint(buffer.getvalue())
    assert not old.composite and old.manifest.batch_id == 2
    assert old.coordinators == {"clicks": b"snap-2"}


def test_a_newer_format_is_refused_with_the_version_it_has(tmp_path: Path) -> None:
    whole = composite(fake_checkpoint(tmp_path / "ckpt"))
    newer = Savepoint(whole.manifest.model_copy(update={"version": 4}), whole.checkpoint)
    with pytest.raises(SavepointError, match="version 4"):
        decode_savepoint(encode_savepoint(newer))


def test_restore_checks_compare_query_by_query(tmp_path: Path) -> None:
    root = fake_checkpoint(tmp_path / "ckpt")
    whole = composite(root)
    check_queries_restorable(whole, queries=program(), allow_drained=False)

    with pytest.raises(IncompatibleSavepoint, match="holds the state of a job of one query"):
        check_queries_restorable(part(root, 2, PAGES), queries=program(), allow_drained=False)
    # a query dropped from the program: refused, unless its state may be dropped
    fewer = {"pages": program()["pages"]}
    with pytest.raises(
        IncompatibleSavepoint,
        match=r"its query 'seeds' is not in this job \(whose queries are pages\).*"
        r"allowNonRestoredState: true",
    ):
        check_queries_restorable(whole, queries=fewer, allow_drained=False)
    check_queries_restorable(whole, queries=fewer, allow_drained=False, allow_non_restored=True)
    renamed = {"pages": program()["pages"], "seeds-v2": program()["seeds"]}
    with pytest.raises(IncompatibleSavepoint, match="its query 'seeds' is not in this job"):
        check_queries_restorable(whole, queries=renamed, allow_drained=False)
    # a query added to the program starts from nothing, as a new operator does in Flink
    more = {**program(), "users": ({"users": "u"}, {"users": "u"})}
    check_queries_restorable(whole, queries=more, allow_drained=False)
    # what is kept is still compared
    changed_and_fewer = {"seeds": ({"seeds": "other"}, {"seeds": "s2"})}
    with pytest.raises(IncompatibleSavepoint, match=r"\(query 'seeds'\).*source 'seeds' changed"):
        check_queries_restorable(
            whole, queries=changed_and_fewer, allow_drained=False, allow_non_restored=True
        )
    changed = {**program(), "seeds": ({"seeds": "other"}, {"seeds": "s2"})}
    with pytest.raises(IncompatibleSavepoint, match=r"\(query 'seeds'\).*source 'seeds' changed"):
        check_queries_restorable(whole, queries=changed, allow_drained=False)

    drained = composite(root, drained=True)
    with pytest.raises(IncompatibleSavepoint, match="allowDrained: true"):
        check_queries_restorable(drained, queries=program(), allow_drained=False)
    check_queries_restorable(drained, queries=program(), allow_drained=True)


def test_each_query_restarts_from_its_own_checkpoint_else_its_part_of_the_savepoint(
    tmp_path: Path,
) -> None:
    root = fake_checkpoint(tmp_path / "ckpt")
    store = CheckpointStore(LocalDirBackend(tmp_path / "store"), retained=3)
    info = store.put_savepoint(1, encode_savepoint(composite(root)))
    lineage = lineage_of("j", info.location)
    stores = {name: query_store(store, name) for name in PROGRAM}
    assert stores["pages"].prefix == "snapshots/queries/pages"

    # A new lineage: every query from its part of the savepoint.
    started = find_query_restores(
        store,
        stores=stores,
        lineage=lineage,
        restore_from=info.location,
        allow_drained=False,
        fingerprints=PROGRAM,
    )
    assert {name: r.batch_id for name, r in started.items()} == {"pages": 2, "seeds": 1}
    assert started["seeds"].restore_point("seeds") is not None
    assert all(r.stored is None for r in started.values())

    # "pages" checkpointed batch 2 in this lineage, with the offsets of 3 pending; "seeds" not
    # yet: it still stands where the savepoint has it.
    stores["pages"].put_checkpoint(
        2,
        encode_savepoint(part(root, 2, PAGES)),
        metadata={LINEAGE_KEY: lineage},
    )
    pending = {LINEAGE_KEY: lineage, "batch": 3, "offsets": "v1\n{}\n{}"}
    store.backend.put(pending_key("pages"), json.dumps(pending).encode())
    again = find_query_restores(
        store,
        stores=stores,
        lineage=lineage,
        restore_from=info.location,
        allow_drained=False,
        fingerprints=PROGRAM,
    )
    assert again["pages"].stored is not None and again["pages"].pending_offsets is not None
    assert again["seeds"].stored is None and again["seeds"].batch_id == 1
    assert store.ids(CheckpointKind.CHECKPOINT) == [], "a query's checkpoints: under its prefix"

    # A job of one query does not take a composite savepoint, nor several queries a single one.
    with pytest.raises(UnrestorableSavepoint, match="holds 2 queries"):
        find_restore(
            store,
            lineage=lineage_of("k", info.location),
            restore_from=info.location,
            allow_drained=False,
            fingerprints=PAGES,
        )
    single = store.put_savepoint(2, encode_savepoint(part(root, 2, PAGES)))
    with pytest.raises(UnrestorableSavepoint, match="a job of one query"):
        find_query_restores(
            store,
            stores=stores,
            lineage=lineage_of("k", single.location),
            restore_from=single.location,
            allow_drained=False,
            fingerprints=PROGRAM,
        )


def test_the_upgrade_check_judges_the_set_of_queries_as_a_restore_does() -> None:
    def refusal(
        running: list[str],
        ours: list[str],
        *,
        one_query_running: bool = False,
        allow_non_restored: bool = False,
    ) -> str:
        return query_set_refusal(
            running,
            ours,
            single=len(ours) == 1,
            one_query_running=one_query_running,
            allow_non_restored=allow_non_restored,
        )

    assert refusal(["pages", "seeds"], ["pages", "seeds"]) == ""
    assert refusal(["pages", "seeds"], ["pages", "seeds", "users"]) == "", "an added query"
    assert refusal([], ["pages", "seeds"]) == "", "nothing running yet"
    dropped = refusal(["pages", "seeds"], ["pages", "users"])
    assert dropped.startswith("the running job's queries seeds are not in this program")
    assert "allowNonRestoredState: true" in dropped
    assert refusal(["pages", "seeds"], ["pages", "users"], allow_non_restored=True) == ""
    # the layouts do not convert, whichever way (a one-query program would restore nothing)
    assert refusal(["pages", "seeds"], ["pages"]).startswith(
        "the running job has 2 queries (pages, seeds) and this program has one"
    )
    assert refusal([], ["pages", "seeds"], one_query_running=True).startswith(
        "the running job has one query and this program has 2"
    )
    assert refusal([], ["pages"], one_query_running=True) == ""
