"""A synchronous client of the shuffle servers, for the driver and Spark's Python workers.

Like the coordinator client it uses only the standard library for HTTP (``http.client`` with one
keep-alive connection per thread, as those connections are not thread-safe) and pickles without
its connections, so a writer or reader function can carry it to executors. Arrow is imported
only where batches are (de)serialised.

Idempotent calls (everything but an upload) are retried on connection errors and 5xx answers
with exponential backoff and jitter until ``retries`` or ``deadline`` run out, then raise
``ShuffleUnavailable``. An upload streams its chunks as they come and cannot replay them, so it
is retried only when the connection failed before the first chunk was taken; otherwise the
caller (a Spark task) runs again, which is safe because a commit replaces the partition whole.

Downloads are spooled (in memory up to a few MiB, then to a temporary file) and checked against
the server's sha256 before the first batch is handed out: a damaged partition raises
``CorruptPartition`` instead of yielding rows that were never written.
"""

from __future__ import annotations

import builtins
import hashlib
import http.client
import json
import logging
import random
import select
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

if TYPE_CHECKING:
    import pyarrow as pa

logger = logging.getLogger(__name__)

T = TypeVar("T")

_RETRYABLE_STATUS = frozenset({500, 502, 503, 504})
_CHUNK = 1 << 20
_SPOOL_IN_MEMORY = 8 << 20
_FRESH_CONNECTION_AFTER = 30.0
"""An upload on a connection idle longer than this opens a new one: the server may close idle
keep-alive connections, and an upload cannot be replayed once its chunks were taken."""


# ---------------------------------------------------------------------------------- errors


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


def _request_error(status: int, message: str, server: str) -> ShuffleRequestError:
    if status == 401:
        return ShuffleUnauthorized(status, message, server=server)
    if status == 404:
        return PartitionNotFound(status, message, server=server)
    return ShuffleRequestError(status, message, server=server)


# ---------------------------------------------------------------------------------- records


def _parse_time(text: object) -> datetime:
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
            committed_at=_parse_time(document["committedAt"]),
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


