"""What a cluster partition is: its manifest, its identity and the decisions about it (pure).

A cluster partition (Flink's FLIP-67) is a dataset a successful Batch job promoted with
``job.stage(name, df, promote=True)``. Its parts are parquet files in the partition storage;
the manifest says who produced it (job, uid, run), what it holds (schema, parts, sizes, rows,
checksums) and until when (``expiresAt``). Everything here is a pure function of its inputs, so
the catalog, the driver, the CLI and the REST service decide the same way.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

MANIFEST_VERSION = 1
PART_PATTERN = "part-*.parquet"
DEFAULT_NAMESPACE = "default"
"""The namespace of partitions promoted by local runs (their manifests name none)."""


class ManifestError(ValueError):
    """A manifest that cannot be read: names the field and what was found."""


@dataclass(frozen=True, slots=True)
class PartFile:
    """One result partition of the dataset, stored as one parquet file."""

    partition: int
    file: str
    bytes: int
    rows: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "file": self.file,
            "bytes": self.bytes,
            "rows": self.rows,
            "sha256": self.sha256,
        }


@dataclass(frozen=True, slots=True)
class Manifest:
    """A cluster partition's description; written last, so its presence is the promotion."""

    id: str
    dataset: str
    job: str
    job_uid: str
    run: int
    namespace: str | None
    schema: dict[str, Any]
    """Spark's JSON of the dataset's StructType (what a consumer reads it as)."""
    parts: tuple[PartFile, ...]
    created_at: datetime
    expires_at: datetime | None = None
    version: int = field(default=MANIFEST_VERSION)

    @property
    def bytes(self) -> int:
        return sum(part.bytes for part in self.parts)

    @property
    def rows(self) -> int:
        return sum(part.rows for part in self.parts)

    @property
    def checksum(self) -> str:
        """One sha256 over the parts' sha256s in partition order: equal data, equal checksum."""
        return combined_checksum(self.parts)

    @property
    def name(self) -> str:
        """The human name: ``<job>/<dataset>`` (several runs may share it; the id is unique)."""
        return f"{self.job}/{self.dataset}"

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "id": self.id,
            "name": self.name,
            "dataset": self.dataset,
            "job": self.job,
            "jobUid": self.job_uid,
            "run": self.run,
            "namespace": self.namespace,
            "schema": self.schema,
            "parts": [part.to_json() for part in self.parts],
            "partitions": len(self.parts),
            "bytes": self.bytes,
            "rows": self.rows,
            "checksum": self.checksum,
            "createdAt": _timestamp(self.created_at),
            "expiresAt": _timestamp(self.expires_at) if self.expires_at else None,
        }

    @classmethod
    def from_json(cls, document: Any) -> Manifest:
        if not isinstance(document, dict):
            raise ManifestError(f"a manifest is a JSON object, found {type(document).__name__}")
        version = _field(document, "version", int)
        if version > MANIFEST_VERSION:
            raise ManifestError(
                f"manifest version {version} is newer than this operator reads "
                f"({MANIFEST_VERSION}): upgrade finishable"
            )
        parts = []
        for index, item in enumerate(_field(document, "parts", list)):
            if not isinstance(item, dict):
                raise ManifestError(f"parts[{index}] is not an object: {item!r}")
            parts.append(
                PartFile(
                    partition=_field(item, "partition", int),
                    file=_field(item, "file", str),
                    bytes=_field(item, "bytes", int),
                    rows=_field(item, "rows", int),
                    sha256=_field(item, "sha256", str),
                )
            )
        expires = document.get("expiresAt")
        namespace = document.get("namespace")
        return cls(
            id=_field(document, "id", str),
            dataset=_field(document, "dataset", str),
            job=_field(document, "job", str),
            job_uid=_field(document, "jobUid", str),
            run=_field(document, "run", int),
            namespace=namespace if isinstance(namespace, str) else None,
            schema=_field(document, "schema", dict),
            parts=tuple(sorted(parts, key=lambda part: part.partition)),
            created_at=_parse_time(_field(document, "createdAt", str), "createdAt"),
            expires_at=_parse_time(expires, "expiresAt") if isinstance(expires, str) else None,
            version=version,
        )

    def expired(self, now: datetime) -> bool:
        """Whether the time to live has run out at ``now``."""
        return self.expires_at is not None and now >= self.expires_at

    def with_parts(self, parts: list[PartFile]) -> Manifest:
        return replace(self, parts=tuple(sorted(parts, key=lambda part: part.partition)))


def partition_id(namespace: str | None, job_key: str, run: int, dataset: str) -> str:
    """The id of the cluster partition a run promotes from ``dataset``: stable across the run's
    driver attempts (a promotion that crashed is redone under the same id), unique across runs,
    jobs and namespaces, and a valid object and Kubernetes name (lowercase hex)."""
    text = f"{namespace or ''}/{job_key}/r{run}/{dataset}"
    return "cp-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def is_partition_id(text: str) -> bool:
    """Whether ``text`` has the form of an id (``partition_id``'s), not of a name."""
    return re.fullmatch(r"cp-[0-9a-f]{20}", text) is not None


def part_file(partition: int) -> str:
    """The file name of one part (sorts in partition order)."""
    return f"part-{partition:06d}.parquet"


def combined_checksum(parts: tuple[PartFile, ...] | list[PartFile]) -> str:
    digest = hashlib.sha256()
    for part in sorted(parts, key=lambda item: item.partition):
        digest.update(f"{part.partition}:{part.sha256}\n".encode("ascii"))
    return digest.hexdigest()


def expiry(created_at: datetime, ttl: timedelta | None) -> datetime | None:
    return created_at + ttl if ttl is not None else None


def matches(manifest: Manifest, reference: str) -> bool:
    """Whether ``reference`` names the partition: its id, ``<job>/<dataset>`` or the dataset."""
    return reference in (manifest.id, manifest.name, manifest.dataset)


def namespace_of(manifest: Manifest) -> str:
    return manifest.namespace or DEFAULT_NAMESPACE


def summary(manifest: Manifest, state: str) -> dict[str, Any]:
    """A partition as the REST API and the CLI list it (the seed's ``GET /partitions`` fields,
    with sizes and its state: Available or Lost)."""
    document = manifest.to_json()
    return {
        "id": manifest.id,
        "name": manifest.name,
        "dataset": manifest.dataset,
        "job-name": manifest.job,
        "job-id": manifest.job_uid,
        "run": manifest.run,
        "namespace": namespace_of(manifest),
        "created-at": document["createdAt"],
        "expires-at": document["expiresAt"],
        "partitions": len(manifest.parts),
        "rows": manifest.rows,
        "bytes": manifest.bytes,
        "checksum": manifest.checksum,
        "state": state,
    }


def object_url(base: str, name: str) -> str:
    """``name`` under the storage URL ``base``, keeping its query (e.g. an S3 endpoint)."""
    parts = urlsplit(base)
    if not parts.scheme or len(parts.scheme) == 1:  # a plain path (or a Windows drive letter)
        return f"{base.rstrip('/')}/{name}"
    if parts.scheme == "local":
        return f"{parts.path.rstrip('/')}/{name}"
    return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/{name}"))


def now_utc() -> datetime:
    return datetime.now(UTC)


def _timestamp(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(value: str, name: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ManifestError(f"{name} {value!r} is not an ISO 8601 time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _field(document: dict[str, Any], name: str, kind: type) -> Any:
    value = document.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ManifestError(f"field {name!r} must be {kind.__name__}, found {value!r}")
    return value
