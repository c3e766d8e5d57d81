"""What the shuffle client hands out: committed partitions, listings, datasets, registrations.

Plain frozen records of the servers' JSON answers, each tagged with the server that gave it;
shared by the client of one server and the cluster of all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


def parse_time(text: object) -> datetime:
    """A server's ISO time (``Z`` or an offset) as an aware UTC datetime."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a time")
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


@dataclass(frozen=True)
class PartitionInfo:
    """A committed partition as its server describes it."""

    dataset: str
    partition: int
    bytes: int
    rows: int
    attempt: str
    committed_at: datetime
    sha256: str
    server: str

    @classmethod
    def from_json(cls, document: Mapping[str, Any], server: str) -> PartitionInfo:
        return cls(
            dataset=str(document["dataset"]),
            partition=int(document["partition"]),
            bytes=int(document["bytes"]),
            rows=int(document["rows"]),
            attempt=str(document["attempt"]),
            committed_at=parse_time(document["committedAt"]),
            sha256=str(document["sha256"]),
            server=server,
        )

    @property
    def key(self) -> tuple[str, int]:
        return self.dataset, self.partition


@dataclass(frozen=True)
class CorruptEntry:
    """A partition a verifying listing found damaged; the server has deleted it."""

    dataset: str
    partition: int
    error: str
    server: str


@dataclass(frozen=True)
class Listing:
    """What one server (or, merged, several) lists."""

    job: str
    partitions: tuple[PartitionInfo, ...]
    corrupt: tuple[CorruptEntry, ...] = ()

    def keys(self) -> set[tuple[str, int]]:
        return {info.key for info in self.partitions}

    def by_key(self) -> dict[tuple[str, int], PartitionInfo]:
        """Partitions by ``(dataset, partition)``; the latest commit wins a duplicate."""
        found: dict[tuple[str, int], PartitionInfo] = {}
        for info in self.partitions:
            known = found.get(info.key)
            if known is None or info.committed_at > known.committed_at:
                found[info.key] = info
        return found


@dataclass(frozen=True)
class DatasetInfo:
    """One dataset's totals on one server."""

    dataset: str
    partitions: int
    bytes: int
    rows: int
    promoted: bool
    server: str


@dataclass(frozen=True)
class Registration:
    """A server's answer to a driver's register or heartbeat."""

    job: str
    attempt: int
    partitions: int
    retain_timeout_seconds: float
    server: str
