"""A stand-in driver for runner tests: speaks the control channel like the real runtime.

It reads its job configuration from the environment exactly as ``FinishableJob.from_env`` does,
counts "checkpoints", answers stop and savepoint requests, and can kill itself with SIGKILL at a
given checkpoint of its first attempt (``--crash-at N``) to play a driver crash, or never answer a
request (``--ignore-requests``) to play a stop that hangs. It does not watch its runner as
``FinishableJob.from_env`` does: like a program still importing PySpark, it relies on the kernel.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path

from finishable.api.control import DriverReport, DriverState, RequestOutcome, RequestReport
from finishable.api.jobconfig import config_from_env
from finishable.api.models import RequestAction
from finishable.api.status import CheckpointStatus, SavepointStatus
from finishable.state.control import LocalControlChannel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--crash-at", type=int, default=0)
    parser.add_argument("--ignore-requests", action="store_true")
    args = parser.parse_args()
    config, attempt, restore_from = config_from_env()
    assert config.control_dir is not None
    channel = LocalControlChannel(Path(config.control_dir))
    with Path(config.control_dir, "attempts.log").open("a") as record:
        record.write(f"{attempt} {restore_from}\n")
    checkpoint = int(restore_from.rsplit("-", 1)[-1]) if restore_from else 0
    answered: set[str] = set()
    savepoint: SavepointStatus | None = None
    last_answer: RequestReport | None = None

    def report(state: DriverState) -> None:
        channel.write_report(
            DriverReport(
                attempt=attempt,
                state=state,
                last_checkpoint=CheckpointStatus(id=checkpoint),
                savepoint=savepoint,
                request=last_answer,
            )
        )

    report(DriverState.STARTING)
    while True:
        time.sleep(0.1)
        checkpoint += 1
        if args.crash_at and attempt == 1 and checkpoint == args.crash_at:
            os.kill(os.getpid(), signal.SIGKILL)
        request = None if args.ignore_requests else channel.read_request(attempt)
        if request is not None and request.id not in answered:
            answered.add(request.id)
            savepoint = SavepointStatus(
                location=f"{config.work_dir}/sp-{checkpoint}", drained=request.drain
            )
            last_answer = RequestReport(id=request.id, outcome=RequestOutcome.COMPLETED)
            if request.action is RequestAction.STOP:
                report(DriverState.FINISHED if request.drain else DriverState.SUSPENDED)
                return
        report(DriverState.RUNNING)


if __name__ == "__main__":
    main()