@dataclass(frozen=True)
class ClusterListing(Listing):
    """A merged listing, with the servers that answered and those that did not."""

    answered: tuple[str, ...] = ()
    unreachable: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------- the client


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
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http(s) URL of a shuffle server")
        self.url = url.rstrip("/")
        self._token = token
        self._timeout = timeout
        self._retries = retries
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._deadline = deadline
        self._local = threading.local()

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

    def register(self, attempt: int, *, retries: int | None = None) -> Registration:
        """Register driver ``attempt`` or heartbeat it; restarts the server's retain clock."""
        reply = self._object("POST", "/v1/drivers", {"attempt": int(attempt)}, retries=retries)
        return Registration(
            job=str(reply["job"]),
            attempt=int(reply["attempt"]),
            partitions=int(reply["partitions"]),
            retain_timeout_seconds=float(reply["retainTimeoutSeconds"]),
            server=self.url,
        )

    def put(
        self, dataset: str, partition: int, attempt: str, chunks: Iterable[bytes]
    ) -> PartitionInfo:
        """Stream ``chunks`` (an Arrow IPC stream) as the partition and commit it."""
        query = urlencode({"attempt": attempt, "commit": "true"})
        path = f"{self._partition_path(dataset, partition)}?{query}"
        reply = self._upload(path, chunks)
        return PartitionInfo.from_json(reply, self.url)

    def put_batches(
        self,
        dataset: str,
        partition: int,
        attempt: str,
        schema: pa.Schema,
        batches: Iterable[pa.RecordBatch],
    ) -> PartitionInfo:
        """Serialise ``batches`` to an IPC stream on the fly and upload it as the partition."""
        return self.put(dataset, partition, attempt, _ipc_chunks(schema, batches))

    def get(self, dataset: str, partition: int) -> Iterator[pa.RecordBatch]:
        """The partition's batches; the whole download is checked before the first one."""
        reader, spool = self._open_stream(dataset, partition)
        return _batches(reader, spool)

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
            while chunk := spool.read(_CHUNK):
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
        self._drop_connection()

    def __enter__(self) -> ShuffleClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_local"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

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

        def attempt(connection: http.client.HTTPConnection) -> tuple[IO[bytes], PartitionInfo]:
            connection.request("GET", self._prefix + path, headers=self._headers())
            response = connection.getresponse()
            if response.status != 200:
                raw = response.read()
                raise _Answer(response.status, raw, response.will_close)
            expected = response.getheader("X-Finishable-Sha256", "")
            # Not a with block: the spool is handed to the caller.
            spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY)  # noqa: SIM115
            try:
                digest = hashlib.sha256()
                size = 0
                while chunk := response.read(_CHUNK):
                    digest.update(chunk)
                    spool.write(chunk)
                    size += len(chunk)
                if response.will_close:
                    self._drop_connection()
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
                    committed_at=_parse_time(
                        response.getheader("X-Finishable-Committed-At", "1970-01-01T00:00:00Z")
                    ),
                    sha256=expected,
                    server=self.url,
                )
            except BaseException:
                spool.close()
                raise
            return spool, info

        return self._retrying("GET", path, attempt)

    # ------------------------------------------------------------------ uploads

    def _upload(self, path: str, chunks: Iterable[bytes]) -> dict[str, Any]:
        source = _Once(chunks)
        headers = self._headers()
        headers["Content-Type"] = "application/vnd.apache.arrow.stream"
        headers["Transfer-Encoding"] = "chunked"
        for _ in range(2):
            connection, reused = self._connection(fresh_after=_FRESH_CONNECTION_AFTER)
            try:
                connection.request(
                    "PUT", self._prefix + path, body=source, headers=headers, encode_chunked=True
                )
                response = connection.getresponse()
                raw = response.read()
                if response.will_close:
                    self._drop_connection()
            except (OSError, http.client.HTTPException) as error:
                self._drop_connection()
                if isinstance(error, _SourceFailed):
                    raise error.cause from None
                if reused and not source.started:
                    continue  # a stale keep-alive connection; nothing was taken yet
                raise ShuffleUnavailable(
                    f"PUT {self.url}{path} failed after {source.sent} byte(s) were sent: "
                    f"{error}; nothing is known to be committed, upload the partition again"
                ) from error
            except BaseException:
                self._drop_connection()  # the body was cut off: the connection is unusable
                raise
            self._touch()
            payload = _decode(raw)
            if 200 <= response.status < 300 and isinstance(payload, dict):
                return payload
            raise _request_error(response.status, _message(payload, response.status), self.url)
        raise ShuffleUnavailable(f"PUT {self.url}{path}: no connection could be opened")

    # ------------------------------------------------------------------ transport

    @property
    def _prefix(self) -> str:
        return urlsplit(self.url).path.rstrip("/")

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}

    def _connection(
        self, fresh_after: float | None = None
    ) -> tuple[http.client.HTTPConnection, bool]:
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        if connection is not None:
            idle = time.monotonic() - getattr(self._local, "used", 0.0)
            if fresh_after is None or (idle < fresh_after and not _closed_by_peer(connection)):
                return connection, True
            self._drop_connection()
        parts = urlsplit(self.url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        connection = cls(parts.hostname or "127.0.0.1", parts.port, timeout=self._timeout)
        self._local.connection = connection
        self._touch()
        return connection, False

    def _touch(self) -> None:
        self._local.used = time.monotonic()

    def _drop_connection(self) -> None:
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        self._local.connection = None
        if connection is not None:
            connection.close()

    def _object(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        retries: int | None = None,
    ) -> dict[str, Any]:
        reply = self._json(method, path, body, retries=retries)
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
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode("utf-8")
        headers = self._headers()
        if data is not None:
            headers["Content-Type"] = "application/json"

        def attempt(connection: http.client.HTTPConnection) -> Any:
            connection.request(method, self._prefix + path, body=data, headers=headers)
            response = connection.getresponse()
            raw = response.read()
            if response.will_close:
                self._drop_connection()
            if not 200 <= response.status < 300:
                raise _Answer(response.status, raw, False)
            return _decode(raw)

        return self._retrying(method, path, attempt, retries=retries)

    def _retrying(
        self,
        method: str,
        path: str,
        attempt: Callable[[http.client.HTTPConnection], T],
        *,
        retries: int | None = None,
    ) -> T:
        """Run an idempotent exchange, retrying connection errors and 5xx with backoff."""
        max_retries = self._retries if retries is None else retries
        give_up_at = time.monotonic() + self._deadline
        failures = 0
        delay = self._backoff
        while True:
            connection, reused = self._connection()
            problem: Exception
            try:
                result = attempt(connection)
            except _Answer as answer:
                if answer.will_close:
                    self._drop_connection()
                payload = _decode(answer.raw)
                problem = _request_error(answer.status, _message(payload, answer.status), self.url)
                if answer.status not in _RETRYABLE_STATUS:
                    raise problem from None
            except (OSError, http.client.HTTPException) as error:
                self._drop_connection()
                problem = error
                # A kept-alive connection the server closed in the meantime: reconnect at once.
                if (
                    reused
                    and failures == 0
                    and isinstance(
                        error,
                        http.client.RemoteDisconnected | BrokenPipeError | ConnectionResetError,
                    )
                ):
                    failures += 1
                    continue
            else:
                self._touch()
                return result
            failures += 1
            if failures > max_retries or time.monotonic() + delay > give_up_at:
                raise ShuffleUnavailable(
                    f"{method} {self.url}{path} failed {failures} time(s), giving up: {problem}"
                ) from problem
            logger.debug(
                "shuffle call %s %s%s failed (%s); retrying in %.3f s",
                method,
                self.url,
                path,
                problem,
                delay,
            )
            time.sleep(delay * (0.5 + random.random() / 2))
            delay = min(delay * 2, self._max_backoff)


class _Answer(Exception):
    """A complete non-2xx answer, raised out of an exchange for ``_retrying`` to judge."""

    def __init__(self, status: int, raw: bytes, will_close: bool) -> None:
        super().__init__(status)
        self.status = status
        self.raw = raw
        self.will_close = will_close


class _SourceFailed(OSError):
    """The upload's own chunks raised: the body is cut off and the connection must go."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"the chunks of the upload raised {cause!r}")
        self.cause = cause


class _Once:
    """Wraps an upload's chunks: counts what was sent and whether any chunk was taken."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self.started = False
        self.sent = 0

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        self.started = True
        while True:
            try:
                chunk = next(self._chunks)
            except StopIteration:
                raise
            except Exception as error:
                raise _SourceFailed(error) from error
            if chunk:  # an empty chunk would end a chunked body early
                self.sent += len(chunk)
                return bytes(chunk)


def _closed_by_peer(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle keep-alive connection is readable, which means the server closed it."""
    sock = connection.sock
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _decode(raw: bytes) -> Any:
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {"error": raw[:200].decode("utf-8", "replace")}


def _message(payload: Any, status: int) -> str:
    if isinstance(payload, dict) and isinstance(payload.get("error"), str):
        return str(payload["error"])
    return f"HTTP {status}"


# ---------------------------------------------------------------------------------- Arrow


class _Sink:
    """A write-only file for ``pyarrow.ipc.new_stream`` whose bytes are drained into chunks."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.closed = False

    def write(self, data: bytes | memoryview) -> int:
        self.buffer += data
        return len(data)

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True

    def drain(self) -> bytes:
        data = bytes(self.buffer)
        self.buffer.clear()
        return data


def _ipc_chunks(schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> Iterator[bytes]:
    """An IPC stream of ``batches`` in chunks of about 1 MiB, written as batches arrive."""
    import pyarrow as pa  # noqa: PLC0415

    sink = _Sink()
    writer = pa.ipc.new_stream(pa.PythonFile(sink, mode="w"), schema)
    try:
        for batch in batches:
            writer.write_batch(batch)
            if len(sink.buffer) >= _CHUNK:
                yield sink.drain()
    finally:
        writer.close()
    if sink.buffer:
        yield sink.drain()


def _batches(reader: pa.ipc.RecordBatchStreamReader, spool: IO[bytes]) -> Iterator[pa.RecordBatch]:
    try:
        yield from reader
    finally:
        spool.close()


# ---------------------------------------------------------------------------------- the cluster


class ShuffleCluster:
    """The job's shuffle servers: where a partition goes, and calls on all of them at once."""

    def __init__(self, urls: Iterable[str], token: str, **client_options: Any) -> None:
        self.clients = [ShuffleClient(url, token, **client_options) for url in urls]
        if not self.clients:
            raise ValueError("a shuffle cluster needs at least one server URL")
        self._token = token
        self._options = client_options
        self._probe_timeout = float(client_options.get("timeout", 10.0))

    @property
    def urls(self) -> list[str]:
        return [client.url for client in self.clients]

    def server_for(self, dataset: str, partition: int) -> ShuffleClient:
        """The server of a partition: a stable hash, the same in every process and attempt."""
        index = zlib.crc32(f"{dataset}/{partition}".encode()) % len(self.clients)
        return self.clients[index]

    def client(self, url: str) -> ShuffleClient:
        """The client of ``url`` (one of the cluster's, or a new one with the same options)."""
        for client in self.clients:
            if client.url == url.rstrip("/"):
                return client
        return ShuffleClient(url, self._token, **self._options)

    def register_all(self, attempt: int) -> dict[str, Registration]:
        """Register (or heartbeat) ``attempt`` everywhere; the servers that answered."""
        answers = self._each(self.clients, lambda client: client.register(attempt, retries=1))
        return {url: reply for url, reply in answers.items() if isinstance(reply, Registration)}

    def list_all(self, dataset: str | None = None, verify: bool = False) -> ClusterListing:
        """Every server's listing merged, each partition tagged with its server."""
        answers = self._each(self.clients, lambda client: client.list(dataset, verify))
        return _merge(answers, self.urls)

    def release_all(
        self, dataset: str | None = None, include_promoted: bool = False
    ) -> dict[str, int | None]:
        """Release on every server; per server the partitions released (``None``: unreachable)."""
        answers = self._each(self.clients, lambda client: client.release(dataset, include_promoted))
        result: dict[str, int | None] = {}
        for url, reply in answers.items():
            if isinstance(reply, int):
                result[url] = reply
            else:
                logger.warning("shuffle server %s could not release: %s", url, reply)
                result[url] = None
        return result

    def wait_for(
        self,
        urls: Iterable[str] | None = None,
        deadline: float = 30.0,
        needed: set[tuple[str, int]] | None = None,
        *,
        verify: bool = False,
        poll_interval: float = 0.25,
    ) -> ClusterListing:
        """Poll ``urls`` (all servers by default) for up to ``deadline`` seconds.

        Ends when every server answered or, when ``needed`` is given, as soon as every needed
        ``(dataset, partition)`` is listed; at the deadline it returns what it found. This is
        a new driver's wait for surviving shuffle pods (``previousWorkerRecoveryTimeout``).
        A server that does not answer is asked again every ``poll_interval`` seconds.
        """
        targets = [self.client(url) for url in urls] if urls is not None else list(self.clients)
        order = [client.url for client in targets]
        give_up_at = time.monotonic() + deadline
        answered: dict[str, Listing] = {}
        failures: dict[str, object] = {}
        next_try = dict.fromkeys(order, 0.0)
        running: dict[Future[Listing | Exception], str] = {}
        pool = ThreadPoolExecutor(max_workers=min(16, len(targets) or 1))
        try:
            while True:
                now = time.monotonic()
                busy = set(running.values())
                for client in targets:
                    url = client.url
                    if url not in answered and url not in busy and next_try[url] <= now:
                        probe = pool.submit(self._probe, url, verify, give_up_at - now)
                        running[probe] = url
                merged = _merge(answered, order)
                if len(answered) == len(targets) or (
                    needed is not None and needed <= merged.keys()
                ):
                    return merged
                remaining = give_up_at - time.monotonic()
                if remaining <= 0:
                    for url in order:
                        if url not in answered:
                            logger.warning(
                                "shuffle server %s did not answer within %.1f s: %s",
                                url,
                                deadline,
                                failures.get(url, "no answer"),
                            )
                    return merged
                done, _ = wait(
                    running, timeout=min(poll_interval, remaining), return_when=FIRST_COMPLETED
                )
                for future in done:
                    url = running.pop(future)
                    outcome = future.result()
                    if isinstance(outcome, Listing):
                        answered[url] = outcome
                    else:
                        failures[url] = outcome
                        next_try[url] = time.monotonic() + poll_interval
        finally:
            # A probe of a silent server may still run: do not wait for it past the deadline.
            pool.shutdown(wait=False, cancel_futures=True)

    def _probe(self, url: str, verify: bool, remaining: float) -> Listing | Exception:
        """One quick listing: no retries, a timeout within what is left of the wait."""
        quick = ShuffleClient(
            url,
            self._token,
            timeout=max(0.1, min(remaining, self._probe_timeout)),
            retries=0,
            deadline=max(0.1, remaining),
        )
        try:
            return quick.list(verify=verify)
        except ShuffleError as error:
            return error
        finally:
            quick.close()

    @staticmethod
    def _each(
        clients: list[ShuffleClient], call: Callable[[ShuffleClient], T]
    ) -> dict[str, T | Exception]:
        """``call`` on every client in parallel; an exception is the answer of its server."""

        def safe(client: ShuffleClient) -> T | Exception:
            try:
                return call(client)
            except ShuffleError as error:
                logger.warning("shuffle server %s: %s", client.url, error)
                return error

        with ThreadPoolExecutor(max_workers=min(16, len(clients))) as pool:
            results = list(pool.map(safe, clients))
        return {client.url: result for client, result in zip(clients, results, strict=True)}


def _merge(answers: Mapping[str, object], order: list[str]) -> ClusterListing:
    """Merge per-server listings; the partition committed last wins a duplicate."""
    listings = {url: reply for url, reply in answers.items() if isinstance(reply, Listing)}
    job = next((listing.job for listing in listings.values()), "")
    partitions: list[PartitionInfo] = []
    corrupt: list[CorruptEntry] = []
    for url in order:
        listing = listings.get(url)
        if listing is not None:
            partitions.extend(listing.partitions)
            corrupt.extend(listing.corrupt)
    merged = Listing(job, tuple(partitions)).by_key()
    return ClusterListing(
        job=job,
        partitions=tuple(merged[key] for key in sorted(merged)),
        corrupt=tuple(corrupt),
        answered=tuple(url for url in order if url in listings),
        unreachable=tuple(url for url in order if url not in listings),
    )


__all__ = [
    "ClusterListing",
    "CorruptEntry",
    "CorruptPartition",
    "DatasetInfo",
    "Listing",
    "PartitionInfo",
    "PartitionNotFound",
    "Registration",
    "ShuffleClient",
    "ShuffleCluster",
    "ShuffleError",
    "ShuffleRequestError",
    "ShuffleUnauthorized",
    "ShuffleUnavailable",
]
