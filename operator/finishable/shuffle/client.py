"""A synchronous client of one shuffle server, for the driver and Spark's Python workers.

Like the coordinator client it speaks HTTP through ``transport`` (standard library only, one
keep-alive connection per thread) and pickles without its connections, so a writer or reader
function can carry it to executors. Arrow is imported only where batches are (de)serialised.

Idempotent calls (everything but an upload) are retried on connection errors and 5xx answers
with exponential backoff and jitter until ``retries`` or ``deadline`` run out, then raise
``ShuffleUnavailable``. An upload streams its chunks as they come and cannot replay them, so it
is retried only when the connection failed before the first chunk was taken; otherwise the
caller (a Spark task) runs again, which is safe because a commit replaces the partition whole.

Downloads are spooled (in memory up to a few MiB, then to a temporary file) and checked against
the server's sha256 before the first batch is handed out: a damaged partition raises
``CorruptPartition`` instead of yielding rows that were never written.

``ShuffleCluster`` (all of a job's servers) is in ``cluster``, the records it answers with in
``answers``, its errors in ``errors``.
"""

from __future__ import annotations

import builtins
import hashlib
import http.client
import logging
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, urlencode

from finishable.shuffle.answers import (
    CorruptEntry,
    DatasetInfo,
    Listing,
    PartitionInfo,
    Registration,
    parse_time,
)
from finishable.shuffle.errors import (
    CorruptPartition,
    ShuffleError,
    ShuffleRequestError,
    ShuffleUnavailable,
    request_error,
)
from finishable.shuffle.streams import (
    CHUNK,
    CutOff,
    SendOnce,
    SourceFailed,
    batches_then_close,
    ipc_chunks,
)
from finishable.transport import (
    RETRY_NONE,
    Exchange,
    HttpAnswerError,
    Policy,
    Transport,
    Unreachable,
    decode_json,
)

if TYPE_CHECKING:
    import pyarrow as pa


logger = logging.getLogger(__name__)

T = TypeVar("T")

_SPOOL_IN_MEMORY = 8 << 20
_FRESH_CONNECTION_AFTER = 30.0
"""An upload on a connection idle longer than this opens a new one: the server may close idle
keep-alive connections, and an upload cannot be replayed once its chunks were taken."""


# ---------------------------------------------------------------------------------- the client


@dataclass(frozen=True, slots=True)
class Uploaded:
    """An upload the server holds uncommitted."""

    id: str
    bytes: int
    sha256: str


