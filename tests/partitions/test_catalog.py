"""The partition storage on a local directory and on S3: promotion, lookup, health, release."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from finishable.partitions import catalog as catalog_module
from finishable.partitions.catalog import (
    AmbiguousPartition,
    PartitionCatalog,
    PartitionInUse,
    PartitionNotFound,
)
from finishable.partitions.manifest import now_utc, object_url
from finishable.state.local import LocalDirBackend
from finishable.state.objectstore import ObjectStoreBackend
from tests.partitions.support import promote, table
from tests.state.conftest import S3Server

pytestmark = pytest.mark.quick


@pytest.fixture(params=["local", "s3"])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> PartitionCatalog:
    if request.param == "local":
        return PartitionCatalog(str(tmp_path / "partitions"))
    server: S3Server = request.getfixturevalue("s3_server")
    return PartitionCatalog(server.url(f"partitions-{uuid.uuid4().hex[:8]}"))


def test_a_staged_promotion_is_not_a_partition_until_committed(catalog: PartitionCatalog) -> None:
    staged = promote(catalog, commit=False)
    assert catalog.list() == []
    with pytest.raises(PartitionNotFound, match="no cluster partition 'totals'"):
        catalog.get("totals")
    committed = catalog.commit(staged.id)
    assert committed == staged
    assert catalog.commit(staged.id) == staged  # a second commit (a retried driver) is a no-op
    assert [m.id for m in catalog.list()] == [staged.id]
    assert (committed.rows, len(committed.parts)) == (33, 3)


def test_parts_are_parquet_with_the_recorded_rows_and_hash(catalog: PartitionCatalog) -> None:
    manifest = promote(catalog)
    import hashlib

    import pyarrow.fs as pafs

    for part in manifest.parts:
        filesystem, path = pafs.FileSystem.from_uri(catalog.part_url(manifest, part))
        with filesystem.open_input_file(path) as handle:
            data = handle.read()
        assert hashlib.sha256(data).hexdigest() == part.sha256 and len(data) == part.bytes
        read = pq.read_table(pa.BufferReader(data))
        assert read.num_rows == part.rows
        assert read.equals(table(part.partition * 100, 10 + part.partition))


def test_lookup_by_id_name_and_dataset_takes_the_newest_run(catalog: PartitionCatalog) -> None:
    first = promote(catalog, run=1)
    second = promote(catalog, run=2)
    assert catalog.get(first.id) == first
    assert catalog.get("paid-totals/totals") == second
    assert catalog.get("totals") == second
    promote(catalog, job="other", uid="uid-9")
    with pytest.raises(AmbiguousPartition, match="other/totals, paid-totals/totals"):
        catalog.get("totals")
    assert catalog.get("paid-totals/totals") == second
    with pytest.raises(PartitionNotFound, match="known: paid-totals/totals"):
        catalog.get("paid-totals/nope")


def test_delete_removes_every_file_and_the_partition(catalog: PartitionCatalog) -> None:
    kept = promote(catalog, dataset="kept")
    gone = promote(catalog)
    catalog.hold(gone.id, "reader-r1", now_utc() - timedelta(hours=1))  # a lapsed lease
    assert catalog.delete(gone.id) == 5  # three parts, the lease and the manifest
    assert catalog.backend.list(f"{gone.id}/") == []
    if isinstance(catalog.backend, LocalDirBackend):
        assert not (catalog.backend.root / gone.id).exists()  # no empty directory is left
    else:  # nor a directory marker of pyarrow's in the bucket
        assert isinstance(catalog.backend, ObjectStoreBackend)
        selector = pafs.FileSelector(f"{catalog.backend.root}/{gone.id}", allow_not_found=True)
        assert catalog.backend.fs.get_file_info(selector) == []
    assert [m.id for m in catalog.list()] == [kept.id]
    assert catalog.delete(gone.id) == 0
    with pytest.raises(PartitionNotFound):
        catalog.get(gone.id)


def test_a_part_gone_from_the_storage_makes_the_partition_lost(catalog: PartitionCatalog) -> None:
    manifest = promote(catalog)
    assert not catalog.health(manifest).lost
    catalog.backend.delete(f"{manifest.id}/{manifest.parts[1].file}")
    health = catalog.health(manifest)
    assert health.lost and health.missing == (manifest.parts[1].file,)


def test_expired_partitions_are_released(
    catalog: PartitionCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the catalog's clock, moved by the test: a slow storage cannot make the partition expire
    # before the test has looked at it
    clock = [now_utc()]
    monkeypatch.setattr(catalog_module, "now_utc", lambda: clock[0])
    short = promote(catalog, dataset="short", ttl=timedelta(seconds=5))
    forever = promote(catalog, dataset="forever")
    assert short.expires_at is not None
    assert catalog.expire(clock[0]) == []
    assert {m.id for m in catalog.list()} == {short.id, forever.id}
    # the time to live runs out: the partition is gone before its files are
    clock[0] = short.expires_at + timedelta(seconds=0.1)
    assert [m.id for m in catalog.list()] == [forever.id]
    with pytest.raises(PartitionNotFound):
        catalog.get(short.id)
    assert catalog.backend.list(f"{short.id}/") != []
    assert catalog.expire(clock[0]) == [short.id]
    assert [m.id for m in catalog.list()] == [forever.id]
    assert catalog.backend.list(f"{short.id}/") == []


def test_a_failed_run_leaves_nothing_once_its_staged_promotions_are_discarded(
    catalog: PartitionCatalog,
) -> None:
    staged = promote(catalog, run=2, commit=False)
    other_run = promote(catalog, run=3, commit=False)
    assert catalog.discard_staged("uid-1", 2) == [staged.id]
    assert catalog.backend.list(f"{staged.id}/") == []
    assert catalog.commit(other_run.id).id == other_run.id


def test_object_urls_keep_the_query_of_the_storage() -> None:
    url = "s3://bucket/prefix?endpoint_override=127.0.0.1:9000&scheme=http"
    assert object_url(url, "cp-1/part-000000.parquet") == (
        "s3://bucket/prefix/cp-1/part-000000.parquet?endpoint_override=127.0.0.1:9000&scheme=http"
    )
    assert object_url("/data/partitions/", "cp-1") == "/data/partitions/cp-1"
    assert object_url("local:///data/p", "cp-1") == "/data/p/cp-1"
    assert object_url("file:///data/p", "cp-1") == "file:///data/p/cp-1"


def test_a_fresh_lease_refuses_a_delete_and_a_given_back_one_does_not(
    catalog: PartitionCatalog,
) -> None:
    manifest = promote(catalog)
    catalog.hold(manifest.id, "consumer-r1", now_utc())
    assert catalog.readers(manifest.id, now_utc()) == ["consumer-r1"]
    with pytest.raises(PartitionInUse, match="being read by consumer-r1"):
        catalog.delete(manifest.id)
    assert catalog.get(manifest.id) == manifest
    catalog.let_go(manifest.id, "consumer-r1")
    assert catalog.readers(manifest.id, now_utc()) == []
    assert catalog.delete(manifest.id) == 4
