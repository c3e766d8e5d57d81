"""The Kafka sink's two phases across processes: what a write task leaves open, how the driver
commits it, and the record that says which transactions a micro-batch holds.

Phase one runs in each write task (``connectors.kafka_writing``): a transactional producer writes
the task's rows and flushes them, and the task reports its transaction (:class:`OpenTransaction`:
transactional id, producer id, epoch) instead of committing it. Phase two runs in the sink's
driver-side commit, once per micro-batch: it writes the batch's :class:`CommitRecord` (state
``committing``) to the sink's staging store, ends every transaction with ``EndTxn(commit)``
(``connectors.kafka_wire``), then rewrites the record as ``committed``. The record is what "the
checkpoint holds it" means here: a driver that dies between the two writes leaves a
``committing`` record, and the next start commits exactly those transactions before any task can
reuse their ids (:meth:`KafkaCommitter.recover`).

Transactional ids are ``<prefix>-<partition>``: a retried task takes its predecessor's id and so
fences it (its open transaction is aborted by the broker), and the number of ids stays the
number of output partitions. A micro-batch's tasks start only after the previous batch's commit
returned, so an id is never reused while its transaction is still to be committed.

A transaction the broker aborted before the commit reached it (the job was down longer than
``transaction.timeout.ms``) cannot be committed any more: that is :class:`KafkaTransactionLost`,
whose message says which batch lost what and which setting to raise.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final, TypeVar

from finishable.connectors import kafka_wire as wire
from finishable.connectors.sink_store import SinkError, SinkStore, now_text

log = logging.getLogger(__name__)

T = TypeVar("T")

COMMIT_RECORD: Final = "_kafka_commit.json"
RECORD_VERSION: Final = 1
COMMITTING: Final = "committing"
COMMITTED: Final = "committed"
RETRY_SECONDS: Final = 120.0
"""How long a commit retries a coordinator that moves, loads or is still writing markers."""


class KafkaTransactionLost(SinkError):
    """A transaction a checkpoint holds was aborted before it could be committed: records lost."""


@dataclass(frozen=True)
class OpenTransaction:
    """A write task's flushed, uncommitted transaction: enough for any process to end it."""

    transactional_id: str
    producer_id: int
    epoch: int
    partition: int
    records: int
    version: int = 1
    """The transaction version the producer used: 1 (librdkafka) or 2 (KIP-890: the Java
    client's on a 4.x broker), which must be ended with ``EndTxn`` v5."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> OpenTransaction:
        return cls(
            transactional_id=str(doc["transactional_id"]),
            producer_id=int(doc["producer_id"]),
            epoch=int(doc["epoch"]),
            partition=int(doc["partition"]),
            records=int(doc["records"]),
            version=int(doc.get("version", 1)),
        )


@dataclass(frozen=True)
class CommitRecord:
    """Which transactions hold micro-batch ``batch_id``, and whether they are committed yet."""

    sink: str
    batch_id: int
    state: str
    transactions: tuple[OpenTransaction, ...]
    run: str = ""
    at: str = ""

    @property
    def records(self) -> int:
        return sum(t.records for t in self.transactions)

    def to_json(self) -> bytes:
        doc = {
            "version": RECORD_VERSION,
            "sink": self.sink,
            "batch_id": self.batch_id,
            "state": self.state,
            "transactions": [t.to_dict() for t in self.transactions],
            "run": self.run,
            "at": self.at,
        }
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> CommitRecord:
        """Parse a record; a damaged or future one is an error naming it, never a guess."""
        try:
            doc = json.loads(data)
            if doc["version"] != RECORD_VERSION:
                raise SinkError(
                    f"{where}: commit record version {doc['version']} is not supported "
                    f"(this finishable reads version {RECORD_VERSION})"
                )
            state = str(doc["state"])
            if state not in (COMMITTING, COMMITTED):
                raise SinkError(f"{where}: unknown commit record state {state!r}")
            return cls(
                sink=str(doc["sink"]),
                batch_id=int(doc["batch_id"]),
                state=state,
                transactions=tuple(OpenTransaction.from_dict(t) for t in doc["transactions"]),
                run=str(doc.get("run", "")),
                at=str(doc.get("at", "")),
            )
        except SinkError:
            raise
        except (ValueError, KeyError, TypeError) as error:
            raise SinkError(f"{where}: damaged commit record: {error}") from None


def read_record(store: SinkStore) -> CommitRecord | None:
    data = store.get(COMMIT_RECORD)
    return None if data is None else CommitRecord.from_json(data, store.where(COMMIT_RECORD))


def write_record(store: SinkStore, record: CommitRecord) -> None:
    store.put_atomic(COMMIT_RECORD, record.to_json())


def transactional_id(prefix: str, partition: int) -> str:
    return f"{prefix}-{partition}"


def lost_message(
    sink: str, batch_id: int, transaction: OpenTransaction, found: wire.TransactionDescription
) -> str:
    """What the user reads when a checkpointed transaction can no longer be committed."""
    seen = (
        "the broker no longer knows the transactional id"
        if found.error == wire.TRANSACTIONAL_ID_NOT_FOUND
        else f"the broker has it in state {found.state} at epoch {found.producer_epoch} "
        f"(the commit needed epoch {transaction.epoch})"
    )
    timeout = f"{found.timeout_ms} ms" if found.timeout_ms else "its transaction.timeout.ms"
    return (
        f"Kafka sink {sink!r}: batch {batch_id} was checkpointed with transaction "
        f"{transaction.transactional_id!r} ({transaction.records} records of output partition "
        f"{transaction.partition}) still to commit, but it cannot be committed any more: {seen}. "
        f"The broker aborts a transaction left open longer than the producer's "
        f"transaction.timeout.ms ({timeout}), and the job was down or recovering longer than "
        "that: those records are lost from the topic. Set options={'kafka.transaction.timeout.ms': "
        "...} above the longest stop or recovery the job may have (the broker caps it at "
        "transaction.max.timeout.ms, 15 minutes by default)"
    )


class KafkaCommitter:
    """Ends transactions other processes opened, by id, producer id and epoch (``EndTxn``).

    It keeps one connection per broker and each id's coordinator while it is used, so a batch of
    many transactions costs a round trip each; ``close()`` (or ``with``) ends the connections."""

    def __init__(
        self,
        bootstrap_servers: str,
        settings: Mapping[str, str],
        *,
        retry_seconds: float = RETRY_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.bootstrap = [_host_port(b) for b in bootstrap_servers.split(",") if b.strip()]
        self.settings = dict(settings)
        self.security = wire.WireSecurity.from_settings(settings)
        self.retry_seconds = retry_seconds
        self.sleep = sleep
        self._wires: dict[tuple[str, int], wire.KafkaWire] = {}
        self._coordinators: dict[str, tuple[str, int]] = {}

    def close(self) -> None:
        for connection in self._wires.values():
            connection.close()
        self._wires.clear()
        self._coordinators.clear()

    def __enter__(self) -> KafkaCommitter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests, each retried while the coordinator moves or loads --

    def _call(self, broker: tuple[str, int], api: tuple[int, int], body: bytes) -> bytes:
        """One request on the broker's kept connection; a broken one is dropped and raised."""
        return self._call_many(broker, [(api, body)])[0]

    def _call_many(
        self, broker: tuple[str, int], requests: Sequence[tuple[tuple[int, int], bytes]]
    ) -> list[bytes]:
        connection = self._wires.get(broker)
        if connection is None:
            connection = wire.KafkaWire(*broker, self.security)
            self._wires[broker] = connection
        try:
            return connection.call_many(requests)
        except wire.KafkaWireError:
            self._wires.pop(broker, None)
            connection.close()
            raise

    def _coordinator(self, transactional_id: str) -> tuple[str, int]:
        self._locate([transactional_id])
        return self._coordinators[transactional_id]

    def _locate(self, transactional_ids: Sequence[str]) -> None:
        """Learn the coordinators of the ids not known yet, in one request; ``_Retry`` if one
        has none yet (the others are kept)."""
        wanted = sorted({t for t in transactional_ids if t not in self._coordinators})
        if not wanted:
            return
        last = ""
        for broker in self.bootstrap:
            try:
                found = wire.parse_find_coordinator(
                    self._call(broker, wire.FIND_COORDINATOR, wire.find_coordinator_body(wanted))
                )
            except wire.KafkaAuthError:
                raise
            except wire.KafkaWireError as error:
                last = str(error)
                continue
            missing = []
            for coordinator in found:
                if coordinator.error == wire.NONE:
                    self._coordinators[coordinator.key] = (coordinator.host, coordinator.port)
                else:
                    missing.append(coordinator)
            if missing:
                raise _Retry(
                    f"no transaction coordinator for {missing[0].key!r} yet: "
                    f"{wire.error_name(missing[0].error)} {missing[0].message}".strip(),
                    missing[0].error,
                )
            if any(t not in self._coordinators for t in wanted):
                raise wire.KafkaWireError(
                    f"FindCoordinator did not answer for every id of {wanted}"
                )
            return
        raise _Retry(f"no bootstrap broker answered: {last}", wire.COORDINATOR_NOT_AVAILABLE)

    def _on_coordinator(self, transactional_id: str, api: tuple[int, int], body: bytes) -> bytes:
        broker = self._coordinator(transactional_id)
        try:
            return self._call(broker, api, body)
        except wire.KafkaAuthError:
            raise
        except wire.KafkaWireError as error:
            self._coordinators.pop(transactional_id, None)
            raise _Retry(str(error), wire.COORDINATOR_NOT_AVAILABLE) from None

    def _retrying(self, what: str, call: Callable[[], T]) -> T:
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.1
        while True:
            try:
                return call()
            except _Retry as retry:
                if time.monotonic() + delay > deadline:
                    raise SinkError(
                        f"{what}: the Kafka brokers did not answer within "
                        f"{self.retry_seconds:.0f} s: {retry}"
                    ) from None
                log.info("%s: %s; retrying", what, retry)
                self.sleep(delay)
                delay = min(delay * 2, 2.0)

    def describe(self, transactional_id: str) -> wire.TransactionDescription:
        def once() -> wire.TransactionDescription:
            body = self._on_coordinator(
                transactional_id,
                wire.DESCRIBE_TRANSACTIONS,
                wire.describe_transactions_body([transactional_id]),
            )
            found = wire.parse_describe_transactions(body)
            if len(found) != 1:
                raise wire.KafkaWireError(f"DescribeTransactions answered {len(found)} states")
            if found[0].error in wire.RETRIABLE:
                self._coordinators.pop(transactional_id, None)
                raise _Retry(wire.error_name(found[0].error), found[0].error)
            return found[0]

        return self._retrying(f"describing Kafka transaction {transactional_id!r}", once)

    def end(self, transaction: OpenTransaction, *, commit: bool) -> int:
        """``EndTxn`` for ``transaction``; the broker's error code once it is not retriable."""

        def once() -> int:
            body = self._on_coordinator(
                transaction.transactional_id, *_end_txn(transaction, commit)
            )
            code = wire.parse_end_txn(body)
            if code in wire.RETRIABLE:
                self._coordinators.pop(transaction.transactional_id, None)
                raise _Retry(wire.error_name(code), code)
            return code

        verb = "committing" if commit else "aborting"
        return self._retrying(f"{verb} Kafka transaction {transaction.transactional_id!r}", once)

    # -- what the sink does with them --

    def end_all(self, transactions: Sequence[OpenTransaction], *, commit: bool) -> list[int]:
        """``EndTxn`` for each transaction, the broker's error code of each: pipelined on one
        connection per coordinator, then one by one (``end``) for those that must be retried."""
        codes: list[int | None] = [None] * len(transactions)
        groups: dict[tuple[str, int], list[int]] = {}
        with contextlib.suppress(_Retry):  # those without a coordinator yet go one by one
            self._locate([t.transactional_id for t in transactions])
        for index, transaction in enumerate(transactions):
            try:
                broker = self._coordinator(transaction.transactional_id)
            except _Retry:
                continue
            groups.setdefault(broker, []).append(index)
        for broker, indexes in groups.items():
            requests = [_end_txn(transactions[index], commit) for index in indexes]
            try:
                bodies = self._call_many(broker, requests)
            except wire.KafkaAuthError:
                raise
            except wire.KafkaWireError:
                continue  # each is retried on its own below
            for index, body in zip(indexes, bodies, strict=True):
                code = wire.parse_end_txn(body)
                codes[index] = None if code in wire.RETRIABLE else code
        return [
            self.end(transaction, commit=commit) if code is None else code
            for transaction, code in zip(transactions, codes, strict=True)
        ]

    def commit_all(self, sink: str, batch_id: int, transactions: Sequence[OpenTransaction]) -> None:
        """Commit every transaction of a batch; one the broker aborted is KafkaTransactionLost.

        A commit that already happened is answered with success (a retry after a crash)."""
        for transaction, code in zip(
            transactions, self.end_all(transactions, commit=True), strict=True
        ):
            if code == wire.NONE:
                continue
            found = self.describe(transaction.transactional_id)
            if found.state == "CompleteCommit" and _ended_by(transaction, found):
                continue
            if code in (
                wire.INVALID_TXN_STATE,
                wire.INVALID_PRODUCER_EPOCH,
                wire.PRODUCER_FENCED,
                wire.INVALID_PRODUCER_ID_MAPPING,
            ):
                raise KafkaTransactionLost(lost_message(sink, batch_id, transaction, found))
            raise SinkError(
                f"Kafka sink {sink!r}: the broker refused to commit transaction "
                f"{transaction.transactional_id!r} of batch {batch_id}: {wire.error_name(code)}"
            )

    def abort_all(self, transactions: Sequence[OpenTransaction]) -> None:
        """Abort transactions nobody will commit (a replay's); gone or ended ones are fine."""
        for transaction, code in zip(
            transactions, self.end_all(transactions, commit=False), strict=True
        ):
            if code not in (wire.NONE, *_ALREADY_ENDED):
                log.warning(
                    "could not abort Kafka transaction %s: %s",
                    transaction.transactional_id,
                    wire.error_name(code),
                )

    def open_transactions(self, brokers: Sequence[tuple[str, int]], prefix: str) -> list[str]:
        """Transactional ids starting with ``prefix`` that a broker has open (``Ongoing``)."""
        found: set[str] = set()
        for host, port in brokers:
            body = self._call(
                (host, port), wire.LIST_TRANSACTIONS, wire.list_transactions_body(["Ongoing"])
            )
            error, listed = wire.parse_list_transactions(body)
            if error != wire.NONE:
                raise SinkError(
                    f"listing the open transactions of Kafka broker {host}:{port} failed: "
                    f"{wire.error_name(error)}"
                )
            found.update(
                t.transactional_id for t in listed if t.transactional_id.startswith(prefix)
            )
        return sorted(found)


