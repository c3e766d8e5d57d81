"""Cluster partitions made by hand: what a producing driver writes, without Spark."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa

from finishable.partitions.catalog import PartitionCatalog
from finishable.partitions.manifest import Manifest, PartFile, expiry, now_utc, partition_id


def table(first: int, count: int) -> pa.Table:
    values = list(range(first, first + count))
    return pa.table({"customer": [f"c{v}" for v in values], "cents": values})


def promote(
    catalog: PartitionCatalog,
    *,
    job: str = "paid-totals",
    uid: str = "uid-1",
    run: int = 1,
    dataset: str = "totals",
    ttl: timedelta | None = None,
    commit: bool = True,
    namespace: str | None = "jobs",
) -> Manifest:
    pid = partition_id(namespace, uid, run, dataset)
    parts: list[PartFile] = [
        catalog.write_part(pid, index, table(index * 100, 10 + index)) for index in range(3)
    ]
    created = now_utc()
    staged = Manifest(
        id=pid,
        dataset=dataset,
        job=job,
        job_uid=uid,
        run=run,
        namespace=namespace,
        schema={"type": "struct", "fields": []},
        parts=tuple(parts),
        created_at=created,
        expires_at=expiry(created, ttl),
    )
    catalog.stage(staged)
    return catalog.commit(pid) if commit else staged
