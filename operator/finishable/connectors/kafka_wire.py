"""The four Kafka requests the Kafka sink's committer needs, which no Python client offers.

An exactly-once Kafka sink commits, in the driver, transactions that write tasks opened and
flushed in their own producers (``connectors.kafka_writing``): Flink's KafkaSink does it by
reflection into the Java producer; librdkafka cannot resume another process's transaction at
all. The broker needs no producer for it, only the transactional id, the producer id and the
epoch: ``EndTxn`` with those, sent to the transaction's coordinator, commits or aborts it. So this
module speaks that much of the Kafka protocol itself (the message layouts are Apache Kafka's
``clients/src/main/resources/common/message/*.json``):

* ``FindCoordinator`` v4 (key type transaction): which broker coordinates a transactional id;
* ``DescribeTransactions`` v0: a transaction's state, producer id and epoch;
* ``EndTxn`` v3: commit or abort a transaction of the first transaction version (librdkafka's;
  no epoch bump on commit, so a retried commit of a committed transaction is answered with
  success), v5 one of version 2 (KIP-890, the Java client's on a 4.x broker: the broker bumps the
  epoch as it ends the transaction);
* ``ListTransactions`` v0: the open transactions a broker coordinates, to abort leftovers.

All four are flexible versions (compact strings and arrays, tagged fields), in brokers since
Kafka 3.0. The connection is PLAINTEXT, SSL, or either with SASL (``SaslHandshake`` v1 and
``SaslAuthenticate`` v2) by PLAIN or SCRAM-SHA-256/512 (RFC 5802), the mechanisms brokers are
secured with besides Kerberos and OAuth, which are refused naming the setting. The encoders,
decoders and the SCRAM exchange are pure functions over bytes; :class:`KafkaWire` is the socket.

One cohesive module: the client side of the part of the Kafka protocol this project speaks
(framing, the messages, authentication and the connection), which change together when a broker
version moves a message's version.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import socket
import ssl
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

FIND_COORDINATOR: Final = (10, 4)
END_TXN: Final = (26, 3)
END_TXN_V2: Final = (26, 5)
"""EndTxn for a transaction of transaction version 2: the same fields; the response adds the
producer id and epoch the broker moved to (read past, not needed)."""
DESCRIBE_TRANSACTIONS: Final = (65, 0)
LIST_TRANSACTIONS: Final = (66, 0)
SASL_HANDSHAKE: Final = (17, 1)
SASL_AUTHENTICATE: Final = (36, 2)
SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
TRANSACTION_KEY_TYPE: Final = 1

NONE: Final = 0
COORDINATOR_LOAD_IN_PROGRESS: Final = 14
COORDINATOR_NOT_AVAILABLE: Final = 15
NOT_COORDINATOR: Final = 16
INVALID_PRODUCER_EPOCH: Final = 47
INVALID_TXN_STATE: Final = 48
INVALID_PRODUCER_ID_MAPPING: Final = 49
CONCURRENT_TRANSACTIONS: Final = 51
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Final = 53
PRODUCER_FENCED: Final = 90
TRANSACTIONAL_ID_NOT_FOUND: Final = 105

ERROR_NAMES: Final = {
    NONE: "NONE",
    COORDINATOR_LOAD_IN_PROGRESS: "COORDINATOR_LOAD_IN_PROGRESS",
    COORDINATOR_NOT_AVAILABLE: "COORDINATOR_NOT_AVAILABLE",
    NOT_COORDINATOR: "NOT_COORDINATOR",
    INVALID_PRODUCER_EPOCH: "INVALID_PRODUCER_EPOCH",
    INVALID_TXN_STATE: "INVALID_TXN_STATE",
    INVALID_PRODUCER_ID_MAPPING: "INVALID_PRODUCER_ID_MAPPING",
    CONCURRENT_TRANSACTIONS: "CONCURRENT_TRANSACTIONS",
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    PRODUCER_FENCED: "PRODUCER_FENCED",
    TRANSACTIONAL_ID_NOT_FOUND: "TRANSACTIONAL_ID_NOT_FOUND",
}
RETRIABLE: Final = frozenset(
    {
        COORDINATOR_LOAD_IN_PROGRESS,
        COORDINATOR_NOT_AVAILABLE,
        NOT_COORDINATOR,
        CONCURRENT_TRANSACTIONS,
    }
)
"""Errors that go away: the coordinator moves, loads, or is still writing the markers."""

CLIENT_ID: Final = "finishable-kafka-committer"
_MAX_FRAME = 64 * 1024 * 1024


class KafkaWireError(RuntimeError):
    """A broker could not be reached, or answered something this client does not understand."""


class KafkaAuthError(KafkaWireError):
    """A broker refused this client's credentials or mechanism: no retry will change that."""