_ALREADY_ENDED: Final = (
    wire.INVALID_TXN_STATE,
    wire.INVALID_PRODUCER_EPOCH,
    wire.PRODUCER_FENCED,
    wire.INVALID_PRODUCER_ID_MAPPING,
)


def _end_txn(transaction: OpenTransaction, commit: bool) -> tuple[tuple[int, int], bytes]:
    """The EndTxn request (its api and version, and body) that ends ``transaction``."""
    api = wire.END_TXN_V2 if transaction.version >= 2 else wire.END_TXN
    return api, wire.end_txn_body(
        transaction.transactional_id, transaction.producer_id, transaction.epoch, commit
    )


def _ended_by(transaction: OpenTransaction, found: wire.TransactionDescription) -> bool:
    """Whether the id's last transaction, as described, is ``transaction`` itself: same producer
    and epoch, or (transaction version 2) the epoch its end moved to."""
    if found.producer_id != transaction.producer_id:
        return False
    bumped = 1 if transaction.version >= 2 else 0
    return found.producer_epoch in (transaction.epoch, transaction.epoch + bumped)


class _Retry(Exception):
    """A coordinator that moved, loads or is busy: the same request may succeed shortly."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"bootstrap server {text.strip()!r}: expected host:port")
    return host.strip("[]"), int(port)


def committing(
    sink: str, batch_id: int, transactions: Sequence[OpenTransaction], run: str
) -> CommitRecord:
    return CommitRecord(sink, batch_id, COMMITTING, tuple(transactions), run, now_text())


def committed(record: CommitRecord) -> CommitRecord:
    return CommitRecord(
        record.sink, record.batch_id, COMMITTED, record.transactions, record.run, now_text()
    )
