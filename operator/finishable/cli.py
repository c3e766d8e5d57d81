"""The ``finishable`` command.

Every user mistake ends in a message on stderr and exit code 1 (2 for a wrong command line), never
in a traceback: the message names the file, the field and what would be accepted.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import yaml

from finishable import __version__
from finishable.api.models import DesiredState, JobMode, Phase, dump
from finishable.api.status import FinishableSparkJobStatus
from finishable.api.validation import InvalidManifest, load_documents, load_job, parse_manifest
from finishable.controller.job.driverconf import default_master
from finishable.controller.naming import KUBERNETES_MASTER
from finishable.local.jobdir import (
    DEFAULT_STATE_DIR,
    PARTITIONS_DIR,
    SETTLED_PHASES,
    LocalJob,
    LocalJobError,
    degraded,
    describe,
    local_job,
    nothing_runs,
    report_document,
    run_command,
    wait_for,
)
from finishable.state.savepointfiles import add_dispose_command

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
            _print_problems(error)
            continue
        for source, document in documents:
            try:
                job = parse_manifest(document, source)
            except InvalidManifest as error:
                failed = True
                _print_problems(error)
            else:
                out.write(f"{source}: ok ({job.spec.mode.value} job {job.metadata.name!r})\n")
    return 1 if failed else 0


def _print_problems(error: InvalidManifest) -> None:
    for problem in error.problems:
        sys.stderr.write(f"{error.source}: {problem}\n")


def _describe(args: argparse.Namespace, out: TextIO) -> int:
    """Print a manifest with every default filled in, and what the job will do."""
    try:
        job = load_job(Path(args.file))
    except InvalidManifest as error:
        _print_problems(error)
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
    from finishable.lifecycle.table import LifecycleMode, TaskKind, render_markdown  # noqa: PLC0415

    kinds = [TaskKind(args.kind)] if args.kind else list(TaskKind)
    mode = LifecycleMode(args.mode) if args.mode else None
    out.write("\n\n".join(render_markdown(kind, mode) for kind in kinds) + "\n")
    return 0


def _local_job(args: argparse.Namespace) -> LocalJob:
    return local_job(args.job, Path(args.state_dir) if args.state_dir else None)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    """Run a manifest's job locally until it is Finished, Suspended or Failed."""
    from finishable.local.runner import LocalRunner  # noqa: PLC0415 - heavier imports

    manifest = Path(args.file)
    try:
        job = load_job(manifest, local=True)
    except InvalidManifest as error:
        _print_problems(error)
        return 1
    state_dir = Path(args.state_dir) if args.state_dir else DEFAULT_STATE_DIR
    runner = LocalRunner(job, manifest, state_dir, out=out)
    return runner.run(resume=args.resume, fresh=args.fresh)


def _stop(args: argparse.Namespace, out: TextIO) -> int:
    """Stop a local job with a savepoint (like setting spec.state), or with drain."""
    job = _local_job(args)
    target = DesiredState.FINISHED if args.drain else DesiredState.SUSPENDED
    command = f"`finishable stop {job.name}{' --drain' if args.drain else ''}`"
    runner = job.runner()
    if not runner.alive:
        status = job.read_status()
        ended = {Phase.FINISHED, Phase.FAILED} | (set() if args.drain else {Phase.SUSPENDED})
        if status is None or status.phase not in ended:
            raise LocalJobError(nothing_runs(job, runner, status, command, args.state_dir))
        out.write("\n".join(describe(status, job.channel.read_report())) + "\n")
        return 1 if status.phase is Phase.FAILED else 0
    desired = job.edit_desired(state=target.value)
    what = "stop with savepoint and drain" if args.drain else "stop with savepoint"
    out.write(f"{job.name}: {what} requested\n")
    if args.no_wait:
        return 0
    return _await(
        job,
        args,
        lambda s: s.phase in SETTLED_PHASES,
        generation=desired.generation,
        command=command,
        out=out,
    )


def _savepoint(args: argparse.Namespace, out: TextIO) -> int:
    """Take a savepoint of a local job without stopping it (like bumping the nonce)."""
    job = _local_job(args)
    command = f"`finishable savepoint {job.name}`"
    runner = job.runner()
    current = job.read_status()
    if not runner.alive:
        raise LocalJobError(nothing_runs(job, runner, current, command, args.state_dir))
    nonce = (current.savepoint_trigger_nonce if current else 0) + 1
    desired = job.edit_desired(savepointTriggerNonce=nonce)
    out.write(f"{job.name}: savepoint requested\n")
    if args.no_wait:
        return 0
    return _await(
        job,
        args,
        lambda s: (
            (s.savepoint_trigger_nonce >= nonce and s.pending_request is None)
            or s.phase in SETTLED_PHASES
        ),
        generation=desired.generation,
        command=command,
        out=out,
    )