def error_name(code: int) -> str:
    return ERROR_NAMES.get(code, f"error code {code}")


# --- encoding ------------------------------------------------------------------------------------


def uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def compact_string(text: str) -> bytes:
    data = text.encode()
    return uvarint(len(data) + 1) + data


def compact_array(items: Sequence[bytes]) -> bytes:
    return uvarint(len(items) + 1) + b"".join(items)


NO_TAGS: Final = b"\x00"


def request_frame(
    api: tuple[int, int], correlation_id: int, body: bytes, *, flexible: bool = True
) -> bytes:
    """A sized request with header v2 (flexible: key, version, correlation id, client id, tags)
    or v1 (the same without tags, for ``SaslHandshake``)."""
    key, version = api
    client = CLIENT_ID.encode()
    header = struct.pack(">hhih", key, version, correlation_id, len(client)) + client
    payload = header + (NO_TAGS if flexible else b"") + body
    return struct.pack(">i", len(payload)) + payload


def find_coordinator_body(transactional_ids: Sequence[str]) -> bytes:
    """One request for the coordinators of many ids (version 4 takes a list of keys)."""
    return (
        struct.pack(">b", TRANSACTION_KEY_TYPE)
        + compact_array([compact_string(t) for t in transactional_ids])
        + NO_TAGS
    )


def describe_transactions_body(transactional_ids: Sequence[str]) -> bytes:
    return compact_array([compact_string(t) for t in transactional_ids]) + NO_TAGS


def end_txn_body(transactional_id: str, producer_id: int, epoch: int, commit: bool) -> bytes:
    return (
        compact_string(transactional_id) + struct.pack(">qh?", producer_id, epoch, commit) + NO_TAGS
    )


def list_transactions_body(states: Sequence[str]) -> bytes:
    return compact_array([compact_string(s) for s in states]) + compact_array([]) + NO_TAGS


def sasl_handshake_body(mechanism: str) -> bytes:
    data = mechanism.encode()
    return struct.pack(">h", len(data)) + data


def sasl_authenticate_body(auth: bytes) -> bytes:
    return uvarint(len(auth) + 1) + auth + NO_TAGS


# --- decoding ------------------------------------------------------------------------------------


class Reader:
    """Reads a response body field by field; running out of bytes is a KafkaWireError."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise KafkaWireError(f"truncated Kafka response ({len(self.data)} bytes)")
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def int8(self) -> int:
        return int(struct.unpack(">b", self.take(1))[0])

    def int16(self) -> int:
        return int(struct.unpack(">h", self.take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self.take(8))[0])

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise KafkaWireError("malformed varint in a Kafka response")

    def compact_string(self) -> str | None:
        size = self.uvarint()
        return None if size == 0 else self.take(size - 1).decode()

    def string(self) -> str:
        return self.compact_string() or ""

    def array_length(self) -> int:
        return max(self.uvarint() - 1, 0)

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def parse_sasl_handshake(body: bytes) -> tuple[int, list[str]]:
    """The error code and the mechanisms the broker enables (a non-flexible response)."""
    reader = Reader(body)
    error = reader.int16()
    mechanisms = []
    for _ in range(max(reader.int32(), 0)):
        mechanisms.append(reader.take(reader.int16()).decode())
    return error, mechanisms


def parse_sasl_authenticate(body: bytes) -> tuple[int, str, bytes]:
    """The error code, the broker's message and its authentication bytes."""
    reader = Reader(body)
    error = reader.int16()
    message = reader.compact_string() or ""
    auth = reader.take(max(reader.uvarint() - 1, 0))
    return error, message, auth


# --- SCRAM (RFC 5802; SHA-256 and SHA-512, as in Kafka) ---------------------------------------


def scram_name(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def scram_client_first(username: str, nonce: str) -> str:
    """The client-first-message's bare part (the GS2 header ``n,,`` goes before it)."""
    return f"n={scram_name(username)},r={nonce}"


def scram_client_final(
    mechanism: str, password: str, client_first_bare: str, server_first: str, nonce: str
) -> tuple[str, bytes]:
    """The client-final-message for ``server_first``, and the server signature that proves the
    broker knew the password too."""
    fields = dict(part.split("=", 1) for part in server_first.split(","))
    combined, salt, iterations = fields.get("r", ""), fields.get("s", ""), fields.get("i", "0")
    if not combined.startswith(nonce) or not salt or not iterations.isdigit():
        raise KafkaWireError(f"malformed SCRAM server-first-message {server_first!r}")
    digest = mechanism.removeprefix("SCRAM-").replace("-", "").lower()
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), base64.b64decode(salt), int(iterations))
    client_key = hmac.digest(salted, b"Client Key", digest)
    stored_key = hashlib.new(digest, client_key).digest()
    without_proof = f"c=biws,r={combined}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(stored_key, auth_message, digest)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_key = hmac.digest(salted, b"Server Key", digest)
    server_signature = hmac.digest(server_key, auth_message, digest)
    return f"{without_proof},p={base64.b64encode(proof).decode()}", server_signature


