"""A real PostgreSQL server for tests: Debian's binaries, a throwaway cluster on loopback.

The tests connect as its superuser without a password, over loopback; with ``listen`` on every
address (e2e: pods reach it at the node's address) every other connection must log in with a
password (``scram-sha-256``), as a role made by :meth:`PostgresServer.add_role`.

PostgreSQL refuses to run as root, so under uid 0 the cluster belongs to ``nobody`` and its
programs run as that user (Popen's ``user``/``group``), in a directory it owns outside pytest's
root-only temporary tree.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import psycopg
import pytest
from psycopg import sql

from testcluster.network import free_port

UNPRIVILEGED_USER = "nobody"


def server_bindir() -> Path | None:
    """Where initdb and postgres are: Debian keeps them off PATH, under one directory per
    version (the newest wins), else ``pg_config --bindir``."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda path: int(Path(path).parts[-3]) if Path(path).parts[-3].isdigit() else 0,
    )
    if found:
        return Path(found[-1]).parent
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        bindir = Path(
            subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True
            ).stdout.strip()
        )
        if (bindir / "initdb").exists() and (bindir / "postgres").exists():
            return bindir
    return None


class PostgresServer:
    """``initdb`` + ``postgres`` on 127.0.0.1 (a free port, its socket in its own directory);
    stopped with a fast shutdown and deleted on exit."""

    def __init__(self, listen: str = "127.0.0.1") -> None:
        self.listen = listen
        bindir = server_bindir()
        if bindir is None:
            pytest.fail(
                "no PostgreSQL server programs (initdb, postgres): install Debian's postgresql "
                "(sh testcluster/tools/install-system-tools.sh)"
            )
        self.bindir = bindir
        self.user = "postgres"
        self.database = "postgres"
        self.port = 0
        self.root = Path(tempfile.mkdtemp(prefix="finishable-pg-"))
        self.process: subprocess.Popen[bytes] | None = None
        self._uid: int | None = None
        self._gid: int | None = None
        if os.geteuid() == 0:
            try:
                entry = pwd.getpwnam(UNPRIVILEGED_USER)
            except KeyError:
                pytest.skip(
                    f"running as root and there is no user {UNPRIVILEGED_USER!r} to run "
                    "PostgreSQL as (it refuses to run as root)"
                )
            self._uid, self._gid = entry.pw_uid, entry.pw_gid
            os.chown(self.root, self._uid, self._gid)

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname={self.database}"

    @property
    def log_path(self) -> Path:
        return self.root / "server.log"

    def start(self, timeout: float = 120.0) -> None:
        data = self.root / "data"
        subprocess.run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                self.user,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
            cwd=self.root,
            user=self._uid,
            group=self._gid,
            extra_groups=None if self._uid is None else [],
        )
        # In the configuration file, not on the command line: a reload (the tests change
        # settings with ALTER SYSTEM) would call a file that differs from the command line wrong.
        if self.listen != "127.0.0.1":  # others log in with a password
            with (data / "pg_hba.conf").open("a") as hba:
                hba.write("host all all 0.0.0.0/0 scram-sha-256\n")
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(
                "fsync = off\n"  # the server is never killed here, only its clients
                "max_connections = 40\n"
                "shared_buffers = 16MB\n"
            )
        self.port = free_port()
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                str(self.bindir / "postgres"),
                "-D",
                str(data),
                "-h",
                self.listen,
                "-p",
                str(self.port),
                "-k",
                str(self.root),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
            start_new_session=True,
            user=self._uid,
            group=self._gid,
            extra_groups=None if self._uid is None else [],
        )
        log.close()
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"postgres exited: {self.log_path.read_text()[-3000:]}")
            try:
                with psycopg.connect(self.dsn, connect_timeout=5):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    def add_role(self, role: str, password: str, database: str) -> None:
        """A role that logs in with ``password`` and owns a new ``database``."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(role), sql.Literal(password)
                )
            )
            conn.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(database), sql.Identifier(role)
                )
            )

    def stop(self) -> None:
        """SIGINT is PostgreSQL's fast shutdown: clients are disconnected, nothing is waited on."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