def _await(
    job: LocalJob,
    args: argparse.Namespace,
    done: Callable[[FinishableSparkJobStatus], bool],
    *,
    generation: int,
    command: str,
    out: TextIO,
) -> int:
    """Wait for the runner to carry out a request: done, refused, timed out, or runner gone."""
    status = wait_for(
        job,
        lambda s: done(s) or degraded(s, generation) is not None or not job.runner().alive,
        args.timeout,
    )
    if status is None:
        sys.stderr.write(
            f"{job.name}: not done within {args.timeout:g}s; it goes on "
            f"(`finishable status {job.name}` shows progress)\n"
        )
        return 1
    problem = degraded(status, generation)
    if problem is not None:
        sys.stderr.write(f"{job.name}: {problem}\n")
        return 1
    if not done(status):
        runner = job.runner()
        raise LocalJobError(
            nothing_runs(job, runner, status, command, args.state_dir, recorded=True)
        )
    out.write("\n".join(describe(status, job.channel.read_report())) + "\n")
    return 1 if status.phase is Phase.FAILED else 0


def _status(args: argparse.Namespace, out: TextIO) -> int:
    """Print a local job's phase and what its driver last reported."""
    job = _local_job(args)
    if args.json:
        out.write(json.dumps(report_document(job), indent=2) + "\n")
        return 0
    status = job.read_status()
    if status is None:
        raise LocalJobError(f"job {job.name!r} has no status yet")
    lines = describe(status, job.channel.read_report())
    runner = job.runner()
    if runner.alive:
        lines.append(f"runner: `finishable run` (pid {runner.pid})")
    elif status.phase not in SETTLED_PHASES:
        run = run_command(runner, args.state_dir)
        lines.append(f"runner: none, nothing acts on the job; `{run}` continues it")
    out.write("\n".join(lines) + "\n")
    return 0


def _operator(args: argparse.Namespace, out: TextIO) -> int:
    """Run the Kubernetes operator (kopf) until SIGTERM."""
    from finishable.controller.main import run_operator  # noqa: PLC0415 - kopf is heavy
    from finishable.controller.settings import OperatorOptions  # noqa: PLC0415
    from finishable.state.errors import BackendError  # noqa: PLC0415

    options = OperatorOptions(
        namespaces=tuple(args.namespace or ()),
        bind=args.bind,
        liveness_port=args.liveness_port,
        metrics_port=args.metrics_port,
        peering=args.peering,
        standalone=args.standalone,
        priority=args.priority,
        resync_seconds=args.resync,
        spark_master=args.spark_master or default_master(os.environ),
        partition_storage=args.cluster_partitions_storage,
    )
    try:
        return run_operator(options)
    except BackendError as error:
        sys.stderr.write(f"cannot reach the Kubernetes API: {error}\n")
        return 1


