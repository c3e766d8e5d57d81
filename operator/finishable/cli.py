"""The ``finishable`` command.

Every user mistake ends in a message on stderr and exit code 1 (2 for a wrong command line), never
in a traceback: the message names the file, the field and what would be accepted.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import yaml

from finishable import __version__
from finishable.api.control import RequestOutcome
from finishable.api.models import DesiredState, JobMode, RequestAction, dump
from finishable.api.validation import InvalidManifest, load_documents, load_job, parse_manifest
from finishable.runtime.local import (
    LocalJob,
    LocalJobError,
    describe_report,
    local_job,
    read_report,
    send_request,
    wait_for_answer,
)

log = logging.getLogger(__name__)

Command = Callable[[argparse.Namespace, TextIO], int]


def _version(args: argparse.Namespace, out: TextIO) -> int:
    """Print the versions that matter when reporting a problem."""
    import platform  # noqa: PLC0415 - only this command needs it

    out.write(f"finishable {__version__}\n")
    out.write(f"python {platform.python_version()}\n")
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
    from finishable.api.crd import render_crd  # noqa: PLC0415 - keeps `finishable --help` fast

    out.write(render_crd())
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
        out.write(f"# a lost driver is restarted up to {spec.recovery.max_attempts} times\n")
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


def _request(args: argparse.Namespace, out: TextIO, action: RequestAction, drain: bool) -> int:
    job = _local_job(args)
    request = send_request(job, action, drain=drain)
    what = {
        (RequestAction.STOP, False): "stop with savepoint",
        (RequestAction.STOP, True): "stop with savepoint and drain",
        (RequestAction.SAVEPOINT, False): "savepoint",
    }[(action, drain)]
    out.write(f"{job.name}: {what} requested ({request.id})\n")
    if args.no_wait:
        return 0
    answer = wait_for_answer(job, request, args.timeout)
    if answer is None:
        sys.stderr.write(
            f"{job.name}: no answer within {args.timeout:g}s; the request stays pending "
            f"(`finishable status {job.name}` shows progress)\n"
        )
        return 1
    detail = f": {answer.message}" if answer.message else ""
    out.write(f"{job.name}: {what} {answer.outcome.value.lower()}{detail}\n")
    return 0 if answer.outcome is RequestOutcome.COMPLETED else 1


def _stop(args: argparse.Namespace, out: TextIO) -> int:
    """Stop a local job with a savepoint, or with drain."""
    return _request(args, out, RequestAction.STOP, args.drain)


def _savepoint(args: argparse.Namespace, out: TextIO) -> int:
    """Take a savepoint of a local job without stopping it."""
    return _request(args, out, RequestAction.SAVEPOINT, False)


def _status(args: argparse.Namespace, out: TextIO) -> int:
    """Print what a local job's driver last reported."""
    report = read_report(_local_job(args))
    if args.json:
        out.write(report.model_dump_json(by_alias=True, exclude_none=True, indent=2) + "\n")
    else:
        out.write("\n".join(describe_report(report)) + "\n")
    return 0


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
    add("crd", _crd, "print the FinishableSparkJob CustomResourceDefinition (YAML)")
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
