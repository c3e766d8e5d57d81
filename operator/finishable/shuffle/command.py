"""``finishable shuffle-server`` as a process: options, opening the store, serving until SIGTERM.

The HTTP server itself (:mod:`finishable.shuffle.server`) is embeddable and knows nothing of the
command line, signals or exit codes; this module turns the command's options into a store and a
running server, reports what to fix when it cannot start (exit code 2, or 1 when the address is
taken), writes the bound port for callers that asked for a free one, and stops cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from finishable.api.jobconfig import TOKEN_ENV
from finishable.api.units import Duration
from finishable.shuffle.records import InvalidName, check_job
from finishable.shuffle.server import BindError, ShuffleServer, StartupError
from finishable.shuffle.store import PartitionStore

logger = logging.getLogger(__name__)

SHUTDOWN_SECONDS = 10.0


@dataclass(frozen=True)
class ServerOptions:
    """How to run a shuffle server; ``port=0`` picks a free port (see ``port_file``)."""

    data_dir: Path
    job: str
    token: str
    retain_timeout: float
    host: str = "0.0.0.0"
    port: int = 7337
    port_file: Path | None = None
    exit_when_released: bool = False
    """Stop after the retain timeout released the job (local runs: no process left behind)."""


def open_store(options: ServerOptions) -> PartitionStore:
    """Check the options and open the store; ``StartupError`` says what to fix."""
    if not options.token:
        raise StartupError(
            f"the bearer token is missing: set ${TOKEN_ENV} to the job's token "
            "(the operator takes it from the Secret <job>-token)"
        )
    if not 0 <= options.port <= 65535:
        raise StartupError(f"--port {options.port} is not valid: expected 0 to 65535")
    if options.retain_timeout <= 0:
        raise StartupError(
            f"--retain-timeout {options.retain_timeout:g}s is not valid: it must be positive"
        )
    try:
        check_job(options.job)
    except InvalidName as error:
        raise StartupError(f"--job: {error}") from None
    try:
        options.data_dir.mkdir(parents=True, exist_ok=True)
        return PartitionStore(options.data_dir, options.job)
    except OSError as error:
        raise StartupError(
            f"cannot create or open the data directory {str(options.data_dir)!r}: "
            f"{error.strerror or error}"
        ) from None


async def serve(
    store: PartitionStore, options: ServerOptions, stop: asyncio.Event | None = None
) -> None:
    """Serve until ``stop`` is set, or SIGTERM / SIGINT; then finish in-flight requests."""
    stop = stop or asyncio.Event()
    server = ShuffleServer(
        store,
        options.token,
        options.retain_timeout,
        on_retain_release=stop.set if options.exit_when_released else None,
    )
    runner = web.AppRunner(server.app(), access_log=None, shutdown_timeout=SHUTDOWN_SECONDS)
    await runner.setup()
    try:
        site = web.TCPSite(runner, options.host, options.port, reuse_address=True)
        try:
            await site.start()
        except OSError as error:
            raise BindError(
                f"cannot listen on {options.host}:{options.port}: {error.strerror or error}"
            ) from None
        port = int(runner.addresses[0][1])
        if options.port_file is not None:
            write_port_file(options.port_file, port)
        logger.info(
            "shuffle server of job %r listening on %s:%d, data in %s, retain timeout %.1f s",
            store.job,
            options.host,
            port,
            store.directory,
            options.retain_timeout,
        )
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            # Outside the main thread there are no signal handlers: the caller sets ``stop``.
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        logger.info("shuffle server of job %r stopping", store.job)
    finally:
        await runner.cleanup()
        store.close()


def write_port_file(path: Path, port: int) -> None:
    """Write the bound port atomically: a reader never sees a half-written number."""
    temp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        temp.write_text(f"{port}\n", encoding="ascii")
        os.replace(temp, path)
    except OSError as error:
        temp.unlink(missing_ok=True)
        raise StartupError(f"cannot write the port file {str(path)!r}: {error}") from None


def run_server(options: ServerOptions) -> int:
    """Run a shuffle server in this thread until SIGTERM; the process's exit code."""
    try:
        store = open_store(options)
        asyncio.run(serve(store, options))
    except StartupError as error:
        sys.stderr.write(f"finishable shuffle-server: {error}\n")
        return error.exit_code
    return 0


def run_from_args(args: argparse.Namespace) -> int:
    """``finishable shuffle-server``: options from the command line, the token from the env."""
    try:
        retain = Duration.parse(args.retain_timeout)
    except ValueError as error:
        sys.stderr.write(f"finishable shuffle-server: --retain-timeout: {error}\n")
        return 2
    options = ServerOptions(
        data_dir=Path(args.data_dir),
        job=args.job,
        token=os.environ.get(TOKEN_ENV, "").strip(),
        retain_timeout=retain.total_seconds(),
        host=args.host,
        port=args.port,
        port_file=Path(args.port_file) if args.port_file else None,
        exit_when_released=bool(getattr(args, "exit_when_released", False)),
    )
    return run_server(options)
