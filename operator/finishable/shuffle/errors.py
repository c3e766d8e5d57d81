"""The errors of the shuffle client: a refusal, an unreachable server, a corrupt partition.

A refusal keeps the server's own message (``status``, ``message``, ``server``); 401 and 404 have
types of their own because callers act on them (a wrong token, a partition to recompute).
"""

from __future__ import annotations


class ShuffleError(Exception):
    """Base of the shuffle client's errors."""


class ShuffleRequestError(ShuffleError):
    """The server refused a request (4xx, or a 5xx that retrying could not fix)."""

    def __init__(self, status: int, message: str, *, server: str = "") -> None:
        where = f"shuffle server {server}" if server else "shuffle server"
        super().__init__(f"{where} answered {status}: {message}")
        self.status = status
        self.message = message
        self.server = server


class ShuffleUnauthorized(ShuffleRequestError):
    """401: the token is missing or not this job's."""


class PartitionNotFound(ShuffleRequestError):
    """404: the partition, dataset or upload is not on that server."""


class ShuffleUnavailable(ShuffleError):
    """Retries ran out; for an upload, nothing is known to be committed."""


class CorruptPartition(ShuffleError):
    """The bytes received do not have the checksum the server committed them with."""

    def __init__(
        self, server: str, dataset: str, partition: int, expected: str, actual: str
    ) -> None:
        super().__init__(
            f"partition {partition} of dataset {dataset!r} on shuffle server {server} is "
            f"corrupt: sha256 {actual} of the received bytes, {expected} committed"
        )
        self.server = server
        self.dataset = dataset
        self.partition = partition
        self.expected = expected
        self.actual = actual


def request_error(status: int, message: str, server: str) -> ShuffleRequestError:
    """The error of a final answer: 401 and 404 have types of their own."""
    if status == 401:
        return ShuffleUnauthorized(status, message, server=server)
    if status == 404:
        return PartitionNotFound(status, message, server=server)
    return ShuffleRequestError(status, message, server=server)
