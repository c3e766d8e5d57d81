"""The ``finishable`` command.

The whole command line is declared here, in one style: each command's options in a function, each
command a row of ``SUBCOMMANDS``; what a command does lives in its module (``local/commands.py``).

Every user mistake ends in a message on stderr and exit code 1 (2 for a wrong command line), never
in a traceback: the message names the file, the field and what would be accepted.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import yaml

from finishable import __version__
from finishable.api.models import DesiredState, JobMode, dump
from finishable.api.units import Duration
from finishable.api.validation import InvalidManifest, load_documents, load_job, parse_manifest
from finishable.controller.naming import KUBERNETES_MASTER, SHUFFLE_PORT
from finishable.local import commands
from finishable.local.jobdir import DEFAULT_STATE_DIR, PARTITIONS_DIR, LocalJobError
from finishable.partitions.commands import TOKEN_ENV
from finishable.partitions.manifest import DEFAULT_NAMESPACE
from finishable.state.savepointfiles import STATE_URL_ENV, dispose_command

log = logging.getLogger(__name__)

Command = Callable[[argparse.Namespace, TextIO], int]


def _version(args: argparse.Namespace, out: TextIO) -> int:
    """Print the versions that matter when reporting a problem."""
    import platform  # noqa: PLC0415 - only this command needs it

    out.write(f"finishable {__version__}\npython {platform.python_version()}\n")
    for package in ("pyspark", "kopf", "pydantic", "pyarrow"):
        out.write(f"{package} {_package_version(package)}\n")
    return 0


def _package_version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version(package)
    except PackageNotFoundError:
        return "(not installed)"


def _crd(args: argparse.Namespace, out: TextIO) -> int:
    """Print the CustomResourceDefinition generated from the models."""
    from finishable.api import crd  # noqa: PLC0415 - keeps `finishable --help` fast

    out.write(crd.render_snapshot_crd() if args.snapshot else crd.render_crd())
    return 0


def _validate(args: argparse.Namespace, out: TextIO) -> int:
    """Check manifests; print every problem as ``FILE: field: message``."""
    failed = False
    for name in args.files:
        try:
            documents = list(load_documents(Path(name)))
        except InvalidManifest as error:
            failed = True
            sys.stderr.write(f"{error}\n")
            continue
        for source, document in documents:
            try:
                job = parse_manifest(document, source)
            except InvalidManifest as error:
                failed = True
                sys.stderr.write(f"{error}\n")
            else:
                out.write(f"{source}: ok ({job.spec.mode.value} job {job.metadata.name!r})\n")
    return 1 if failed else 0


def _describe(args: argparse.Namespace, out: TextIO) -> int:
    """Print a manifest with every default filled in, and what the job will do."""
    try:
        job = load_job(Path(args.file))
    except InvalidManifest as error:
        sys.stderr.write(f"{error}\n")
        return 1
    spec = job.spec
    out.write(f"# {job.metadata.name}: a {spec.mode.value} job, desired state {spec.state.value}\n")
    if spec.mode is JobMode.STREAMING:
        out.write(
            f"# one checkpoint per micro-batch, at most every {spec.checkpointing.interval}, "
            f"stored in {spec.checkpointing.storage.type.value}, "
            f"{spec.checkpointing.retained} retained\n"
        )
    else:
        shuffle = spec.effective_shuffle
        out.write(
            f"# {shuffle.replicas} shuffle pods keep result partitions for "
            f"{shuffle.retain_timeout} after a driver is lost\n"
        )
    if spec.recovery.enabled:
        recovery = spec.recovery
        out.write(
            f"# a lost driver is restarted, up to {recovery.max_attempts} times within any "
            f"{recovery.failure_rate_interval} (spec.recovery.failureRateInterval)\n"
        )
    stops = {
        DesiredState.SUSPENDED: "stop with savepoint",
        DesiredState.FINISHED: "stop with savepoint and drain",
    }
    for state, what in stops.items():
        out.write(f"# spec.state: {state.value} -> {what}\n")
    document = dump(job)
    if spec.shuffle is None:
        document["spec"].pop("shuffle", None)
    out.write(yaml.safe_dump(document, sort_keys=False))
    return 0


def _lifecycle(args: argparse.Namespace, out: TextIO) -> int:
    """Print the FLIP-147 lifecycle tables (Markdown) that drive every task of a job."""
    from finishable.api.lifecycle import LifecycleMode, TaskKind  # noqa: PLC0415
    from finishable.lifecycle.table import render_markdown  # noqa: PLC0415

    kinds = [TaskKind(args.kind)] if args.kind else list(TaskKind)
    mode = LifecycleMode(args.mode) if args.mode else None
    out.write("\n\n".join(render_markdown(kind, mode) for kind in kinds) + "\n")
    return 0


def _operator(args: argparse.Namespace, out: TextIO) -> int:
    """Run the Kubernetes operator (kopf) until SIGTERM."""
    from finishable.controller.main import run_from_args  # noqa: PLC0415 - kopf is heavy

    return run_from_args(args)


def _driver(args: argparse.Namespace, out: TextIO) -> int:
    """Start the job's program in a driver pod (the operator's pods run this)."""
    from finishable.api.jobconfig import JobConfigError  # noqa: PLC0415
    from finishable.driver.dependencies.errors import DriverError  # noqa: PLC0415
    from finishable.driver.main import run_driver  # noqa: PLC0415

    try:
        run_driver()
    except (JobConfigError, DriverError) as error:
        sys.stderr.write(f"{error}\n")
        return 1


def _shuffle_server(args: argparse.Namespace, out: TextIO) -> int:
    """Serve a Batch job's result partitions (the operator's shuffle pods run this)."""
    from finishable.shuffle.command import run_from_args  # noqa: PLC0415 - aiohttp is heavy

    return run_from_args(args)


def _partitions(args: argparse.Namespace, out: TextIO) -> int:
    """``finishable partitions list|get|delete``."""
    from finishable.partitions.commands import PartitionCommandError, run  # noqa: PLC0415

    root = Path(args.state_dir) if args.state_dir else DEFAULT_STATE_DIR
    storage = args.storage or str((root / PARTITIONS_DIR).resolve())
    try:
        return run(args, out, storage)
    except PartitionCommandError as error:
        sys.stderr.write(f"{error}\n")
        return 1


def _partition_service(args: argparse.Namespace, out: TextIO) -> int:
    """Serve the cluster partitions of a partition storage over HTTP."""
    from finishable.partitions.service import run_from_args  # noqa: PLC0415 - aiohttp is heavy

    return run_from_args(args)


# -- the command line: each command's options in one function, every command in one table -------


def _crd_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--snapshot", action="store_true", help="the FinishableSparkSnapshot CRD")


def _validate_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="manifest files")


def _manifest_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a manifest holding one job")


def _lifecycle_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kind", choices=["SOURCE", "NON_SOURCE"], help="only this kind of task")
    parser.add_argument(
        "--mode",
        choices=["FINAL_CHECKPOINT", "STOP_WITH_SAVEPOINT_DRAIN", "STOP_WITH_SAVEPOINT"],
        help="only this termination mode",
    )


def _state_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir", help="where local jobs keep their state (default: .finishable)"
    )


def _run_options(parser: argparse.ArgumentParser) -> None:
    _manifest_option(parser)
    parser.add_argument("--resume", action="store_true", help="resume a suspended job")
    parser.add_argument(
        "--fresh", action="store_true", help="discard the job's earlier local state"
    )
    _state_dir_option(parser)


def _local_job_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="JOB", help="the job's name (metadata.name)")
    _state_dir_option(parser)


def _waiting_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-wait", action="store_true", help="do not wait for the answer")
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait (default 600)"
    )


def _stop_options(parser: argparse.ArgumentParser) -> None:
    _local_job_options(parser)
    parser.add_argument(
        "--drain", action="store_true", help="fire every pending window, then finish"
    )
    _waiting_options(parser)


def _savepoint_options(parser: argparse.ArgumentParser) -> None:
    _local_job_options(parser)
    _waiting_options(parser)


def _status_options(parser: argparse.ArgumentParser) -> None:
    _local_job_options(parser)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _operator_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace",
        action="append",
        metavar="NS",
        help="serve this namespace (repeat for more); every namespace when not given",
    )
    parser.add_argument("--bind", default="0.0.0.0", help="address of /healthz and /metrics")
    parser.add_argument("--liveness-port", type=int, default=8080, help="port of /healthz")
    parser.add_argument("--metrics-port", type=int, default=9090, help="port of /metrics")
    parser.add_argument(
        "--peering", default="finishable-spark-operator", help="kopf peering object name"
    )
    parser.add_argument(
        "--standalone", action="store_true", help="do not peer (a single replica only)"
    )
    parser.add_argument(
        "--priority", type=int, help="peering priority (default: random; highest acts)"
    )
    parser.add_argument(
        "--resync", type=float, default=60.0, help="seconds between reconciles of a quiet job"
    )
    parser.add_argument(
        "--spark-master",
        help="Spark master of the drivers. Default: the API server as pods reach it "
        "(k8s://https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT in a pod, else "
        f"{KUBERNETES_MASTER}): Spark creates executor pods; local[N] runs Spark inside each "
        "driver pod (small clusters, CI)",
    )
    parser.add_argument(
        "--cluster-partitions-storage",
        metavar="URL",
        help="the partition storage of Batch jobs that set no spec.clusterPartitions.storage "
        "(the one the partition service serves)",
    )
    for phase in ("Finished", "Failed"):
        parser.add_argument(
            f"--ttl-after-{phase.lower()}",
            type=_duration,
            metavar="DURATION",
            help=f"delete {phase} jobs this long after they {phase.lower()} (0s: at once) "
            f"unless their spec.ttlAfter{phase} says otherwise (default: they are kept)",
        )


def _duration(text: str) -> Duration:
    """A duration option, or why it is not one (argparse prints it)."""
    try:
        return Duration.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _listen_options(parser: argparse.ArgumentParser, port: int) -> None:
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--port", type=int, default=port, help="port; 0 picks a free one")
    parser.add_argument("--port-file", help="write the bound port to this file once listening")


def _shuffle_server_options(parser: argparse.ArgumentParser) -> None:
    _listen_options(parser, SHUFFLE_PORT)
    parser.add_argument("--data-dir", required=True, help="where partitions are stored")
    parser.add_argument("--job", required=True, help="the job whose partitions are served")
    parser.add_argument(
        "--retain-timeout",
        default="5m",
        help="release the partitions after no driver heartbeat for this long (default 5m)",
    )
    parser.add_argument(
        "--exit-when-released", action="store_true", help="exit once the retain timeout released"
    )


def _partitions_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["list", "get", "delete"], help="what to do")
    parser.add_argument(
        "partition", nargs="?", metavar="PARTITION", help="get/delete: id, <job>/<dataset> or name"
    )
    parser.add_argument(
        "--storage",
        help="the partition storage URL (default: <state dir>/_partitions of local runs)",
    )
    _state_dir_option(parser)
    parser.add_argument("--server", help="a cluster partition service, e.g. http://host:8088")
    parser.add_argument(
        "--namespace", default=DEFAULT_NAMESPACE, help="with --server: the namespace"
    )
    parser.add_argument(
        "--token-file", help=f"with --server: a file holding the token (else ${TOKEN_ENV})"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--force", action="store_true", help="delete: even while a job reads it (it then fails)"
    )


def _partition_service_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--storage", required=True, help="the partition storage URL")
    parser.add_argument(
        "--tokens-dir",
        required=True,
        help="a directory with one file per namespace holding its bearer token",
    )
    _listen_options(parser, 8088)
    parser.add_argument(
        "--expire-interval",
        type=float,
        default=60.0,
        help="seconds between releases of expired partitions (default 60)",
    )


def _dispose_savepoint_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "location", metavar="LOCATION", help="the savepoint's location: <root>/sp-<digits>.blob"
    )
    parser.add_argument(
        "--reach-like",
        metavar="URL",
        default=os.environ.get(STATE_URL_ENV, ""),
        help="reach LOCATION with this storage URL's credentials and options (endpoint, "
        f"region) when it names none (default: ${STATE_URL_ENV})",
    )


@dataclass(frozen=True)
class Subcommand:
    """One ``finishable`` command: what runs it, what ``--help`` says, the options it takes."""

    name: str
    run: Command
    help: str
    options: Callable[[argparse.ArgumentParser], None] | None = None


SUBCOMMANDS = (
    Subcommand("version", _version, "print the versions of finishable and its main dependencies"),
    Subcommand(
        "crd", _crd, "print the FinishableSparkJob CustomResourceDefinition (YAML)", _crd_options
    ),
    Subcommand("validate", _validate, "check FinishableSparkJob manifests", _validate_options),
    Subcommand(
        "describe",
        _describe,
        "print a manifest with all defaults and what the job will do",
        _manifest_option,
    ),
    Subcommand(
        "lifecycle", _lifecycle, "print the FLIP-147 task lifecycle tables", _lifecycle_options
    ),
    Subcommand(
        "run",
        commands.run,
        "run a manifest's job locally (embedded Spark, no cluster)",
        _run_options,
    ),
    Subcommand(
        "stop",
        commands.stop,
        "stop a local job with a savepoint (--drain: and drain it)",
        _stop_options,
    ),
    Subcommand(
        "savepoint",
        commands.savepoint,
        "take a savepoint of a local job without stopping it",
        _savepoint_options,
    ),
    Subcommand(
        "status", commands.status, "show what a local job's driver last reported", _status_options
    ),
    Subcommand("operator", _operator, "run the Kubernetes operator (kopf)", _operator_options),
    Subcommand("driver", _driver, "start a job's program in its driver pod (used by the operator)"),
    Subcommand(
        "shuffle-server",
        _shuffle_server,
        "serve a Batch job's result partitions (the operator's shuffle pods run this; "
        "the token comes from $FINISHABLE_TOKEN)",
        _shuffle_server_options,
    ),
    Subcommand(
        "partitions",
        _partitions,
        "list, show or delete cluster partitions (datasets promoted by Batch jobs)",
        _partitions_options,
    ),
    Subcommand(
        "dispose-savepoint",
        dispose_command,
        "delete a savepoint's files, its .meta then its .blob (the operator's disposal pods "
        "run this with the job's storage credentials)",
        _dispose_savepoint_options,
    ),
    Subcommand(
        "partition-service",
        _partition_service,
        "serve the cluster partition REST API (FLIP-67) of a partition storage",
        _partition_service_options,
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; each subcommand's function is stored in ``command``."""
    parser = argparse.ArgumentParser(
        prog="finishable",
        description=(
            "Run PySpark jobs that stop with a savepoint, drain, take a final checkpoint and "
            "recover after a driver crash, locally or through the Kubernetes operator."
        ),
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log more")
    parsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for subcommand in SUBCOMMANDS:
        sub = parsers.add_parser(subcommand.name, help=subcommand.help, description=subcommand.help)
        if subcommand.options is not None:
            subcommand.options(sub)
        sub.set_defaults(command=subcommand.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``finishable`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    command: Command | None = getattr(args, "command", None)
    if command is None:
        parser.print_help()
        return 2
    try:
        return command(args, sys.stdout)
    except LocalJobError as error:
        sys.stderr.write(f"{error}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
