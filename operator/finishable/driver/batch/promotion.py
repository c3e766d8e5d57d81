"""Promotion: a successful Batch run's promoted datasets become cluster partitions (FLIP-67).

At the final checkpoint, before the output is published, each promoted stage's result partitions
are copied from the shuffle servers into the partition storage as parquet parts and *staged*;
once the output is committed the staged manifests are *committed*, which is the promotion. A run
that fails in between leaves only staged promotions (no cluster partition); a driver that crashed
after the output commit commits them on its next attempt (``commit`` is idempotent). Both steps
are keyed by a partition id derived from the run, so a retry rewrites the same partition.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import pyarrow as pa

from finishable.driver.failures import PermanentFailure
from finishable.partitions.catalog import PartitionCatalog
from finishable.partitions.manifest import Manifest, PartFile, expiry, now_utc, partition_id

if TYPE_CHECKING:
    from finishable.api.jobconfig import JobConfig
    from finishable.driver.batch.core import DeclaredStage
    from finishable.shuffle.cluster import ShuffleCluster

log = logging.getLogger(__name__)


class PromotionFailed(RuntimeError):
    """A promoted dataset's partition could not be copied as committed."""


@dataclass(frozen=True, slots=True)
class ProducerIdentity:
    """Who promotes: what every manifest of the run records."""

    job: str
    job_uid: str
    run: int
    namespace: str | None

    @classmethod
    def of(cls, config: JobConfig) -> ProducerIdentity:
        return cls(config.name, config.job_key, config.run, config.namespace)

    def partition_id(self, dataset: str) -> str:
        return partition_id(self.namespace, self.job_uid, self.run, dataset)


def build_manifest(
    producer: ProducerIdentity,
    dataset: str,
    schema: dict[str, object],
    parts: list[PartFile],
    *,
    created_at: datetime,
    ttl_seconds: float | None,
) -> Manifest:
    """The manifest of one promoted dataset (pure)."""
    return Manifest(
        id=producer.partition_id(dataset),
        dataset=dataset,
        job=producer.job,
        job_uid=producer.job_uid,
        run=producer.run,
        namespace=producer.namespace,
        schema=schema,
        parts=tuple(sorted(parts, key=lambda part: part.partition)),
        created_at=created_at,
        expires_at=expiry(created_at, timedelta(seconds=ttl_seconds) if ttl_seconds else None),
    )


def require_storage(config: JobConfig, stage: str) -> None:
    """Refuse ``promote=True`` before any work when the job has nowhere to keep partitions."""
    if config.partition_url is None:
        raise PermanentFailure(
            f"stage {stage!r} is promoted, but the job has no partition storage: set "
            "spec.clusterPartitions.storage (s3://bucket/prefix, ...) or keep checkpoints in "
            "object storage (spec.checkpointing.storage.type: ObjectStore)"
        )


class Promotion:
    """The producing driver's side of promotion, for one driver attempt."""

    def __init__(self, config: JobConfig, shuffle: ShuffleCluster) -> None:
        self.producer = ProducerIdentity.of(config)
        self.url = config.partition_url
        ttl = config.spec.cluster_partitions.ttl
        self.ttl_seconds = ttl.total_seconds() if ttl is not None else None
        self.shuffle = shuffle
        self._catalog: PartitionCatalog | None = None

    @property
    def catalog(self) -> PartitionCatalog:
        if self._catalog is None:
            if self.url is None:
                raise PermanentFailure("the job has no partition storage")
            self._catalog = PartitionCatalog(self.url)
        return self._catalog

    def stage(self, stage: DeclaredStage) -> str:
        """Copy the stage's committed partitions into the partition storage; stage the manifest."""
        pid = self.producer.partition_id(stage.name)
        if self.catalog.committed(pid) is not None:
            return pid  # an earlier attempt of this run promoted it already
        parts = []
        for _, finished in sorted(stage.finished.items()):
            for ref in finished.partitions:
                table = self._fetch(ref.server, ref.dataset, ref.partition, ref.sha256)
                parts.append(self.catalog.write_part(pid, ref.partition, table))
        schema = stage.dataframe.schema.jsonValue()
        manifest = build_manifest(
            self.producer,
            stage.name,
            schema,
            parts,
            created_at=now_utc(),
            ttl_seconds=self.ttl_seconds,
        )
        self.catalog.stage(manifest)
        log.info(
            "stage %s: %d partition(s), %d row(s) staged for promotion as %s in %s",
            stage.name,
            len(parts),
            manifest.rows,
            pid,
            self.catalog.location,
        )
        return pid

    def commit(self, datasets: list[str]) -> list[Manifest]:
        """Publish the staged promotions of ``datasets`` (after the output commit)."""
        return [self.catalog.commit(self.producer.partition_id(name)) for name in datasets]

    def close(self) -> None:
        if self._catalog is not None:
            self._catalog.close()

    def _fetch(self, server: str, dataset: str, partition: int, sha256: str) -> pa.Table:
        buffer = io.BytesIO()
        info = self.shuffle.client(server).download(dataset, partition, buffer)
        if info.sha256 != sha256:
            raise PromotionFailed(
                f"partition {dataset}/{partition} on {server} is not the one its task committed "
                f"(sha256 {info.sha256[:12]}, committed {sha256[:12]})"
            )
        return pa.ipc.open_stream(buffer.getvalue()).read_all()