def _driver(args: argparse.Namespace, out: TextIO) -> int:
    """Start the job's program in a driver pod (the operator's pods run this)."""
    from finishable.api.jobconfig import JobConfigError  # noqa: PLC0415
    from finishable.driver.main import DriverError, run_driver  # noqa: PLC0415

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
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    def add(name: str, command: Command, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(command=command)
        return sub

    add("version", _version, "print the versions of finishable and its main dependencies")
    crd = add("crd", _crd, "print the FinishableSparkJob CustomResourceDefinition (YAML)")
    crd.add_argument("--snapshot", action="store_true", help="the FinishableSparkSnapshot CRD")
    validate = add("validate", _validate, "check FinishableSparkJob manifests")
    validate.add_argument("files", nargs="+", metavar="FILE", help="manifest files")
    describe = add(
        "describe", _describe, "print a manifest with all defaults and what the job will do"
    )
    describe.add_argument("file", metavar="FILE", help="a manifest holding one job")
    lifecycle = add("lifecycle", _lifecycle, "print the FLIP-147 task lifecycle tables")
    lifecycle.add_argument(
        "--kind", choices=["SOURCE", "NON_SOURCE"], help="only this kind of task"
    )
    lifecycle.add_argument(
        "--mode",
        choices=["FINAL_CHECKPOINT", "STOP_WITH_SAVEPOINT_DRAIN", "STOP_WITH_SAVEPOINT"],
        help="only this termination mode",
    )
    run = add("run", _run, "run a manifest's job locally (embedded Spark, no cluster)")
    run.add_argument("file", metavar="FILE", help="a manifest holding one job")
    run.add_argument("--resume", action="store_true", help="resume a suspended job")
    run.add_argument("--fresh", action="store_true", help="discard the job's earlier local state")
    run.add_argument("--state-dir", help="where local jobs keep their state (default: .finishable)")
    operator = add("operator", _operator, "run the Kubernetes operator (kopf)")
    operator.add_argument(
        "--namespace",
        action="append",
        metavar="NS",
        help="serve this namespace (repeat for more); every namespace when not given",
    )
    operator.add_argument("--bind", default="0.0.0.0", help="address of /healthz and /metrics")
    operator.add_argument("--liveness-port", type=int, default=8080, help="port of /healthz")
    operator.add_argument("--metrics-port", type=int, default=9090, help="port of /metrics")
    operator.add_argument(
        "--peering", default="finishable-spark-operator", help="kopf peering object name"
    )
    operator.add_argument(
        "--standalone", action="store_true", help="do not peer (a single replica only)"
    )
    operator.add_argument(
        "--priority", type=int, help="peering priority (default: random; highest acts)"
    )
    operator.add_argument(
        "--resync", type=float, default=60.0, help="seconds between reconciles of a quiet job"
    )
    operator.add_argument(
        "--spark-master",
        help="Spark master of the drivers. Default: the API server as pods reach it "
        "(k8s://https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT in a pod, else "
        f"{KUBERNETES_MASTER}): Spark creates executor pods; local[N] runs Spark inside each "
        "driver pod (small clusters, CI)",
    )
    operator.add_argument(
        "--cluster-partitions-storage",
        metavar="URL",
        help="the partition storage of Batch jobs that set no spec.clusterPartitions.storage "
        "(the one the partition service serves)",
    )
    add("driver", _driver, "start a job's program in its driver pod (used by the operator)")
    shuffle = add(
        "shuffle-server",
        _shuffle_server,
        "serve a Batch job's result partitions (the operator's shuffle pods run this; "
        "the token comes from $FINISHABLE_TOKEN)",
    )
    shuffle.add_argument("--host", default="0.0.0.0", help="address to listen on")
    shuffle.add_argument("--port", type=int, default=7337, help="port; 0 picks a free one")
    shuffle.add_argument("--data-dir", required=True, help="where partitions are stored")
    shuffle.add_argument("--job", required=True, help="the job whose partitions are served")
    shuffle.add_argument(
        "--retain-timeout",
        default="5m",
        help="release the partitions after no driver heartbeat for this long (default 5m)",
    )
    shuffle.add_argument("--port-file", help="write the bound port to this file once listening")
    shuffle.add_argument(
        "--exit-when-released", action="store_true", help="exit once the retain timeout released"
    )
    partitions = add(
        "partitions",
        _partitions,
        "list, show or delete cluster partitions (datasets promoted by Batch jobs)",
    )
    from finishable.partitions.commands import add_arguments, add_service_arguments  # noqa: PLC0415

    add_arguments(partitions)
    add_dispose_command(add)
    add_service_arguments(
        add(
            "partition-service",
            _partition_service,
            "serve the cluster partition REST API (FLIP-67) of a partition storage",
        )
    )
    for name, command, help_text in (
        ("stop", _stop, "stop a local job with a savepoint (--drain: and drain it)"),
        ("savepoint", _savepoint, "take a savepoint of a local job without stopping it"),
        ("status", _status, "show what a local job's driver last reported"),
    ):
        sub = add(name, command, help_text)
        sub.add_argument("job", metavar="JOB", help="the job's name (metadata.name)")
        sub.add_argument(
            "--state-dir", help="where local jobs keep their state (default: .finishable)"
        )
        if name == "status":
            sub.add_argument("--json", action="store_true", help="print the report as JSON")
            continue
        if name == "stop":
            sub.add_argument(
                "--drain", action="store_true", help="fire every pending window, then finish"
            )
        sub.add_argument("--no-wait", action="store_true", help="do not wait for the answer")
        sub.add_argument(
            "--timeout", type=float, default=600.0, help="seconds to wait (default 600)"
        )
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
