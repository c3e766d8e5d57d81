"""The retention policy's decisions, without I/O: which state ConfigMaps outlive their job."""

from __future__ import annotations

from typing import Any

from finishable.api.models import RetainOnDelete
from finishable.controller.deletion import dispose_state, retain_on_delete


def configmap(name: str, object_name: str | None) -> dict[str, Any]:
    annotations = {"finishable.dev/object-name": object_name} if object_name else {}
    return {"metadata": {"name": name, "annotations": annotations}}


STATE = [
    configmap("etl-snapshots.sp-000000000002.blob", "snapshots/sp-000000000002.blob"),
    configmap("etl-snapshots.sp-000000000002.blob-part-0001", "snapshots/sp-000000000002.blob"),
    configmap("etl-snapshots.chk-000000000009.meta", "snapshots/chk-000000000009.meta"),
    configmap("etl-pending-offsets", "pending-offsets"),
    configmap("etl-events.uid-r1.seg-000000000000", "events/uid-r1/seg-000000000000"),
    configmap("etl-fence.uid.claims.r000001-a000002", "fence/uid/claims/r000001-a000002"),
    configmap("etl-by-hand", None),
]


def test_the_default_keeps_savepoints_and_their_parts_only() -> None:
    disposal = dispose_state(STATE, RetainOnDelete.SAVEPOINTS)
    assert disposal.keep == [
        "etl-snapshots.sp-000000000002.blob",
        "etl-snapshots.sp-000000000002.blob-part-0001",
    ]
    assert len(disposal.delete) == len(STATE) - 2


def test_nothing_and_everything() -> None:
    assert dispose_state(STATE, RetainOnDelete.NOTHING).keep == []
    assert dispose_state(STATE, RetainOnDelete.EVERYTHING).delete == []


def test_a_spec_that_says_nothing_or_nonsense_keeps_the_savepoints() -> None:
    assert retain_on_delete({}) is RetainOnDelete.SAVEPOINTS
    assert retain_on_delete({"checkpointing": {"retainOnDelete": "Sometimes"}}) is (
        RetainOnDelete.SAVEPOINTS
    )
    assert retain_on_delete({"checkpointing": {"retainOnDelete": "Nothing"}}) is (
        RetainOnDelete.NOTHING
    )
