"""The shuffle store's vocabulary: the names it accepts, the errors it raises, the records it keeps.

Dataset, partition, attempt and job names become paths on disk, so they are checked here before
anything touches the file system; the errors carry messages meant for the HTTP caller as they are;
the records are what a partition's sidecar says and what the server answers. Kept apart from the
store so that the server and the store speak one language without the store's locking and I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

DATASET_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
ATTEMPT_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
JOB_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")
MAX_PARTITION = 1_000_000

DATASET_HELP = (
    "1 to 128 letters, digits, '_', '.' or '-', starting with a letter or digit "
    "(regular expression ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$)"
)
PARTITION_HELP = f"a non-negative integer below {MAX_PARTITION:_}"
ATTEMPT_HELP = (
    "1 to 64 letters, digits, '_', '.' or '-' (regular expression ^[A-Za-z0-9_.-]{1,64}$)"
)
JOB_HELP = "1 to 253 letters, digits, '_', '.' or '-', starting with a letter or digit"


# ---------------------------------------------------------------------------------- errors


class StoreError(Exception):
    """Base of the store's errors; the message is meant for the caller as it is."""


class InvalidName(StoreError, ValueError):
    """A dataset, partition, attempt or job name the store refuses (it becomes a path)."""

    def __init__(self, name: str, value: object, accepted: str) -> None:
        super().__init__(f"{name} {value!r} is not valid: expected {accepted}")
        self.field = name
        self.value = value


class NotArrowStream(StoreError):
    """An upload whose bytes are not an Arrow IPC stream; nothing was committed."""

    def __init__(self, dataset: str, partition: int, detail: str) -> None:
        super().__init__(
            f"the body uploaded for dataset {dataset!r} partition {partition} is not an "
            f"Arrow IPC stream (write it with pyarrow.ipc.new_stream): {detail}"
        )
        self.dataset = dataset
        self.partition = partition


class UnknownUpload(StoreError):
    """A commit named an upload the store does not hold (never started, committed or expired)."""

    def __init__(self, upload_id: str, dataset: str, partition: int) -> None:
        super().__init__(
            f"no pending upload {upload_id!r} for dataset {dataset!r} partition {partition} "
            "(it was never started, is already committed, or expired)"
        )
        self.upload_id = upload_id


class PartitionMissing(StoreError):
    """The asked-for partition is not committed on this server."""

    def __init__(self, dataset: str, partition: int) -> None:
        super().__init__(f"dataset {dataset!r} has no committed partition {partition}")
        self.dataset = dataset
        self.partition = partition


class DatasetMissing(StoreError):
    """The asked-for dataset has no committed partition on this server."""

    def __init__(self, dataset: str) -> None:
        super().__init__(f"dataset {dataset!r} has no committed partitions")
        self.dataset = dataset


# ---------------------------------------------------------------------------------- names


def check_dataset(value: str) -> str:
    """``value`` if it is a valid dataset name, else ``InvalidName``."""
    if not isinstance(value, str) or not DATASET_PATTERN.fullmatch(value):
        raise InvalidName("dataset", value, DATASET_HELP)
    return value


def check_partition(value: object) -> int:
    """The partition number from an ``int`` or its decimal text, else ``InvalidName``."""
    if isinstance(value, bool):
        raise InvalidName("partition", value, PARTITION_HELP)
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 7:
        number = int(value)
    else:
        raise InvalidName("partition", value, PARTITION_HELP)
    if not 0 <= number < MAX_PARTITION:
        raise InvalidName("partition", value, PARTITION_HELP)
    return number


def check_attempt(value: str) -> str:
    """``value`` if it is a valid attempt label, else ``InvalidName``."""
    if not isinstance(value, str) or not ATTEMPT_PATTERN.fullmatch(value):
        raise InvalidName("attempt", value, ATTEMPT_HELP)
    return value


def check_job(value: str) -> str:
    """``value`` if it can name the job's directory under the data dir, else ``InvalidName``."""
    if not isinstance(value, str) or not JOB_PATTERN.fullmatch(value) or value in (".", ".."):
        raise InvalidName("job", value, JOB_HELP)
    return value


# ---------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class PartitionMeta:
    """What the sidecar of a committed partition says about it."""

    dataset: str
    partition: int
    bytes: int
    rows: int
    attempt: str
    committed_at: datetime
    sha256: str

    def to_json(self) -> dict[str, Any]:
        """The sidecar document, also the server's answer for a partition."""
        return {
            "dataset": self.dataset,
            "partition": self.partition,
            "bytes": self.bytes,
            "rows": self.rows,
            "attempt": self.attempt,
            "committedAt": format_time(self.committed_at),
            "sha256": self.sha256,
        }

    @classmethod
    def from_json(cls, document: object) -> PartitionMeta:
        """Read a sidecar; ``ValueError`` (naming the field) when it is damaged."""
        if not isinstance(document, dict):
            raise ValueError("the sidecar is not a JSON object")
        try:
            dataset = check_dataset(document["dataset"])
            partition = check_partition(document["partition"])
            attempt = check_attempt(document["attempt"])
            size = document["bytes"]
            rows = document["rows"]
            digest = document["sha256"]
            committed_at = parse_time(document["committedAt"])
        except KeyError as missing:
            raise ValueError(f"the sidecar lacks the field {missing}") from None
        for name, number in (("bytes", size), ("rows", rows)):
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise ValueError(f"the sidecar's {name} is not a non-negative integer")
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ValueError("the sidecar's sha256 is not 64 lowercase hex digits")
        return cls(dataset, partition, size, rows, attempt, committed_at, digest)


@dataclass(frozen=True)
class CorruptReport:
    """A partition whose bytes no longer match its sidecar; the store has deleted it."""

    dataset: str
    partition: int
    error: str

    def to_json(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "partition": self.partition, "error": self.error}


@dataclass(frozen=True)
class DatasetSummary:
    """One dataset's totals, as ``GET /v1/datasets`` lists them."""

    dataset: str
    partitions: int
    bytes: int
    rows: int
    promoted: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "partitions": self.partitions,
            "bytes": self.bytes,
            "rows": self.rows,
            "promoted": self.promoted,
        }


def format_time(moment: datetime) -> str:
    """ISO 8601 in UTC with a ``Z``, the form sidecars and answers carry."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_time(text: object) -> datetime:
    """The inverse of ``format_time``; ``ValueError`` when ``text`` is not such a time."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not an ISO 8601 time")
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return moment.astimezone(UTC)
