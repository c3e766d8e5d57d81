"""A real Kafka broker on loopback for the tests: Apache Kafka in KRaft mode, one node that is
both broker and controller, from the pinned jars of ``testcluster/kafka-jars.txt``.

The jars are fetched once from Maven Central (``MAVEN_REPOSITORY`` overrides it) into
``~/.cache/finishable/kafka-<version>/`` and each is checked against the sha256 the list pins; a
mismatch stops with an error and keeps nothing. Java 17 runs the broker. Its settings are those a
single-node cluster needs for transactions (the transaction log and the offsets topic with one
replica) and nothing else, so that what the tests see is what a real broker does.

A :class:`KafkaBroker` keeps its log directory across :meth:`KafkaBroker.stop`,
:meth:`KafkaBroker.kill` (SIGKILL) and :meth:`KafkaBroker.start`, so a test can restart it under
a running job and find its topics, offsets and open transactions where a real restart leaves them.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from testcluster.network import free_port
from testcluster.processes import terminate
from testcluster.waiting import wait_for

JARS_LIST = Path(__file__).with_name("kafka-jars.txt")
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
KAFKA_ARTIFACT = "org.apache.kafka:kafka_2.13"
START_TIMEOUT = 180.0  # a JVM on a loaded two-core machine; the broker logs what it waits for


class KafkaUnavailable(RuntimeError):
    """The broker cannot be started here: no Java, or its jars cannot be fetched."""


@dataclass(frozen=True)
class PinnedJar:
    """One line of the jar list: a Maven coordinate and the sha256 its jar must have."""

    group: str
    artifact: str
    version: str
    sha256: str

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    def url(self, repository: str) -> str:
        group = self.group.replace(".", "/")
        return f"{repository}/{group}/{self.artifact}/{self.version}/{self.file_name}"


def pinned_jars(text: str) -> list[PinnedJar]:
    """The jars a list names (``group:artifact:version sha256`` per line, ``#`` comments)."""
    jars = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            coordinate, sha256 = line.split()
            group, artifact, version = coordinate.split(":")
        except ValueError:
            raise ValueError(
                f"line {number} of the jar list: {line!r} is not 'group:artifact:version sha256'"
            ) from None
        jars.append(PinnedJar(group, artifact, version, sha256))
    return jars


def kafka_version(jars: list[PinnedJar]) -> str:
    """The broker's version: that of ``kafka_2.13`` in the list."""
    for jar in jars:
        if f"{jar.group}:{jar.artifact}" == KAFKA_ARTIFACT:
            return jar.version
    raise ValueError(f"the jar list names no {KAFKA_ARTIFACT}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_jars(jars: list[PinnedJar], directory: Path, repository: str | None = None) -> list[Path]:
    """Every jar of ``jars`` in ``directory``, fetched and checked where missing or different;
    two test processes at once fetch each jar once (a lock beside them)."""
    repository = repository or os.environ.get("MAVEN_REPOSITORY", MAVEN_CENTRAL)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    with (directory / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for jar in jars:
            path = directory / jar.file_name
            paths.append(path)
            if path.is_file() and _sha256(path) == jar.sha256:
                continue
            partial = Path(tempfile.mkstemp(dir=directory, prefix=f".{jar.file_name}.")[1])
            try:
                try:
                    urllib.request.urlretrieve(jar.url(repository), partial)
                except OSError as error:
                    raise KafkaUnavailable(
                        f"cannot fetch {jar.url(repository)} ({error}); Maven Central must be "
                        "reachable, or MAVEN_REPOSITORY name a mirror"
                    ) from None
                got = _sha256(partial)
                if got != jar.sha256:
                    raise KafkaUnavailable(
                        f"{jar.url(repository)} has sha256 {got}, not the {jar.sha256} "
                        f"{JARS_LIST.name} pins"
                    )
                partial.replace(path)
            finally:
                partial.unlink(missing_ok=True)
    return paths


def kafka_classpath() -> tuple[str, list[Path]]:
    """The pinned broker's version and its jars, fetched into the cache when missing."""
    jars = pinned_jars(JARS_LIST.read_text(encoding="utf-8"))
    version = kafka_version(jars)
    return version, fetch_jars(jars, _cache() / f"kafka-{version}")


SPARK_KAFKA_JARS = Path(__file__).with_name("spark-kafka-jars.txt")


def spark_kafka_jars() -> list[Path]:
    """Spark's own Kafka connector (``format("kafka")``), for plain Structured Streaming beside
    the finishable source in benchmarks/kafka.py; fetched into the cache when missing."""
    jars = pinned_jars(SPARK_KAFKA_JARS.read_text(encoding="utf-8"))
    return fetch_jars(jars, _cache() / "spark-kafka")


def _cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "finishable"


def broker_properties(
    data_dir: Path, port: int, controller_port: int, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A single-node KRaft cluster's settings: what transactions need with one replica."""
    return {
        "process.roles": "broker,controller",
        "node.id": "1",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "log.dirs": str(data_dir),
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0",
        # Records keep the event times tests give them (days old, often): retention by time
        # would delete them while a test reads. A test of data loss sets its own.
        "log.retention.ms": "-1",
        **(extra or {}),
    }


SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def sasl_listener(
    port: int, controller_port: int, sasl_port: int, users: Mapping[str, str]
) -> dict[str, str]:
    """A SASL_PLAINTEXT listener beside the plain one, taking PLAIN and SCRAM for ``users``
    (SCRAM's credentials are written when the storage is formatted)."""
    plain_users = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    return {
        "listeners": (
            f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port},"
            f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
        ),
        "advertised.listeners": (
            f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
        ),
        "listener.security.protocol.map": (
            "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
        ),
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": ",".join(("PLAIN", *SCRAM_MECHANISMS)),
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
        ),
        **{
            f"listener.name.sasl_plaintext.{mechanism.lower()}.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            )
            for mechanism in SCRAM_MECHANISMS
        },
    }


LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{HH:mm:ss.SSS} %-5p %c{1}: %m%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = {level}
logger.apache.name = org.apache.kafka
logger.apache.level = {level}
"""


class KafkaBroker:
    """One Kafka broker process on loopback; its data directory outlives its process."""

    def __init__(
        self,
        directory: Path,
        extra: Mapping[str, str] | None = None,
        *,
        sasl_users: Mapping[str, str] | None = None,
    ) -> None:
        if shutil.which("java") is None:
            raise KafkaUnavailable("no `java` on PATH: the Kafka broker needs Java 17")
        self.version, self._jars = kafka_classpath()
        self.directory = directory
        self.port = free_port()
        self.controller_port = free_port()
        self.sasl_port = free_port() if sasl_users else None
        self._sasl_users = dict(sasl_users or {})
        self.data_dir = directory / "data"
        self.log_path = directory / "broker.log"
        self._config = directory / "server.properties"
        sasl = (
            sasl_listener(self.port, self.controller_port, self.sasl_port, self._sasl_users)
            if self.sasl_port is not None
            else {}
        )
        properties = broker_properties(
            self.data_dir, self.port, self.controller_port, {**sasl, **(extra or {})}
        )
        directory.mkdir(parents=True, exist_ok=True)
        self._config.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        (directory / "log4j2.properties").write_text(LOG4J2.replace("{level}", "INFO"))
        self._process: subprocess.Popen[bytes] | None = None
        self._log_start = 0
        self._format()

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap_servers(self) -> str:
        """The SASL_PLAINTEXT listener (PLAIN and SCRAM-SHA-256/512 for ``sasl_users``)."""
        if self.sasl_port is None:
            raise KafkaUnavailable("this broker was started without sasl_users")
        return f"127.0.0.1:{self.sasl_port}"

    def _java(self, main: str, *arguments: str) -> list[str]:
        return [
            "java",
            "-Xms128m",
            "-Xmx512m",
            f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
            "-cp",
            os.pathsep.join(str(jar) for jar in self._jars),
            main,
            *arguments,
        ]

    def _format(self) -> None:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        done = subprocess.run(
            self._java(
                "kafka.tools.StorageTool",
                "format",
                f"--cluster-id={cluster_id}",  # an id may start with "-", which "-t ID" misreads
                "-c",
                str(self._config),
                *(
                    argument
                    for name, password in self._sasl_users.items()
                    for mechanism in SCRAM_MECHANISMS
                    for argument in (
                        "--add-scram",
                        f"{mechanism}=[name={name},password={password}]",
                    )
                ),
            ),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise KafkaUnavailable(f"formatting the broker's storage failed: {done.stderr[-2000:]}")

    def start(self) -> None:
        """Start the broker and wait until it accepts connections (its data kept from before)."""
        if self.running:
            return
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            self._java("kafka.Kafka", str(self._config)),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_for(
            self._listening,
            f"the Kafka broker on {self.bootstrap_servers}",
            START_TIMEOUT,
            on_fail=lambda: f"\n{self.tail()}",
            interval=0.2,
        )

    def _listening(self) -> bool:
        if self._process is None or self._process.poll() is not None:
            raise KafkaUnavailable(f"the Kafka broker exited: {self.tail()}")
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", self.port), timeout=1),
            self.log_path.open("rb") as log,
        ):
            log.seek(self._log_start)
            return b"Kafka Server started" in log.read()
        return False

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        """A clean shutdown (SIGTERM; SIGKILL after 60 s)."""
        if self._process is not None:
            terminate(self._process, grace=60.0)
            self._process = None

    def kill(self) -> None:
        """SIGKILL: a crash, what the broker's log recovery then repairs."""
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(timeout=60)
            self._process = None

    def tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def running_broker(
    directory: Path,
    extra: Mapping[str, str] | None = None,
    *,
    sasl_users: Mapping[str, str] | None = None,
) -> Iterator[KafkaBroker]:
    """A started broker for the block, stopped after it (its directory left for the logs)."""
    broker = KafkaBroker(directory, extra, sasl_users=sasl_users)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


if __name__ == "__main__":  # `python -m testcluster.kafka fetch`: what `make jars` runs
    import sys

    if sys.argv[1:] != ["fetch"]:
        sys.exit("usage: python -m testcluster.kafka fetch")
    try:
        fetched_version, fetched = kafka_classpath()
    except KafkaUnavailable as error:
        sys.exit(f"kafka: {error}")
    sys.stderr.write(f"kafka: the {fetched_version} broker's {len(fetched)} jars are cached\n")
