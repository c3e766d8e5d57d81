"""``finishable run|stop|savepoint|status``: a job on this machine, through its state directory.

``run`` starts the local runner in the foreground; the others edit the job's desired state, as
``kubectl`` edits the custom resource, and wait for the runner to carry it out (local/jobdir.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from finishable.api.models import DesiredState, Phase
from finishable.api.status import FinishableSparkJobStatus
from finishable.api.validation import InvalidManifest, load_job
from finishable.local.jobdir import (
    DEFAULT_STATE_DIR,
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


def _job(args: argparse.Namespace) -> LocalJob:
    return local_job(args.job, Path(args.state_dir) if args.state_dir else None)


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run a manifest's job locally until it is Finished, Suspended or Failed."""
    from finishable.local.runner import LocalRunner  # noqa: PLC0415 - heavier imports

    manifest = Path(args.file)
    try:
        job = load_job(manifest, local=True)
    except InvalidManifest as error:
        sys.stderr.write(f"{error}\n")
        return 1
    state_dir = Path(args.state_dir) if args.state_dir else DEFAULT_STATE_DIR
    runner = LocalRunner(job, manifest, state_dir, out=out)
    return runner.run(resume=args.resume, fresh=args.fresh)


def stop(args: argparse.Namespace, out: TextIO) -> int:
    """Stop a local job with a savepoint (like setting spec.state), or with drain."""
    job = _job(args)
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


def savepoint(args: argparse.Namespace, out: TextIO) -> int:
    """Take a savepoint of a local job without stopping it (like bumping the nonce)."""
    job = _job(args)
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


def status(args: argparse.Namespace, out: TextIO) -> int:
    """Print a local job's phase and what its driver last reported."""
    job = _job(args)
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
