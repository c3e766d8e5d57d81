"""What a cluster partition is, decided without I/O: identity, JSON, checksum, expiry, names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from finishable.partitions.manifest import (
    Manifest,
    ManifestError,
    PartFile,
    expiry,
    is_partition_id,
    matches,
    part_file,
    partition_id,
)
from finishable.state.backends import validate_name

pytestmark = pytest.mark.quick

CREATED = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def manifest(**changes: object) -> Manifest:
    fields: dict[str, object] = {
        "id": partition_id("jobs", "uid-1", 1, "totals"),
        "dataset": "totals",
        "job": "paid-totals",
        "job_uid": "uid-1",
        "run": 1,
        "namespace": "jobs",
        "schema": {"type": "struct", "fields": []},
        "parts": (
            PartFile(1, part_file(1), 20, 3, "b" * 64),
            PartFile(0, part_file(0), 10, 2, "a" * 64),
        ),
        "created_at": CREATED,
        "expires_at": None,
    }
    fields.update(changes)
    return Manifest(**fields)  # type: ignore[arg-type]


def test_the_id_is_stable_within_a_run_and_unique_across_runs_jobs_and_namespaces() -> None:
    first = partition_id("jobs", "uid-1", 1, "totals")
    assert first == partition_id("jobs", "uid-1", 1, "totals")
    others = {
        partition_id("jobs", "uid-1", 2, "totals"),
        partition_id("jobs", "uid-2", 1, "totals"),
        partition_id("other", "uid-1", 1, "totals"),
        partition_id("jobs", "uid-1", 1, "paid"),
    }
    assert first not in others and len(others) == 4
    assert validate_name(first) == first  # a valid object name (and Kubernetes name)
    assert first.startswith("cp-") and len(first) <= 63
    assert is_partition_id(first)
    assert not is_partition_id("cp-../../etc") and not is_partition_id("totals")


def test_totals_and_checksum_come_from_the_parts() -> None:
    value = manifest()
    assert (value.rows, value.bytes, value.name) == (5, 30, "paid-totals/totals")
    reordered = manifest(parts=tuple(reversed(value.parts)))
    assert reordered.checksum == value.checksum
    changed = manifest(parts=(PartFile(0, part_file(0), 10, 2, "c" * 64),))
    assert changed.checksum != value.checksum


def test_json_round_trip_keeps_everything_and_orders_the_parts() -> None:
    value = manifest(expires_at=CREATED + timedelta(days=7))
    document = value.to_json()
    assert [part["partition"] for part in document["parts"]] == [1, 0]  # as given
    again = Manifest.from_json(document)
    assert [part.partition for part in again.parts] == [0, 1]
    assert again.to_json()["checksum"] == document["checksum"]
    assert (again.created_at, again.expires_at, again.namespace) == (
        CREATED,
        CREATED + timedelta(days=7),
        "jobs",
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rows": None}, None),
        ({"run": "one"}, "field 'run' must be int, found 'one'"),
        ({"parts": "x"}, "field 'parts' must be list"),
        ({"createdAt": "yesterday"}, "createdAt 'yesterday' is not an ISO 8601 time"),
        ({"version": 99}, "manifest version 99 is newer"),
        ({"run": True}, "field 'run' must be int"),
    ],
)
def test_a_bad_manifest_names_the_field(change: dict[str, object], message: str | None) -> None:
    document = {**manifest().to_json(), **change}
    if message is None:  # a derived field is not read back
        assert Manifest.from_json(document).rows == 5
        return
    with pytest.raises(ManifestError, match=message):
        Manifest.from_json(document)
    with pytest.raises(ManifestError, match="JSON object"):
        Manifest.from_json([document])


def test_expiry_from_the_time_to_live() -> None:
    assert expiry(CREATED, None) is None
    value = manifest(expires_at=expiry(CREATED, timedelta(hours=1)))
    assert not value.expired(CREATED + timedelta(minutes=59))
    assert value.expired(CREATED + timedelta(hours=1))
    assert not manifest().expired(CREATED + timedelta(days=10_000))


def test_a_partition_answers_to_its_id_its_name_and_its_dataset() -> None:
    value = manifest()
    assert matches(value, value.id) and matches(value, "paid-totals/totals")
    assert matches(value, "totals")
    assert not matches(value, "paid-totals") and not matches(value, "other/totals")