@dataclass(frozen=True)
class Coordinator:
    key: str
    node_id: int
    host: str
    port: int
    error: int
    message: str


def parse_find_coordinator(body: bytes) -> list[Coordinator]:
    """The coordinator of each key asked for, with its error code."""
    reader = Reader(body)
    reader.int32()  # throttle
    found = []
    for _ in range(reader.array_length()):
        key = reader.string()
        node_id = reader.int32()
        host = reader.string()
        port = reader.int32()
        error = reader.int16()
        message = reader.compact_string() or ""
        reader.skip_tags()
        found.append(Coordinator(key, node_id, host, port, error, message))
    return found


@dataclass(frozen=True)
class TransactionDescription:
    """What a transaction coordinator knows of one transactional id."""

    transactional_id: str
    error: int
    state: str
    """``Empty``, ``Ongoing``, ``PrepareCommit``, ``PrepareAbort``, ``CompleteCommit``,
    ``CompleteAbort``, ``Dead`` or ``PrepareEpochFence``."""
    timeout_ms: int
    producer_id: int
    producer_epoch: int


def parse_describe_transactions(body: bytes) -> list[TransactionDescription]:
    reader = Reader(body)
    reader.int32()  # throttle
    found: list[TransactionDescription] = []
    for _ in range(reader.array_length()):
        error = reader.int16()
        transactional_id = reader.string()
        state = reader.string()
        timeout_ms = reader.int32()
        reader.int64()  # start time
        producer_id = reader.int64()
        epoch = reader.int16()
        for _ in range(reader.array_length()):  # topics
            reader.string()
            for _ in range(reader.array_length()):
                reader.int32()
            reader.skip_tags()
        reader.skip_tags()
        found.append(
            TransactionDescription(transactional_id, error, state, timeout_ms, producer_id, epoch)
        )
    return found


def parse_end_txn(body: bytes) -> int:
    reader = Reader(body)
    reader.int32()  # throttle
    return reader.int16()