class ShuffleClient:
    """Calls one shuffle server at ``url`` with ``token``; safe to share between threads."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retries: int = 6,
        backoff: float = 0.05,
        max_backoff: float = 2.0,
        deadline: float = 60.0,
    ) -> None:
        policy = Policy(timeout, retries, backoff, max_backoff, deadline)
        self._transport = Transport(url, token, policy, what="a shuffle server")
        self.url = self._transport.url

    def __repr__(self) -> str:
        return f"ShuffleClient({self.url!r})"

    # ------------------------------------------------------------------ calls

    def health(self) -> bool:
        """Whether the server answers (no token needed, no retries)."""
        try:
            reply = self._json("GET", "/healthz", retries=0)
        except ShuffleError:
            return False
        return isinstance(reply, dict) and reply.get("status") == "ok"

    def register(self, attempt: int, *, run: int = 1, retries: int | None = None) -> Registration:
        """Register driver ``attempt`` of ``run`` or heartbeat it; restarts the server's retain
        clock. Refused (409) once a newer attempt registered: this driver is superseded."""
        body = {"attempt": int(attempt), "run": int(run)}
        reply = self._object("POST", "/v1/drivers", body, retries=retries)
        return Registration(
            job=str(reply["job"]),
            attempt=int(reply["attempt"]),
            partitions=int(reply["partitions"]),
            retain_timeout_seconds=float(reply["retainTimeoutSeconds"]),
            server=self.url,
        )

    def put(
        self,
        dataset: str,
        partition: int,
        attempt: str,
        chunks: Iterable[bytes],
        *,
        epoch: tuple[int, int] | None = None,
    ) -> PartitionInfo:
        """Stream ``chunks`` (an Arrow IPC stream) as the partition and commit it; with the
        writing driver's ``epoch`` (run, attempt), refused if a newer driver registered."""
        path = self._put_path(dataset, partition, attempt, epoch, commit=True)
        reply = self._upload(path, chunks)
        return PartitionInfo.from_json(reply, self.url)

    def upload(
        self,
        dataset: str,
        partition: int,
        attempt: str,
        chunks: Iterable[bytes],
        *,
        epoch: tuple[int, int] | None = None,
    ) -> Uploaded:
        """Stream ``chunks`` without committing them, for :meth:`commit` (a Batch task
        uploads, and the driver commits the one attempt it accepts)."""
        path = self._put_path(dataset, partition, attempt, epoch, commit=False)
        reply = self._upload(path, chunks)
        return Uploaded(str(reply["upload"]), int(reply["bytes"]), str(reply["sha256"]))

    def commit(
        self,
        dataset: str,
        partition: int,
        upload: str,
        *,
        epoch: tuple[int, int] | None = None,
    ) -> PartitionInfo:
        """Make upload ``upload`` the partition (refused if a newer driver than ``epoch``
        registered, or if the upload is unknown: committed, or aborted)."""
        body: dict[str, Any] = {"upload": upload}
        if epoch is not None:
            body["epoch"] = f"{epoch[0]}.{epoch[1]}"
        path = f"{self._partition_path(dataset, partition)}/commit"
        return PartitionInfo.from_json(self._object("POST", path, body, retries=0), self.url)

    def _put_path(
        self,
        dataset: str,
        partition: int,
        attempt: str,
        epoch: tuple[int, int] | None,
        *,
        commit: bool,
    ) -> str:
        fields = {"attempt": attempt}
        if commit:
            fields["commit"] = "true"
        if epoch is not None:
            fields["epoch"] = f"{epoch[0]}.{epoch[1]}"
        return f"{self._partition_path(dataset, partition)}?{urlencode(fields)}"

    def put_batches(
        self,
        dataset: str,
        partition: int,
        attempt: str,
        schema: pa.Schema,
        batches: Iterable[pa.RecordBatch],
        *,
        epoch: tuple[int, int] | None = None,
    ) -> PartitionInfo:
        """Serialise ``batches`` to an IPC stream on the fly, upload and commit it."""
        return self.put(dataset, partition, attempt, ipc_chunks(schema, batches), epoch=epoch)

    def get(self, dataset: str, partition: int) -> Iterator[pa.RecordBatch]:
        """The partition's batches; the whole download is checked before the first one."""
        reader, spool = self._open_stream(dataset, partition)
        return batches_then_close(reader, spool)

    def read_table(self, dataset: str, partition: int) -> pa.Table:
        """The partition as one table (the schema survives even with no batches)."""
        reader, spool = self._open_stream(dataset, partition)
        try:
            return reader.read_all()
        finally:
            spool.close()

    def download(self, dataset: str, partition: int, sink: IO[bytes]) -> PartitionInfo:
        """Copy the partition's verified bytes to ``sink``; returns what the server committed."""
        spool, info = self._download(dataset, partition)
        with spool:
            while chunk := spool.read(CHUNK):
                sink.write(chunk)
        return info

    def list(self, dataset: str | None = None, verify: bool = False) -> Listing:
        """Committed partitions; ``verify`` re-hashes them first and reports the corrupt ones."""
        query: dict[str, str] = {}
        if dataset is not None:
            query["dataset"] = dataset
        if verify:
            query["verify"] = "true"
        path = "/v1/partitions" + (f"?{urlencode(query)}" if query else "")
        reply = self._object("GET", path)
        return self._listing(reply)

    def release(self, dataset: str | None = None, include_promoted: bool = False) -> int:
        """Delete the job's partitions (one dataset's, even promoted); returns how many."""
        if dataset is not None:
            path = f"/v1/partitions/{quote(dataset, safe='')}"
        else:
            path = "/v1/partitions" + ("?includePromoted=true" if include_promoted else "")
        return int(self._object("DELETE", path)["released"])

    def promote(self, dataset: str) -> DatasetInfo:
        """Keep ``dataset`` when the job is released (a cluster partition)."""
        reply = self._object("POST", f"/v1/datasets/{quote(dataset, safe='')}/promote", {})
        return self._dataset(reply)

    def datasets(self) -> builtins.list[DatasetInfo]:
        """Per-dataset totals."""
        reply = self._json("GET", "/v1/datasets")
        if not isinstance(reply, list):
            raise ShuffleRequestError(200, "the dataset listing is not an array", server=self.url)
        return [self._dataset(item) for item in reply]

    def close(self) -> None:
        """Close this thread's connection."""
        self._transport.close()

    def __enter__(self) -> ShuffleClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ answers

    def _listing(self, reply: Mapping[str, Any]) -> Listing:
        return Listing(
            job=str(reply.get("job", "")),
            partitions=tuple(
                PartitionInfo.from_json(item, self.url) for item in reply.get("partitions", [])
            ),
            corrupt=tuple(
                CorruptEntry(
                    str(item["dataset"]), int(item["partition"]), str(item["error"]), self.url
                )
                for item in reply.get("corrupt", [])
            ),
        )

    def _dataset(self, item: Mapping[str, Any]) -> DatasetInfo:
        return DatasetInfo(
            dataset=str(item["dataset"]),
            partitions=int(item["partitions"]),
            bytes=int(item["bytes"]),
            rows=int(item["rows"]),
            promoted=bool(item["promoted"]),
            server=self.url,
        )

    @staticmethod
    def _partition_path(dataset: str, partition: int) -> str:
        return f"/v1/partitions/{quote(dataset, safe='')}/{int(partition)}"

    # ------------------------------------------------------------------ downloads

    def _open_stream(
        self, dataset: str, partition: int
    ) -> tuple[pa.ipc.RecordBatchStreamReader, IO[bytes]]:
        import pyarrow as pa  # noqa: PLC0415 - HTTP-only users need no Arrow

        spool, _ = self._download(dataset, partition)
        try:
            return pa.ipc.open_stream(pa.PythonFile(spool, mode="r")), spool
        except BaseException:
            spool.close()
            raise

    def _download(self, dataset: str, partition: int) -> tuple[IO[bytes], PartitionInfo]:
        """Fetch into a spool, hashing on the way; the spool is rewound and verified."""
        path = self._partition_path(dataset, partition)

        def attempt(exchange: Exchange) -> tuple[IO[bytes], PartitionInfo]:
            response = exchange.send("GET", path)
            expected = response.getheader("X-Finishable-Sha256", "")
            # Not a with block: the spool is handed to the caller.
            spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY)  # noqa: SIM115
            try:
                digest = hashlib.sha256()
                size = 0
                while chunk := response.read(CHUNK):
                    digest.update(chunk)
                    spool.write(chunk)
                    size += len(chunk)
                actual = digest.hexdigest()
                if actual != expected:
                    raise CorruptPartition(self.url, dataset, partition, expected, actual)
                spool.seek(0)
                info = PartitionInfo(
                    dataset=dataset,
                    partition=int(partition),
                    bytes=size,
                    rows=int(response.getheader("X-Finishable-Rows", "0")),
                    attempt=response.getheader("X-Finishable-Attempt", ""),
                    committed_at=parse_time(
                        response.getheader("X-Finishable-Committed-At", "1970-01-01T00:00:00Z")
                    ),
                    sha256=expected,
                    server=self.url,
                )
            except BaseException:
                spool.close()
                raise
            return spool, info

        return self._answered(lambda: self._transport.exchange("GET", path, attempt))

    # ------------------------------------------------------------------ uploads

    def _upload(self, path: str, chunks: Iterable[bytes]) -> dict[str, Any]:
        source = SendOnce(chunks)
        headers = {
            "Content-Type": "application/vnd.apache.arrow.stream",
            "Transfer-Encoding": "chunked",
        }

        def attempt(exchange: Exchange) -> Any:
            try:
                response = exchange.send("PUT", path, source, headers, chunked=True)
                return decode_json(response.read())
            except (OSError, http.client.HTTPException) as error:
                if source.started:  # the chunks taken cannot be sent again: do not retry
                    raise CutOff(error) from error
                raise

        def once() -> Any:
            """No retry but a new connection in place of a stale one, before any chunk."""
            try:
                return self._transport.exchange(
                    "PUT",
                    path,
                    attempt,
                    retries=0,
                    retry_statuses=RETRY_NONE,
                    fresh_after=_FRESH_CONNECTION_AFTER,
                )
            except SourceFailed as error:
                raise error.cause from None
            except (Unreachable, CutOff) as error:
                problem = error.problem
                raise ShuffleUnavailable(
                    f"PUT {self.url}{path} failed after {source.sent} byte(s) were sent: "
                    f"{problem}; nothing is known to be committed, upload the partition again"
                ) from problem

        return self._dict(self._answered(once))

    # ------------------------------------------------------------------ requests

    def _object(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        retries: int | None = None,
    ) -> dict[str, Any]:
        return self._dict(self._json(method, path, body, retries=retries))

    def _dict(self, reply: Any) -> dict[str, Any]:
        if not isinstance(reply, dict):
            raise ShuffleRequestError(200, f"unexpected reply {reply!r:.200}", server=self.url)
        return reply

    def _json(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        retries: int | None = None,
    ) -> Any:
        return self._answered(
            lambda: self._transport.request_json(method, path, body, retries=retries)
        )

    def _answered(self, call: Callable[[], T]) -> T:
        """``call``'s result, with the transport's errors told as the shuffle client's."""
        try:
            return call()
        except HttpAnswerError as error:
            raise request_error(error.status, error.message, self.url) from None
        except Unreachable as error:
            raise ShuffleUnavailable(str(error)) from error.problem


__all__ = ["ShuffleClient"]