@dataclass(frozen=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


def parse_list_transactions(body: bytes) -> tuple[int, list[ListedTransaction]]:
    reader = Reader(body)
    reader.int32()  # throttle
    error = reader.int16()
    for _ in range(reader.array_length()):  # unknown state filters
        reader.string()
    listed: list[ListedTransaction] = []
    for _ in range(reader.array_length()):
        transactional_id = reader.string()
        producer_id = reader.int64()
        state = reader.string()
        reader.skip_tags()
        listed.append(ListedTransaction(transactional_id, producer_id, state))
    return error, listed


# --- the connection ------------------------------------------------------------------------------


@dataclass(frozen=True)
class WireSecurity:
    """How to reach the brokers, from the producer's librdkafka settings: PLAINTEXT or SSL, either
    with SASL PLAIN or SCRAM."""

    protocol: str = "PLAINTEXT"
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = None
    verify_hostname: bool = True
    mechanism: str | None = None
    username: str = ""
    password: str = field(default="", repr=False)

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> WireSecurity:
        """The security of a client configuration; what this client cannot speak is refused,
        naming the setting."""
        protocol = settings.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise KafkaWireError(f"security.protocol={settings['security.protocol']!r} is unknown")
        mechanism = None
        if protocol.startswith("SASL_"):
            mechanism = (
                settings.get("sasl.mechanisms") or settings.get("sasl.mechanism") or "GSSAPI"
            ).upper()
            if mechanism not in SASL_MECHANISMS:
                raise KafkaWireError(
                    f"sasl.mechanisms={mechanism!r}: the exactly-once Kafka sink commits "
                    f"transactions with SASL {', '.join(SASL_MECHANISMS)}; GSSAPI (Kerberos) and "
                    "OAUTHBEARER are not supported yet (use delivery='at-least-once', or a "
                    "listener with one of those)"
                )
            if not settings.get("sasl.username") or "sasl.password" not in settings:
                raise KafkaWireError(
                    f"SASL {mechanism} needs kafka.sasl.username and kafka.sasl.password"
                )
        return cls(
            protocol=protocol,
            ca_location=settings.get("ssl.ca.location"),
            certificate_location=settings.get("ssl.certificate.location"),
            key_location=settings.get("ssl.key.location"),
            key_password=settings.get("ssl.key.password"),
            verify_hostname=settings.get("ssl.endpoint.identification.algorithm", "https")
            != "none",
            mechanism=mechanism,
            username=settings.get("sasl.username", ""),
            password=settings.get("sasl.password", ""),
        )

    def wrap(self, sock: socket.socket, host: str) -> socket.socket:
        if not self.protocol.endswith("SSL"):
            return sock
        context = ssl.create_default_context(cafile=self.ca_location)
        context.check_hostname = self.verify_hostname
        if self.certificate_location:
            context.load_cert_chain(self.certificate_location, self.key_location, self.key_password)
        return context.wrap_socket(sock, server_hostname=host)


class KafkaWire:
    """One connection to one broker; requests are answered in order (one at a time here)."""

    def __init__(self, host: str, port: int, security: WireSecurity, timeout: float = 30.0) -> None:
        self.where = f"{host}:{port}"
        try:
            raw = socket.create_connection((host, port), timeout=timeout)
            self._sock = security.wrap(raw, host)
        except OSError as error:
            raise KafkaWireError(f"cannot connect to Kafka broker {self.where}: {error}") from None
        self._correlation = 0
        if security.mechanism is not None:
            try:
                self._authenticate(security)
            except BaseException:
                self.close()
                raise

    def _authenticate(self, security: WireSecurity) -> None:
        mechanism = security.mechanism or ""
        error, enabled = parse_sasl_handshake(
            self.call(SASL_HANDSHAKE, sasl_handshake_body(mechanism), flexible=False)
        )
        if error != NONE:
            raise KafkaAuthError(
                f"Kafka broker {self.where} does not take SASL {mechanism} "
                f"(it enables {', '.join(enabled) or 'none'})"
            )
        if mechanism == "PLAIN":
            self._sasl_step(f"\0{security.username}\0{security.password}".encode())
            return
        nonce = secrets.token_urlsafe(24)
        first = scram_client_first(security.username, nonce)
        server_first = self._sasl_step(f"n,,{first}".encode()).decode()
        final, expected = scram_client_final(
            mechanism, security.password, first, server_first, nonce
        )
        server_final = self._sasl_step(final.encode()).decode()
        if not server_final.startswith("v=") or not hmac.compare_digest(
            base64.b64decode(server_final[2:]), expected
        ):
            raise KafkaAuthError(f"Kafka broker {self.where} failed SCRAM's server proof")

    def _sasl_step(self, auth: bytes) -> bytes:
        error, message, answer = parse_sasl_authenticate(
            self.call(SASL_AUTHENTICATE, sasl_authenticate_body(auth))
        )
        if error != NONE:
            raise KafkaAuthError(
                f"Kafka broker {self.where} refused the SASL authentication: {message or error}"
            )
        return answer

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, api: tuple[int, int], body: bytes, *, flexible: bool = True) -> bytes:
        """Send one request and return its response body (after the response header: v1 with
        tags for a flexible version, v0 without)."""
        return self.call_many([(api, body)], flexible=flexible)[0]

    def call_many(
        self, requests: Sequence[tuple[tuple[int, int], bytes]], *, flexible: bool = True
    ) -> list[bytes]:
        """Send the requests at once and return their response bodies, in order: a broker
        answers a connection's requests in the order they came (pipelining)."""
        first = self._correlation + 1
        frames = []
        for api, body in requests:
            self._correlation += 1
            frames.append(request_frame(api, self._correlation, body, flexible=flexible))
        bodies: list[bytes] = []
        try:
            self._sock.sendall(b"".join(frames))
            for expected in range(first, self._correlation + 1):
                size = struct.unpack(">i", self._read(4))[0]
                if not 0 < size <= _MAX_FRAME:
                    raise KafkaWireError(f"Kafka broker {self.where} sent a frame of {size} bytes")
                response = Reader(self._read(size))
                if response.int32() != expected:
                    raise KafkaWireError(f"Kafka broker {self.where} answered out of order")
                if flexible:
                    response.skip_tags()
                bodies.append(response.data[response.at :])
        except OSError as error:
            raise KafkaWireError(f"Kafka broker {self.where}: {error}") from None
        return bodies

    def _read(self, size: int) -> bytes:
        chunks: list[bytes] = []
        while size:
            chunk = self._sock.recv(size)
            if not chunk:
                raise KafkaWireError(f"Kafka broker {self.where} closed the connection")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)
